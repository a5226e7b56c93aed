package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/store"
)

// Limits of a workflow.
const (
	// MaxWorkflowSteps bounds the steps of one workflow.
	MaxWorkflowSteps = 10_000
	// MaxParents bounds the parents of one task.
	MaxParents = 1_000
	// MaxStepKeyLen bounds a step's key.
	MaxStepKeyLen = 200
)

// Failure policies of an edge, as the API names them.
const (
	PolicyCancelDependents = store.CancelDependents
	PolicyWait             = store.Wait
	PolicyRunAnyway        = store.RunAnyway
)

// StepRequest is one step of a workflow: a task, its key among the steps,
// the keys of the steps it waits for, and what a failed parent does to it
// (empty: the workflow's policy).
type StepRequest struct {
	Key             string
	Task            CreateRequest
	DependsOn       []string
	OnParentFailure string
}

// WorkflowRequest is a workflow to create: its steps and their edges.
type WorkflowRequest struct {
	Title           string
	IdempotencyKey  *string
	OnParentFailure string
	Steps           []StepRequest
}

// checkPolicy adds a problem when policy is not one the store applies.
func checkPolicy(v *ValidationError, field, policy string) {
	switch policy {
	case "", PolicyCancelDependents, PolicyWait, PolicyRunAnyway:
	default:
		v.add(field, "unknown policy %q (CANCEL_DEPENDENTS, WAIT or RUN_ANYWAY)", policy)
	}
}

// checkParents validates the existing tasks a new one depends on.
func checkParents(v *ValidationError, prefix string, ids []int, policy string) []store.Parent {
	checkPolicy(v, prefix+"onParentFailure", policy)
	if len(ids) > MaxParents {
		v.add(prefix+"dependsOn", "names %d tasks; the limit is %d", len(ids), MaxParents)
		return nil
	}
	out := make([]store.Parent, 0, len(ids))
	for _, id := range ids {
		if id <= 0 {
			v.add(prefix+"dependsOn", "%d is not a task id", id)
			continue
		}
		out = append(out, store.Parent{ID: id, Policy: policy})
	}
	return out
}

// order returns the steps' indexes in an order where every step comes
// after the steps it depends on, adding a problem for each duplicate key,
// unknown key, and for a cycle (naming its steps).
func order(v *ValidationError, steps []StepRequest) []int {
	index := make(map[string]int, len(steps))
	for i, st := range steps {
		field := fmt.Sprintf("steps[%d].key", i)
		switch {
		case st.Key == "":
			v.add(field, "must not be empty")
		case len(st.Key) > MaxStepKeyLen:
			v.add(field, "is %d bytes; the limit is %d", len(st.Key), MaxStepKeyLen)
		}
		if j, dup := index[st.Key]; dup {
			v.add(field, "%q is the key of step %d too", st.Key, j)
			continue
		}
		index[st.Key] = i
	}
	children := make([][]int, len(steps))
	waiting := make([]int, len(steps))
	for i, st := range steps {
		seen := map[string]bool{}
		for _, k := range st.DependsOn {
			j, ok := index[k]
			switch {
			case !ok:
				v.add(fmt.Sprintf("steps[%d].dependsOn", i), "no step has the key %q", k)
				continue
			case j == i:
				v.add(fmt.Sprintf("steps[%d].dependsOn", i), "step %q depends on itself", k)
				continue
			case seen[k]:
				continue
			}
			seen[k] = true
			children[j] = append(children[j], i)
			waiting[i]++
		}
	}
	if len(v.Problems) > 0 {
		return nil
	}
	// Kahn: what is left once no step is free is on a cycle or below one.
	out := make([]int, 0, len(steps))
	for i := range steps {
		if waiting[i] == 0 {
			out = append(out, i)
		}
	}
	for k := 0; k < len(out); k++ {
		for _, c := range children[out[k]] {
			if waiting[c]--; waiting[c] == 0 {
				out = append(out, c)
			}
		}
	}
	if len(out) < len(steps) {
		var stuck []string
		for i := range steps {
			if waiting[i] > 0 && len(stuck) < 10 {
				stuck = append(stuck, fmt.Sprintf("%q", steps[i].Key))
			}
		}
		v.add("steps", "the dependencies have a cycle (through %s)", strings.Join(stuck, ", "))
		return nil
	}
	return out
}

