package graph

import (
	"context"
	"sync/atomic"

	"taskgraph/access"
	"taskgraph/auth"
	"taskgraph/ent"
	"taskgraph/ent/task"
	"taskgraph/events"
)

// whereQueries counts the changes a subscription had to confirm with a
// query (its filter holds a predicate only the database evaluates).
var whereQueries atomic.Int64

// subscriptionBuffer is how many changes a subscriber may fall behind by
// before it is dropped (its subscription then completes; it re-reads and
// subscribes again).
const subscriptionBuffer = 256

// taskUpdated streams committed changes of one task (id) or of the tasks
// matching where, in version order per task; only of tasks the subscriber
// may see (an id it may not see is NOT_FOUND, like an unknown one).
func (r *subscriptionResolver) taskUpdated(ctx context.Context, id *int, where *ent.TaskWhereInput) (<-chan *ent.Task, error) {
	viewer, err := auth.Require(ctx)
	if err != nil {
		return nil, err
	}
	if where != nil {
		// Reject a where input the database would reject, now rather
		// than on the first change.
		if _, err := where.P(); err != nil {
			return nil, err
		}
	}
	// Subscribe before reading the current state: a change committed in
	// between is then in the buffer, not lost (duplicates are dropped by
	// version below).
	plan := planWhereArgs(where, whereArgument(ctx))
	match := func(c events.TaskChange) bool {
		// The same rule package access applies to queries: a change of a
		// task the subscriber may not see never enters its buffer.
		if !access.CanSee(viewer, c.Task.Owner) {
			return false
		}
		ok, _ := plan.match(c.Task)
		return ok
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
			return nil, err
		}
		first = t
	}

	out := make(chan *ent.Task, 1)
	go func() {
		defer close(out)
		defer sub.Close()
		var last int64
		send := func(t *ent.Task) bool {
			select {
			case out <- t:
				return true
			case <-ctx.Done():
				return false
			}
		}
		if first != nil {
			if !send(first) {
				return
			}
			last = first.Version
		}
		for {
			select {
			case <-ctx.Done():
				return
			case c, ok := <-sub.C:
				if !ok {
					if err := sub.Err(); err != nil {
						r.Log.Info("subscription ended", "reason", err)
					}
					return
				}
				if id != nil && c.Task.Version <= last {
					continue // already sent with the current state
				}
				if _, exact := plan.match(c.Task); !exact {
					whereQueries.Add(1)
					p, err := where.P()
					if err != nil {
						return
					}
					found, err := r.Client.Task.Query().Where(task.ID(c.Task.ID), p).Exist(ctx)
					if err != nil || !found {
						continue
					}
				}
				if !send(c.Task) {
					return
				}
				last = c.Task.Version
			}
		}
	}()
	return out, nil
}

// taskLogAppended streams the log lines of one task as they are committed.
// The task must be visible to the subscriber when it subscribes; its owner
// never changes, so it stays visible.
func (r *subscriptionResolver) taskLogAppended(ctx context.Context, taskID int) (<-chan *ent.TaskLog, error) {
	if _, err := r.Client.Task.Get(ctx, taskID); err != nil {
		return nil, err
	}
	sub := r.Broker.SubscribeLogs(taskID, subscriptionBuffer)
	out := make(chan *ent.TaskLog, 1)
	go func() {
		defer close(out)
		defer sub.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case l, ok := <-sub.C:
				if !ok {
					return
				}
				select {
				case out <- l:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
