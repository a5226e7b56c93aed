package tg

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/taskgraph/taskgraph/internal/tasktype"
	"github.com/taskgraph/taskgraph/tg/tgtype"
)

// TaskType is a task type registered with Register: it creates tasks of
// its type from typed inputs and reads their typed results.
type TaskType[In, Out any] struct {
	c    *Client
	name string
}

// Name is the type's name, as tasks, the API and the console show it.
func (t *TaskType[In, Out]) Name() string { return t.name }

// Register adds a task type named name to c, run by handle: In is the
// task's input, decoded from its JSON (unknown fields refused) and
// validated against the JSON Schema reflected from In — the API and the
// console validate it alike and build their launch forms from it — and,
// when *In has a method Validate() error, by that method too. What handle
// returns with a nil error is stored, masked, as the task's result. An
// error fails the execution: unmarked or Retryable, the task's retry
// policy runs it again; NonRetryable, it fails at once; Resource, it waits
// longer. A panic fails the execution as a retryable error.
//
// Handlers may run more than once for one task (a node died after the
// work and before its outcome was written; the watchdog ran it again):
// write business rows under a business key of their own (the task's
// Code, say) so that a second run changes nothing.
//
// name is lower case: letters, digits, '.', '_' and '-', at most 63. Call
// Register before Start; a name taken is an error.
func Register[In, Out any](c *Client, name string, handle func(ctx context.Context, job *Job, in In) (Out, error), opts ...TypeOption) (*TaskType[In, Out], error) {
	var internal []tasktype.Option
	for _, o := range opts {
		if o.apply != nil {
			internal = append(internal, o.apply)
		}
	}
	typ, err := tasktype.New(name, func(ctx context.Context, job *tasktype.Job, in In) error {
		out, err := handle(ctx, &Job{j: job}, in)
		if err != nil {
			return err
		}
		return job.SetResult(out)
	}, internal...)
	if err != nil {
		return nil, &ValidationError{Problems: []Problem{{Field: "name", Message: err.Error()}}}
	}
	err = c.beforeStart(func() error { return c.app.Registry.Add(typ) })
	if err != nil {
		return nil, err
	}
	return &TaskType[In, Out]{c: c, name: name}, nil
}

// TypeOption sets a default of a task type's tasks (Register).
type TypeOption struct{ apply tasktype.Option }

// WithDescription describes the type in the API and the console.
func WithDescription(d string) TypeOption { return TypeOption{tasktype.WithDescription(d)} }

// WithTimeout is how long an execution may run before it fails with
// error kind TIMEOUT (default: five minutes; a task may set its own).
func WithTimeout(d time.Duration) TypeOption { return TypeOption{tasktype.WithTimeout(d)} }

// WithFinishWithin gives the type's tasks a deadline d after they may
// first run (their RunAt, or their creation), for those created without a
// FinishBy of their own: see FinishBy. At most 366 days.
func WithFinishWithin(d time.Duration) TypeOption { return TypeOption{tasktype.WithFinishWithin(d)} }

// WithRetryPolicy names the retry policy of the type's tasks: "default"
// (3 attempts, backing off 5 s, 30 s, 5 min), "none", or another of the
// server's (the API's retryPolicies lists them).
func WithRetryPolicy(name string) TypeOption { return TypeOption{tasktype.WithRetryPolicy(name)} }

// WithConcurrency caps how many of the type's executions run at once on
// one node (cluster-wide caps and rates are flow controls, set in the
// console or the API).
func WithConcurrency(n int) TypeOption { return TypeOption{tasktype.WithConcurrency(n)} }

// WithStallDetection flags an execution whose progress and log stand
// still for after while its heartbeats go on (Job.Progress, Job.Info and
// Job.Heartbeat move it) and, when cancel is true, stops it as a STALLED
// failure for the retry policy to decide on.
func WithStallDetection(after time.Duration, cancel bool) TypeOption {
	action := tasktype.StallFlag
	if cancel {
		action = tasktype.StallCancel
	}
	return TypeOption{tasktype.WithStallDetection(after, action)}
}

// Review is a type's review policy (WithReview): which business failures
// of its tasks wait for a person (REVIEW_PENDING) instead of ending. A
// handler's NeedsReview asks for a review whatever the policy says.
type Review struct {
	// NonRetryable sends NON_RETRYABLE failures to review.
	NonRetryable bool
	// ConfirmPartial sends a PARTIAL_SUCCESS (Job.SetResultStatus) to
	// review before it counts as a success.
	ConfirmPartial bool
	// FourEyes refuses the decision of the task's submitter: another
	// operator of its tenant (or an admin) decides.
	FourEyes bool
	// Deadline, when set, is how long a review may wait; then the task
	// is rejected (FAILED), or, with AlertOnDeadline, left waiting for a
	// REVIEW_OVERDUE alert rule to report.
	Deadline        time.Duration
	AlertOnDeadline bool
}

// WithReview gives the type a review policy.
func WithReview(r Review) TypeOption {
	p := tasktype.ReviewPolicy{OnNonRetryable: r.NonRetryable, ConfirmPartial: r.ConfirmPartial, FourEyes: r.FourEyes, Deadline: r.Deadline}
	if r.Deadline > 0 {
		p.OnDeadline = tasktype.DeadlineReject
		if r.AlertOnDeadline {
			p.OnDeadline = tasktype.DeadlineAlert
		}
	}
	return TypeOption{tasktype.WithReview(p)}
}

// Create creates a task of the type with input in, in a transaction of
// its own (see Client.Create).
func (t *TaskType[In, Out]) Create(ctx context.Context, in In, opts ...TaskOption) (*tgtype.Task, error) {
	return t.c.Create(ctx, t.name, in, opts...)
}

// CreateTx creates a task of the type in tx, a transaction of the
// caller's (see Client.CreateTx).
func (t *TaskType[In, Out]) CreateTx(ctx context.Context, tx *sql.Tx, in In, opts ...TaskOption) (*tgtype.Task, error) {
	return t.c.CreateTx(ctx, tx, t.name, in, opts...)
}

// Result decodes the result of task, a task of the type, as its handler
// returned it (masked: a phone number in it reads 138****5678). A task
// without a result (not finished, or failed) is an error.
func (t *TaskType[In, Out]) Result(task *tgtype.Task) (Out, error) {
	var out Out
	switch {
	case task == nil:
		return out, fmt.Errorf("taskgraph: no task")
	case task.Type != t.name:
		return out, fmt.Errorf("taskgraph: task %d is of type %q, not %q", task.ID, task.Type, t.name)
	case task.Status != tgtype.Success || len(task.Result) == 0:
		return out, fmt.Errorf("taskgraph: task %d has no result: it is %s", task.ID, task.Status)
	}
	if err := json.Unmarshal(task.Result, &out); err != nil {
		return out, fmt.Errorf("taskgraph: result of task %d: %w", task.ID, err)
	}
	return out, nil
}
