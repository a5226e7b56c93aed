package flow_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/flow"
	"github.com/taskgraph/taskgraph/internal/store"
)

func as(user string, role auth.Role, tenant string) context.Context {
	return auth.NewContext(context.Background(), auth.Viewer{User: user, Role: role, Source: auth.SourceToken, Tenant: tenant})
}

// createFor makes n waiting tasks of a type owned in a tenant.
func (b bundle) createFor(t testing.TB, typ, tenant string, n int) error {
	t.Helper()
	tasks := make([]store.NewTask, n)
	for i := range tasks {
		tasks[i] = store.NewTask{Type: typ, Owner: "u", OwnerSource: auth.SourceToken, Tenant: tenant, Input: json.RawMessage(`{}`), InputHash: "h",
			TimeoutSeconds: 60, RetryPolicy: "default", MaxAttempts: 3}
	}
	out, err := b.store.CreateTasks(context.Background(), tasks)
	if err != nil {
		return err
	}
	for _, c := range out {
		if c.Err != nil {
			return c.Err
		}
	}
	return nil
}

// claimTenants claims up to limit tasks of typ and counts them by tenant.
func (b bundle) claimTenants(t testing.TB, typ string, limit int) map[string]int {
	t.Helper()
	got, err := b.store.Claim(context.Background(), "w", []string{typ}, limit)
	require.NoError(t, err)
	out := map[string]int{}
	for _, c := range got {
		out[c.Task.Tenant]++
	}
	return out
}

func (b bundle) waitingTask(t testing.TB, typ, tenant string) *ent.Task {
	t.Helper()
	tk, err := b.store.Client().Task.Query().Where(task.Type(typ), task.Tenant(tenant), task.StatusEQ(lifecycle.Pending)).First(sysCtx)
	require.NoError(t, err)
	return tk
}

