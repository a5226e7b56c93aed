package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/events"
)

// Token fences the writes of one execution: the instance it runs and the
// instance's version when it was claimed. Once the instance has moved on
// (completed, timed out, cancelled), writes carrying the token are refused.
type Token struct {
	InstanceID int
	Version    int64
}

// Claimed is an execution a worker now holds: the task as committed by the
// claim and the instance (whose ID and Version make the token).
type Claimed struct {
	Task     *ent.Task
	Instance *ent.TaskInstance
}

// Token returns the fencing token of the execution.
func (c Claimed) Token() Token {
	return Token{InstanceID: c.Instance.ID, Version: c.Instance.Version}
}

func init() {
	for _, from := range lifecycle.WaitingStatuses {
		if !lifecycle.CanMove(from, lifecycle.Executing) {
			panic("lifecycle: claim needs " + string(from) + " -> EXECUTING")
		}
	}
	// claimInstances selects the waiting instances as the live ones but
	// EXECUTING.
	waiting := slices.DeleteFunc(slices.Clone(lifecycle.LiveStatuses), func(s lifecycle.Status) bool { return s == lifecycle.Executing })
	slices.Sort(waiting)
	if !slices.Equal(waiting, slices.Sorted(slices.Values(lifecycle.WaitingStatuses))) {
		panic("lifecycle: the waiting states must be the live ones but EXECUTING")
	}
}

// Status lists for the hand-written statements, built from the transition
// table's own lists.
var (
	sqlWaiting   = lifecycle.QuotedList(lifecycle.WaitingStatuses...)
	sqlExecuting = lifecycle.QuotedList(lifecycle.Executing)
	sqlLive      = lifecycle.QuotedList(lifecycle.LiveStatuses...)
	sqlTerminal  = lifecycle.QuotedList(lifecycle.TerminalStatuses...)
	sqlCancelled = lifecycle.QuotedList(lifecycle.Cancelled)
	// sqlKindCancelled is the error kind of a cancelled execution.
	sqlKindCancelled = "'" + string(lifecycle.KindCancelled) + "'"
)

// Claim moves up to limit waiting instances whose run_at has passed, of the
// given task types, to EXECUTING for workerID, smallest priority first, and
// their tasks with them. On PostgreSQL the instances are picked with FOR
// UPDATE SKIP LOCKED, so concurrent claimers never block on or share a row.
//
// The cost of a claim does not depend on how many instances wait: the
// candidates are read per task type from the claimable index, which holds
// only waiting instances already in claim order, and at most limit of them
// per type are read (claimQuery). An instance whose task does not mirror
// it (the task is not waiting) is left alone, for the watchdog's repair; it
// never fails the claim of the others.
func (s *Store) Claim(ctx context.Context, workerID string, types []string, limit int) ([]Claimed, error) {
	return s.ClaimEach(ctx, workerID, types, nil, limit)
}

// ClaimEach is Claim with a cap per type: at most caps[i] instances of
// types[i] (a worker's room under the type's concurrency cap), and limit
// in all, taken in claim order across the types. With caps nil, each type
// may have up to limit. One claim of every type a worker runs, rather than
// one per capped type, keeps priority across the types: a capped type's
// task is not held back behind another type's backlog.
func (s *Store) ClaimEach(ctx context.Context, workerID string, types []string, caps []int, limit int) ([]Claimed, error) {
	return s.claimEach(ctx, workerID, nil, types, caps, limit)
}

// ClaimOfTenant is Claim of the tasks of one tenant only: what a worker
// whose credentials name a tenant may take (the worker protocol). The
// candidates are read from the claimable index as Claim reads them, each
// checked against its instance's tenant (copied from its task), so the
// claim reads past the waiting instances of other tenants' tasks of the
// same types that come first.
func (s *Store) ClaimOfTenant(ctx context.Context, workerID, tenant string, types []string, limit int) ([]Claimed, error) {
	return s.claimEach(ctx, workerID, &tenant, types, nil, limit)
}

