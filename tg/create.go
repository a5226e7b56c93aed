package tg

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/ent/taskreview"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/tg/tgtype"
)

// TaskOption sets something of one task at its creation; what is not set
// takes its type's default.
type TaskOption struct{ apply func(*engine.CreateRequest) }

// Title names the task in lists (at most 200 characters).
func Title(s string) TaskOption { return TaskOption{func(r *engine.CreateRequest) { r.Title = s }} }

// BizID is the caller's business key of the task: an order number, a file
// name (at most 128 characters). Lists filter by it.
func BizID(s string) TaskOption { return TaskOption{func(r *engine.CreateRequest) { r.BizID = s }} }

// IdempotencyKey makes the creation idempotent for its owner: the same key
// again returns the task it made (created false), and with another input
// it is a *ConflictError.
func IdempotencyKey(key string) TaskOption {
	return TaskOption{func(r *engine.CreateRequest) { r.IdempotencyKey = &key }}
}

// Priority orders waiting tasks: 0 runs first, 100 last (default 5).
func Priority(p int) TaskOption { return TaskOption{func(r *engine.CreateRequest) { r.Priority = &p }} }

// RunAt delays the task's first execution until t (at most a year ahead).
func RunAt(t time.Time) TaskOption { return TaskOption{func(r *engine.CreateRequest) { r.RunAt = &t }} }

// Timeout replaces the type's timeout for this task (whole seconds, at
// least one).
func Timeout(d time.Duration) TaskOption {
	return TaskOption{func(r *engine.CreateRequest) {
		s := int(d / time.Second)
		r.TimeoutSeconds = &s
	}}
}

// MaxAttempts replaces the retry policy's number of attempts for this task.
func MaxAttempts(n int) TaskOption {
	return TaskOption{func(r *engine.CreateRequest) { r.MaxAttempts = &n }}
}

// RetryPolicy names the retry policy of this task.
func RetryPolicy(name string) TaskOption {
	return TaskOption{func(r *engine.CreateRequest) { r.RetryPolicy = &name }}
}

// FinishBy gives the task a deadline: it must finish (SUCCESS) by t, which
// must lie ahead (and after its RunAt). The server flags it at risk when
// it is still open within its margin of t, and missed once t has passed
// (tgtype.Task.DeadlineState); alert rules (DEADLINE_AT_RISK,
// DEADLINE_MISSED) and the on-time report read those flags. Without it,
// the type's WithFinishWithin applies, if it has one.
func FinishBy(t time.Time) TaskOption {
	return TaskOption{func(r *engine.CreateRequest) { r.Deadline = &t }}
}

// StallAfter replaces the type's stall detection for this task (0: none).
func StallAfter(d time.Duration) TaskOption {
	return TaskOption{func(r *engine.CreateRequest) {
		s := int(d / time.Second)
		r.StallAfterSeconds = &s
	}}
}

// NewTask is one task of CreateMany: its type, its input (any value that
// encodes to a JSON object, or a json.RawMessage) and its options.
type NewTask struct {
	Type    string
	Input   any
	Options []TaskOption
}

// Created is the answer to one NewTask of CreateMany: the task, and
// whether this call created it (false: an earlier one with the same
// idempotency key did), or the item's own error (a *ValidationError, a
// *ConflictError).
type Created struct {
	Task    *tgtype.Task
	Created bool
	Err     error
}

// request builds the engine's request for one task.
func request(typ string, input any, opts []TaskOption) (engine.CreateRequest, error) {
	r := engine.CreateRequest{Type: typ}
	switch in := input.(type) {
	case json.RawMessage:
		r.Input = in
	case nil:
	default:
		b, err := json.Marshal(in)
		if err != nil {
			return r, &ValidationError{Problems: []Problem{{Field: "input", Message: "does not encode to JSON: " + err.Error()}}}
		}
		r.Input = b
	}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&r)
		}
	}
	return r, nil
}

