package flow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/tenantflowstart"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/flow"
)

// TestTenantQuotaRate: a tenant's quota rates its starts of every type
// (rateLimit per ratePeriodSeconds): the claim starts no more of its tasks,
// of all its types together, than the rate admits in its window, another
// tenant's go on, the held tasks say why and the pool is told when to claim
// again; the window moving on admits the next ones, and removing the rate
// releases the rest.
func TestTenantQuotaRate(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		b := setup(t, dsn, flow.Tenanted(true))
		ctx := context.Background()

		// Bad limits are VALIDATION on their field, and change nothing.
		for _, l := range []flow.QuotaLimits{{RateLimit: ptr(0)}, {RateLimit: ptr(5), RatePeriodSeconds: ptr(0)}, {RateLimit: ptr(5), RatePeriodSeconds: ptr(flow.MaxRatePeriodSeconds + 1)}} {
			_, err := b.svc.SetTenantQuota(platformCtx, "acme", l)
			var ve *engine.ValidationError
			require.True(t, errors.As(err, &ve), "%v", err)
		}
		// A tenant's admin may not rate their own tenant.
		_, err := b.svc.SetTenantQuota(as("ann", auth.RoleAdmin, "acme"), "acme", flow.QuotaLimits{RateLimit: ptr(100)})
		var fe *auth.ForbiddenError
		require.True(t, errors.As(err, &fe), "%v", err)

		q, err := b.svc.SetTenantQuota(platformCtx, "acme", flow.QuotaLimits{RateLimit: ptr(5), RatePeriodSeconds: ptr(60)})
		require.NoError(t, err)
		require.Equal(t, 5, *q.RateLimit)
		require.Equal(t, 60, q.RatePeriodSeconds)
		require.Zero(t, q.StartedInWindow)
		require.Nil(t, q.NextStartAt)

		require.NoError(t, b.createFor(t, "import", "acme", 6))
		require.NoError(t, b.createFor(t, "webhook", "acme", 6))
		require.NoError(t, b.createFor(t, "import", "other", 4))
		types := []string{"import", "webhook"}
		claim := func() (map[string]int, map[string]int) {
			t.Helper()
			got, err := b.store.Claim(ctx, "w", types, 100)
			require.NoError(t, err)
			tenants, acmeTypes := map[string]int{}, map[string]int{}
			for _, c := range got {
				tenants[c.Task.Tenant]++
				if c.Task.Tenant == "acme" {
					acmeTypes[c.Task.Type]++
				}
			}
			return tenants, acmeTypes
		}
		tenants, acmeTypes := claim()
		require.Equal(t, map[string]int{"acme": 5, "other": 4}, tenants, "acme starts 5 of its 12, of both types together; other is not held")
		require.Len(t, acmeTypes, 2, "both of acme's types get a part: %v", acmeTypes)
		next := b.store.NextAdmission()
		require.False(t, next.IsZero(), "the pool is told when the rate admits acme again")
		require.True(t, !next.Before(epoch) && !next.After(epoch.Add(60*time.Second)), "%v", next)

		tenants, _ = claim()
		require.Empty(t, tenants, "acme's window is full")

		w, err := b.svc.WaitReason(ctx, b.waitingTask(t, "webhook", "acme"))
		require.NoError(t, err)
		require.NotNil(t, w)
		require.Equal(t, flow.RateLimited, w.Kind)
		require.Equal(t, "acme", *w.Tenant)
		require.Equal(t, 5, w.Limit)
		require.Equal(t, 5, w.Current)
		require.Contains(t, w.Message, "tenant acme started 5 of 5 per 60s")
		q, err = b.svc.TenantQuota(platformCtx, ptr("acme"))
		require.NoError(t, err)
		require.Equal(t, 5, q.StartedInWindow)
		require.NotNil(t, q.NextStartAt)

		b.clock.Advance(61 * time.Second)
		tenants, _ = claim()
		require.Equal(t, map[string]int{"acme": 5}, tenants, "the next window admits five more")

		// Without the rate, the rest start, and its starts are forgotten.
		_, err = b.svc.SetTenantQuota(platformCtx, "acme", flow.QuotaLimits{})
		require.NoError(t, err)
		left, err := b.store.Client().TenantFlowStart.Query().Where(tenantflowstart.Tenant("acme")).Count(sysCtx)
		require.NoError(t, err)
		require.Zero(t, left)
		tenants, _ = claim()
		require.Equal(t, map[string]int{"acme": 2}, tenants)
	})
}

// TestTenantQuotaRateOnTwoNodes: two nodes claiming a rated tenant's tasks
// at once on PostgreSQL start no more than its rate between them (each
// claim locks the tenant's quota row while it counts and records).
func TestTenantQuotaRateOnTwoNodes(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresOnly(t)
	b1 := setup(t, dsn, flow.Tenanted(true))
	b2 := setup(t, dsn, flow.Tenanted(true))
	_, err := b1.svc.SetTenantQuota(platformCtx, "acme", flow.QuotaLimits{RateLimit: ptr(10), RatePeriodSeconds: ptr(3600)})
	require.NoError(t, err)
	require.NoError(t, b1.createFor(t, "import", "acme", 100))
	var mu sync.Mutex
	started := 0
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, b := range []bundle{b1, b2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				got, err := b.store.Claim(context.Background(), fmt.Sprintf("node-%d", i), []string{"import"}, 2)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				started += len(got)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 10, started, "the rate admits ten in its hour, across both nodes")
}
