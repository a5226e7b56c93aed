package store

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// QuotaError refuses a task that would take a tenant's waiting instances
// of a type past the cap the tenant's share of it sets
// (tenant_flow_controls.max_waiting).
type QuotaError struct {
	Type, Tenant string
	// Limit is the cap; Waiting how many of the tenant's instances of the
	// type wait (counted up to the cap).
	Limit, Waiting int
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("quota exceeded: tenant %q may have at most %d waiting %s tasks (%d wait)", e.Tenant, e.Limit, e.Type, e.Waiting)
}

// checkWaitingCaps answers with a *QuotaError, in out, each item of ns
// that would take its tenant's waiting instances of its type past the
// cap of the tenant's share, in order: the first items fill what room
// there is. It reads the tenant controls of the call's (type, tenant)
// pairs that cap waiting, locking them on PostgreSQL so that concurrent
// creates count one after the other, and counts each capped pair's
// waiting instances up to its cap (the (task_type, tenant, ...) claimable
// index): what it reads grows with the caps, never past them. An item
// that its idempotency key or schedule slot answers with an existing task
// is answered here, and neither takes room nor is refused.
func (s *Store) checkWaitingCaps(ctx context.Context, t *txn, ns []NewTask, out []Created) error {
	type pair struct{ typ, tenant string }
	seen := map[pair]bool{}
	var pairs []pair
	for i, n := range ns {
		if out[i].Err != nil || n.waitingOn > 0 {
			continue // refused already, or not waiting once created
		}
		p := pair{n.Type, n.Tenant}
		if !seen[p] {
			seen[p] = true
			pairs = append(pairs, p)
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].typ != pairs[j].typ {
			return pairs[i].typ < pairs[j].typ
		}
		return pairs[i].tenant < pairs[j].tenant
	})
	args := make([]any, 0, 2*len(pairs))
	for _, p := range pairs {
		args = append(args, p.typ, p.tenant)
	}
	q := `SELECT task_type, tenant, max_waiting FROM tenant_flow_controls WHERE max_waiting IS NOT NULL AND (task_type, tenant) IN (VALUES ` +
		strings.TrimSuffix(strings.Repeat("(?, ?), ", len(pairs)), ", ") + `) ORDER BY task_type, tenant`
	if s.d.postgres() {
		q = `SELECT task_type, tenant, max_waiting FROM tenant_flow_controls WHERE max_waiting IS NOT NULL AND (task_type, tenant) IN (` +
			strings.TrimSuffix(strings.Repeat("(?, ?), ", len(pairs)), ", ") + `) ORDER BY task_type, tenant FOR UPDATE`
	}
	rows, err := s.query(ctx, t, q, args...)
	if err != nil {
		return fmt.Errorf("read waiting caps: %w", err)
	}
	caps := map[pair]int{}
	for rows.Next() {
		var p pair
		var c int
		if err := rows.Scan(&p.typ, &p.tenant, &c); err != nil {
			rows.Close()
			return fmt.Errorf("read waiting caps: %w", err)
		}
		caps[p] = c
	}
	err = rows.Err()
	rows.Close()
	if err != nil || len(caps) == 0 {
		return err
	}
	// An item whose idempotency key (or schedule slot) names a task that
	// exists is answered with that task, and takes no room: a resubmit of
	// what already waits is not one more waiting task.
	var keyed []int
	for i, n := range ns {
		if _, capped := caps[pair{n.Type, n.Tenant}]; capped && out[i].Err == nil && n.waitingOn == 0 &&
			(n.IdempotencyHash != nil || (n.ScheduleID != nil && n.ScheduleSlot != nil)) {
			keyed = append(keyed, i)
		}
	}
	if len(keyed) > 0 {
		if err := s.resolveKeys(ctx, t, ns, keyed, out); err != nil {
			return err
		}
	}
	room := map[pair]int{}
	waiting := map[pair]int{}
	for p, c := range caps {
		rows, err := s.query(ctx, t, `SELECT COUNT(*) FROM (SELECT 1 FROM task_instances WHERE status IN (`+sqlWaiting+`) AND task_type = ? AND tenant = ? LIMIT ?) w`, p.typ, p.tenant, c)
		if err != nil {
			return fmt.Errorf("count waiting %s of tenant %q: %w", p.typ, p.tenant, err)
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
			return fmt.Errorf("count waiting %s of tenant %q: %w", p.typ, p.tenant, err)
		}
		waiting[p], room[p] = n, c-n
	}
	for i, n := range ns {
		if out[i].Err != nil || out[i].Task != nil || n.waitingOn > 0 {
			continue
		}
		p := pair{n.Type, n.Tenant}
		c, capped := caps[p]
		if !capped {
			continue
		}
		if room[p] <= 0 {
			out[i].Err = &QuotaError{Type: p.typ, Tenant: p.tenant, Limit: c, Waiting: waiting[p]}
			continue
		}
		room[p]--
	}
	return nil
}

// The quotas of a tenant (tenant_quotas) a *TenantQuotaError names.
const (
	QuotaMaxWaiting          = "maxWaiting"
	QuotaMaxSchedules        = "maxSchedules"
	QuotaMinScheduleInterval = "minScheduleIntervalSeconds"
)

// TenantQuotaError refuses what would take a tenant past its quota
// (tenant_quotas), across all its task types: Quota names the limit
// (QuotaMaxWaiting, QuotaMaxSchedules, QuotaMinScheduleInterval), Limit is
// its value and Count what the tenant holds (its waiting instances,
// counted up to one past the cap; its enabled schedules; the refused
// schedule's shortest gap between two fires, in seconds).
type TenantQuotaError struct {
	Tenant       string
	Quota        string
	Limit, Count int
}

