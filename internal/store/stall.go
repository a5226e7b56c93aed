package store

import (
	"context"
	"fmt"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/stalloverride"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/internal/events"
)

// StallMark flags a running execution as stalled, or clears the flag.
type StallMark struct {
	Token Token
	// Stalled flags the execution; false clears its flag.
	Stalled bool
	// MovedBefore, when flagging, applies the flag only if the execution
	// has not moved since (its progress_at, or its start, is not later): a
	// heartbeat carrying a move may land between the watchdog's read and
	// its write.
	MovedBefore time.Time
	// Log, when set, is written as a line of the task's trace.
	Log string
}

// MarkStalled applies marks to executions that are still EXECUTING with the
// token's version, and reports per mark whether it was applied. A stall is
// not a transition: the instance stays EXECUTING and keeps its version (its
// worker's fencing token stays valid); its task's version is bumped so that
// the change is published, in order, like progress.
func (s *Store) MarkStalled(ctx context.Context, marks []StallMark) ([]bool, error) {
	ctx = internal(ctx)
	applied := make([]bool, len(marks))
	err := s.write(ctx, func(t *txn) error {
		now := s.Now()
		var changed []int
		for i, m := range marks {
			applied[i] = false
			var n int64
			var err error
			if m.Stalled {
				n, err = s.exec(ctx, t, `
UPDATE task_instances SET stalled_at = ?
WHERE id = ? AND version = ? AND status = `+sqlExecuting+` AND stalled_at IS NULL
	AND COALESCE(progress_at, started_at) <= ?`, now, m.Token.InstanceID, m.Token.Version, m.MovedBefore.UTC())
			} else {
				n, err = s.exec(ctx, t, `
UPDATE task_instances SET stalled_at = NULL
WHERE id = ? AND version = ? AND status = `+sqlExecuting+` AND stalled_at IS NOT NULL`, m.Token.InstanceID, m.Token.Version)
			}
			if err != nil {
				return fmt.Errorf("mark stalled: %w", err)
			}
			if n == 0 {
				continue
			}
			applied[i] = true
			rows, err := s.queryInts(ctx, t, 1, `SELECT task_id FROM task_instances WHERE id = ?`, m.Token.InstanceID)
			if err != nil || len(rows) != 1 {
				return fmt.Errorf("mark stalled: read task of instance %d: %v", m.Token.InstanceID, err)
			}
			taskID := int(rows[0][0])
			changed = append(changed, taskID)
			if m.Log != "" {
				lg, err := t.TaskLog.Create().
					SetTaskID(taskID).
					SetInstanceID(m.Token.InstanceID).
					SetLevel(tasklog.LevelWARN).
					SetMessage(m.Log).
					SetCreatedAt(now).
					Save(ctx)
				if err != nil {
					return fmt.Errorf("mark stalled: write log: %w", err)
				}
				t.logged(lg)
			}
		}
		if len(changed) == 0 {
			return nil
		}
		rows, err := t.QueryContext(ctx, s.d.rebind(`
UPDATE tasks SET updated_at = ?, version = version + 1
WHERE id IN (`+placeholders(len(changed))+`) AND status = `+sqlExecuting+`
RETURNING `+changingColumns("tasks")), append([]any{now}, intsToAny(changed)...)...)
		if err != nil {
			return fmt.Errorf("mark stalled: publish: %w", err)
		}
		tasks, err := s.scanChanged(ctx, t, rows, nil)
		if err != nil {
			return fmt.Errorf("mark stalled: publish: %w", err)
		}
		t.changed(events.StallChanged, tasks...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// intsTo64 converts ids for inInts.
func intsTo64(ids []int) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

func intsToAny(ids []int) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// SetStallOverride records a task's own stallAfter (0: no stall detection
// for it). The first value recorded for a task stays: a resubmission with an
// idempotency key does not change the task it returns.
func (s *Store) SetStallOverride(ctx context.Context, taskID int, after time.Duration) error {
	return s.Write(ctx, func(tx *Tx) error { return tx.SetStallOverride(ctx, taskID, after) })
}

// SetStallOverride records a task's own stallAfter as
// Store.SetStallOverride does, in tx: with the task's creation, say.
func (tx *Tx) SetStallOverride(ctx context.Context, taskID int, after time.Duration) error {
	ctx = internal(ctx)
	n, err := tx.t.StallOverride.Query().Where(stalloverride.TaskID(taskID)).Count(ctx)
	if err != nil {
		return fmt.Errorf("set stall override of task %d: %w", taskID, err)
	}
	if n > 0 {
		return nil
	}
	// Inserted only after the count found none: the insert conflicts only
	// with a transaction of another node doing the same, and then the
	// first value stays (in a savepoint: a failed statement would end a
	// PostgreSQL transaction that is not the store's own to retry).
	if _, err := tx.t.ExecContext(ctx, "SAVEPOINT stall_override"); err != nil {
		return fmt.Errorf("set stall override of task %d: %w", taskID, err)
	}
	err = tx.t.StallOverride.Create().
		SetTaskID(taskID).
		SetStallAfterSeconds(int(after / time.Second)).
		Exec(ctx)
	if err != nil && ent.IsConstraintError(err) {
		if _, rbErr := tx.t.ExecContext(ctx, "ROLLBACK TO SAVEPOINT stall_override"); rbErr != nil {
			return fmt.Errorf("set stall override of task %d: %w", taskID, rbErr)
		}
		err = nil
	}
	if err != nil {
		return fmt.Errorf("set stall override of task %d: %w", taskID, err)
	}
	if _, err := tx.t.ExecContext(ctx, "RELEASE SAVEPOINT stall_override"); err != nil {
		return fmt.Errorf("set stall override of task %d: %w", taskID, err)
	}
	return nil
}

// StallOverrides returns the tasks' own stallAfter, for those that have one.
func (s *Store) StallOverrides(ctx context.Context, taskIDs []int) (map[int]time.Duration, error) {
	out := make(map[int]time.Duration)
	if len(taskIDs) == 0 {
		return out, nil
	}
	rows, err := s.client.StallOverride.Query().
		Where(stalloverride.TaskIDIn(taskIDs...)).
		All(internal(ctx))
	if err != nil {
		return nil, fmt.Errorf("read stall overrides: %w", err)
	}
	for _, r := range rows {
		out[r.TaskID] = time.Duration(r.StallAfterSeconds) * time.Second
	}
	return out, nil
}

// StallOverride returns a task's own stallAfter, and false when it has none.
func (s *Store) StallOverride(ctx context.Context, taskID int) (time.Duration, bool, error) {
	m, err := s.StallOverrides(ctx, []int{taskID})
	if err != nil {
		return 0, false, err
	}
	d, ok := m[taskID]
	return d, ok, nil
}
