package graph

import (
	"errors"
	"fmt"
	"maps"
	"slices"

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
// taskStats is the API's view of grouped counts by (type, status): every
// figure the counts of its groups (estimates, with their intervals, when
// the counts are not exact).
func taskStats(g store.GroupCounts) *model.TaskStats {
	all := g.Count(func([]string) bool { return true })
	stats := &model.TaskStats{Total: all.N, TotalLow: all.Low, TotalHigh: all.High, Exact: g.Exact, Sampled: g.Sampled}
	types := map[string]bool{}
	for _, k := range g.Groups() {
		types[k[0]] = true
	}
	for _, s := range lifecycle.AllStatuses {
		c := g.Count(func(k []string) bool { return k[1] == string(s) })
		stats.ByStatus = append(stats.ByStatus, &model.StatusCount{Status: s, Count: c.N, Low: c.Low, High: c.High})
	}
	for _, typ := range slices.Sorted(maps.Keys(types)) {
		c := g.Count(func(k []string) bool { return k[0] == typ })
		tc := &model.TypeCount{Type: typ, Count: c.N, Low: c.Low, High: c.High}
		for _, s := range lifecycle.AllStatuses {
			if !slices.ContainsFunc(g.Groups(), func(k []string) bool { return k[0] == typ && k[1] == string(s) }) {
				continue
			}
			c := g.Count(func(k []string) bool { return k[0] == typ && k[1] == string(s) })
			tc.ByStatus = append(tc.ByStatus, &model.StatusCount{Status: s, Count: c.N, Low: c.Low, High: c.High})
		}
		stats.ByType = append(stats.ByType, tc)
	}
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
