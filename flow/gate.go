// Package flow holds task types back cluster-wide: a cap on a type's
// running instances across all nodes, a rate of starts ("at most N starts
// in any window of P"), and a pause, optionally until a time. Settings live
// in the flow_controls table, are changed live through Service (audited,
// operators and admins only), and are enforced by Gate inside the claim's
// own transaction, so that no number of nodes claiming at once can exceed
// them. Service also says why a waiting task is held back.
//
// What a claim costs does not grow with the backlog: the gate reads the
// control rows of the types asked for (a unique index), counts the running
// instances of a capped type (the partial index on EXECUTING instances: as
// many rows as run, never the waiting ones), and sums the starts of a
// rate-limited type in its window (flow_starts, one row per claim, kept
// for one period).
package flow

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"

	"taskgraph/store"
)

// Unlimited is an admission without a limit of the gate's own.
const Unlimited = store.Unlimited

// Querier runs statements with ? placeholders inside the claim's
// transaction.
type Querier = store.Querier

// Gate limits, per task type, what one claim may take (store.Config.Gate).
// It keeps no state of its own: everything is read and written in the
// claim's transaction. On PostgreSQL it locks a limited type's control row
// for that transaction, which serializes concurrent claims of the type
// across nodes until the claim commits; SQLite has a single writer and
// needs no lock.
type Gate struct{}

// NewGate returns the gate.
func NewGate() *Gate { return &Gate{} }

var _ store.Gate = (*Gate)(nil)

// control is a type's row of flow_controls.
type control struct {
	typ         string
	maxRunning  sql.NullInt64
	rateLimit   sql.NullInt64
	ratePeriod  int64
	paused      bool
	pausedUntil sql.NullTime
}

func (c control) pausedAt(now time.Time) bool {
	return c.paused && (!c.pausedUntil.Valid || c.pausedUntil.Time.After(now))
}

// Admit returns how many instances of each type the claim may take now;
// a type absent from the map may not be claimed at all (paused, at its
// cap, out of starts); Unlimited means no limit beyond the claim's own.
func (g *Gate) Admit(ctx context.Context, q Querier, types []string, now time.Time) (map[string]int, error) {
	out := make(map[string]int, len(types))
	for _, t := range types {
		out[t] = Unlimited
	}
	if len(types) == 0 {
		return out, nil
	}
	controls, err := g.controls(ctx, q, types, false)
	if err != nil {
		return nil, fmt.Errorf("flow gate: %w", err)
	}
	for _, c := range controls {
		if c.pausedAt(now) {
			delete(out, c.typ)
			continue
		}
		allowed := Unlimited
		if c.maxRunning.Valid {
			running, err := countInt(ctx, q, `SELECT COUNT(*) FROM task_instances WHERE status = 'EXECUTING' AND task_type = ?`, c.typ)
			if err != nil {
				return nil, fmt.Errorf("flow gate: count running %s: %w", c.typ, err)
			}
			allowed = max(0, int(c.maxRunning.Int64)-running)
		}
		if c.rateLimit.Valid {
			started, err := countInt(ctx, q, `SELECT COALESCE(SUM(count), 0) FROM flow_starts WHERE task_type = ? AND started_at > ?`,
				c.typ, windowStart(now, c.ratePeriod))
			if err != nil {
				return nil, fmt.Errorf("flow gate: count starts of %s: %w", c.typ, err)
			}
			left := max(0, int(c.rateLimit.Int64)-started)
			if allowed == Unlimited || left < allowed {
				allowed = left
			}
		}
		if allowed == 0 {
			delete(out, c.typ)
			continue
		}
		out[c.typ] = allowed
	}
	return out, nil
}

// Claimed records, in the claim's transaction, the starts of rate-limited
// types, and forgets those out of their window.
func (g *Gate) Claimed(ctx context.Context, q Querier, claimed map[string]int, now time.Time) error {
	var types []string
	for t, n := range claimed {
		if n > 0 {
			types = append(types, t)
		}
	}
	if len(types) == 0 {
		return nil
	}
	controls, err := g.controls(ctx, q, types, true)
	if err != nil {
		return fmt.Errorf("flow gate: %w", err)
	}
	for _, c := range controls {
		if _, err := q.Exec(ctx, `INSERT INTO flow_starts (task_type, started_at, count) VALUES (?, ?, ?)`, c.typ, now.UTC(), claimed[c.typ]); err != nil {
			return fmt.Errorf("flow gate: record starts of %s: %w", c.typ, err)
		}
		if _, err := q.Exec(ctx, `DELETE FROM flow_starts WHERE task_type = ? AND started_at <= ?`, c.typ, windowStart(now, c.ratePeriod)); err != nil {
			return fmt.Errorf("flow gate: forget old starts of %s: %w", c.typ, err)
		}
	}
	return nil
}

// windowStart is the exclusive start of the rate window ending at now.
func windowStart(now time.Time, periodSeconds int64) time.Time {
	return now.UTC().Add(-time.Duration(max(periodSeconds, 1)) * time.Second)
}

// controls reads the control rows of types that have one, in type order
// (the order locks are taken in, so that two claims never wait on each
// other's), locking those that limit on PostgreSQL. rateOnly reads only
// rate-limited types.
func (g *Gate) controls(ctx context.Context, q Querier, types []string, rateOnly bool) ([]control, error) {
	types = append([]string(nil), types...)
	sort.Strings(types)
	args := make([]any, len(types))
	for i, t := range types {
		args[i] = t
	}
	query := `SELECT task_type, max_running, rate_limit, rate_period_seconds, paused, paused_until FROM flow_controls WHERE task_type IN (` +
		strings.TrimSuffix(strings.Repeat("?, ", len(types)), ", ") + `)`
	if rateOnly {
		query += ` AND rate_limit IS NOT NULL`
	} else {
		query += ` AND (max_running IS NOT NULL OR rate_limit IS NOT NULL OR paused)`
	}
	query += ` ORDER BY task_type`
	if q.Postgres() {
		query += ` FOR UPDATE`
	}
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read flow controls: %w", err)
	}
	defer rows.Close()
	var out []control
	for rows.Next() {
		var c control
		var until any
		if err := rows.Scan(&c.typ, &c.maxRunning, &c.rateLimit, &c.ratePeriod, &c.paused, &until); err != nil {
			return nil, fmt.Errorf("read flow controls: %w", err)
		}
		if c.pausedUntil, err = scanTime(until); err != nil {
			return nil, fmt.Errorf("read flow controls: paused_until: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// scanTime reads a nullable timestamp as PostgreSQL (time.Time) or SQLite
// (text, as the driver wrote it) returns it.
func scanTime(v any) (sql.NullTime, error) {
	switch t := v.(type) {
	case nil:
		return sql.NullTime{}, nil
	case time.Time:
		return sql.NullTime{Time: t, Valid: true}, nil
	case string:
		return parseSQLiteTime(t)
	case []byte:
		return parseSQLiteTime(string(t))
	}
	return sql.NullTime{}, fmt.Errorf("unexpected %T", v)
}

func parseSQLiteTime(s string) (sql.NullTime, error) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999999-07:00", time.RFC3339Nano, "2006-01-02 15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return sql.NullTime{Time: t, Valid: true}, nil
		}
	}
	return sql.NullTime{}, fmt.Errorf("cannot read time %q", s)
}

func countInt(ctx context.Context, q Querier, query string, args ...any) (int, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	if rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
	}
	return n, rows.Err()
}