// CreateWorkflow validates a workflow (no duplicate or unknown key, no
// cycle, at most MaxWorkflowSteps steps, every step as Create checks a
// task) and creates it with all its steps in one transaction, with its
// audit record, owned by the viewer of ctx. With an idempotency key the
// viewer already used, the first workflow is returned, or a
// *store.ConflictError when the definition differs. Nothing is created
// when anything is refused.
func (e *Engine) CreateWorkflow(ctx context.Context, req WorkflowRequest) (*ent.Workflow, error) {
	v, err := e.admit(ctx, 1)
	if err != nil {
		return nil, err
	}
	details := map[string]any{"workflow": req.Title, "steps": len(req.Steps)}
	if req.IdempotencyKey != nil {
		details["idempotencyKey"] = *req.IdempotencyKey
	}
	entry := audit.Entry{Action: audit.Create, Details: details}
	var wf *ent.Workflow
	err = func() error {
		if err := v.AllowMutate("create workflows"); err != nil {
			return err
		}
		nw, err := e.prepareWorkflow(v, req)
		if err != nil {
			return err
		}
		return e.store.Write(ctx, func(tx *store.Tx) error {
			var created bool
			var err error
			if wf, created, err = tx.CreateWorkflow(ctx, nw); err != nil {
				return err
			}
			recorded := entry
			recorded.Details = withCode(details, wf.Code, !created)
			return e.audit.Insert(ctx, tx.Ent(), recorded)
		})
	}()
	if err != nil {
		entry.Err = err
		e.record(ctx, e.store.Write, false, entry)
		return nil, err
	}
	return wf, nil
}

// prepareWorkflow validates a workflow for viewer v and returns it as the
// store creates it, its steps sorted, masked and sealed like tasks.
func (e *Engine) prepareWorkflow(v auth.Viewer, req WorkflowRequest) (store.NewWorkflow, error) {
	var problems ValidationError
	checkText(&problems, "title", req.Title, MaxTitleLen)
	checkPolicy(&problems, "onParentFailure", req.OnParentFailure)
	switch {
	case len(req.Steps) == 0:
		problems.add("steps", "a workflow has at least one step")
	case len(req.Steps) > MaxWorkflowSteps:
		problems.add("steps", "%d steps; the limit is %d", len(req.Steps), MaxWorkflowSteps)
	}
	if k := req.IdempotencyKey; k != nil {
		if *k == "" {
			problems.add("idempotencyKey", "must not be empty when given")
		}
		checkText(&problems, "idempotencyKey", *k, MaxKeyLen)
	}
	if err := problems.err(); err != nil {
		return store.NewWorkflow{}, err
	}
	sorted := order(&problems, req.Steps)
	if err := problems.err(); err != nil {
		return store.NewWorkflow{}, err
	}
	pos := make(map[string]int, len(sorted))
	steps := make([]store.NewTask, len(sorted))
	hashes := make([]string, 0, len(sorted)*2)
	for p, i := range sorted {
		st := req.Steps[i]
		prefix := fmt.Sprintf("steps[%d].", i)
		checkPolicy(&problems, prefix+"onParentFailure", st.OnParentFailure)
		n, err := e.prepare(v, st.Task)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) {
				return store.NewWorkflow{}, err
			}
			for _, pr := range ve.Problems {
				problems.add(prefix+pr.Field, "%s", pr.Message)
			}
			continue
		}
		key := st.Key
		n.StepKey = &key
		deps := slices.Clone(st.DependsOn)
		slices.Sort(deps)
		deps = slices.Compact(deps)
		for _, k := range deps {
			n.Parents = append(n.Parents, store.Parent{Step: pos[k], Policy: st.OnParentFailure})
		}
		pos[key] = p
		steps[p] = n
		hashes = append(hashes, key, n.InputHash, strings.Join(deps, "\x00"), st.OnParentFailure)
	}
	if err := problems.err(); err != nil {
		return store.NewWorkflow{}, err
	}
	def, _ := json.Marshal(hashes)
	nw := store.NewWorkflow{
		Title:           e.masker.String(req.Title),
		Owner:           v.User,
		OwnerSource:     v.Source,
		Tenant:          v.Tenant,
		OwnerRole:       string(v.Role),
		InputHash:       e.sealer.Hash([]byte("workflow"), []byte(req.Title), []byte(req.OnParentFailure), def),
		OnParentFailure: req.OnParentFailure,
		Steps:           steps,
	}
	if k := req.IdempotencyKey; k != nil {
		shown := e.masker.String(*k)
		id := v.Identity()
		h := e.sealer.Hash([]byte("workflow idempotency key"), []byte(id.Source), []byte(id.Tenant), []byte(id.User), []byte(*k))
		nw.IdempotencyKey, nw.IdempotencyHash = &shown, &h
	}
	return nw, nil
}

// ValidateWorkflow checks a workflow as CreateWorkflow would for viewer v,
// without creating anything (a schedule's, when it is saved). Its result
// has the steps' inputs masked (NewTask.Input) and sealed (InputSealed).
func (e *Engine) ValidateWorkflow(v auth.Viewer, req WorkflowRequest) (store.NewWorkflow, error) {
	return e.prepareWorkflow(v, req)
}

// ScheduleSlotKey is the idempotency key of the workflow a schedule
// creates for a slot: one workflow per slot, across nodes.
func ScheduleSlotKey(scheduleID int, slot time.Time) string {
	return fmt.Sprintf("schedule %d slot %s", scheduleID, slot.UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano))
}

