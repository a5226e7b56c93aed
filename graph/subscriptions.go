package graph

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/outage"
)

// whereQueries counts the changes a subscription had to confirm with a
// query (its filter holds a predicate only the database evaluates).
var whereQueries atomic.Int64

// subscriptionBuffer is how many changes wait for a subscriber before its
// broker backlog takes over (see events.Config.Backlog).
const subscriptionBuffer = 256

// Why a stream ends before its client ends it. The client receives a last
// error (extensions.code) and then the end of the stream, never a bare end:
// RESYNC_REQUIRED means re-read what you watch and subscribe again;
// UNAVAILABLE (shutting down) means reconnect, to this or another node.
var (
	errShuttingDown = errors.New("the server is shutting down; reconnect and subscribe again")
	errMissed       = errors.New("changes could not be checked against the subscription's filter; re-read and subscribe again")
)

// streamEnd is where a subscription resolver leaves why its stream ended;
// the operation's response handler (streamEnds) turns it into the stream's
// last response.
type streamEnd struct {
	mu  sync.Mutex
	err error
}

type streamEndKey struct{}

func endStream(ctx context.Context, err error) {
	if e, ok := ctx.Value(streamEndKey{}).(*streamEnd); ok && err != nil {
		e.mu.Lock()
		if e.err == nil {
			e.err = err
		}
		e.mu.Unlock()
	}
}

// streamEnds gives every subscription a streamEnd, and ends a stream that
// its resolver ended for a reason with one more response carrying that
// reason as a typed error (on graphql-transport-ws a next message with
// errors, then complete; on SSE an event with errors, then complete).
func streamEnds(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	op := graphql.GetOperationContext(ctx).Operation
	if op == nil || op.Operation != ast.Subscription {
		return next(ctx)
	}
	end := &streamEnd{}
	responses := next(context.WithValue(ctx, streamEndKey{}, end))
	finished := false
	return func(ctx context.Context) *graphql.Response {
		if finished {
			return nil
		}
		if r := responses(ctx); r != nil {
			return r
		}
		finished = true
		end.mu.Lock()
		err := end.err
		end.mu.Unlock()
		if err == nil || ctx.Err() != nil {
			return nil
		}
		return &graphql.Response{Errors: gqlerror.List{streamEndError(err)}}
	}
}

// streamEndError is the error a stream ended by err ends with.
func streamEndError(err error) *gqlerror.Error {
	e := &gqlerror.Error{Message: err.Error(), Extensions: map[string]any{}}
	switch {
	case errors.Is(err, events.ErrLagged):
		setCode(e, CodeResyncRequired, map[string]any{"reason": "LAGGED"})
	case errors.Is(err, events.ErrResyncRequired), errors.Is(err, errMissed):
		setCode(e, CodeResyncRequired, map[string]any{"reason": "MISSED_CHANGES"})
	default: // shutting down, broker closed
		e.Message = errShuttingDown.Error()
		setCode(e, CodeUnavailable, map[string]any{"reason": "SHUTTING_DOWN", "retryable": true, "retryAfterSeconds": 1})
	}
	return e
}

// streams tracks the running subscription streams so that a shutdown can
// end them and wait for them.
type streams struct {
	goingAway chan struct{}
	mu        sync.Mutex
	closing   bool
	running   int
	idle      chan struct{} // closed when closing and nothing runs
}

func newStreams() *streams {
	return &streams{goingAway: make(chan struct{}), idle: make(chan struct{})}
}

// start registers a stream; false when the server is going away.
func (s *streams) start() bool {
	if s == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.running++
	return true
}

func (s *streams) done() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running--; s.running == 0 && s.closing {
		close(s.idle)
	}
}

// closed is closed when the server goes away (nil: never).
func (s *streams) closed() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.goingAway
}

// goAway ends every stream and waits (within ctx) for their resolvers.
func (s *streams) goAway(ctx context.Context) bool {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		close(s.goingAway)
		if s.running == 0 {
			close(s.idle)
		}
	}
	s.mu.Unlock()
	select {
	case <-s.idle:
		return true
	case <-ctx.Done():
		return false
	}
}

