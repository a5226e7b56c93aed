package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/builtin"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// TestTenantQuotaAPI: a tenant's quota, set by a platform administrator
// only, caps its waiting tasks across types (a batch's item beyond it is
// refused, a resubmit at the cap is answered), its enabled schedules and
// how often they fire; the deployment's floor holds a tenant without one.
func TestTenantQuotaAPI(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		path, tokens := apptest.Tokens(t,
			auth.Viewer{User: "root", Role: auth.RoleAdmin},
			auth.Viewer{User: "ada", Role: auth.RoleAdmin, Tenant: "acme"},
			auth.Viewer{User: "otto", Role: auth.RoleOperator, Tenant: "acme"},
			auth.Viewer{User: "bea", Role: auth.RoleOperator, Tenant: "beta"},
		)
		s := apptest.Start(t, dsn, app.Options{Register: func(r *tasktype.Registry) { tasktype.Register(r, "other", builtin.Noop) }}, func(c *app.Config) {
			c.Access.TokenFile = path
			c.Access.PlatformAdmins = []auth.Identity{{Source: auth.SourceToken, User: "root"}}
			c.Roles = []app.Role{app.RoleAPI}
			c.MinScheduleInterval = 10 * time.Second
		})
		const set = `mutation($t: String!, $in: TenantQuotaInput!) { setTenantQuota(tenant: $t, input: $in) { tenant maxWaiting maxSchedules minScheduleIntervalSeconds updatedBy } }`
		limits := map[string]any{"maxWaiting": 2, "maxSchedules": 1, "minScheduleIntervalSeconds": 60}
		for _, tn := range []string{"acme", "beta"} {
			r := s.DoAs(t, tokens["ada"], set, map[string]any{"t": tn, "in": limits})
			require.Equal(t, "FORBIDDEN", r.Errors[0].Code(), "a tenant's admin sets no quota, their own neither")
		}
		r := s.DoAs(t, tokens["root"], set, map[string]any{"t": "acme", "in": map[string]any{"minScheduleIntervalSeconds": 0}})
		require.Equal(t, "VALIDATION", r.Errors[0].Code())
		r = s.DoAs(t, tokens["root"], set, map[string]any{"t": "acme", "in": map[string]any{"maxRunning": -1}})
		require.Equal(t, "VALIDATION", r.Errors[0].Code())
		require.Contains(t, r.Errors[0].Message, "maxRunning")
		for _, w := range []int{0, 1001} {
			r = s.DoAs(t, tokens["root"], set, map[string]any{"t": "acme", "in": map[string]any{"weight": w}})
			require.Equal(t, "VALIDATION", r.Errors[0].Code(), "weight %d", w)
			require.Contains(t, r.Errors[0].Message, "weight")
		}
		var setQ struct {
			SetTenantQuota struct {
				Tenant                                               string
				MaxWaiting, MaxSchedules, MinScheduleIntervalSeconds *int
				UpdatedBy                                            string
			}
		}
		s.QueryAs(t, tokens["root"], set, map[string]any{"t": "acme", "in": limits}, &setQ)
		require.Equal(t, 2, *setQ.SetTenantQuota.MaxWaiting)
		require.Equal(t, "root", setQ.SetTenantQuota.UpdatedBy)

		// Waiting: tenant-wide, across types; a batch's item beyond it is
		// refused and creates nothing; a resubmit at the cap returns its task.
		var first struct{ CreateTask struct{ ID string } }
		s.QueryAs(t, tokens["otto"], `mutation { createTask(input: {type: "noop", idempotencyKey: "k1"}) { id } }`, nil, &first)
		var batch struct {
			CreateTasks []struct {
				Task  *struct{ ID string }
				Error *struct{ Code, Message string }
			}
		}
		s.QueryAs(t, tokens["otto"], `mutation { createTasks(inputs: [{type: "noop"}, {type: "other"}]) { task { id } error { code message } } }`, nil, &batch)
		require.Len(t, batch.CreateTasks, 2)
		require.NotNil(t, batch.CreateTasks[0].Task)
		require.Nil(t, batch.CreateTasks[1].Task)
		require.Equal(t, "QUOTA_EXCEEDED", batch.CreateTasks[1].Error.Code)
		require.Contains(t, batch.CreateTasks[1].Error.Message, `tenant "acme" may have at most 2 waiting tasks (2 wait)`)
		r = s.DoAs(t, tokens["otto"], `mutation { createTask(input: {type: "noop"}) { id } }`, nil)
		require.Equal(t, "QUOTA_EXCEEDED", r.Errors[0].Code())
		require.Equal(t, "maxWaiting", r.Errors[0].Extensions["quota"])
		var again struct{ CreateTask struct{ ID string } }
		s.QueryAs(t, tokens["otto"], `mutation { createTask(input: {type: "noop", idempotencyKey: "k1"}) { id } }`, nil, &again)
		require.Equal(t, first.CreateTask.ID, again.CreateTask.ID, "a resubmit at the cap returns its task")
		r = s.DoAs(t, tokens["bea"], `mutation { createTask(input: {type: "noop"}) { id } }`, nil)
		require.Empty(t, r.Errors, "another tenant's quota does not hold beta")

		// Schedules: the interval floor (an interval, a cron's gap), the cap.
		const create = `mutation($in: CreateScheduleInput!) { createSchedule(input: $in) { id paused } }`
		task := map[string]any{"type": "noop"}
		for _, in := range []map[string]any{
			{"name": "fast", "intervalSeconds": 1, "task": task},
			{"name": "fast cron", "cron": "* * * * * *", "task": task},
			{"name": "thirty", "cron": "*/30 * * * * *", "task": task},
		} {
			r = s.DoAs(t, tokens["otto"], create, map[string]any{"in": in})
			require.Equal(t, "QUOTA_EXCEEDED", r.Errors[0].Code(), in["name"])
			require.Equal(t, "minScheduleIntervalSeconds", r.Errors[0].Extensions["quota"])
		}
		var sch struct{ CreateSchedule struct{ ID string } }
		s.QueryAs(t, tokens["otto"], create, map[string]any{"in": map[string]any{"name": "minutely", "intervalSeconds": 60, "task": task}}, &sch)
		r = s.DoAs(t, tokens["otto"], create, map[string]any{"in": map[string]any{"name": "hourly", "intervalSeconds": 3600, "task": task}})
		require.Equal(t, "QUOTA_EXCEEDED", r.Errors[0].Code(), "one enabled schedule at most")
		require.Equal(t, "maxSchedules", r.Errors[0].Extensions["quota"])
		var paused struct{ CreateSchedule struct{ ID string } }
		s.QueryAs(t, tokens["otto"], create, map[string]any{"in": map[string]any{"name": "hourly", "intervalSeconds": 3600, "paused": true, "task": task}}, &paused)
		r = s.DoAs(t, tokens["otto"], `mutation($id: ID!) { resumeSchedule(id: $id) { paused } }`, map[string]any{"id": paused.CreateSchedule.ID})
		require.Equal(t, "QUOTA_EXCEEDED", r.Errors[0].Code(), "resuming is enabling")
		r = s.DoAs(t, tokens["otto"], `mutation($id: ID!) { updateSchedule(id: $id, input: {intervalSeconds: 1}) { id } }`, map[string]any{"id": sch.CreateSchedule.ID})
		require.Equal(t, "QUOTA_EXCEEDED", r.Errors[0].Code(), "an edit below the floor")
		s.QueryAs(t, tokens["otto"], `mutation($id: ID!) { updateSchedule(id: $id, input: {intervalSeconds: 120}) { id } }`, map[string]any{"id": sch.CreateSchedule.ID}, nil)

		// The deployment's floor (10 s here) holds a tenant without a quota.
		r = s.DoAs(t, tokens["bea"], create, map[string]any{"in": map[string]any{"name": "fast", "intervalSeconds": 1, "task": task}})
		require.Equal(t, "QUOTA_EXCEEDED", r.Errors[0].Code())
		require.Contains(t, r.Errors[0].Message, `tenant "beta"'s schedules may fire at most once every 10 seconds (this one fires 1 seconds apart)`)
		s.QueryAs(t, tokens["bea"], create, map[string]any{"in": map[string]any{"name": "ten", "intervalSeconds": 10, "task": task}}, nil)
		// A quota's own floor replaces it: one-second schedules allowed.
		s.QueryAs(t, tokens["root"], set, map[string]any{"t": "beta", "in": map[string]any{"minScheduleIntervalSeconds": 1}}, nil)
		s.QueryAs(t, tokens["bea"], create, map[string]any{"in": map[string]any{"name": "fast", "intervalSeconds": 1, "task": task}}, nil)

		// Reading: one's own tenant's; another's is the platform's.
		type quota struct {
			Tenant             string
			MaxWaiting         *int
			Waiting, Schedules int
		}
		var mine struct{ TenantQuota quota }
		s.QueryAs(t, tokens["ada"], `{ tenantQuota { tenant maxWaiting waiting schedules } }`, nil, &mine)
		require.Equal(t, quota{Tenant: "acme", MaxWaiting: mine.TenantQuota.MaxWaiting, Waiting: 2, Schedules: 1}, mine.TenantQuota)
		require.Equal(t, 2, *mine.TenantQuota.MaxWaiting)
		r = s.DoAs(t, tokens["ada"], `{ tenantQuota(tenant: "beta") { tenant } }`, nil)
		require.Equal(t, "FORBIDDEN", r.Errors[0].Code())
		var list struct{ TenantQuotas []quota }
		s.QueryAs(t, tokens["ada"], `{ tenantQuotas { tenant waiting schedules } }`, nil, &list)
		require.Len(t, list.TenantQuotas, 1)
		require.Equal(t, "acme", list.TenantQuotas[0].Tenant)
		s.QueryAs(t, tokens["root"], `{ tenantQuotas { tenant waiting schedules } }`, nil, &list)
		require.Len(t, list.TenantQuotas, 2)
		require.Equal(t, []string{"acme", "beta"}, []string{list.TenantQuotas[0].Tenant, list.TenantQuotas[1].Tenant})
		require.Equal(t, 2, list.TenantQuotas[1].Schedules)

		// Audited, refusals too.
		var audits struct {
			AuditLogs struct {
				Edges []struct {
					Node struct{ Action, Outcome, Actor string }
				}
			}
		}
		s.QueryAs(t, tokens["root"], `{ auditLogs(first: 100) { edges { node { action outcome actor } } } }`, nil, &audits)
		seen := map[string]int{}
		for _, e := range audits.AuditLogs.Edges {
			if e.Node.Action == "TENANT_QUOTA_SET" {
				seen[e.Node.Actor+" "+e.Node.Outcome]++
			}
		}
		require.Equal(t, 2, seen["ada FAILED"], "%v", seen)
		require.Equal(t, 2, seen["root OK"], "%v", seen)
		// The fair share's weight: set, read back, 1 when left out.
		var weighted struct{ SetTenantQuota struct{ Weight int } }
		s.QueryAs(t, tokens["root"], `mutation { setTenantQuota(tenant: "gamma", input: {weight: 3}) { weight } }`, nil, &weighted)
		require.Equal(t, 3, weighted.SetTenantQuota.Weight)
		s.QueryAs(t, tokens["root"], `mutation { setTenantQuota(tenant: "gamma", input: {maxWaiting: 5}) { weight } }`, nil, &weighted)
		require.Equal(t, 1, weighted.SetTenantQuota.Weight, "replaced: the weight left out is 1")
		// The rate across types: set and read back with its use; its
		// period is 1 when left out; bad values are VALIDATION by field.
		var rated struct {
			SetTenantQuota struct {
				RateLimit                          *int
				RatePeriodSeconds, StartedInWindow int
				NextStartAt                        *string
			}
		}
		s.QueryAs(t, tokens["root"], `mutation { setTenantQuota(tenant: "gamma", input: {rateLimit: 30, ratePeriodSeconds: 60}) { rateLimit ratePeriodSeconds startedInWindow nextStartAt } }`, nil, &rated)
		require.Equal(t, 30, *rated.SetTenantQuota.RateLimit)
		require.Equal(t, 60, rated.SetTenantQuota.RatePeriodSeconds)
		require.Zero(t, rated.SetTenantQuota.StartedInWindow)
		require.Nil(t, rated.SetTenantQuota.NextStartAt)
		for field, in := range map[string]map[string]any{"rateLimit": {"rateLimit": 0}, "ratePeriodSeconds": {"rateLimit": 5, "ratePeriodSeconds": 86401}} {
			r = s.DoAs(t, tokens["root"], set, map[string]any{"t": "gamma", "in": in})
			require.Equal(t, "VALIDATION", r.Errors[0].Code(), field)
			require.Contains(t, r.Errors[0].Message, field)
		}
		s.QueryAs(t, tokens["root"], `mutation { setTenantQuota(tenant: "gamma", input: {maxWaiting: 5}) { rateLimit ratePeriodSeconds startedInWindow nextStartAt } }`, nil, &rated)
		require.Nil(t, rated.SetTenantQuota.RateLimit, "replaced: no rate")
		require.Equal(t, 1, rated.SetTenantQuota.RatePeriodSeconds)
		var capped struct {
			SetTenantQuota struct {
				MaxRunning *int
				Running    int
			}
		}
		s.QueryAs(t, tokens["root"], `mutation { setTenantQuota(tenant: "gamma", input: {maxRunning: 2}) { maxRunning running } }`, nil, &capped)
		require.Equal(t, 2, *capped.SetTenantQuota.MaxRunning)
		require.Zero(t, capped.SetTenantQuota.Running)
		// Running work by tenant: a platform administrator sees every
		// tenant's, anyone else their own (claimed here by the store: this
		// node runs no workers).
		var mine0 struct{ CreateTask struct{ ID string } }
		s.QueryAs(t, tokens["bea"], `mutation { createTask(input: {type: "other"}) { id } }`, nil, &mine0)
		cl, err := s.App.Store.Claim(auth.NewSystemContext(context.Background()), "w", []string{"noop", "other"}, 100)
		require.NoError(t, err)
		require.NotEmpty(t, cl)
		type share struct {
			Tenant  string
			Running int
		}
		var all, own struct{ RunningByTenant []share }
		s.QueryAs(t, tokens["root"], `{ runningByTenant { tenant running } }`, nil, &all)
		want := map[string]int{}
		for _, c := range cl {
			want[c.Task.Tenant]++
		}
		got := map[string]int{}
		for _, x := range all.RunningByTenant {
			got[x.Tenant] = x.Running
		}
		require.Equal(t, want, got)
		require.Contains(t, got, "acme")
		require.Contains(t, got, "beta")
		s.QueryAs(t, tokens["bea"], `{ runningByTenant { tenant running } }`, nil, &own)
		require.Equal(t, []share{{Tenant: "beta", Running: want["beta"]}}, own.RunningByTenant, "a tenant's user sees their own only")
		var unset struct{ TenantQuota struct{ Weight int } }
		s.QueryAs(t, tokens["root"], `{ tenantQuota(tenant: "nobody") { weight } }`, nil, &unset)
		require.Equal(t, 1, unset.TenantQuota.Weight, "a tenant without a quota weighs 1")
	})
}
