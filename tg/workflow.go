package tg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/tg/tgtype"
)

// ErrNoParentResult is returned by ParentResult when the job's task has no
// parent of that step key, or the parent left no result.
var ErrNoParentResult = errors.New("taskgraph: no such parent result")

// ParentResult decodes the result the parent of step key left the job's
// task (a step of a workflow waits for its parents, and runs once they
// succeeded). A parent that is no workflow's step (a task created with
// DependsOn waits for existing tasks) is named by its code. The result is
// the parent's as stored and shown: masked (a value the masker takes for a
// secret arrives as the API shows it, not as the parent's handler returned
// it; unlike a task's own input, a result has no unmasked copy). A secret
// a child needs belongs in its own input.
func ParentResult[T any](job *Job, key string) (T, error) {
	var out T
	raw, ok := job.j.Parents[key]
	if !ok {
		for _, o := range job.j.Outcomes {
			if o.Code == key {
				raw, ok = o.Result, true
			}
		}
	}
	if !ok || len(raw) == 0 {
		return out, fmt.Errorf("%w: %q", ErrNoParentResult, key)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("taskgraph: decode the result of parent %q: %w", key, err)
	}
	return out, nil
}

// ParentResultOf decodes the result of the job's task's parent of task
// id, as ParentResult does by key: for a task created with DependsOn(ids).
func ParentResultOf[T any](job *Job, id int) (T, error) {
	for _, o := range job.j.Outcomes {
		if o.ID == id {
			return ParentResult[T](job, o.Code)
		}
	}
	var out T
	return out, fmt.Errorf("%w: task %d", ErrNoParentResult, id)
}

// ParentKeys lists the step keys of the parents whose results the job's
// task was given.
func (j *Job) ParentKeys() []string {
	keys := make([]string, 0, len(j.j.Parents))
	for k := range j.j.Parents {
		keys = append(keys, k)
	}
	return keys
}

// ParentOutcome is how a parent of the job's task ended: its state
// (SUCCESS, FAILED or CANCELLED for a parent the task waited for), and its
// result (SUCCESS) or its error (FAILED: its last error; CANCELLED: the
// reason). Result and Error are as stored, masked as the parent's own
// result and error are shown.
type ParentOutcome struct {
	// ID and Code name the parent task.
	ID     int
	Code   string
	Status tgtype.Status
	Result json.RawMessage
	Error  string
}

// ParentOutcomes returns how each parent of the job's task ended, by step
// key (a parent outside a workflow: by its code). A step that runs
// whatever its parents did (OnParentFailure "RUN_ANYWAY": a cleanup, a
// chord's error callback) reads its failed and cancelled parents' errors
// here; ParentResult decodes a successful parent's result. It is nil for a
// task without parents.
func (j *Job) ParentOutcomes() map[string]ParentOutcome {
	if j.j.Outcomes == nil {
		return nil
	}
	out := make(map[string]ParentOutcome, len(j.j.Outcomes))
	for k, o := range j.j.Outcomes {
		out[k] = ParentOutcome{ID: o.ID, Code: o.Code, Status: tgtype.Status(o.Status), Result: o.Result, Error: o.Error}
	}
	return out
}

// DependsOn makes the task wait for existing tasks (by id): it starts
// WAITING_DEPENDENCY and runs once they have all succeeded; a parent that
// fails or is cancelled cancels it. Its handler gets their results
// (ParentResultOf, or ParentResult by code).
func DependsOn(ids ...int) TaskOption {
	return TaskOption{func(r *engine.CreateRequest) { r.DependsOn = append(r.DependsOn, ids...) }}
}

// Step is one step of a workflow: a key unique among its steps, a task
// (type, input, options) and the keys of the steps it waits for.
type Step struct {
	Key       string
	Type      string
	Input     any
	Options   []TaskOption
	DependsOn []string
	// OnParentFailure is what a parent that fails or is cancelled does to
	// this step: "CANCEL_DEPENDENTS" (empty: the default: it is cancelled
	// with everything below it), "WAIT" (it waits until a retry of the
	// parent succeeds) or "RUN_ANYWAY" (it runs once its parents have
	// ended, however they ended; Job.ParentOutcomes tells it how).
	OnParentFailure string
}

// Workflow is a workflow as created: its id, readable code and title, and
// its steps' task ids by step key.
type Workflow struct {
	ID    int
	Code  string
	Title string
	Steps map[string]int
}

// CreateWorkflow validates and creates a workflow and all its steps in one
// transaction (no cycle, no unknown or duplicate key, at most 10,000
// steps: else a *ValidationError, and nothing is created). With key not
// empty, the same key and definition return the workflow created first,
// another definition is a *ConflictError.
func (c *Client) CreateWorkflow(ctx context.Context, key, title string, steps []Step) (*Workflow, error) {
	req := engine.WorkflowRequest{Title: title, Steps: make([]engine.StepRequest, len(steps))}
	if key != "" {
		req.IdempotencyKey = &key
	}
	for i, st := range steps {
		r, err := request(st.Type, st.Input, st.Options)
		if err != nil {
			return nil, err
		}
		req.Steps[i] = engine.StepRequest{Key: st.Key, Task: r, DependsOn: st.DependsOn, OnParentFailure: st.OnParentFailure}
	}
	vctx, err := viewer(ctx)
	if err != nil {
		return nil, err
	}
	wf, err := c.app.Engine.CreateWorkflow(vctx, req)
	if err != nil {
		return nil, publicError(err)
	}
	tasks, err := c.app.Store.WorkflowSteps(vctx, wf.ID)
	if err != nil {
		return nil, publicError(err)
	}
	out := &Workflow{ID: wf.ID, Code: wf.Code, Title: wf.Title, Steps: make(map[string]int, len(tasks))}
	for _, t := range tasks {
		if t.StepKey != nil {
			out.Steps[*t.StepKey] = t.ID
		}
	}
	return out, nil
}
