package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/outage"
)

// CancelTask cancels a waiting task (PENDING, RETRY_PENDING) at once, and
// asks a running one (EXECUTING) to stop: its handler sees the request
// through its context and the instance becomes CANCELLED when it returns.
// Asking again while a request is pending changes nothing. A finished task
// yields a *lifecycle.TransitionError.
func (s *Store) CancelTask(ctx context.Context, id int, reason string) (out *ent.Task, err error) {
	err = s.Write(ctx, func(tx *Tx) error {
		out, err = tx.CancelTask(ctx, id, reason)
		return err
	})
	return out, err
}

// CancelTask cancels a task as Store.CancelTask does, in tx.
func (tx *Tx) CancelTask(ctx context.Context, id int, reason string) (*ent.Task, error) {
	return tx.s.cancelIn(lifecycle.Guarded(ctx), tx.t, id, reason)
}

// CancelTaskForSchedule cancels a task as CancelTask does, on condition
// that schedule scheduleID is still at version: a scheduler's pass that
// read the schedule before another node moved it on, or before an edit,
// cancels nothing (the overlap policy CANCEL_PREVIOUS) and gets
// ErrScheduleMoved. On PostgreSQL the schedule's row is locked for the
// transaction, so the version cannot move between the check and the
// cancel; SQLite has one writer at a time.
func (s *Store) CancelTaskForSchedule(ctx context.Context, id int, reason string, scheduleID int, version int64) (*ent.Task, error) {
	ctx = lifecycle.Guarded(ctx)
	var out *ent.Task
	err := s.write(ctx, func(t *txn) error {
		lock := ""
		if s.d.postgres() {
			lock = " FOR UPDATE"
		}
		got, err := s.queryInts(ctx, t, 1, `SELECT version FROM schedules WHERE id = ?`+lock, scheduleID)
		if err != nil {
			return fmt.Errorf("cancel for schedule %d: %w", scheduleID, err)
		}
		if len(got) == 0 || got[0][0] != version {
			return ErrScheduleMoved
		}
		out, err = s.cancelIn(ctx, t, id, reason)
		return err
	})
	return out, err
}

// CancelTasks cancels each task as CancelTask does, all in one transaction:
// what fails for one id (not found, finished) is that id's error and
// leaves the others alone; an error of the database fails them all.
func (s *Store) CancelTasks(ctx context.Context, ids []int, reason string) (out []Each, err error) {
	err = s.Write(ctx, func(tx *Tx) error {
		out, err = tx.CancelTasks(ctx, ids, reason)
		return err
	})
	return out, err
}

// CancelTasks cancels each task as Store.CancelTasks does, in tx.
func (tx *Tx) CancelTasks(ctx context.Context, ids []int, reason string) ([]Each, error) {
	ctx = lifecycle.Guarded(ctx)
	return tx.s.eachIn(ctx, tx.t, ids, func(t *txn, id int) (*ent.Task, error) { return tx.s.cancelIn(ctx, t, id, reason) })
}

func (s *Store) cancelIn(ctx context.Context, t *txn, id int, reason string) (*ent.Task, error) {
	// The state may move between the read and the conditional UPDATE
	// (a claim); read again and decide again, a bounded number of times.
	for range 5 {
		tk, err := t.Task.Get(ctx, id)
		if ent.IsNotFound(err) {
			return nil, &NotFoundError{Entity: "task", ID: id}
		}
		if err != nil {
			return nil, fmt.Errorf("cancel: read task: %w", err)
		}
		switch tk.Status {
		case lifecycle.Pending, lifecycle.RetryPending, lifecycle.WaitingDependency, lifecycle.ReviewPending:
			done, err := s.cancelWaiting(ctx, t, tk, reason)
			if err != nil {
				return nil, err
			}
			if done {
				return tk, nil
			}
		case lifecycle.Executing:
			if tk.CancelRequested {
				return tk, nil
			}
			done, err := s.requestCancel(ctx, t, tk, reason)
			if err != nil {
				return nil, err
			}
			if done {
				return tk, nil
			}
		default:
			return nil, lifecycle.Check("task", tk.ID, tk.Status, lifecycle.Cancelled)
		}
	}
	return nil, fmt.Errorf("cancel task %d: its state kept changing", id)
}

