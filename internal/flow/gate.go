// Package flow holds task types back cluster-wide: a cap on a type's
// running instances across all nodes, a rate of starts ("at most N starts
// in any window of P"), and a pause, optionally until a time. Settings live
// in the flow_controls table, are changed live through Service (audited,
// operators and admins only), and are enforced by Gate inside the claim's
// own transaction, so that no number of nodes claiming at once can exceed
// them. Service also says why a waiting task is held back.
//
// A rate counts admission stamps (rate.go): each start is stamped with the
// time its slot in the window freed, at most one emission interval P/N
// before its claim, so that the claims' reaction times do not add up: a
// saturated type starts N per P, the stamps never more than N in any
// window of P, the actual starts never more than N+1.
//
// What a claim costs does not grow with the backlog: the gate reads the
// control rows of the types asked for (a unique index), counts the running
// instances of a capped type (the partial index on EXECUTING instances: as
// many rows as run, never the waiting ones), and reads the recent starts
// of a rate-limited type (flow_starts, a row per claim and stamp, kept for
// two periods, read through the (task_type, started_at) index).
package flow

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/store"
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
//
// It remembers one thing between claims: the earliest time a type it
// refused will be admitted again (a rate window that frees up, a pause
// that ends), which the pool asks for (NextAdmission) to claim then rather
// than at its next poll.
type Gate struct {
	mu   sync.Mutex
	next time.Time
	// atCap holds the types the latest claims of which found at their
	// cap, and heldAtCap is whether there are any: while a type is held
	// at its cap, the end of any execution may free a slot of it, and the
	// pool claims at once (HeldAtCap) instead of at its next poll.
	atCap     map[string]bool
	heldAtCap atomic.Bool
}

// NewGate returns the gate.
func NewGate() *Gate { return &Gate{} }

// NextAdmission returns, and forgets, the earliest time a type refused by
// the claims since the last call will be admitted again (zero: none).
func (g *Gate) NextAdmission() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.next
	g.next = time.Time{}
	return t
}

// HeldAtCap reports whether the latest claim of a capped type found it at
// its cap or filled it: the end of an execution may then free a slot a waiting
// task can take, which is worth a claim now rather than at the next poll.
// Safe to call from any goroutine, cheaply (an atomic read).
func (g *Gate) HeldAtCap() bool { return g.heldAtCap.Load() }

// noteCap records whether typ was found at its cap by a claim.
func (g *Gate) noteCap(typ string, full bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if full {
		if g.atCap == nil {
			g.atCap = map[string]bool{}
		}
		g.atCap[typ] = true
	} else {
		delete(g.atCap, typ)
	}
	g.heldAtCap.Store(len(g.atCap) > 0)
}

// admitAt notes that a refused type will be admitted again at t.
func (g *Gate) admitAt(t time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.next.IsZero() || t.Before(g.next) {
		g.next = t
	}
}

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

// Admit reads the control rows of types, locking them on PostgreSQL, then
// reads the claim's time with clock: claims of a type that wait for each
// other then read it in the order they commit, and a rate's claim times
// never go backwards. It returns how many instances of each type the claim
// may take now; a type absent from Room may not be claimed at all (paused,
// at its cap, out of starts). Only a claim that may take a rate-limited
// type has starts to record (Record); the others' claims make no call.
func (g *Gate) Admit(ctx context.Context, q Querier, types []string, clock func() time.Time) (store.Admission, error) {
	controls, err := g.controls(ctx, q, types)
	if err != nil {
		return store.Admission{}, fmt.Errorf("flow gate: %w", err)
	}
	now := clock()
	room := make(map[string]int, len(types))
	for _, t := range types {
		room[t] = Unlimited
	}
	// The rate windows of the rate-limited types admitted, as read: their
	// control rows are locked, and the claim writes no start before Record.
	windows := map[string]*rateWindow{}
	// The room the caps leave, of the capped types admitted: a claim that
	// takes all of it leaves the type at its cap (Took).
	capRoom := map[string]int{}
	for _, c := range controls {
		if c.pausedAt(now) {
			if c.pausedUntil.Valid {
				g.admitAt(c.pausedUntil.Time)
			}
			delete(room, c.typ)
			continue
		}
		allowed := Unlimited
		if c.maxRunning.Valid {
			running, err := countInt(ctx, q, `SELECT COUNT(*) FROM task_instances WHERE status = `+sqlExecuting+` AND task_type = ?`, c.typ)
			if err != nil {
				return store.Admission{}, fmt.Errorf("flow gate: count running %s: %w", c.typ, err)
			}
			allowed = max(0, int(c.maxRunning.Int64)-running)
			g.noteCap(c.typ, allowed == 0)
			if allowed > 0 {
				capRoom[c.typ] = allowed
			}
		}
		if c.rateLimit.Valid {
			// The starts of the last two periods, through the
			// (task_type, started_at) index.
			starts, err := readStarts(ctx, q, c.typ, horizon(now, c.period()))
			if err != nil {
				return store.Admission{}, fmt.Errorf("flow gate: read starts of %s: %w", c.typ, err)
			}
			w := newRateWindow(int(c.rateLimit.Int64), c.period(), now, starts)
			left := len(w.take(maxRoom))
			if left < maxRoom {
				// The rate holds the type back after these: say when
				// the next one may start, to claim it then.
				if at := w.next(); at.After(now) {
					g.admitAt(at)
				}
			}
			if allowed == Unlimited || left < allowed {
				allowed = left
			}
			if allowed > 0 {
				// take gave w's stamps away: Record takes from a fresh one.
				windows[c.typ] = newRateWindow(int(c.rateLimit.Int64), c.period(), now, starts)
			}
		}
		if allowed == 0 {
			delete(room, c.typ)
			continue
		}
		room[c.typ] = allowed
	}
	adm := store.Admission{Now: now, Room: room}
	if len(capRoom) > 0 {
		adm.Took = func(claimed map[string]int) {
			for typ, r := range capRoom {
				if claimed[typ] >= r {
					g.noteCap(typ, true)
				}
			}
		}
	}
	if len(windows) > 0 {
		adm.Record = func(ctx context.Context, q Querier, claimed map[string]int) error {
			return record(ctx, q, windows, claimed, now)
		}
	}
	if err := g.admitShares(ctx, q, types, &adm); err != nil {
		return store.Admission{}, fmt.Errorf("flow gate: %w", err)
	}
	return adm, nil
}