// Create validates and creates a task of type typ with input, in a
// transaction of its own with its audit record: workers may claim it, and
// the API's subscribers see it, at once. The input is validated against
// the type's schema, masked before it is stored, and kept unmasked only
// encrypted, for the handler. The task belongs to the program, or to the
// owner of ctx (OnBehalfOf).
func (c *Client) Create(ctx context.Context, typ string, input any, opts ...TaskOption) (*tgtype.Task, error) {
	req, err := request(typ, input, opts)
	if err != nil {
		return nil, err
	}
	vctx, err := viewer(ctx)
	if err != nil {
		return nil, err
	}
	t, err := c.app.Engine.Create(vctx, req)
	if err != nil {
		return nil, publicError(err)
	}
	return taskOf(t), nil
}

// CreateTx creates a task as Create does, in tx, a transaction of the
// caller's on the Client's database (begun on DB(); on PostgreSQL, on any
// connection to the same database and schema), beside the caller's own
// writes — the business record the task is about, say. The task, its
// first execution and its audit record exist only if the caller commits
// tx: only then do workers claim it and subscribers hear of it; a
// rollback leaves nothing of it. An error leaves tx to the caller, who
// should roll it back (nothing of the task was written; on PostgreSQL a
// failed statement ends the transaction). A serialization failure is the
// caller's to retry, with its whole transaction.
func (c *Client) CreateTx(ctx context.Context, tx *sql.Tx, typ string, input any, opts ...TaskOption) (*tgtype.Task, error) {
	if tx == nil {
		return nil, &ValidationError{Problems: []Problem{{Field: "tx", Message: "no transaction given (Create opens its own)"}}}
	}
	req, err := request(typ, input, opts)
	if err != nil {
		return nil, err
	}
	vctx, err := viewer(ctx)
	if err != nil {
		return nil, err
	}
	t, err := c.app.Engine.CreateTx(vctx, tx, req)
	if err != nil {
		return nil, publicError(err)
	}
	return taskOf(t), nil
}

// CreateMany creates up to 1,000 tasks in one transaction of its own, in
// a few statements of many rows, each validated, masked and made
// idempotent as Create does, and answered on its own: an item refused
// does not stop the others. The call is one audit record. The error is
// for the call as a whole (too many items, the database failed).
func (c *Client) CreateMany(ctx context.Context, tasks []NewTask) ([]Created, error) {
	return c.createMany(ctx, tasks, nil)
}

// CreateManyTx creates tasks as CreateMany does, in tx, a transaction of
// the caller's (see CreateTx).
func (c *Client) CreateManyTx(ctx context.Context, tx *sql.Tx, tasks []NewTask) ([]Created, error) {
	if tx == nil {
		return nil, &ValidationError{Problems: []Problem{{Field: "tx", Message: "no transaction given (CreateMany opens its own)"}}}
	}
	return c.createMany(ctx, tasks, tx)
}

func (c *Client) createMany(ctx context.Context, tasks []NewTask, tx *sql.Tx) ([]Created, error) {
	out := make([]Created, len(tasks))
	reqs := make([]engine.CreateRequest, 0, len(tasks))
	idx := make([]int, 0, len(tasks))
	for i, n := range tasks {
		req, err := request(n.Type, n.Input, n.Options)
		if err != nil {
			out[i].Err = err
			continue
		}
		reqs = append(reqs, req)
		idx = append(idx, i)
	}
	vctx, err := viewer(ctx)
	if err != nil {
		return nil, err
	}
	var res []engine.CreateResult
	if tx == nil {
		res, err = c.app.Engine.CreateMany(vctx, reqs)
	} else {
		res, err = c.app.Engine.CreateManyTx(vctx, tx, reqs)
	}
	if err != nil {
		return nil, publicError(err)
	}
	for j, r := range res {
		i := idx[j]
		if r.Err != nil {
			out[i].Err = publicError(r.Err)
			continue
		}
		out[i] = Created{Task: taskOf(r.Task), Created: r.Created}
	}
	return out, nil
}

// Task reads a task with its executions, the latest first. A task that
// does not exist, or that the owner of ctx may not see, is a
// *NotFoundError.
func (c *Client) Task(ctx context.Context, id int) (*tgtype.Task, error) {
	vctx, err := viewer(ctx)
	if err != nil {
		return nil, err
	}
	t, err := c.app.Store.Client().Task.Query().Where(task.ID(id)).
		WithInstances(func(q *ent.TaskInstanceQuery) { q.Order(ent.Desc(taskinstance.FieldInstanceNo)) }).
		Only(vctx)
	if ent.IsNotFound(err) {
		return nil, &NotFoundError{ID: id}
	}
	if err != nil {
		return nil, publicError(err)
	}
	return taskOf(t), nil
}

