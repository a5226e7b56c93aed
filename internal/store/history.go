package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/taskgraph/taskgraph/internal/history"
)

// historyCounters are task_histories' counter columns, in the order of
// historyValues.
var historyCounters = func() []string {
	cols := []string{"created", "started", "succeeded", "failed", "cancelled", "retries", "rows_imported", "rows_exported", "run_time_ms", "waiting"}
	for _, m := range []string{"wait", "run"} {
		for i := range history.Buckets {
			cols = append(cols, fmt.Sprintf("%s_h%02d", m, i))
		}
	}
	return append(cols, "bytes_stored")
}()

func historyValues(c *history.Counts) []any {
	v := []any{c.Created, c.Started, c.Succeeded, c.Failed, c.Cancelled, c.Retries, c.RowsImported, c.RowsExported, c.RunTimeMs, c.Waiting}
	for _, h := range []*history.Histogram{&c.Wait, &c.Run} {
		for _, n := range h {
			v = append(v, n)
		}
	}
	return append(v, c.BytesStored)
}

func historyPointers(c *history.Counts) []any {
	p := []any{&c.Created, &c.Started, &c.Succeeded, &c.Failed, &c.Cancelled, &c.Retries, &c.RowsImported, &c.RowsExported, &c.RunTimeMs, &c.Waiting}
	for _, h := range []*history.Histogram{&c.Wait, &c.Run} {
		for i := range h {
			p = append(p, &h[i])
		}
	}
	return append(p, &c.BytesStored)
}

// historyUpsertSQL adds a row's counts to those stored (add) or replaces
// them (a roll-up's rows), one statement per row of the batch: a batch of
// outcomes costs one statement per (bucket, type, tenant), never one per
// task.
func (d sqlDialect) historyUpsertSQL(add bool) string {
	var b strings.Builder
	b.WriteString("INSERT INTO task_histories (bucket_start, resolution, task_type, tenant, " + strings.Join(historyCounters, ", ") + ") VALUES (" + d.timeParam() + ", ?, ?, ?")
	for range historyCounters {
		b.WriteString(", ?")
	}
	b.WriteString(") ON CONFLICT (resolution, bucket_start, task_type, tenant) DO UPDATE SET ")
	for i, c := range historyCounters {
		if i > 0 {
			b.WriteString(", ")
		}
		switch {
		case !add:
			b.WriteString(c + " = excluded." + c)
		case c == "waiting":
			// The largest depth sampled: a flush of counts (waiting 0)
			// leaves a sample alone.
			greatest := "max"
			if d.postgres() {
				greatest = "GREATEST"
			}
			b.WriteString(c + " = " + greatest + "(task_histories." + c + ", excluded." + c + ")")
		default:
			b.WriteString(c + " = task_histories." + c + " + excluded." + c)
		}
	}
	return b.String()
}

// AddHistory adds the rows of b to the task history, in one transaction
// (rows in a fixed order, so two nodes adding to the same rows do not
// deadlock).
func (s *Store) AddHistory(ctx context.Context, b history.Batch) error {
	return s.putHistory(ctx, b, true)
}

// ReplaceHistory writes the rows of b over those stored (a roll-up).
func (s *Store) ReplaceHistory(ctx context.Context, b history.Batch) error {
	return s.putHistory(ctx, b, false)
}

func (s *Store) putHistory(ctx context.Context, b history.Batch, add bool) error {
	if len(b) == 0 {
		return nil
	}
	keys := make([]history.Key, 0, len(b))
	for k := range b {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y history.Key) int {
		return strings.Compare(fmt.Sprint(x.Resolution, x.Start.UnixNano(), x.Type, "\x00", x.Tenant), fmt.Sprint(y.Resolution, y.Start.UnixNano(), y.Type, "\x00", y.Tenant))
	})
	q := s.d.historyUpsertSQL(add)
	return s.write(internal(ctx), func(t *txn) error {
		for _, k := range keys {
			args := append([]any{k.Start.UTC(), string(k.Resolution), k.Type, k.Tenant}, historyValues(b[k])...)
			if _, err := s.exec(ctx, t, q, args...); err != nil {
				return fmt.Errorf("history: upsert: %w", err)
			}
		}
		return nil
	})
}

// ReadHistory returns the stored rows of resolution r whose bucket starts
// in [from, to).
func (s *Store) ReadHistory(ctx context.Context, r history.Resolution, from, to time.Time) (history.Batch, error) {
	q := "SELECT bucket_start, task_type, tenant, " + strings.Join(historyCounters, ", ") +
		" FROM task_histories WHERE resolution = ? AND bucket_start >= " + s.d.timeParam() + " AND bucket_start < " + s.d.timeParam()
	rows, err := s.db.QueryContext(ctx, s.d.rebind(q), string(r), r.Truncate(from), to.UTC())
	if err != nil {
		return nil, fmt.Errorf("history: read: %w", err)
	}
	defer rows.Close()
	out := history.Batch{}
	for rows.Next() {
		var k history.Key
		var c history.Counts
		if err := rows.Scan(append([]any{&k.Start, &k.Type, &k.Tenant}, historyPointers(&c)...)...); err != nil {
			return nil, fmt.Errorf("history: read: %w", err)
		}
		k.Start, k.Resolution = k.Start.UTC(), r
		out.Row(k).Add(c)
	}
	return out, rows.Err()
}

// RollUpHistory recomputes the rows of resolution to (HOUR or DAY) whose
// buckets overlap [from, now) from the finer rows (minutes for hours,
// hours for days), replacing them: idempotent while the finer rows are kept.
func (s *Store) RollUpHistory(ctx context.Context, to history.Resolution, from, now time.Time) error {
	finer := history.Minute
	if to == history.Day {
		finer = history.Hour
	}
	rows, err := s.ReadHistory(ctx, finer, to.Truncate(from), now)
	if err != nil {
		return err
	}
	return s.ReplaceHistory(ctx, history.RollUp(rows, to))
}

// PurgeHistory deletes the rows past their resolution's retention and
// returns how many.
func (s *Store) PurgeHistory(ctx context.Context, rt history.Retention, now time.Time) (int64, error) {
	var n int64
	err := s.write(internal(ctx), func(t *txn) error {
		n = 0
		for _, r := range []history.Resolution{history.Minute, history.Hour, history.Day} {
			m, err := s.exec(ctx, t, "DELETE FROM task_histories WHERE resolution = ? AND bucket_start < "+s.d.timeParam(), string(r), rt.Cutoff(r, now))
			if err != nil {
				return fmt.Errorf("history: purge: %w", err)
			}
			n += m
		}
		return nil
	})
	return n, err
}