// tenantControl is a row of tenant_flow_controls: what holds one tenant's
// share of a type back.
type tenantControl struct {
	control
	tenant string
}

// admitShares reads, after the types' own, the tenant controls of the
// types the claim may take (locking them on PostgreSQL), and says in adm
// how many of each held tenant's instances the claim may take. What it
// reads grows with the tenants held back, never with the backlog: a
// tenant's cap counts its running instances, its rate reads its recent
// starts.
func (g *Gate) admitShares(ctx context.Context, q Querier, types []string, adm *store.Admission) error {
	var open []string
	for _, t := range types {
		if _, ok := adm.Room[t]; ok {
			open = append(open, t)
		}
	}
	controls, err := tenantControls(ctx, q, open)
	if err != nil || len(controls) == 0 {
		return err
	}
	now := adm.Now
	adm.Shares = map[string]map[string]int{}
	windows := map[shareKey]*rateWindow{}
	for _, c := range controls {
		if adm.Shares[c.typ] == nil {
			adm.Shares[c.typ] = map[string]int{}
		}
		if c.pausedAt(now) {
			if c.pausedUntil.Valid {
				g.admitAt(c.pausedUntil.Time)
			}
			adm.Shares[c.typ][c.tenant] = 0
			continue
		}
		allowed := Unlimited
		if c.maxRunning.Valid {
			running, err := countInt(ctx, q, `SELECT COUNT(*) FROM task_instances WHERE status = `+sqlExecuting+` AND task_type = ? AND tenant = ?`, c.typ, c.tenant)
			if err != nil {
				return fmt.Errorf("count running %s of tenant %q: %w", c.typ, c.tenant, err)
			}
			allowed = max(0, int(c.maxRunning.Int64)-running)
		}
		if c.rateLimit.Valid {
			starts, err := readTenantStarts(ctx, q, c.typ, c.tenant, horizon(now, c.period()))
			if err != nil {
				return fmt.Errorf("read starts of %s of tenant %q: %w", c.typ, c.tenant, err)
			}
			w := newRateWindow(int(c.rateLimit.Int64), c.period(), now, starts)
			left := len(w.take(maxRoom))
			if left < maxRoom {
				if at := w.next(); at.After(now) {
					g.admitAt(at)
				}
			}
			if allowed == Unlimited || left < allowed {
				allowed = left
			}
			if allowed > 0 {
				windows[shareKey{c.typ, c.tenant}] = newRateWindow(int(c.rateLimit.Int64), c.period(), now, starts)
			}
		}
		adm.Shares[c.typ][c.tenant] = allowed
	}
	if len(windows) > 0 {
		adm.RecordShares = func(ctx context.Context, q Querier, claimed map[string]map[string]int) error {
			return recordShares(ctx, q, windows, claimed, now)
		}
	}
	return nil
}

