package store

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Fair share: of a task type that several tenants wait for, a claim takes
// the tenants' tasks in proportion to their weights (tenant_quotas.weight,
// 1 unless set), whatever one tenant's backlog. It is stride scheduling
// across the tenants with waiting instances of the type: each tenant has a
// pass, and its j-th candidate in claim order (priority, run_at, id: the
// order within a tenant) the virtual time pass + j/weight; the claim takes
// the candidates of the smallest virtual times, then the tenants' passes
// advance by what each was given (1/weight a task). A tenant that starts
// waiting joins at the smallest pass, and one that had nothing more to
// take at the claim's cutoff (the largest virtual time taken): waiting
// earns no credit.
//
// The bound: while tenant B has claimable tasks, a node's claims give any
// other tenant A at most w_A/w_B tasks for each of B's, plus one claim's
// limit for the claim in flight. With N nodes (each keeps its passes in
// memory), before B's n tasks have all started A starts at most
// n·w_A/w_B + N·(limit+1) more.
//
// Its cost: one statement a claim finds out which of the claim's types have
// more than one tenant waiting (two probes of the (task_type, tenant, ...)
// claimable index per type) and which tenants' quotas cap their running
// instances; only those types (all of them while a tenant is capped) are
// then read tenant by tenant, each tenant's range up to what it may be
// given.

// MaxWeight is the largest weight a tenant may have in the fair share
// (tenant_quotas.weight; the smallest is 1).
const MaxWeight = 1000

// fairReadBudget bounds the candidates a claim reads of one type read tenant
// by tenant: beyond it, each tenant's range is read up to twice its share
// of the claim rather than up to the whole claim.
const fairReadBudget = 4096

// fairness is a node's passes: per task type, per tenant listed at the
// type's last claim, relative to the smallest of them.
type fairness struct {
	mu   sync.Mutex
	pass map[string]map[string]float64
	// turn rotates the order in which a capped tenant's room is divided
	// among types; held says a recent claim found a tenant at its cap
	// on running instances (Store.HeldAtCap).
	turn atomic.Uint64
	held atomic.Bool
}

// starts returns the passes of tenants of type ty, for a claim.
func (f *fairness) starts(ty string, tenants []string) []float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]float64, len(tenants))
	for i, tn := range tenants {
		out[i] = max(f.pass[ty][tn], 0)
	}
	return out
}

