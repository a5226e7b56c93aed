package graph

import (
	"errors"
	"fmt"
	"sort"

	"entgo.io/ent/dialect/sql"
	"entgo.io/ent/dialect/sql/sqljson"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/ent/predicate"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/workflow"
	"github.com/taskgraph/taskgraph/graph/model"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/store"
)

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// bulkResults reports each id's outcome with the same codes as errors.
func bulkResults(res []engine.BulkResult) []*model.TaskActionResult {
	out := make([]*model.TaskActionResult, len(res))
	for i, r := range res {
		out[i] = &model.TaskActionResult{ID: r.ID, Ok: r.Err == nil, Task: r.Task, Error: actionError(r.Err)}
	}
	return out
}

// actionError is the typed error of one item of a bulk call (nil for none).
func actionError(err error) *model.ActionError {
	if err == nil {
		return nil
	}
	code, _, ok := classify(err)
	msg := err.Error()
	if !ok {
		code, msg = CodeInternal, "internal error"
	}
	return &model.ActionError{Code: code, Message: msg}
}

// createRequest is what the engine is asked for one CreateTaskInput.
func createRequest(input model.CreateTaskInput) engine.CreateRequest {
	return engine.CreateRequest{
		Type:              input.Type,
		Title:             deref(input.Title),
		BizID:             deref(input.BizID),
		Input:             input.Input,
		Priority:          input.Priority,
		TimeoutSeconds:    input.TimeoutSeconds,
		RetryPolicy:       input.RetryPolicy,
		MaxAttempts:       input.MaxAttempts,
		IdempotencyKey:    input.IdempotencyKey,
		RunAt:             input.RunAt,
		StallAfterSeconds: input.StallAfterSeconds,
		DependsOn:         input.DependsOn,
		OnParentFailure:   policy(input.OnParentFailure),
		Review:            input.Review,
		Deadline:          input.Deadline,
	}
}

func policy(p *workflow.OnParentFailure) string {
	if p == nil {
		return ""
	}
	return string(*p)
}

// workflowRequest is the engine's request of a createWorkflow input.
func workflowRequest(input model.CreateWorkflowInput) engine.WorkflowRequest {
	req := engine.WorkflowRequest{
		Title:           deref(input.Title),
		IdempotencyKey:  input.Key,
		OnParentFailure: policy(input.OnParentFailure),
		Steps:           make([]engine.StepRequest, len(input.Steps)),
	}
	for i, st := range input.Steps {
		req.Steps[i] = engine.StepRequest{
			Key: st.Key,
			Task: engine.CreateRequest{
				Type:           st.Type,
				Title:          deref(st.Title),
				BizID:          deref(st.BizID),
				Input:          st.Input,
				Priority:       st.Priority,
				TimeoutSeconds: st.TimeoutSeconds,
				RetryPolicy:    st.RetryPolicy,
				MaxAttempts:    st.MaxAttempts,
			},
			DependsOn:       st.DependsOn,
			OnParentFailure: policy(st.OnParentFailure),
		}
	}
	return req
}

// taskStats folds (type, status, count) rows into totals.
func taskStats(counts []engine.Count) *model.TaskStats {
	stats := &model.TaskStats{}
	byStatus := map[lifecycle.Status]int{}
	byType := map[string]*model.TypeCount{}
	for _, c := range counts {
		stats.Total += c.Count
		byStatus[c.Status] += c.Count
		tc := byType[c.Type]
		if tc == nil {
			tc = &model.TypeCount{Type: c.Type}
			byType[c.Type] = tc
		}
		tc.Count += c.Count
		tc.ByStatus = append(tc.ByStatus, &model.StatusCount{Status: c.Status, Count: c.Count})
	}
	for _, s := range lifecycle.AllStatuses {
		stats.ByStatus = append(stats.ByStatus, &model.StatusCount{Status: s, Count: byStatus[s]})
	}
	for _, tc := range byType {
		sort.Slice(tc.ByStatus, func(i, j int) bool { return statusIndex(tc.ByStatus[i].Status) < statusIndex(tc.ByStatus[j].Status) })
		stats.ByType = append(stats.ByType, tc)
	}
	sort.Slice(stats.ByType, func(i, j int) bool { return stats.ByType[i].Type < stats.ByType[j].Type })
	return stats
}

func statusIndex(s lifecycle.Status) int {
	for i, v := range lifecycle.AllStatuses {
		if v == s {
			return i
		}
	}
	return len(lifecycle.AllStatuses)
}

// auditLogNamesTask matches audit records whose task_ids contain id.
func auditLogNamesTask(id int) predicate.AuditLog {
	return func(s *sql.Selector) {
		s.Where(sqljson.ValueContains(auditlog.FieldTaskIds, id))
	}
}

// maxPathConditions bounds the conditions of one payload filter.
const maxPathConditions = 10

// addPayloadWhere adds to w the conditions on a task's JSON column (see
// store.PayloadWhere); a bad condition is a VALIDATION error naming it.
func addPayloadWhere(w *ent.TaskWhereInput, field, column string, data []*model.JSONPathPredicate) error {
	if len(data) == 0 {
		return nil
	}
	if len(data) > maxPathConditions {
		return &engine.ValidationError{Problems: []engine.Problem{{Field: "where." + field, Message: fmt.Sprintf("at most %d conditions", maxPathConditions)}}}
	}
	conds := make([]store.PathCondition, len(data))
	for i, d := range data {
		conds[i] = store.PathCondition{Path: d.Path, Eq: d.Eq, Prefix: d.Prefix, Exists: d.Exists}
	}
	p, err := store.PayloadWhere(column, conds)
	var pe *store.PathError
	if errors.As(err, &pe) {
		return &engine.ValidationError{Problems: []engine.Problem{{Field: fmt.Sprintf("where.%s[%d].%s", field, pe.Index, pe.Field), Message: pe.Msg}}}
	}
	if err != nil {
		return err
	}
	w.AddPredicates(p)
	return nil
}