func (s *Store) claimEach(ctx context.Context, workerID string, tenant *string, types []string, caps []int, limit int) ([]Claimed, error) {
	ctx = internal(ctx)
	if caps != nil && len(caps) != len(types) {
		return nil, fmt.Errorf("claim: %d caps for %d types", len(caps), len(types))
	}
	limit = min(limit, maxBatchRows)
	if limit <= 0 || len(types) == 0 {
		return nil, nil
	}
	// What the claim asks of each type; each attempt lowers a copy of it
	// to what the gate admits.
	wanted := make([]int, len(types))
	for i := range wanted {
		wanted[i] = limit
		if caps != nil {
			wanted[i] = min(max(caps[i], 0), limit)
		}
	}
	if !slices.ContainsFunc(wanted, func(l int) bool { return l > 0 }) {
		return nil, nil
	}
	if !s.d.postgres() {
		// SQLite: a claim that would take nothing (nothing waits, or the
		// gate admits none of it) takes no write lock, which every node
		// sharing the file would wait for; a poll finds out by reading.
		ok, err := s.anyClaimable(ctx, tenant, types, wanted)
		if err != nil || !ok {
			return nil, err
		}
	}
	var out []Claimed
	var shares map[string][]share
	err := s.write(ctx, func(t *txn) error {
		out, shares = nil, nil
		q := txQuerier{s: s, t: t}
		limits := slices.Clone(wanted)
		adm, err := s.admit(ctx, q, types, limits)
		if err != nil {
			return err
		}
		now := adm.Now
		var recordRates func(ctx context.Context, q Querier, started map[string]int) error
		shares, recordRates, err = s.split(ctx, q, types, limits, adm, tenant)
		if err != nil {
			return err
		}
		// 1. The tasks of the picked instances. The instances are locked
		// first (FOR UPDATE in the pick), then their tasks: the lock order
		// every writer keeps.
		pick, pickArgs := s.d.claimQuery(types, limits, shares, now, tenant, limit)
		args := append([]any{now}, pickArgs...)
		rows, err := s.query(ctx, t, claimTasks(pick), args...)
		if err != nil {
			return fmt.Errorf("claim tasks: %w", err)
		}
		tasks, err := ent.ScanTaskRows(s.client, rows)
		if err != nil {
			return fmt.Errorf("claim tasks: %w", err)
		}
		if len(tasks) == 0 {
			return nil
		}
		// 2. Their live instances, found by task through the one-live index.
		ids := make([]int64, len(tasks))
		for i, tk := range tasks {
			ids[i] = int64(tk.ID)
		}
		stmt, stmtArgs := s.d.claimInstances(workerID, now, ids)
		rows, err = s.query(ctx, t, stmt, stmtArgs...)
		if err != nil {
			return fmt.Errorf("claim instances: %w", err)
		}
		insts, err := scanClaimedInstances(s.client, rows, workerID, now)
		if err != nil {
			return fmt.Errorf("claim instances: %w", err)
		}
		if len(insts) != len(tasks) {
			// Every picked task had a waiting instance locked by the pick
			// in this transaction; a difference is a broken invariant.
			return fmt.Errorf("claim: %d tasks but %d instances moved", len(tasks), len(insts))
		}
		byID := make(map[int]*ent.Task, len(tasks))
		for _, tk := range tasks {
			byID[tk.ID] = tk
		}
		// Hand out work in claim order.
		slices.SortFunc(insts, cmpClaimOrder)
		out = make([]Claimed, len(insts))
		hist := t.history()
		for i, in := range insts {
			out[i] = Claimed{Task: byID[in.TaskID], Instance: in}
			// Waited from when it could run (its run_at, or its
			// creation if later) to now.
			hist.Started(in.TaskType, byID[in.TaskID].Tenant, now, now.Sub(later(in.RunAt, in.CreatedAt)))
		}
		t.changed(events.Transitioned, tasks...)
		if adm.Record != nil || adm.Took != nil {
			counts := make(map[string]int, len(types))
			for _, tk := range tasks {
				counts[tk.Type]++
			}
			if adm.Record != nil {
				if err := adm.Record(ctx, q, counts); err != nil {
					return fmt.Errorf("claim: gate: %w", err)
				}
			}
			if adm.Took != nil {
				adm.Took(counts)
			}
		}
		if recordRates != nil {
			// The starts of tenants whose quotas rate them.
			started := map[string]int{}
			for _, tk := range tasks {
				started[tk.Tenant]++
			}
			if err := recordRates(ctx, q, started); err != nil {
				return fmt.Errorf("claim: tenants' rates: %w", err)
			}
		}
		if adm.RecordShares != nil {
			counts := map[string]map[string]int{}
			for _, tk := range tasks {
				if _, ok := adm.Shares[tk.Type]; !ok {
					continue
				}
				if counts[tk.Type] == nil {
					counts[tk.Type] = map[string]int{}
				}
				counts[tk.Type][tk.Tenant]++
			}
			if err := adm.RecordShares(ctx, q, counts); err != nil {
				return fmt.Errorf("claim: gate: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if tenant == nil && len(shares) > 0 {
		given := map[string]map[string]int{}
		for _, c := range out {
			if _, ok := shares[c.Task.Type]; ok {
				if given[c.Task.Type] == nil {
					given[c.Task.Type] = map[string]int{}
				}
				given[c.Task.Type][c.Task.Tenant]++
			}
		}
		for ty, sh := range shares {
			s.fair.took(ty, sh, given[ty])
		}
	}
	return out, nil
}

// Gate limits, per task type, what one claim may take (cluster-wide
// concurrency caps, rate limits, pauses). It runs inside the claim's
// transaction, so row locks it takes (e.g. SELECT ... FOR UPDATE on a
// type's control row) serialize concurrent claims of that type across
// nodes until the claim commits.
type Gate interface {
	// Admit says how many instances of each of types the claim may take.
	// It is the first thing the claim's transaction does: it takes its
	// locks, then reads the claim's time with clock, so that a claim that
	// waited for another's commit counts from after it (a rate's claim
	// times never go backwards). Its cost must not depend on how many
	// instances wait.
	Admit(ctx context.Context, q Querier, types []string, clock func() time.Time) (Admission, error)
}

// Admission is a gate's answer to a claim.
type Admission struct {
	// Now is the claim's time, read once the gate's locks were held.
	Now time.Time
	// Room is how many instances of each type the claim may take: a type
	// absent from it may not be claimed at all; Unlimited means no limit
	// beyond the claim's own.
	Room map[string]int
	// Record, when not nil, is told in the same transaction how many were
	// claimed per type (a rate limit counts them). A gate that limits
	// nothing it must count leaves it nil, and the claim makes no call.
	Record func(ctx context.Context, q Querier, claimed map[string]int) error
	// Took, when not nil, is told how many the claim took per type, in
	// memory, once it took any (a cap notes whether the claim filled it).
	Took func(claimed map[string]int)
	// Shares holds tenants' shares of types back: for a type it names,
	// the room of each tenant it lists (0: none of the tenant's); a tenant
	// it does not list takes what the type's room allows. The claim then
	// reads that type tenant by tenant (the tenants with waiting
	// instances, through the (task_type, tenant, ...) claimable index).
	Shares map[string]map[string]int
	// RecordShares, when not nil, is told in the same transaction how
	// many were claimed per type and tenant, of the types in Shares.
	RecordShares func(ctx context.Context, q Querier, claimed map[string]map[string]int) error
}

// share is one tenant's part in a claim of a type read tenant by tenant:
// its room (how far its range is read), its pass and its stride (1/weight;
// fair.go).
type share struct {
	tenant string
	limit  int
	start  float64
	stride float64
}

// maxShareTenants bounds how many tenants with waiting instances one
// claim reads of a type read tenant by tenant.
const maxShareTenants = 1000

// split returns the types of the claim read tenant by tenant, with each
// waiting tenant's share: those whose tenants' shares the admission holds
// back; (when the claim is not of one tenant) those that more than one
// tenant waits for, to share them fairly (fair.go); and those that a
// tenant whose quota caps its running instances or rates its starts waits
// for. A tenant's room is its own (a held share's; its part of the room
// its quota leaves, divided among the claim's types it waits for), never
// more than the type's, and, for fairness, what fairReads says. The
// function it returns, when not nil, records in the claim's transaction
// how many of each tenant's instances the claim started (a quota's rate
// counts them).
func (s *Store) split(ctx context.Context, q Querier, types []string, limits []int, adm Admission, tenant *string) (map[string][]share, func(ctx context.Context, q Querier, started map[string]int) error, error) {
	var open []string
	lim := map[string]int{}
	for i, ty := range types {
		if limits[i] > 0 {
			open = append(open, ty)
			lim[ty] = limits[i]
		}
	}
	if len(open) == 0 {
		return nil, nil, nil
	}
	w, err := readWaiters(ctx, q, open)
	if err != nil {
		return nil, nil, err
	}
	isCapped := func(tn string) bool { _, ok := w.capped[tn]; return ok }
	var read []string
	for _, ty := range open {
		_, held := adm.Shares[ty]
		_, waits := w.first[ty]
		switch {
		case held:
			// Read tenant by tenant even when nobody seemed to wait: a
			// held tenant's task created since must not be read plainly.
			read = append(read, ty)
		case len(w.capped) > 0 && (tenant == nil || isCapped(*tenant)):
			// Likewise while a tenant's running instances are capped:
			// only the tenants listed are read, each up to its room.
			read = append(read, ty)
		case !waits:
			// Nobody waits: nothing to share.
		case tenant == nil && w.multi[ty]:
			read = append(read, ty)
		}
	}
	s.fair.held.Store(false)
	if len(read) == 0 {
		return nil, nil, nil
	}
	type waiting struct {
		tenant       string
		weight, room int
	}
	lists := make(map[string][]waiting, len(read))
	typesOf := map[string][]string{} // a capped tenant's types, in the claim's order
	for _, ty := range read {
		rooms := adm.Shares[ty]
		rows, err := q.Query(ctx, waitingTenantsSQL, ty, ty, maxShareTenants)
		if err != nil {
			return nil, nil, fmt.Errorf("claim: tenants waiting for %s: %w", ty, err)
		}
		var list []waiting
		for rows.Next() {
			var tn string
			var wt int
			if err := rows.Scan(&tn, &wt); err != nil {
				rows.Close()
				return nil, nil, fmt.Errorf("claim: tenants waiting for %s: %w", ty, err)
			}
			l := lim[ty]
			if room, held := rooms[tn]; held && room != Unlimited {
				l = min(max(room, 0), l)
			}
			if l > 0 && (tenant == nil || tn == *tenant) {
				list = append(list, waiting{tenant: tn, weight: min(max(wt, 1), MaxWeight), room: l})
				if isCapped(tn) {
					typesOf[tn] = append(typesOf[tn], ty)
				}
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("claim: tenants waiting for %s: %w", ty, err)
		}
		lists[ty] = list
	}
	var parts map[string]map[string]int // capped tenant → type → its part of the room
	var record func(ctx context.Context, q Querier, started map[string]int) error
	if len(typesOf) > 0 {
		tenants := make([]string, 0, len(typesOf))
		for tn := range typesOf {
			tenants = append(tenants, tn)
		}
		qr, err := s.quotaRooms(ctx, q, tenants, adm.Now)
		if err != nil {
			return nil, nil, err
		}
		record = qr.record
		turn := int(s.fair.turn.Add(1) % 1024)
		parts = make(map[string]map[string]int, len(qr.room))
		for tn, r := range qr.room {
			want := 0
			for _, ty := range typesOf[tn] {
				want += lim[ty]
			}
			if c, capped := qr.capRoom[tn]; capped && c < want {
				// A finish may free a slot: worth a claim at once.
				s.fair.held.Store(true)
			}
			if r == Unlimited {
				continue
			}
			parts[tn] = allot(r, typesOf[tn], turn)
		}
	}
	out := make(map[string][]share, len(read))
	for _, ty := range read {
		list := lists[ty]
		var kept []waiting
		for _, x := range list {
			if part, capped := parts[x.tenant]; capped {
				x.room = min(x.room, part[ty])
			}
			if x.room > 0 {
				kept = append(kept, x)
			}
		}
		weights := make([]int, len(kept))
		tenants := make([]string, len(kept))
		for j, x := range kept {
			weights[j], tenants[j] = x.weight, x.tenant
		}
		reads := fairReads(lim[ty], weights)
		starts := s.fair.starts(ty, tenants)
		shares := make([]share, len(kept))
		for j, x := range kept {
			shares[j] = share{tenant: x.tenant, limit: min(x.room, reads[j]), start: starts[j], stride: 1 / float64(x.weight)}
		}
		out[ty] = shares
	}
	return out, record, nil
}

// admit lowers limits (one per type) to what the gate admits, and returns
// its admission (with the claim's time; without a gate, the clock's).
func (s *Store) admit(ctx context.Context, q Querier, types []string, limits []int) (Admission, error) {
	if s.gate == nil {
		return Admission{Now: s.Now()}, nil
	}
	adm, err := s.gate.Admit(ctx, q, types, s.Now)
	if err != nil {
		return Admission{}, fmt.Errorf("claim: gate: %w", err)
	}
	for i, ty := range types {
		room, ok := adm.Room[ty]
		switch {
		case !ok:
			limits[i] = 0
		case room != Unlimited:
			limits[i] = min(max(room, 0), limits[i])
		}
	}
	return adm, nil
}

// anyClaimable reports whether a claim of types, at most wanted[i] of
// types[i], would find anything to take now, by reading only (the gate's
// reads, then the claim's pick of one instance, each a statement of its
// own): a hint, which the claim's transaction checks again.
func (s *Store) anyClaimable(ctx context.Context, tenant *string, types []string, wanted []int) (bool, error) {
	limits := slices.Clone(wanted)
	adm, err := s.admit(ctx, dbQuerier{s}, types, limits)
	if err != nil {
		return false, err
	}
	if !slices.ContainsFunc(limits, func(l int) bool { return l > 0 }) {
		return false, nil
	}
	shares, _, err := s.split(ctx, dbQuerier{s}, types, limits, adm, tenant)
	if err != nil {
		return false, err
	}
	pick, args := s.d.claimQuery(types, limits, shares, adm.Now, tenant, 1)
	rows, err := s.db.QueryContext(ctx, s.d.rebind(pick), args...)
	if err != nil {
		return false, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	found := rows.Next()
	return found, rows.Err()
}

// dbQuerier is a Querier outside any transaction (reads only).
type dbQuerier struct{ s *Store }

func (q dbQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.s.db.ExecContext(ctx, q.s.d.rebind(query), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q dbQuerier) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return q.s.db.QueryContext(ctx, q.s.d.rebind(query), args...)
}

func (q dbQuerier) Postgres() bool { return q.s.d.postgres() }

// NextAdmission returns, and forgets, the earliest time the gate said a
// type it refused will be admitted again (zero: none, or a gate that does
// not say), so that a pool claims then rather than at its next poll.
func (s *Store) NextAdmission() time.Time {
	if g, ok := s.gate.(interface{ NextAdmission() time.Time }); ok {
		return g.NextAdmission()
	}
	return time.Time{}
}

// HeldAtCap reports whether the last claim found a tenant at its cap on
// running instances (tenant_quotas.max_running), or the gate (if it says)
// a type at its cap in a recent claim: the end of an execution may then free a slot that
// a waiting task of that type can take at once.
func (s *Store) HeldAtCap() bool {
	if s.fair.held.Load() {
		return true // a tenant at its cap on running instances
	}
	if g, ok := s.gate.(interface{ HeldAtCap() bool }); ok {
		return g.HeldAtCap()
	}
	return false
}

// Unlimited is the room Gate.Admit gives a type it does not limit.
const Unlimited = -1

// Querier runs statements with ? placeholders inside the claim's
// transaction.
type Querier interface {
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	Query(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	// Postgres reports which database it is (the SQL may differ).
	Postgres() bool
}

// txQuerier is the Querier of a store transaction.
type txQuerier struct {
	s *Store
	t *txn
}

// A gate's statements run on every claim: they are prepared like the
// claim's own (prepared.go).
func (q txQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.s.execute(ctx, q.t, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q txQuerier) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return q.s.query(ctx, q.t, query, args...)
}

func (q txQuerier) Postgres() bool { return q.s.d.postgres() }

// claimTasks is the claim's first statement: it moves to EXECUTING the
// tasks of the instances pick selects (and locks).
func claimTasks(pick string) string {
	return `UPDATE tasks SET status = ` + sqlExecuting + `, attention_status = NULL, version = version + 1, updated_at = ?
WHERE status IN (` + sqlWaiting + `) AND id IN (SELECT task_id FROM (` + pick + `) picked)
RETURNING ` + taskColumns("tasks")
}

// claimInstances is the claim's second statement: it moves the waiting
// instances of the claimed tasks to EXECUTING.
//
// It finds them by task through the one-live index: its condition on
// status is that index's own (live), narrowed to the waiting ones by
// excluding EXECUTING. Written as status IN (waiting), the condition would
// also match the claimable index's, and on tables never analyzed
// PostgreSQL read that whole index (every waiting instance: the backlog)
// in a bitmap scan once a claim took more than a few hundred.
func (d sqlDialect) claimInstances(workerID string, now any, taskIDs []int64) (string, []any) {
	in, args := d.inInts("task_id", taskIDs)
	return `UPDATE task_instances SET status = ` + sqlExecuting + `, version = version + 1, worker_id = ?, started_at = ?, heartbeat_at = ?
WHERE ` + in + ` AND status IN (` + sqlLive + `) AND status <> ` + sqlExecuting + `
RETURNING ` + claimedInstanceColumns, append([]any{workerID, now, now}, args...)
}

// claimedInstanceColumns are what a claim reads back of the instances it
// moved; the rest it set itself (status, worker, start and heartbeat time)
// or is empty until the execution ends.
const claimedInstanceColumns = "id, task_id, instance_no, attempt, task_type, priority, run_at, version, created_at"

// scanClaimedInstances reads rows of claimedInstanceColumns into the
// instances a claim by workerID at now made EXECUTING, bound to c, and
// closes rows.
func scanClaimedInstances(c *ent.Client, rows *sql.Rows, workerID string, now time.Time) ([]*ent.TaskInstance, error) {
	defer rows.Close()
	var out []*ent.TaskInstance
	for rows.Next() {
		in := &ent.TaskInstance{Status: lifecycle.Executing, WorkerID: workerID}
		if err := rows.Scan(&in.ID, &in.TaskID, &in.InstanceNo, &in.Attempt, &in.TaskType, &in.Priority, &in.RunAt, &in.Version, &in.CreatedAt); err != nil {
			return nil, err
		}
		started, beat := now, now
		in.StartedAt, in.HeartbeatAt = &started, &beat
		out = append(out, in.BindTo(c))
	}
	return out, rows.Err()
}

// claimQuery returns a SELECT of (task_id, priority, run_at, id) of the
// waiting instances to claim, and its arguments: for each task type, at
// most limit of them, read in claim order from the claimable index, then
// the first limit of all types by (priority, run_at, id). Reading type by
// type keeps the read on the index's order (one type is one contiguous,
// ordered range of it), so the plan never scans the backlog nor sorts it;
// the final sort is of at most len(types) * limit rows. With tenant, only
// that tenant's instances are selected (task_instances.tenant, copied from
// its task).
//
// A type in shares (its tenants' shares held back, or several tenants
// waiting for it) is read tenant by tenant instead, each tenant's range of
// the (task_type, tenant, ...) claimable index up to the tenant's room,
// and the type's first limit of those taken by the fair share's virtual
// time (fair.go): a held tenant's backlog is never read past, and no
// tenant's backlog holds another's tasks back.
func (d sqlDialect) claimQuery(types []string, limits []int, shares map[string][]share, now any, tenant *string, limit int) (string, []any) {
	var of string
	var ofArgs []any
	if tenant != nil {
		of = ` AND tenant = ?`
		ofArgs = []any{*tenant}
		shares = onlyTenant(shares, *tenant)
	}
	cols := `task_id, priority, run_at, id FROM task_instances WHERE status IN (` + sqlWaiting + `) AND task_type = %s AND run_at <= ?` + of + ` ORDER BY priority, run_at, id LIMIT %s`
	tenantCols := `task_id, priority, run_at, id FROM task_instances WHERE status IN (` + sqlWaiting + `) AND task_type = ? AND tenant = %s AND run_at <= ? ORDER BY priority, run_at, id LIMIT %s`
	if d.postgres() {
		// PostgreSQL: a LATERAL read per type (FOR UPDATE is not allowed
		// in the arms of a UNION).
		var plainTypes []string
		var plainLims pq.Int64Array
		for i, ty := range types {
			if _, ok := shares[ty]; ok {
				continue
			}
			plainTypes = append(plainTypes, ty)
			plainLims = append(plainLims, int64(limits[i]))
		}
		if len(shares) == 0 {
			return `SELECT c.task_id, c.priority, c.run_at, c.id FROM unnest(CAST(? AS TEXT[]), CAST(? AS BIGINT[])) ty(name, lim),
	LATERAL (SELECT ` + fmt.Sprintf(cols, "ty.name", "ty.lim") + ` FOR UPDATE SKIP LOCKED) c
	ORDER BY c.priority, c.run_at, c.id LIMIT ?`, append(append([]any{stringArray(plainTypes), plainLims, now}, ofArgs...), limit)
		}
		var arms []string
		var args []any
		if len(plainTypes) > 0 {
			arms = append(arms, `SELECT * FROM (SELECT c.task_id, c.priority, c.run_at, c.id FROM unnest(CAST(? AS TEXT[]), CAST(? AS BIGINT[])) ty(name, lim),
	LATERAL (SELECT `+fmt.Sprintf(cols, "ty.name", "ty.lim")+` FOR UPDATE SKIP LOCKED) c) p`)
			args = append(append(args, stringArray(plainTypes), plainLims, now), ofArgs...)
		}
		for i, ty := range types {
			sh, ok := shares[ty]
			if !ok || len(sh) == 0 {
				continue
			}
			tenants := make([]string, len(sh))
			lims := make(pq.Int64Array, len(sh))
			starts := make(pq.Float64Array, len(sh))
			strides := make(pq.Float64Array, len(sh))
			for j, x := range sh {
				tenants[j], lims[j], starts[j], strides[j] = x.tenant, int64(x.limit), x.start, x.stride
			}
			// Each tenant's candidates in claim order, the j-th at the
			// virtual time start + j*stride; the type's first limit of
			// them by that time (fair.go).
			arms = append(arms, fmt.Sprintf(`SELECT * FROM (SELECT v.task_id, v.priority, v.run_at, v.id FROM (
	SELECT c.task_id, c.priority, c.run_at, c.id, tn.start + tn.stride * row_number() OVER (PARTITION BY tn.ord ORDER BY c.priority, c.run_at, c.id) AS vt
	FROM unnest(CAST(? AS TEXT[]), CAST(? AS BIGINT[]), CAST(? AS FLOAT8[]), CAST(? AS FLOAT8[])) WITH ORDINALITY tn(name, lim, start, stride, ord),
	LATERAL (SELECT `+fmt.Sprintf(tenantCols, "tn.name", "tn.lim")+` FOR UPDATE SKIP LOCKED) c) v ORDER BY v.vt, v.priority, v.run_at, v.id LIMIT ?) s%d`, i))
			args = append(args, stringArray(tenants), lims, starts, strides, ty, now, limits[i])
		}
		if len(arms) == 0 {
			return `SELECT task_id, priority, run_at, id FROM task_instances WHERE false`, nil
		}
		return `SELECT * FROM (` + strings.Join(arms, " UNION ALL ") + `) picked ORDER BY priority, run_at, id LIMIT ?`, append(args, limit)
	}
	// SQLite has a single writer and needs no row locks; each arm is a
	// subquery so that it may have its own ORDER BY and LIMIT.
	var arms []string
	args := make([]any, 0, 3*len(types)+1)
	for i, ty := range types {
		if limits[i] <= 0 {
			continue
		}
		if sh, ok := shares[ty]; ok {
			if len(sh) == 0 {
				continue
			}
			var tarms []string
			for _, x := range sh {
				tarms = append(tarms, `SELECT task_id, priority, run_at, id, ? + ? * ROW_NUMBER() OVER (ORDER BY priority, run_at, id) AS vt FROM (SELECT `+fmt.Sprintf(tenantCols, "?", "?")+`)`)
				args = append(args, x.start, x.stride, ty, x.tenant, now, x.limit)
			}
			arms = append(arms, `SELECT * FROM (SELECT task_id, priority, run_at, id FROM (`+strings.Join(tarms, " UNION ALL ")+`) ORDER BY vt, priority, run_at, id LIMIT ?)`)
			args = append(args, limits[i])
			continue
		}
		arms = append(arms, `SELECT * FROM (SELECT `+fmt.Sprintf(cols, "?", "?")+`)`)
		args = append(append(append(args, ty, now), ofArgs...), limits[i])
	}
	if len(arms) == 0 {
		return `SELECT task_id, priority, run_at, id FROM task_instances WHERE 0`, nil
	}
	args = append(args, limit)
	return `SELECT * FROM (` + strings.Join(arms, " UNION ALL ") + `) ORDER BY priority, run_at, id LIMIT ?`, args
}

// onlyTenant keeps, of each type's shares, the one of tenant (a claim of
// one tenant's tasks reads no other's range).
func onlyTenant(shares map[string][]share, tenant string) map[string][]share {
	if len(shares) == 0 {
		return shares
	}
	out := make(map[string][]share, len(shares))
	for ty, sh := range shares {
		var kept []share
		for _, x := range sh {
			if x.tenant == tenant {
				kept = append(kept, x)
			}
		}
		out[ty] = kept
	}
	return out
}

func cmpClaimOrder(a, b *ent.TaskInstance) int {
	if a.Priority != b.Priority {
		return a.Priority - b.Priority
	}
	if c := a.RunAt.Compare(b.RunAt); c != 0 {
		return c
	}
	return a.ID - b.ID
}

// ExplainClaim returns the plans of the claim's two statements for types
// and limit, run with EXPLAIN ANALYZE in a transaction that is rolled back:
// on PostgreSQL JSON plans, on SQLite the rows of EXPLAIN QUERY PLAN. It is
// for tests and diagnostics; it claims nothing.
func (s *Store) ExplainClaim(ctx context.Context, types []string, limit int) ([]string, error) {
	ctx = internal(ctx)
	tx, err := s.client.Tx(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	now := s.Now()
	limits := make([]int, len(types))
	for i := range limits {
		limits[i] = limit
	}
	// The types several tenants wait for are read tenant by tenant, as
	// the claim reads them.
	shares, _, err := s.split(ctx, txQuerierOf{tx: tx, d: s.d}, types, limits, Admission{Now: now}, nil)
	if err != nil {
		return nil, err
	}
	pick, pickArgs := s.d.claimQuery(types, limits, shares, now, nil, limit)
	first, firstArgs := s.d.rebind(claimTasks(pick)), append([]any{now}, pickArgs...)
	prefix := "EXPLAIN QUERY PLAN "
	if s.d.postgres() {
		prefix = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
	}
	explain := func(q string, args ...any) (string, error) {
		rows, err := tx.QueryContext(ctx, prefix+q, args...)
		if err != nil {
			return "", err
		}
		defer rows.Close()
		cols, err := rows.Columns()
		if err != nil {
			return "", err
		}
		var b strings.Builder
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				return "", err
			}
			for i, v := range vals {
				if i > 0 {
					b.WriteByte(' ')
				}
				if bs, ok := v.([]byte); ok {
					v = string(bs)
				}
				fmt.Fprint(&b, v)
			}
			b.WriteByte('\n')
		}
		return b.String(), rows.Err()
	}
	var plans []string
	// The first statement's plan, undone; then the statement itself, for
	// the ids the second one takes.
	if s.d.postgres() {
		if _, err := tx.ExecContext(ctx, "SAVEPOINT explain"); err != nil {
			return nil, err
		}
	}
	p, err := explain(first, firstArgs...)
	if err != nil {
		return nil, err
	}
	plans = append(plans, p)
	if s.d.postgres() {
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT explain"); err != nil {
			return nil, err
		}
	}
	rows, err := tx.QueryContext(ctx, first, firstArgs...)
	if err != nil {
		return nil, err
	}
	tasks, err := ent.ScanTaskRows(s.client, rows)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(tasks))
	for i, tk := range tasks {
		ids[i] = int64(tk.ID)
	}
	if len(ids) == 0 {
		ids = []int64{0}
	}
	q, qArgs := s.d.claimInstances("explain", now, ids)
	p, err = explain(s.d.rebind(q), qArgs...)
	if err != nil {
		return nil, err
	}
	return append(plans, p), nil
}

// txQuerierOf is a Querier of an ent transaction (ExplainClaim's).
type txQuerierOf struct {
	tx *ent.Tx
	d  sqlDialect
}

func (q txQuerierOf) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.tx.ExecContext(ctx, q.d.rebind(query), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q txQuerierOf) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return q.tx.QueryContext(ctx, q.d.rebind(query), args...)
}

func (q txQuerierOf) Postgres() bool { return q.d.postgres() }