// TenantRoom is store.TenantRater: of each tenant whose quota rates its
// starts of every type (the claim has locked its quota row), how many the
// rate admits now, from its starts of the last two periods, kept in
// tenant_flow_starts under the empty task type (anyTypeOfTenant). A tenant
// the rate holds back is admitted again at its window's next slot
// (NextAdmission).
func (g *Gate) TenantRoom(ctx context.Context, q Querier, rates map[string]store.Rate, now time.Time) (map[string]int, func(context.Context, Querier, map[string]int) error, error) {
	tenants := make([]string, 0, len(rates))
	for tn := range rates {
		tenants = append(tenants, tn)
	}
	sort.Strings(tenants)
	room := make(map[string]int, len(rates))
	windows := map[shareKey]*rateWindow{}
	for _, tn := range tenants {
		r := rates[tn]
		period := time.Duration(max(r.PeriodSeconds, 1)) * time.Second
		starts, err := readTenantStarts(ctx, q, anyTypeOfTenant, tn, horizon(now, period))
		if err != nil {
			return nil, nil, fmt.Errorf("flow gate: read starts of tenant %q: %w", tn, err)
		}
		w := newRateWindow(r.Limit, period, now, starts)
		left := len(w.take(maxRoom))
		if left < maxRoom {
			if at := w.next(); at.After(now) {
				g.admitAt(at)
			}
		}
		room[tn] = left
		if left > 0 {
			windows[shareKey{anyTypeOfTenant, tn}] = newRateWindow(r.Limit, period, now, starts)
		}
	}
	if len(windows) == 0 {
		return room, nil, nil
	}
	return room, func(ctx context.Context, q Querier, started map[string]int) error {
		return recordShares(ctx, q, windows, map[string]map[string]int{anyTypeOfTenant: started}, now)
	}, nil
}

// anyTypeOfTenant is the task type under which tenant_flow_starts keeps a
// tenant's starts of every type, counted by its quota's rate: no task type
// has an empty name.
const anyTypeOfTenant = ""

var _ store.TenantRater = (*Gate)(nil)

// shareKey is one tenant's share of one type.
type shareKey struct{ typ, tenant string }