func (e *TenantQuotaError) Error() string {
	switch e.Quota {
	case QuotaMaxWaiting:
		if e.Count > e.Limit {
			return fmt.Sprintf("quota exceeded: tenant %q may have at most %d waiting tasks (more than %d wait)", e.Tenant, e.Limit, e.Limit)
		}
		return fmt.Sprintf("quota exceeded: tenant %q may have at most %d waiting tasks (%d wait)", e.Tenant, e.Limit, e.Count)
	case QuotaMaxSchedules:
		return fmt.Sprintf("quota exceeded: tenant %q may have at most %d enabled schedules (%d enabled)", e.Tenant, e.Limit, e.Count)
	case QuotaMinScheduleInterval:
		return fmt.Sprintf("quota exceeded: tenant %q's schedules may fire at most once every %d seconds (this one fires %d seconds apart)", e.Tenant, e.Limit, e.Count)
	}
	return fmt.Sprintf("quota exceeded: tenant %q: %s %d (%d)", e.Tenant, e.Quota, e.Limit, e.Count)
}

// checkTenantQuotas answers with a *TenantQuotaError, in out, each item of
// ns that would take its tenant's waiting instances, of every type, past
// the tenant's quota (tenant_quotas.max_waiting), in order: the first
// items fill what room there is. It runs after checkWaitingCaps (an item
// refused there takes no room here), reads the quotas of the call's
// tenants that cap waiting, locking them on PostgreSQL so that concurrent
// creates count one after the other, and counts each capped tenant's
// waiting instances up to one past its cap (the taskinstance_tenant_waiting
// index): what it reads grows with the caps, never past them. An item that
// its idempotency key or schedule slot answers with an existing task is
// answered here, and neither takes room nor is refused.
func (s *Store) checkTenantQuotas(ctx context.Context, t *txn, ns []NewTask, out []Created) error {
	seen := map[string]bool{}
	var tenants []string
	for i, n := range ns {
		if out[i].Err != nil || out[i].Task != nil || n.waitingOn > 0 {
			continue // refused or answered already, or not waiting once created
		}
		if !seen[n.Tenant] {
			seen[n.Tenant] = true
			tenants = append(tenants, n.Tenant)
		}
	}
	if len(tenants) == 0 {
		return nil
	}
	sort.Strings(tenants)
	args := make([]any, len(tenants))
	for i, tn := range tenants {
		args[i] = tn
	}
	q := `SELECT tenant, max_waiting FROM tenant_quotas WHERE max_waiting IS NOT NULL AND tenant IN (` +
		strings.TrimSuffix(strings.Repeat("?, ", len(tenants)), ", ") + `) ORDER BY tenant`
	if s.d.postgres() {
		q += ` FOR UPDATE`
	}
	rows, err := s.query(ctx, t, q, args...)
	if err != nil {
		return fmt.Errorf("read tenant quotas: %w", err)
	}
	caps := map[string]int{}
	for rows.Next() {
		var tn string
		var c int
		if err := rows.Scan(&tn, &c); err != nil {
			rows.Close()
			return fmt.Errorf("read tenant quotas: %w", err)
		}
		caps[tn] = c
	}
	err = rows.Err()
	rows.Close()
	if err != nil || len(caps) == 0 {
		return err
	}
	// As in checkWaitingCaps: a resubmit of what exists takes no room.
	var keyed []int
	for i, n := range ns {
		if _, capped := caps[n.Tenant]; capped && out[i].Err == nil && out[i].Task == nil && n.waitingOn == 0 &&
			(n.IdempotencyHash != nil || (n.ScheduleID != nil && n.ScheduleSlot != nil)) {
			keyed = append(keyed, i)
		}
	}
	if len(keyed) > 0 {
		if err := s.resolveKeys(ctx, t, ns, keyed, out); err != nil {
			return err
		}
	}
	room := map[string]int{}
	waiting := map[string]int{}
	for tn, c := range caps {
		n, err := s.countTenantWaiting(ctx, t, tn, c+1)
		if err != nil {
			return err
		}
		waiting[tn], room[tn] = n, c-n
	}
	for i, n := range ns {
		if out[i].Err != nil || out[i].Task != nil || n.waitingOn > 0 {
			continue
		}
		c, capped := caps[n.Tenant]
		if !capped {
			continue
		}
		if room[n.Tenant] <= 0 {
			// Count: what waits, with the call's items before this one.
			out[i].Err = &TenantQuotaError{Tenant: n.Tenant, Quota: QuotaMaxWaiting, Limit: c, Count: max(waiting[n.Tenant], c-room[n.Tenant])}
			continue
		}
		room[n.Tenant]--
	}
	return nil
}

// countTenantWaiting counts a tenant's waiting instances of every type, up
// to limit, through the taskinstance_tenant_waiting index.
func (s *Store) countTenantWaiting(ctx context.Context, t *txn, tenant string, limit int) (int, error) {
	rows, err := s.query(ctx, t, `SELECT COUNT(*) FROM (SELECT 1 FROM task_instances WHERE status IN (`+sqlWaiting+`) AND tenant = ? LIMIT ?) w`, tenant, limit)
	if err != nil {
		return 0, fmt.Errorf("count waiting tasks of tenant %q: %w", tenant, err)
	}
	defer rows.Close()
	n := 0
	if rows.Next() {
		err = rows.Scan(&n)
	}
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return 0, fmt.Errorf("count waiting tasks of tenant %q: %w", tenant, err)
	}
	return n, nil
}
