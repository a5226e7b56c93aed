package store

import (
	"context"
	"fmt"
	"time"
)

// PurgeFinished deletes up to limit tasks that finished (SUCCESS, FAILED,
// CANCELLED) before cutoff, with their instances and log lines, in one
// transaction, and returns how many tasks went. Nothing that can still
// change is ever deleted.
//
// Candidates are read oldest first from the created_at index (a task
// finishes after it is created, so every task that finished before cutoff
// was created before it): the read stops after limit matches and never
// sorts the table. tasks has no index on finished_at or status on purpose
// (its updates stay HOT, see ent/schema/task.go); the only rows read in
// vain are old tasks still waiting or running. On a table never analyzed
// PostgreSQL would rather collect every old task and sort them (it guesses
// few match): orderedScans takes that choice away for this transaction.
func (s *Store) PurgeFinished(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	var n int
	err := s.write(ctx, func(t *txn) error {
		if err := s.d.orderedScans(ctx, t); err != nil {
			return fmt.Errorf("purge: %w", err)
		}
		rows, err := s.queryInts(ctx, t, 1, s.d.purgeSelect(), cutoff.UTC(), cutoff.UTC(), limit)
		if err != nil {
			return fmt.Errorf("purge: select: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		args := make([]any, len(rows))
		for i, r := range rows {
			args[i] = r[0]
		}
		in := placeholders(len(args))
		for _, q := range []string{
			`DELETE FROM task_logs WHERE task_id IN (` + in + `)`,
			`DELETE FROM task_instances WHERE task_id IN (` + in + `)`,
		} {
			if _, err := s.exec(ctx, t, q, args...); err != nil {
				return fmt.Errorf("purge: %w", err)
			}
		}
		deleted, err := s.exec(ctx, t, `DELETE FROM tasks WHERE id IN (`+in+`) AND status IN (`+sqlTerminal+`)`, args...)
		if err != nil {
			return fmt.Errorf("purge: %w", err)
		}
		n = int(deleted)
		return nil
	})
	return n, err
}

// purgeSelect picks the tasks a purge deletes: finished before the cutoff,
// read oldest first from the created_at index.
func (d sqlDialect) purgeSelect() string {
	return `SELECT id FROM tasks
WHERE created_at < ? AND status IN (` + sqlTerminal + `) AND finished_at < ?
ORDER BY created_at
LIMIT ?` + d.skipLocked()
}

// orderedScans makes PostgreSQL read indexes in order, for the rest of the
// transaction, instead of collecting a range and sorting it: for the
// background scans that stop after a limit, whose planner estimates a table
// never analyzed makes wrong. (Our sessions run without JIT, so the cost
// these settings add to the refused plans never makes a plan compile.)
func (d sqlDialect) orderedScans(ctx context.Context, t *txn) error {
	if !d.postgres() {
		return nil
	}
	_, err := t.ExecContext(ctx, "SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true)")
	return err
}