// CreateScheduledWorkflow creates the workflow of one slot of a schedule,
// whole, in one transaction, on behalf of the schedule's owner (the viewer
// of ctx), validated, masked and audited like CreateWorkflow, with
// ScheduleSlotKey as its idempotency key (req's is not used). Not rate
// limited, as CreateScheduled. A workflow already created for the slot is
// returned with created false. With a version, it is created only if the
// schedule is still at it, and moves it on; store.ErrScheduleMoved
// otherwise, unaudited.
func (e *Engine) CreateScheduledWorkflow(ctx context.Context, req WorkflowRequest, scheduleID int, slot time.Time, version *int64) (_ *ent.Workflow, created bool, err error) {
	v, err := auth.Require(ctx)
	if err != nil {
		return nil, false, err
	}
	key := ScheduleSlotKey(scheduleID, slot)
	req.IdempotencyKey = &key
	details := map[string]any{"workflow": req.Title, "steps": len(req.Steps), "schedule": scheduleID, "slot": slot.UTC().Format(time.RFC3339Nano)}
	entry := audit.Entry{Action: audit.Create, Details: details}
	var wf *ent.Workflow
	err = func() error {
		if err := v.AllowMutate("create workflows"); err != nil {
			return err
		}
		nw, err := e.prepareWorkflow(v, req)
		if err != nil {
			return err
		}
		at := slot.UTC().Truncate(time.Microsecond)
		nw.ScheduleID, nw.ScheduleSlot, nw.ScheduleVersion = &scheduleID, &at, version
		return e.store.Write(ctx, func(tx *store.Tx) error {
			var err error
			if wf, created, err = tx.CreateWorkflow(ctx, nw); err != nil {
				return err
			}
			recorded := entry
			recorded.Details = withCode(details, wf.Code, !created)
			return e.audit.Insert(ctx, tx.Ent(), recorded)
		})
	}()
	if errors.Is(err, store.ErrScheduleMoved) {
		return nil, false, err
	}
	if err != nil {
		entry.Err = err
		_ = e.audit.Record(ctx, entry)
		return nil, false, err
	}
	return wf, created, nil
}

// CancelWorkflow cancels every step of workflow id not finished yet, as
// CancelMany does (audited, each step on its own), and returns the
// workflow; the steps waiting for them are cancelled with them. A workflow
// the viewer may not see is not found.
func (e *Engine) CancelWorkflow(ctx context.Context, id int, reason string) (*ent.Workflow, error) {
	wf, err := e.store.Client().Workflow.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	steps, err := e.store.WorkflowSteps(ctx, id)
	if err != nil {
		return nil, err
	}
	var open []int
	for _, st := range steps {
		if !st.Status.Terminal() {
			open = append(open, st.ID)
		}
	}
	if len(open) == 0 {
		return wf, nil
	}
	res, err := e.CancelMany(ctx, open, reason)
	if err != nil {
		return nil, err
	}
	for _, r := range res {
		// A step that a parent's cancel already ended is done with.
		if r.Err != nil && !errors.Is(r.Err, lifecycle.ErrInvalidTransition) {
			return nil, r.Err
		}
	}
	return wf, nil
}

// RetryWorkflow re-runs the FAILED and CANCELLED steps of workflow id and
// keeps those that succeeded (Tx.RetryWorkflow), audited as one retry of
// the steps it moved, with the reason. A workflow the viewer may not see
// is not found; one with nothing to re-run is a
// *lifecycle.TransitionError.
func (e *Engine) RetryWorkflow(ctx context.Context, id int, reason string) (*ent.Workflow, error) {
	v, err := e.admit(ctx, 1)
	if err != nil {
		return nil, err
	}
	details := map[string]any{"workflow": id}
	if reason != "" {
		details["reason"] = reason
	}
	entry := audit.Entry{Action: audit.Retry, Details: details}
	err = func() error {
		if err := v.AllowMutate("retry workflows"); err != nil {
			return err
		}
		var problems ValidationError
		checkText(&problems, "reason", reason, MaxReasonLen)
		if err := problems.err(); err != nil {
			return err
		}
		return e.store.Write(ctx, func(tx *store.Tx) error {
			moved, err := tx.RetryWorkflow(ctx, id, e.masker.String(reason))
			if err != nil {
				return err
			}
			got, err := tx.Ent().Workflow.Get(ctx, id)
			if err != nil {
				return err
			}
			recorded := entry
			recorded.Details = maps.Clone(details)
			recorded.Details["code"], recorded.Details["steps"] = got.Code, len(moved)
			for _, tk := range moved {
				recorded.TaskIDs = append(recorded.TaskIDs, tk.ID)
			}
			return e.audit.Insert(ctx, tx.Ent(), recorded)
		})
	}()
	if err != nil {
		entry.Err = err
		e.record(ctx, e.store.Write, false, entry)
		return nil, err
	}
	return e.store.Client().Workflow.Get(ctx, id)
}
