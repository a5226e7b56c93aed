package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/history"
)

// The task history is written from memory: each transaction of the store
// that creates tasks, starts executions (claims) or ends them (finishes,
// cancels) records what it did in its own batch (txn.hist), which joins
// the process's accumulator only once the transaction committed (a rolled
// back or retried attempt counts nothing). FlushHistory moves the
// accumulator to task_histories, one upsert per (minute, type, tenant),
// outside of every task's transaction: the finish never waits on a
// history row. A process killed before its flush loses what it counted
// since the last one (at most one flush interval); Close flushes.

// historyAcc is the process's counts not yet written.
type historyAcc struct {
	mu sync.Mutex
	b  history.Batch
}

func (a *historyAcc) merge(b history.Batch) {
	if len(b) == 0 {
		return
	}
	a.mu.Lock()
	if a.b == nil {
		a.b = history.Batch{}
	}
	a.b.Merge(b)
	a.mu.Unlock()
}

func (a *historyAcc) take() history.Batch {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.b
	a.b = nil
	return b
}

// history returns the transaction's batch of history counts.
func (t *txn) history() history.Batch {
	if t.hist == nil {
		t.hist = history.Batch{}
	}
	return t.hist
}

// histCreated counts tasks created at now.
func (t *txn) histCreated(tasks []*ent.Task, now time.Time) {
	b := t.history()
	for _, tk := range tasks {
		b.Created(tk.Type, tk.Tenant, now)
	}
}

// histCancelled counts tasks cancelled at now before they ran.
func (t *txn) histCancelled(tasks []*ent.Task, now time.Time) {
	b := t.history()
	for _, tk := range tasks {
		b.CancelledWaiting(tk.Type, tk.Tenant, now)
	}
}

// histOutcome is the history's name of a finished task's status: the
// outcome of the execution that ended.
func histOutcome(st lifecycle.Status) (outcome string, retried bool) {
	switch st {
	case lifecycle.RetryPending:
		return string(lifecycle.Failed), true
	case lifecycle.Success, lifecycle.Failed, lifecycle.Cancelled:
		return string(st), false
	}
	return string(st), false // REVIEW_PENDING: its run time only
}

// FlushHistory writes the history counted since the last flush (AddHistory)
// and reports how many rows it wrote. When the write fails the counts are
// kept for the next flush.
func (s *Store) FlushHistory(ctx context.Context) (int, error) {
	b := s.hist.take()
	if len(b) == 0 {
		return 0, nil
	}
	if err := s.AddHistory(ctx, b); err != nil {
		s.hist.merge(b)
		return 0, err
	}
	return len(b), nil
}

// CountStored counts, in the history of the minute of at, bytes of an
// artifact written for a task of type typ and tenant tenant. The artifact
// store calls it once the artifact's row committed; the count is written
// by the next flush, as the executions' are.
func (s *Store) CountStored(typ, tenant string, at time.Time, bytes int64) {
	if bytes <= 0 {
		return
	}
	b := history.Batch{}
	b.Stored(typ, tenant, at, bytes)
	s.hist.merge(b)
}

// SampleWaiting records, in the minute of now, the waiting depth (instances
// PENDING or RETRY_PENDING) of every task type and tenant that has any:
// one grouped count over the waiting instances, made by one node a minute
// (the watchdog role's history loop), not per chart.
func (s *Store) SampleWaiting(ctx context.Context, now time.Time) (int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT task_type, tenant, COUNT(*) FROM task_instances WHERE status IN (`+sqlWaiting+`) GROUP BY task_type, tenant`)
	if err != nil {
		return 0, fmt.Errorf("history: sample waiting: %w", err)
	}
	defer rows.Close()
	b := history.Batch{}
	start := history.Minute.Truncate(now)
	for rows.Next() {
		var k history.Key
		var n int64
		if err := rows.Scan(&k.Type, &k.Tenant, &n); err != nil {
			return 0, fmt.Errorf("history: sample waiting: %w", err)
		}
		k.Start, k.Resolution = start, history.Minute
		b.Row(k).Waiting = n
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("history: sample waiting: %w", err)
	}
	return len(b), s.AddHistory(ctx, b)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