// tenantControls reads the tenant control rows of types that limit
// anything, in (type, tenant) order, locking them on PostgreSQL.
func tenantControls(ctx context.Context, q Querier, types []string) ([]tenantControl, error) {
	if len(types) == 0 {
		return nil, nil
	}
	types = append([]string(nil), types...)
	sort.Strings(types)
	args := make([]any, len(types))
	for i, t := range types {
		args[i] = t
	}
	query := `SELECT task_type, tenant, max_running, rate_limit, rate_period_seconds, paused, paused_until FROM tenant_flow_controls WHERE task_type IN (` +
		strings.TrimSuffix(strings.Repeat("?, ", len(types)), ", ") + `) AND (max_running IS NOT NULL OR rate_limit IS NOT NULL OR paused) ORDER BY task_type, tenant`
	if q.Postgres() {
		query += ` FOR UPDATE`
	}
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read tenant flow controls: %w", err)
	}
	defer rows.Close()
	var out []tenantControl
	for rows.Next() {
		var c tenantControl
		var until any
		if err := rows.Scan(&c.typ, &c.tenant, &c.maxRunning, &c.rateLimit, &c.ratePeriod, &c.paused, &until); err != nil {
			return nil, fmt.Errorf("read tenant flow controls: %w", err)
		}
		if c.pausedUntil, err = scanTime(until); err != nil {
			return nil, fmt.Errorf("read tenant flow controls: paused_until: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// recordShares is record for tenants' rates: their starts go to
// tenant_flow_starts.
func recordShares(ctx context.Context, q Querier, windows map[shareKey]*rateWindow, claimed map[string]map[string]int, now time.Time) error {
	keys := make([]shareKey, 0, len(windows))
	for k := range windows {
		if claimed[k.typ][k.tenant] > 0 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].typ != keys[j].typ {
			return keys[i].typ < keys[j].typ
		}
		return keys[i].tenant < keys[j].tenant
	})
	for _, k := range keys {
		w, n := windows[k], claimed[k.typ][k.tenant]
		stamps := w.take(n)
		if len(stamps) != n {
			return fmt.Errorf("flow gate: %d starts of %s of tenant %q claimed, %d admitted", n, k.typ, k.tenant, len(stamps))
		}
		for i := 0; i < len(stamps); {
			j := i
			for j < len(stamps) && stamps[j].Equal(stamps[i]) {
				j++
			}
			if _, err := q.Exec(ctx, `INSERT INTO tenant_flow_starts (task_type, tenant, started_at, admitted_at, count) VALUES (?, ?, ?, ?, ?)`,
				k.typ, k.tenant, now.UTC(), stamps[i].UTC(), j-i); err != nil {
				return fmt.Errorf("flow gate: record starts of %s of tenant %q: %w", k.typ, k.tenant, err)
			}
			i = j
		}
		if _, err := q.Exec(ctx, `DELETE FROM tenant_flow_starts WHERE task_type = ? AND tenant = ? AND started_at <= ?`, k.typ, k.tenant, horizon(now, w.period).UTC()); err != nil {
			return fmt.Errorf("flow gate: forget old starts of %s of tenant %q: %w", k.typ, k.tenant, err)
		}
	}
	return nil
}

// readTenantStarts reads a tenant's tenant_flow_starts rows of a type
// claimed after from.
func readTenantStarts(ctx context.Context, q Querier, typ, tenant string, from time.Time) ([]startRow, error) {
	rows, err := q.Query(ctx, `SELECT started_at, admitted_at, count FROM tenant_flow_starts WHERE task_type = ? AND tenant = ? AND started_at > ?`, typ, tenant, from.UTC())
	if err != nil {
		return nil, err
	}
	return scanStarts(rows)
}

// record writes, in the claim's transaction, the starts of rate-limited
// types with their admission stamps (rate.go), given by the windows Admit
// read, and forgets the rows no longer of use.
func record(ctx context.Context, q Querier, windows map[string]*rateWindow, claimed map[string]int, now time.Time) error {
	types := make([]string, 0, len(windows))
	for t := range windows {
		if claimed[t] > 0 {
			types = append(types, t)
		}
	}
	sort.Strings(types)
	for _, typ := range types {
		w := windows[typ]
		stamps := w.take(claimed[typ])
		if len(stamps) != claimed[typ] {
			// Admit allowed them in this transaction, from the same rows.
			return fmt.Errorf("flow gate: %d starts of %s claimed, %d admitted", claimed[typ], typ, len(stamps))
		}
		// One row per distinct stamp (they come in order).
		for i := 0; i < len(stamps); {
			j := i
			for j < len(stamps) && stamps[j].Equal(stamps[i]) {
				j++
			}
			if _, err := q.Exec(ctx, `INSERT INTO flow_starts (task_type, started_at, admitted_at, count) VALUES (?, ?, ?, ?)`,
				typ, now.UTC(), stamps[i].UTC(), j-i); err != nil {
				return fmt.Errorf("flow gate: record starts of %s: %w", typ, err)
			}
			i = j
		}
		if _, err := q.Exec(ctx, `DELETE FROM flow_starts WHERE task_type = ? AND started_at <= ?`, typ, horizon(now, w.period).UTC()); err != nil {
			return fmt.Errorf("flow gate: forget old starts of %s: %w", typ, err)
		}
	}
	return nil
}

// maxRoom is the most starts of a rate-limited type one claim is told it
// may take (more than the store claims at once).
const maxRoom = 10_000

func (c control) period() time.Duration {
	return time.Duration(max(c.ratePeriod, 1)) * time.Second
}

// readStarts reads a type's flow_starts rows claimed after from.
func readStarts(ctx context.Context, q Querier, typ string, from time.Time) ([]startRow, error) {
	rows, err := q.Query(ctx, `SELECT started_at, admitted_at, count FROM flow_starts WHERE task_type = ? AND started_at > ?`, typ, from.UTC())
	if err != nil {
		return nil, err
	}
	return scanStarts(rows)
}

// scanStarts reads rows of (started_at, admitted_at, count) and closes
// them.
func scanStarts(rows *sql.Rows) ([]startRow, error) {
	defer rows.Close()
	var out []startRow
	for rows.Next() {
		var claimed, stamp any
		var r startRow
		if err := rows.Scan(&claimed, &stamp, &r.count); err != nil {
			return nil, err
		}
		ct, err := scanTime(claimed)
		if err != nil {
			return nil, err
		}
		st, err := scanTime(stamp)
		if err != nil {
			return nil, err
		}
		r.claimed, r.stamp = ct.Time, ct.Time
		if st.Valid { // rows written before stamps: their claim's time
			r.stamp = st.Time
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// sqlExecuting is the running status, as the store writes it.
var sqlExecuting = lifecycle.QuotedList(lifecycle.Executing)

// controls reads the control rows of types that have one, in type order
// (the order locks are taken in, so that two claims never wait on each
// other's), locking them on PostgreSQL. Only the types a control limits
// have a row here.
func (g *Gate) controls(ctx context.Context, q Querier, types []string) ([]control, error) {
	if len(types) == 0 {
		return nil, nil
	}
	types = append([]string(nil), types...)
	sort.Strings(types)
	args := make([]any, len(types))
	for i, t := range types {
		args[i] = t
	}
	query := `SELECT task_type, max_running, rate_limit, rate_period_seconds, paused, paused_until FROM flow_controls WHERE task_type IN (` +
		strings.TrimSuffix(strings.Repeat("?, ", len(types)), ", ") + `) AND (max_running IS NOT NULL OR rate_limit IS NOT NULL OR paused) ORDER BY task_type`
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