// Wait waits until task id is in a final state (SUCCESS, FAILED,
// CANCELLED) or waits for a person (REVIEW_PENDING), and returns it as
// Task does, or until ctx ends. It follows
// the task's committed changes as they happen, on this node or another.
func (c *Client) Wait(ctx context.Context, id int) (*tgtype.Task, error) {
	sub := c.app.Broker.SubscribeTask(id, nil, 16)
	defer func() { sub.Close() }()
	// Changes published between the read below and the subscription are
	// not missed: the subscription came first. One lost to a full buffer
	// or a relay that lagged is caught by the periodic read.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		t, err := c.Task(ctx, id)
		if err != nil {
			return nil, err
		}
		if t.Status.Final() || t.Status == tgtype.ReviewPending {
			return t, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("taskgraph: waiting for task %d: %w", id, context.Cause(ctx))
		case _, ok := <-sub.C:
			if !ok { // dropped behind: read, and follow again
				sub = c.app.Broker.SubscribeTask(id, nil, 16)
			}
		case <-tick.C:
		}
	}
}

// Cancel cancels a waiting task at once and asks a running one to stop
// (its handler's context is cancelled); reason is shown with it. A
// finished task is a *TransitionError.
func (c *Client) Cancel(ctx context.Context, id int, reason string) (*tgtype.Task, error) {
	vctx, err := viewer(ctx)
	if err != nil {
		return nil, err
	}
	t, err := c.app.Engine.Cancel(vctx, id, reason)
	if err != nil {
		return nil, publicError(err)
	}
	return taskOf(t), nil
}

// Retry runs a FAILED task again in a new execution; the failed ones stay
// as they are, with their errors. Any other state is a *TransitionError.
func (c *Client) Retry(ctx context.Context, id int) (*tgtype.Task, error) {
	vctx, err := viewer(ctx)
	if err != nil {
		return nil, err
	}
	t, err := c.app.Engine.Retry(vctx, id)
	if err != nil {
		return nil, publicError(err)
	}
	return taskOf(t), nil
}

// ApproveReview decides a task waiting for review (REVIEW_PENDING): it
// runs again, with the same input, in a new execution. The decision is
// audited with its reason; with a four-eyes review, the task's submitter
// may not decide (a *ForbiddenError). A task not waiting for review, or
// decided by someone else first, is a *TransitionError.
func (c *Client) ApproveReview(ctx context.Context, id int, reason string) (*tgtype.Task, error) {
	return c.decide(ctx, id, store.DecisionApproved, reason, nil)
}

// EditAndRetry decides a task waiting for review: it runs again with
// input instead (validated by its type's schema, masked and sealed as a
// created task's input), kept as a new input version beside the ones
// before. reason is required.
func (c *Client) EditAndRetry(ctx context.Context, id int, input any, reason string) (*tgtype.Task, error) {
	raw, err := json.Marshal(input)
	if err != nil {
		return nil, &ValidationError{Problems: []Problem{{Field: "input", Message: err.Error()}}}
	}
	return c.decide(ctx, id, store.DecisionEdited, reason, raw)
}

// AcceptReview decides a task waiting for review: it ends SUCCESS with
// the result its execution left, partial or none.
func (c *Client) AcceptReview(ctx context.Context, id int, reason string) (*tgtype.Task, error) {
	return c.decide(ctx, id, store.DecisionAccepted, reason, nil)
}

// RejectReview decides a task waiting for review: it ends FAILED.
// reason is required.
func (c *Client) RejectReview(ctx context.Context, id int, reason string) (*tgtype.Task, error) {
	return c.decide(ctx, id, store.DecisionRejected, reason, nil)
}

func (c *Client) decide(ctx context.Context, id int, d taskreview.Decision, reason string, input json.RawMessage) (*tgtype.Task, error) {
	vctx, err := viewer(ctx)
	if err != nil {
		return nil, err
	}
	t, err := c.app.Engine.Decide(vctx, id, d, reason, input)
	if err != nil {
		return nil, publicError(err)
	}
	return taskOf(t), nil
}