// took advances the passes of type ty's tenants, as a claim listed them
// (with the passes it read), by what each was given (given[tenant] tasks,
// at 1/weight each). The claim's cutoff is the largest virtual time it
// took; a tenant whose next candidate would have come before it had no
// more to take, and joins at it (waiting earns no credit). The passes are
// then rebased on the smallest; tenants not listed are forgotten.
func (f *fairness) took(ty string, listed []share, given map[string]int) {
	cutoff := math.Inf(-1)
	for _, x := range listed {
		if n := given[x.tenant]; n > 0 {
			cutoff = max(cutoff, x.start+float64(n)*x.stride)
		}
	}
	if math.IsInf(cutoff, -1) {
		return // nothing was given: the passes stand
	}
	next := make(map[string]float64, len(listed))
	base := math.Inf(1)
	for _, x := range listed {
		p := x.start + float64(given[x.tenant])*x.stride
		if p+x.stride < cutoff {
			p = cutoff
		}
		next[x.tenant] = p
		base = min(base, p)
	}
	for tn, p := range next {
		next[tn] = p - base
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pass == nil {
		f.pass = map[string]map[string]float64{}
	}
	f.pass[ty] = next
}

// waitersSQL returns a statement telling, for n types, the smallest
// tenant waiting and whether any other waits (kind 't': name, tenant,
// 1 or 0), each a probe of the claimable index by (task_type, tenant); and
// the tenants whose quota caps their running instances or rates their
// starts (kind 'q': tenant, the cap or -1).
func waitersSQL(n int) string {
	arm := `SELECT 't', CAST(? AS TEXT), m.t1, CASE WHEN EXISTS (SELECT 1 FROM task_instances i WHERE i.status IN (` + sqlWaiting + `) AND i.task_type = ? AND i.tenant > m.t1) THEN 1 ELSE 0 END
FROM (SELECT MIN(tenant) AS t1 FROM task_instances WHERE status IN (` + sqlWaiting + `) AND task_type = ?) m WHERE m.t1 IS NOT NULL`
	arms := make([]string, n, n+1)
	for i := range arms {
		arms[i] = arm
	}
	arms = append(arms, `SELECT 'q', '', tenant, COALESCE(max_running, -1) FROM tenant_quotas WHERE max_running IS NOT NULL OR rate_limit IS NOT NULL`)
	return strings.Join(arms, " UNION ALL ")
}

// waiters is who waits for the types of a claim: per type, the smallest
// tenant waiting and whether others wait too; and the tenants whose quota
// caps their running instances (with the cap) or rates their starts (-1
// when only that): the claim reads every type tenant by tenant while there
// are any.
type waiters struct {
	first  map[string]string
	multi  map[string]bool
	capped map[string]int
}

// readWaiters reads the waiters of types (those with room).
func readWaiters(ctx context.Context, q Querier, types []string) (waiters, error) {
	w := waiters{first: map[string]string{}, multi: map[string]bool{}}
	args := make([]any, 0, 3*len(types))
	for _, ty := range types {
		args = append(args, ty, ty, ty)
	}
	rows, err := q.Query(ctx, waitersSQL(len(types)), args...)
	if err != nil {
		return w, fmt.Errorf("claim: tenants waiting: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind, ty, tenant string
		var n int
		if err := rows.Scan(&kind, &ty, &tenant, &n); err != nil {
			return w, fmt.Errorf("claim: tenants waiting: %w", err)
		}
		if kind == "q" {
			if w.capped == nil {
				w.capped = map[string]int{}
			}
			w.capped[tenant] = n
			continue
		}
		w.first[ty] = tenant
		if n == 1 {
			w.multi[ty] = true
		}
	}
	if err := rows.Err(); err != nil {
		return w, fmt.Errorf("claim: tenants waiting: %w", err)
	}
	return w, nil
}

// Rate is a rate of starts: at most Limit in any window of PeriodSeconds.
type Rate struct {
	Limit, PeriodSeconds int
}

// TenantRater is a Gate that also counts the starts of tenants whose quota
// rates them (tenant_quotas.rate_limit), across all their task types. The
// claim calls it in its transaction, after it has locked those tenants'
// quota rows; a store whose gate is not one leaves the quotas' rates
// unenforced (package flow's gate is one).
type TenantRater interface {
	// TenantRoom returns how many of each rated tenant's instances the
	// claim may start now, and a function the claim calls, in the same
	// transaction, with how many of each tenant's it started (nil when
	// there is nothing to record). Its cost must not depend on how many
	// instances wait.
	TenantRoom(ctx context.Context, q Querier, rates map[string]Rate, now time.Time) (map[string]int, func(ctx context.Context, q Querier, started map[string]int) error, error)
}

// quotaRoom is what tenants' quotas leave a claim: each capped or rated
// tenant's room (its cap less what runs, and no more than its rate
// admits); which of them a cap on running instances holds (capRoom: the
// room that cap leaves, a finish may free a slot of it); and the rate's
// record, nil when no rated tenant may start anything.
type quotaRoom struct {
	room    map[string]int
	capRoom map[string]int
	record  func(ctx context.Context, q Querier, started map[string]int) error
}

// quotaRooms locks the quotas of tenants (on PostgreSQL, so that
// concurrent claims of a capped or rated tenant count one after the other)
// and returns each one's room: under its cap on running instances, its cap
// less what runs, counted up to the cap through
// taskinstance_tenant_running; under its rate, what the gate's TenantRoom
// admits.
func (s *Store) quotaRooms(ctx context.Context, q Querier, tenants []string, now time.Time) (quotaRoom, error) {
	slices.Sort(tenants)
	args := make([]any, len(tenants))
	for i, tn := range tenants {
		args[i] = tn
	}
	stmt := `SELECT tenant, max_running, rate_limit, rate_period_seconds FROM tenant_quotas WHERE (max_running IS NOT NULL OR rate_limit IS NOT NULL) AND tenant IN (` +
		strings.TrimSuffix(strings.Repeat("?, ", len(tenants)), ", ") + `) ORDER BY tenant`
	if q.Postgres() {
		stmt += ` FOR UPDATE`
	}
	out := quotaRoom{room: map[string]int{}, capRoom: map[string]int{}}
	rows, err := q.Query(ctx, stmt, args...)
	if err != nil {
		return out, fmt.Errorf("claim: tenants' quotas: %w", err)
	}
	caps := map[string]int{}
	rates := map[string]Rate{}
	for rows.Next() {
		var tn string
		var c, r sql.NullInt64
		var period int64
		if err := rows.Scan(&tn, &c, &r, &period); err != nil {
			rows.Close()
			return out, fmt.Errorf("claim: tenants' quotas: %w", err)
		}
		if c.Valid {
			caps[tn] = int(c.Int64)
		}
		if r.Valid {
			rates[tn] = Rate{Limit: int(r.Int64), PeriodSeconds: int(period)}
		}
		out.room[tn] = Unlimited
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return out, fmt.Errorf("claim: tenants' quotas: %w", err)
	}
	for tn, c := range caps {
		rows, err := q.Query(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM task_instances WHERE status = `+sqlExecuting+` AND tenant = ? LIMIT ?) r`, tn, c)
		if err != nil {
			return out, fmt.Errorf("claim: count running tasks of tenant %q: %w", tn, err)
		}
		n := 0
		if rows.Next() {
			err = rows.Scan(&n)
		}
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
		if err != nil {
			return out, fmt.Errorf("claim: count running tasks of tenant %q: %w", tn, err)
		}
		out.capRoom[tn] = max(c-n, 0)
		out.room[tn] = out.capRoom[tn]
	}
	if r, ok := s.gate.(TenantRater); ok && len(rates) > 0 {
		room, record, err := r.TenantRoom(ctx, q, rates, now)
		if err != nil {
			return out, fmt.Errorf("claim: tenants' rates: %w", err)
		}
		for tn, n := range room {
			if out.room[tn] == Unlimited || n < out.room[tn] {
				out.room[tn] = max(n, 0)
			}
		}
		out.record = record
	}
	return out, nil
}

// allot divides a capped tenant's room among the types of a claim it waits
// for (in types' order, starting at the offset turn so that no type is
// always served first): each gets an equal part, the rest one each.
func allot(room int, types []string, turn int) map[string]int {
	out := make(map[string]int, len(types))
	if len(types) == 0 {
		return out
	}
	for i := range types {
		ty := types[(i+turn)%len(types)]
		out[ty] = room / len(types)
		if i < room%len(types) {
			out[ty]++
		}
	}
	return out
}

// waitingTenantsSQL lists the tenants with waiting instances of a type, in
// order, one probe of the (task_type, tenant, ...) claimable index per
// tenant (a skip scan): what it reads does not grow with the backlog. Each
// comes with its weight (tenant_quotas.weight; 1 without a quota).
var waitingTenantsSQL = `WITH RECURSIVE t(tenant) AS (
	SELECT MIN(tenant) FROM task_instances WHERE status IN (` + sqlWaiting + `) AND task_type = ?
	UNION ALL
	SELECT (SELECT MIN(i.tenant) FROM task_instances i WHERE i.status IN (` + sqlWaiting + `) AND i.task_type = ? AND i.tenant > t.tenant) FROM t WHERE t.tenant IS NOT NULL
) SELECT w.tenant, COALESCE(q.weight, 1) FROM (SELECT tenant FROM t WHERE tenant IS NOT NULL LIMIT ?) w LEFT JOIN tenant_quotas q ON q.tenant = w.tenant ORDER BY w.tenant`

// fairReads returns how far each tenant's range is read in a claim of
// limit of a type: the whole claim while the reads stay within
// fairReadBudget, else twice the tenant's share by weight (at least one).
func fairReads(limit int, weights []int) []int {
	out := make([]int, len(weights))
	total := 0
	for _, w := range weights {
		total += w
	}
	for i, w := range weights {
		out[i] = limit
		if len(weights)*limit > fairReadBudget {
			out[i] = min(limit, max(1, int(math.Ceil(2*float64(limit)*float64(w)/float64(total)))))
		}
	}
	return out
}