// Each is the outcome of one id of a bulk action.
type Each struct {
	ID   int
	Task *ent.Task
	Err  error
}

// eachIn runs fn for every id in the transaction t, each id in a
// savepoint of its own: an id whose fn fails is rolled back alone (its
// changes are not published) and reported in its Each, unless the failure
// is the database's, which fails the transaction.
func (s *Store) eachIn(ctx context.Context, t *txn, ids []int, fn func(t *txn, id int) (*ent.Task, error)) ([]Each, error) {
	out := make([]Each, 0, len(ids))
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		changes, logs := len(t.changes), len(t.logs)
		if _, err := t.ExecContext(ctx, "SAVEPOINT each_id"); err != nil {
			return nil, fmt.Errorf("savepoint: %w", err)
		}
		tk, err := fn(t, id)
		if err == nil {
			if _, err := t.ExecContext(ctx, "RELEASE SAVEPOINT each_id"); err != nil {
				return nil, fmt.Errorf("release savepoint: %w", err)
			}
			out = append(out, Each{ID: id, Task: tk})
			continue
		}
		if retryableDBError(err) || outage.Classify(err) != outage.None {
			return nil, err
		}
		if _, rbErr := t.ExecContext(ctx, "ROLLBACK TO SAVEPOINT each_id"); rbErr != nil {
			return nil, fmt.Errorf("task %d: %w (and rolling it back failed: %v)", id, err, rbErr)
		}
		if _, rbErr := t.ExecContext(ctx, "RELEASE SAVEPOINT each_id"); rbErr != nil {
			return nil, fmt.Errorf("release savepoint: %w", rbErr)
		}
		t.changes, t.logs = t.changes[:changes], t.logs[:logs]
		out = append(out, Each{ID: id, Err: err})
	}
	return out, nil
}

