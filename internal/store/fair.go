package store

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
)

// Fair share: of a task type that several tenants wait for, a claim takes
// the tenants' tasks in proportion to their weights (tenant_quotas.weight,
// 1 unless set), whatever one tenant's backlog. It is stride scheduling
// across the tenants with waiting instances of the type: each tenant has a
// pass, and its j-th candidate in claim order (priority, run_at, id: the
// order within a tenant) the virtual time pass + j/weight; the claim takes
// the candidates of the smallest virtual times, then the tenants' passes
// advance by what each was given (1/weight a task). A tenant that starts
// waiting, or has had nothing to take, joins at the smallest pass of those
// that took some: waiting earns no credit.
//
// The bound: while tenant B has claimable tasks, a node's claims give any
// other tenant A at most w_A/w_B tasks for each of B's, plus one claim's
// limit for the claim in flight. With N nodes (each keeps its passes in
// memory), before B's n tasks have all started A starts at most
// n·w_A/w_B + N·(limit+1) more.
//
// Its cost: one statement a claim finds out which of the claim's types have
// more than one tenant waiting (two probes of the (task_type, tenant, ...)
// claimable index per type); only those types are then read tenant by
// tenant, each tenant's range up to what it may be given.

// MaxWeight is the largest weight a tenant may have in the fair share
// (tenant_quotas.weight; the smallest is 1).
const MaxWeight = 1000

// fairReadBudget bounds the candidates a claim reads of one type read tenant
// by tenant: beyond it, each tenant's range is read up to twice its share
// of the claim rather than up to the whole claim.
const fairReadBudget = 4096

// fairness is a node's passes: per task type, per tenant, relative to the
// smallest pass of the tenants that took some at the type's last claim.
type fairness struct {
	mu   sync.Mutex
	pass map[string]map[string]float64
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

// multiTenantSQL returns a statement listing which of n types have
// instances of more than one tenant waiting: per type, the smallest tenant
// waiting and whether any other waits, each a probe of the claimable
// index by (task_type, tenant).
func multiTenantSQL(n int) string {
	arm := `SELECT CAST(? AS TEXT) AS name WHERE EXISTS (SELECT 1 FROM task_instances i WHERE i.status IN (` + sqlWaiting + `) AND i.task_type = ? AND i.tenant > (SELECT MIN(m.tenant) FROM task_instances m WHERE m.status IN (` + sqlWaiting + `) AND m.task_type = ?))`
	arms := make([]string, n)
	for i := range arms {
		arms[i] = arm
	}
	return strings.Join(arms, " UNION ALL ")
}

// multiTenant returns which of types (those with room) have more than one
// tenant waiting.
func multiTenant(ctx context.Context, q Querier, types []string) (map[string]bool, error) {
	if len(types) == 0 {
		return nil, nil
	}
	args := make([]any, 0, 3*len(types))
	for _, ty := range types {
		args = append(args, ty, ty, ty)
	}
	rows, err := q.Query(ctx, multiTenantSQL(len(types)), args...)
	if err != nil {
		return nil, fmt.Errorf("claim: tenants waiting: %w", err)
	}
	defer rows.Close()
	var out map[string]bool
	for rows.Next() {
		var ty string
		if err := rows.Scan(&ty); err != nil {
			return nil, fmt.Errorf("claim: tenants waiting: %w", err)
		}
		if out == nil {
			out = map[string]bool{}
		}
		out[ty] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: tenants waiting: %w", err)
	}
	return out, nil
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
