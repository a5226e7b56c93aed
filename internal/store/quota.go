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