// taskUpdated streams committed changes of one task (id) or of the tasks
// matching where, in version order per task; only of tasks the subscriber
// may see (an id it may not see is NOT_FOUND, like an unknown one).
func (r *subscriptionResolver) taskUpdated(ctx context.Context, id *int, where *ent.TaskWhereInput) (<-chan *ent.Task, error) {
	viewer, err := auth.Require(ctx)
	if err != nil {
		return nil, err
	}
	// An empty where ({}) is every task, as in queries; one the database
	// would reject is refused now rather than on the first change.
	if where, err = normalWhere(where); err != nil {
		return nil, err
	}
	// Subscribe before reading the current state: a change committed in
	// between is then in the buffer, not lost (duplicates are dropped by
	// version below).
	plan := planWhereArgs(where, whereArgument(ctx))
	match := func(c events.TaskChange) bool {
		// The same rule package access applies to queries: a change of a
		// task the subscriber may not see never enters its buffer.
		if !access.CanSee(viewer, c.Task) {
			return false
		}
		ok, _ := plan.match(c.Task)
		return ok
	}
	if !r.streams.start() {
		return nil, errShuttingDown
	}
	var sub *events.Subscription[events.TaskChange]
	if id != nil {
		sub = r.Broker.SubscribeTask(*id, match, subscriptionBuffer)
	} else {
		sub = r.Broker.SubscribeTasks(match, subscriptionBuffer)
	}
	var first *ent.Task
	if id != nil {
		t, err := r.Client.Task.Get(ctx, *id)
		if err != nil {
			sub.Close()
			r.streams.done()
			return nil, err
		}
		first = t
	}

	out := make(chan *ent.Task, 1)
	go func() {
		defer r.streams.done()
		defer close(out)
		defer sub.Close()
		closing := r.streams.closed()
		// last is the version sent of the one task watched: the broker's
		// changes older than the current state read above are skipped. (The
		// broker itself never delivers a version twice nor out of order.)
		var last int64
		send := func(t *ent.Task) bool {
			select {
			case out <- t:
				last = t.Version
				return true
			case <-ctx.Done():
			case <-closing:
				endStream(ctx, errShuttingDown)
			}
			return false
		}
		if first != nil && !send(first) {
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-closing:
				endStream(ctx, errShuttingDown)
				return
			case c, ok := <-sub.C:
				if !ok {
					if err := sub.Err(); err != nil {
						r.Log.Info("subscription ended", "reason", err)
						endStream(ctx, err)
					}
					return
				}
				if id != nil && c.Task.Version <= last {
					continue // already sent with the current state
				}
				if _, exact := plan.match(c.Task); !exact {
					whereQueries.Add(1)
					found, err := r.confirm(ctx, closing, where, c.Task.ID)
					if err != nil {
						endStream(ctx, err)
						return
					}
					if !found {
						continue
					}
				}
				if !send(c.Task) {
					return
				}
			}
		}
	}()
	return out, nil
}

// confirm asks the database whether task id matches where (its predicates
// that only the database evaluates). An outage is retried with backoff for
// a while: a change is never dropped because the check could not run.
func (r *subscriptionResolver) confirm(ctx context.Context, closing <-chan struct{}, where *ent.TaskWhereInput, id int) (bool, error) {
	p, err := where.P()
	if err != nil {
		return false, err
	}
	wait := 100 * time.Millisecond
	deadline := time.Now().Add(confirmPatience)
	for {
		found, err := r.Client.Task.Query().Where(task.ID(id), p).Exist(ctx)
		if err == nil {
			return found, nil
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if outage.Classify(err) == outage.None || time.Now().After(deadline) {
			r.Log.Warn("subscription: checking a change against its filter failed", "task_id", id, "err", err)
			return false, errMissed
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return false, ctx.Err()
		case <-closing:
			return false, errShuttingDown
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// confirmPatience is how long a subscription retries a filter check
// through an outage before it tells its client to resync.
const confirmPatience = 30 * time.Second

// taskLogAppended streams the log lines of one task as they are committed.
// The task must be visible to the subscriber when it subscribes; its owner
// and tenant never change, so it stays visible.
func (r *subscriptionResolver) taskLogAppended(ctx context.Context, taskID int) (<-chan *ent.TaskLog, error) {
	if _, err := r.Client.Task.Get(ctx, taskID); err != nil {
		return nil, err
	}
	if !r.streams.start() {
		return nil, errShuttingDown
	}
	sub := r.Broker.SubscribeLogs(taskID, subscriptionBuffer)
	out := make(chan *ent.TaskLog, 1)
	go func() {
		defer r.streams.done()
		defer close(out)
		defer sub.Close()
		closing := r.streams.closed()
		for {
			select {
			case <-ctx.Done():
				return
			case <-closing:
				endStream(ctx, errShuttingDown)
				return
			case l, ok := <-sub.C:
				if !ok {
					endStream(ctx, sub.Err())
					return
				}
				select {
				case out <- l:
				case <-ctx.Done():
					return
				case <-closing:
					endStream(ctx, errShuttingDown)
					return
				}
			}
		}
	}()
	return out, nil
}