// TestControlsAreScopedToTheirOwner: a type's own control holds every
// tenant's tasks, so only a platform administrator changes it; a tenant's
// admin holds their own tenant's share, and only theirs.
func TestControlsAreScopedToTheirOwner(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		var fe *auth.ForbiddenError
		opA := as("otto", auth.RoleOperator, "acme")
		adminA := as("alice", auth.RoleAdmin, "acme")
		adminB := as("bob", auth.RoleAdmin, "beta")
		t.Run("NoTenantChangesATypeForEveryTenant", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), flow.Tenanted(true))
			for _, ctx := range []context.Context{opA, adminA, as("eve", auth.RoleAdmin, "")} {
				_, err := b.svc.Pause(ctx, "noop", nil)
				require.ErrorAs(t, err, &fe)
				_, err = b.svc.Set(ctx, "import", flow.Limits{MaxRunning: ptr(1), RateLimit: ptr(1), RatePeriodSeconds: ptr(86400)})
				require.ErrorAs(t, err, &fe)
				_, err = b.svc.Pause(ctx, "system.sweep", nil)
				require.ErrorAs(t, err, &fe, "an internal type")
				_, err = b.svc.PauseTenant(ctx, "system.sweep", nil, nil)
				require.ErrorAs(t, err, &fe, "an internal type, even one's own tenant's share")
			}
			require.NoError(t, b.createFor(t, "noop", "beta", 3))
			require.Equal(t, map[string]int{"beta": 3}, b.claimTenants(t, "noop", 10), "nothing held beta's tasks")

			// A platform administrator's pause: nobody else lifts it.
			_, err := b.svc.Pause(platformCtx, "noop", nil)
			require.NoError(t, err)
			_, err = b.svc.Resume(adminA, "noop")
			require.ErrorAs(t, err, &fe)
			require.NoError(t, b.createFor(t, "noop", "beta", 1))
			require.Empty(t, b.claimTenants(t, "noop", 10))
			w, err := b.svc.WaitReason(adminB, b.waitingTask(t, "noop", "beta"))
			require.NoError(t, err)
			require.Equal(t, "noop is paused for every tenant by root", w.Message)
			require.Nil(t, w.Tenant)
			_, err = b.svc.Resume(platformCtx, "noop")
			require.NoError(t, err)
			require.Equal(t, map[string]int{"beta": 1}, b.claimTenants(t, "noop", 10))
		})
		t.Run("WithoutTenantsTheAdminsChangeTypes", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t))
			c, err := b.svc.Set(as("eve", auth.RoleAdmin, ""), "noop", flow.Limits{MaxRunning: ptr(3)})
			require.NoError(t, err)
			require.Equal(t, 3, *c.MaxRunning)
			_, err = b.svc.Set(adminA, "noop", flow.Limits{MaxRunning: ptr(3)})
			require.ErrorAs(t, err, &fe, "the admin of a named tenant is no deployment's")
			_, err = b.svc.Pause(platformCtx, "noop", nil)
			require.NoError(t, err)
			_, err = b.svc.Resume(as("eve", auth.RoleAdmin, ""), "noop")
			require.ErrorAs(t, err, &fe, "a platform administrator's pause")
			_, err = b.svc.Pause(as("eve", auth.RoleAdmin, ""), "system.sweep", nil)
			require.ErrorAs(t, err, &fe)
		})
		t.Run("ATenantsPauseHoldsItsOwnTasksOnly", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), flow.Tenanted(true))
			require.NoError(t, b.createFor(t, "noop", "acme", 5))
			require.NoError(t, b.createFor(t, "noop", "beta", 2))
			_, err := b.svc.PauseTenant(opA, "noop", nil, nil)
			require.ErrorAs(t, err, &fe, "an operator")
			_, err = b.svc.PauseTenant(adminA, "noop", ptr("beta"), nil)
			require.ErrorAs(t, err, &fe, "another tenant's share")
			c, err := b.svc.PauseTenant(adminA, "noop", nil, nil)
			require.NoError(t, err)
			require.Equal(t, flow.TenantControl{Type: "noop", Tenant: "acme", RatePeriodSeconds: 1, Paused: true, PausedBy: "alice", Waiting: 5,
				UpdatedBy: "alice", UpdatedAt: c.UpdatedAt}, c)
			require.Equal(t, map[string]int{"beta": 2}, b.claimTenants(t, "noop", 10))
			w, err := b.svc.WaitReason(adminA, b.waitingTask(t, "noop", "acme"))
			require.NoError(t, err)
			require.Equal(t, flow.Paused, w.Kind)
			require.Equal(t, "noop is paused for tenant acme by alice", w.Message)
			require.Equal(t, "acme", *w.Tenant)

			// Counts are the viewer's tenant's.
			got, err := b.svc.Get(adminB, "noop")
			require.NoError(t, err)
			require.Equal(t, 2, got.Running)
			require.Equal(t, 0, got.Waiting)
			require.Empty(t, got.Shares, "beta sees no other tenant's share")
			got, err = b.svc.Get(platformCtx, "noop")
			require.NoError(t, err)
			require.Equal(t, 5, got.Waiting)
			require.Len(t, got.Shares, 1)

			_, err = b.svc.ResumeTenant(adminA, "noop", nil)
			require.NoError(t, err)
			require.Equal(t, map[string]int{"acme": 5}, b.claimTenants(t, "noop", 10))

			// A platform administrator's pause of the tenant's share: the
			// tenant's admin does not lift it.
			require.NoError(t, b.createFor(t, "noop", "acme", 1))
			_, err = b.svc.PauseTenant(platformCtx, "noop", ptr("acme"), nil)
			require.NoError(t, err)
			_, err = b.svc.ResumeTenant(adminA, "noop", nil)
			require.ErrorAs(t, err, &fe)
			_, err = b.svc.PauseTenant(adminA, "noop", nil, nil)
			require.ErrorAs(t, err, &fe, "nor takes it over")
			require.Empty(t, b.claimTenants(t, "noop", 10))

			audits, err := b.store.Client().AuditLog.Query().All(sysCtx)
			require.NoError(t, err)
			var seen []string
			for _, a := range audits {
				seen = append(seen, string(a.Action)+":"+string(a.Outcome)+":"+a.Actor+":"+a.Details["tenant"].(string))
			}
			require.Subset(t, seen, []string{"TYPE_PAUSE:FAILED:otto:acme", "TYPE_PAUSE:FAILED:alice:beta", "TYPE_PAUSE:OK:alice:acme",
				"TYPE_RESUME:OK:alice:acme", "TYPE_PAUSE:OK:root:acme", "TYPE_RESUME:FAILED:alice:acme"})
		})
		t.Run("ATenantsCapsAndRateHoldItsOwnTasksOnly", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), flow.Tenanted(true))
			require.NoError(t, b.createFor(t, "noop", "acme", 6))
			require.NoError(t, b.createFor(t, "noop", "beta", 4))
			_, err := b.svc.SetTenant(adminA, "noop", nil, flow.TenantLimits{MaxRunning: ptr(2)})
			require.NoError(t, err)
			require.Equal(t, map[string]int{"acme": 2, "beta": 4}, b.claimTenants(t, "noop", 10))
			require.Empty(t, b.claimTenants(t, "noop", 10), "acme at its cap")
			w, err := b.svc.WaitReason(adminA, b.waitingTask(t, "noop", "acme"))
			require.NoError(t, err)
			require.Equal(t, flow.AtCap, w.Kind)
			require.Equal(t, "waiting: noop of tenant acme at its cap 2/2", w.Message)

			_, err = b.svc.SetTenant(adminA, "noop", nil, flow.TenantLimits{RateLimit: ptr(1), RatePeriodSeconds: ptr(10)})
			require.NoError(t, err)
			require.Equal(t, map[string]int{"acme": 1}, b.claimTenants(t, "noop", 10))
			require.Empty(t, b.claimTenants(t, "noop", 10), "acme out of starts")
			c, err := b.svc.SetTenant(adminA, "noop", nil, flow.TenantLimits{RateLimit: ptr(1), RatePeriodSeconds: ptr(10)})
			require.NoError(t, err)
			require.Equal(t, 1, c.StartedInWindow)
			b.clock.Advance(10 * time.Second)
			require.Equal(t, map[string]int{"acme": 1}, b.claimTenants(t, "noop", 10))

			// A cap on waiting refuses the create beyond it.
			_, err = b.svc.SetTenant(adminA, "noop", nil, flow.TenantLimits{MaxWaiting: ptr(3)})
			require.NoError(t, err)
			err = b.createFor(t, "noop", "acme", 2)
			var qe *store.QuotaError
			require.ErrorAs(t, err, &qe)
			require.Equal(t, store.QuotaError{Type: "noop", Tenant: "acme", Limit: 3, Waiting: 2}, *qe, "the first of the two fitted")
			got, err := b.svc.Get(adminA, "noop")
			require.NoError(t, err)
			require.Equal(t, 3, got.Waiting)
			require.ErrorAs(t, b.createFor(t, "noop", "acme", 1), &qe)
			require.NoError(t, b.createFor(t, "noop", "beta", 5), "beta has no cap")
		})
	})
}