// cancelWaitingAll moves the waiting tasks among ids, with their live
// instances, to CANCELLED as cancelWaiting does one by one, with one
// statement for all the instances and one for all the tasks (instances
// first, then tasks: the lock order every writer keeps). Each UPDATE is
// conditional on the waiting states, which lifecycle's table lets move to
// CANCELLED (checked here). It returns the tasks it cancelled, as written;
// ids it did not move (running, finished, unknown, or claimed meanwhile)
// are left to the caller.
func (s *Store) cancelWaitingAll(ctx context.Context, t *txn, ids []int, reason string) ([]*ent.Task, error) {
	// The states a cancel ends at once: the claimable ones, a step
	// waiting for its parents, and a task waiting for a review.
	froms := append(slices.Clone(lifecycle.WaitingStatuses), lifecycle.WaitingDependency, lifecycle.ReviewPending)
	for _, from := range froms {
		if err := lifecycle.Check("task", 0, from, lifecycle.Cancelled); err != nil {
			return nil, err
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	waiting := lifecycle.QuotedList(froms...)
	now := s.Now()
	msg := "cancelled before it ran"
	if reason != "" {
		msg += ": " + reason
	}
	in, args := s.d.inInts("task_id", intsTo64(ids))
	moved, err := s.queryInts(ctx, t, 1, `
UPDATE task_instances SET status = `+sqlCancelled+`, error_kind = `+sqlKindCancelled+`, last_error = ?, finished_at = ?, version = version + 1
WHERE `+in+` AND status IN (`+waiting+`)
RETURNING task_id`, append([]any{msg, now}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("cancel: update instances: %w", err)
	}
	if len(moved) == 0 {
		return nil, nil
	}
	taskIDs := make([]int64, len(moved))
	for i, r := range moved {
		taskIDs[i] = r[0]
	}
	in, args = s.d.inInts("id", taskIDs)
	rows, err := t.QueryContext(ctx, s.d.rebind(`
UPDATE tasks SET status = `+sqlCancelled+`, attention_status = `+sqlCancelled+`, cancel_reason = NULLIF(?, ''), finished_at = ?, updated_at = ?, version = version + 1
WHERE `+in+` AND status IN (`+waiting+`)
RETURNING `+changingColumns("tasks")), append([]any{reason, now, now}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("cancel: update tasks: %w", err)
	}
	tasks, err := s.scanChanged(ctx, t, rows, nil)
	if err != nil {
		return nil, fmt.Errorf("cancel: update tasks: %w", err)
	}
	if len(tasks) != len(taskIDs) {
		// A task moves only with its live instance, which this
		// transaction now holds: a task that did not follow it is an
		// inconsistency, and the page is not applied.
		return nil, fmt.Errorf("cancel: %d waiting instances but %d of their tasks were waiting", len(taskIDs), len(tasks))
	}
	if err := s.closeReviews(ctx, t, taskIDs, now); err != nil {
		return nil, fmt.Errorf("cancel: %w", err)
	}
	t.changed(events.Transitioned, tasks...)
	t.histCancelled(tasks, now)
	if err := s.afterEnded(ctx, t, tasks); err != nil {
		return nil, fmt.Errorf("cancel: %w", err)
	}
	return tasks, nil
}

// cancelAll cancels ids (distinct) in t as cancelIn does each: the waiting
// ones together (cancelWaitingAll), the others id by id, each in its own
// savepoint (eachIn). The outcomes are in the order of ids.
func (s *Store) cancelAll(ctx context.Context, t *txn, ids []int, reason string) ([]Each, error) {
	// The statements of cancelWaitingAll are not read through ent: only
	// the ids the viewer may see go there (one read through the access
	// filter); the others meet cancelIn's NotFound.
	visible, err := t.Task.Query().Where(task.IDIn(ids...)).IDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("cancel: read tasks: %w", err)
	}
	cancelled, err := s.cancelWaitingAll(ctx, t, visible, reason)
	if err != nil {
		return nil, err
	}
	done := make(map[int]*ent.Task, len(cancelled))
	for _, tk := range cancelled {
		done[tk.ID] = tk
	}
	rest := make([]int, 0, len(ids)-len(done))
	for _, id := range ids {
		if done[id] == nil {
			rest = append(rest, id)
		}
	}
	others, err := s.eachIn(ctx, t, rest, func(t *txn, id int) (*ent.Task, error) { return s.cancelIn(ctx, t, id, reason) })
	if err != nil {
		return nil, err
	}
	out := make([]Each, 0, len(ids))
	for _, id := range ids {
		if tk := done[id]; tk != nil {
			out = append(out, Each{ID: id, Task: tk})
			continue
		}
		out = append(out, others[0])
		others = others[1:]
	}
	return out, nil
}

// cancelWaiting moves a waiting task and its live instance to CANCELLED.
// It reports false when the instance was claimed meanwhile.
func (s *Store) cancelWaiting(ctx context.Context, t *txn, tk *ent.Task, reason string) (bool, error) {
	from := tk.Status
	if err := lifecycle.Check("task", tk.ID, from, lifecycle.Cancelled); err != nil {
		return false, err
	}
	now := s.Now()
	msg := "cancelled before it ran"
	if reason != "" {
		msg += ": " + reason
	}
	// Instance first, then task: the lock order every writer keeps.
	n, err := s.exec(ctx, t, `
UPDATE task_instances SET status = `+sqlCancelled+`, error_kind = `+sqlKindCancelled+`, last_error = ?, finished_at = ?, version = version + 1
WHERE task_id = ? AND status = ?`, msg, now, tk.ID, string(from))
	if err != nil {
		return false, fmt.Errorf("cancel: update instance: %w", err)
	}
	if n == 0 {
		return false, nil
	}
	n, err = s.exec(ctx, t, `
UPDATE tasks SET status = `+sqlCancelled+`, attention_status = `+sqlCancelled+`, cancel_reason = NULLIF(?, ''), finished_at = ?, updated_at = ?, version = version + 1
WHERE id = ? AND status = ? AND version = ?`, reason, now, now, tk.ID, string(from), tk.Version)
	if err != nil {
		return false, fmt.Errorf("cancel: update task: %w", err)
	}
	if n != 1 {
		return false, fmt.Errorf("cancel: task %d changed while its instance was held", tk.ID)
	}
	if from == lifecycle.ReviewPending {
		if err := s.closeReviews(ctx, t, []int64{int64(tk.ID)}, now); err != nil {
			return false, fmt.Errorf("cancel: %w", err)
		}
	}
	cancelled := lifecycle.Cancelled
	tk.Status, tk.AttentionStatus, tk.CancelReason, tk.FinishedAt, tk.UpdatedAt = lifecycle.Cancelled, &cancelled, reason, &now, now
	tk.Version++
	t.changed(events.Transitioned, tk)
	t.histCancelled([]*ent.Task{tk}, now)
	if err := s.afterEnded(ctx, t, []*ent.Task{tk}); err != nil {
		return false, fmt.Errorf("cancel: %w", err)
	}
	return true, nil
}

// requestCancel flags a running task. It reports false when the task was no
// longer running.
func (s *Store) requestCancel(ctx context.Context, t *txn, tk *ent.Task, reason string) (bool, error) {
	now := s.Now()
	n, err := s.exec(ctx, t, `
UPDATE tasks SET cancel_requested = ?, cancel_reason = NULLIF(?, ''), updated_at = ?, version = version + 1
WHERE id = ? AND status = `+sqlExecuting+` AND version = ?`, true, reason, now, tk.ID, tk.Version)
	if err != nil {
		return false, fmt.Errorf("cancel: request: %w", err)
	}
	if n == 0 {
		return false, nil
	}
	tk.CancelRequested, tk.CancelReason, tk.UpdatedAt = true, reason, now
	tk.Version++
	t.changed(events.CancelRequested, tk)
	return true, nil
}

// RetryTask moves a FAILED task to RETRY_PENDING with a new instance that
// may run at once, leaving the failed instances as they are. The new instance
// starts the retry policy's attempts again. Any other state yields a
// *lifecycle.TransitionError; of many concurrent retries of one task, exactly
// one succeeds.
func (s *Store) RetryTask(ctx context.Context, id int) (out *ent.Task, err error) {
	err = s.Write(ctx, func(tx *Tx) error {
		out, err = tx.RetryTask(ctx, id)
		return err
	})
	return out, err
}

// RetryTask retries a task as Store.RetryTask does, in tx.
func (tx *Tx) RetryTask(ctx context.Context, id int) (*ent.Task, error) {
	return tx.s.retryIn(lifecycle.Guarded(ctx), tx.t, id)
}

// RetryTasks retries each task as RetryTask does, in one transaction, with
// the per-id failures of CancelTasks.
func (s *Store) RetryTasks(ctx context.Context, ids []int) (out []Each, err error) {
	err = s.Write(ctx, func(tx *Tx) error {
		out, err = tx.RetryTasks(ctx, ids)
		return err
	})
	return out, err
}

// RetryTasks retries each task as Store.RetryTasks does, in tx.
func (tx *Tx) RetryTasks(ctx context.Context, ids []int) ([]Each, error) {
	ctx = lifecycle.Guarded(ctx)
	return tx.s.eachIn(ctx, tx.t, ids, func(t *txn, id int) (*ent.Task, error) { return tx.s.retryIn(ctx, t, id) })
}

func (s *Store) retryIn(ctx context.Context, t *txn, id int) (out *ent.Task, _ error) {
	err := func() error {
		tk, err := t.Task.Get(ctx, id)
		if ent.IsNotFound(err) {
			return &NotFoundError{Entity: "task", ID: id}
		}
		if err != nil {
			return fmt.Errorf("retry: read task: %w", err)
		}
		// The table also allows EXECUTING -> RETRY_PENDING, but that is
		// the retry policy's move; a person may retry only a FAILED task.
		if tk.Status != lifecycle.Failed {
			return &lifecycle.TransitionError{Entity: "task", ID: tk.ID, From: tk.Status, To: lifecycle.RetryPending, Reason: "only a FAILED task can be retried"}
		}
		if err := lifecycle.Check("task", tk.ID, tk.Status, lifecycle.RetryPending); err != nil {
			return err
		}
		now := s.Now()
		n, err := s.exec(ctx, t, `
UPDATE tasks SET status = `+lifecycle.QuotedList(lifecycle.RetryPending)+`, attention_status = `+lifecycle.QuotedList(lifecycle.RetryPending)+`, cancel_requested = ?, finished_at = NULL, progress_done = 0, updated_at = ?, version = version + 1
WHERE id = ? AND status = ? AND version = ?`, false, now, tk.ID, string(tk.Status), tk.Version)
		if err != nil {
			return fmt.Errorf("retry: update task: %w", err)
		}
		if n == 0 {
			// Someone moved it first; report the state it is in now.
			cur, err := t.Task.Get(ctx, id)
			if err != nil {
				return fmt.Errorf("retry: read task: %w", err)
			}
			return &lifecycle.TransitionError{Entity: "task", ID: id, From: cur.Status, To: lifecycle.RetryPending, Reason: "moved concurrently"}
		}
		// Its children that run anyway, still waiting, await its new
		// outcome.
		if err := s.rewait(ctx, t, []int64{int64(id)}); err != nil {
			return fmt.Errorf("retry: %w", err)
		}
		last, err := t.TaskInstance.Query().
			Where(taskinstance.TaskID(id)).
			Order(ent.Desc(taskinstance.FieldInstanceNo)).
			First(ctx)
		if err != nil {
			return fmt.Errorf("retry: read last instance: %w", err)
		}
		// The partial unique index on live instances makes a second live
		// instance impossible even if the UPDATE above were bypassed.
		inst, err := t.TaskInstance.Create().
			SetTaskID(id).
			SetInstanceNo(last.InstanceNo + 1).
			SetAttempt(1).
			SetStatus(lifecycle.RetryPending).
			SetTaskType(tk.Type).
			SetPriority(tk.Priority).
			SetTenant(tk.Tenant).
			SetRunAt(now).
			SetCreatedAt(now).
			Save(ctx)
		if err != nil {
			return fmt.Errorf("retry: create instance: %w", err)
		}
		lg, err := t.TaskLog.Create().
			SetTaskID(id).
			SetInstanceID(inst.ID).
			SetLevel(tasklog.LevelINFO).
			SetMessage(fmt.Sprintf("manual retry: instance #%d scheduled", inst.InstanceNo)).
			SetCreatedAt(now).
			Save(ctx)
		if err != nil {
			return fmt.Errorf("retry: write log: %w", err)
		}
		t.logged(lg)
		retrying := lifecycle.RetryPending
		tk.Status, tk.AttentionStatus, tk.CancelRequested, tk.FinishedAt, tk.ProgressDone, tk.UpdatedAt = lifecycle.RetryPending, &retrying, false, nil, 0, now
		tk.Version++
		out = tk
		t.changed(events.Transitioned, tk)
		return nil
	}()
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TaskByID reads one task.
func (s *Store) TaskByID(ctx context.Context, id int) (*ent.Task, error) {
	tk, err := s.client.Task.Query().Where(task.ID(id)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, &NotFoundError{Entity: "task", ID: id}
	}
	return tk, err
}
