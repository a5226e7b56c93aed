package app_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// TestFlowControlAPI: reading, changing and auditing flow settings through
// GraphQL, and a waiting task saying why it waits, in a deployment with
// tenants: a type's own control is the platform administrators', a
// tenant's share its admins'. (The node runs no workers: nothing claims
// the tasks.)
func TestFlowControlAPI(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		path, tokens := apptest.Tokens(t,
			auth.Viewer{User: "root", Role: auth.RoleAdmin},
			auth.Viewer{User: "ada", Role: auth.RoleAdmin, Tenant: "acme"},
			auth.Viewer{User: "otto", Role: auth.RoleOperator, Tenant: "acme"},
			auth.Viewer{User: "vera", Role: auth.RoleViewer, Tenant: "acme"},
		)
		s := apptest.Start(t, dsn, app.Options{}, func(c *app.Config) {
			c.Access.TokenFile = path
			c.Access.PlatformAdmins = []auth.Identity{{Source: auth.SourceToken, User: "root"}}
			c.Roles = []app.Role{app.RoleAPI}
		})
		var list struct {
			TypeControls []struct {
				Type       string
				MaxRunning *int
				Paused     bool
			}
		}
		s.QueryAs(t, tokens["vera"], `{ typeControls { type maxRunning paused } }`, nil, &list)
		require.NotEmpty(t, list.TypeControls)
		for _, c := range list.TypeControls {
			require.Nil(t, c.MaxRunning)
			require.False(t, c.Paused)
		}

		const set = `mutation($t: String!, $in: TypeControlInput!) { setTypeControl(type: $t, input: $in) { type maxRunning rateLimit ratePeriodSeconds updatedBy } }`
		for _, who := range []string{"vera", "otto", "ada"} {
			r := s.DoAs(t, tokens[who], set, map[string]any{"t": "import", "in": map[string]any{"maxRunning": 1, "rateLimit": 1, "ratePeriodSeconds": 86400}})
			require.Equal(t, "FORBIDDEN", r.Errors[0].Code(), who)
			r = s.DoAs(t, tokens[who], `mutation { pauseType(type: "alert.deliver") { paused } }`, nil)
			require.Equal(t, "FORBIDDEN", r.Errors[0].Code(), who)
		}
		r := s.DoAs(t, tokens["root"], set, map[string]any{"t": "nope", "in": map[string]any{"maxRunning": 2}})
		require.Equal(t, "VALIDATION", r.Errors[0].Code())
		r = s.DoAs(t, tokens["root"], set, map[string]any{"t": "noop", "in": map[string]any{"rateLimit": 0}})
		require.Equal(t, "VALIDATION", r.Errors[0].Code())
		var got struct {
			SetTypeControl struct {
				Type              string
				MaxRunning        int
				RateLimit         int
				RatePeriodSeconds int
				UpdatedBy         string
			}
		}
		s.QueryAs(t, tokens["root"], set, map[string]any{"t": "noop", "in": map[string]any{"maxRunning": 2, "rateLimit": 10, "ratePeriodSeconds": 60}}, &got)
		require.Equal(t, 2, got.SetTypeControl.MaxRunning)
		require.Equal(t, 10, got.SetTypeControl.RateLimit)
		require.Equal(t, 60, got.SetTypeControl.RatePeriodSeconds)
		require.Equal(t, "root", got.SetTypeControl.UpdatedBy)

		// The tenant's admin pauses the tenant's share.
		until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
		var paused struct {
			PauseTenantType struct {
				Tenant, PausedBy string
				Paused           bool
				PausedUntil      time.Time
			}
		}
		r = s.DoAs(t, tokens["otto"], `mutation { pauseTenantType(type: "noop") { paused } }`, nil)
		require.Equal(t, "FORBIDDEN", r.Errors[0].Code(), "an operator")
		r = s.DoAs(t, tokens["ada"], `mutation { pauseTenantType(type: "noop", tenant: "beta") { paused } }`, nil)
		require.Equal(t, "FORBIDDEN", r.Errors[0].Code(), "another tenant's")
		s.QueryAs(t, tokens["ada"], `mutation($u: Time) { pauseTenantType(type: "noop", until: $u) { tenant paused pausedBy pausedUntil } }`, map[string]any{"u": until.Format(time.RFC3339)}, &paused)
		require.Equal(t, "acme", paused.PauseTenantType.Tenant)
		require.True(t, paused.PauseTenantType.Paused)
		require.Equal(t, "ada", paused.PauseTenantType.PausedBy)
		require.True(t, until.Equal(paused.PauseTenantType.PausedUntil))

		var created struct {
			CreateTask struct {
				Status        string
				WaitingReason struct {
					Kind, Message string
					Tenant        *string
					Until         time.Time
				}
			}
		}
		s.QueryAs(t, tokens["otto"], `mutation { createTask(input: {type: "noop"}) { status waitingReason { kind message tenant until } } }`, nil, &created)
		require.Equal(t, "PENDING", created.CreateTask.Status)
		require.Equal(t, "PAUSED", created.CreateTask.WaitingReason.Kind)
		require.Equal(t, "noop is paused for tenant acme by ada until "+until.Format(time.RFC3339), created.CreateTask.WaitingReason.Message)
		require.Equal(t, "acme", *created.CreateTask.WaitingReason.Tenant)
		require.True(t, until.Equal(created.CreateTask.WaitingReason.Until))

		// A platform administrator's pause: the tenant's admin does not lift it.
		s.QueryAs(t, tokens["root"], `mutation { pauseType(type: "noop") { paused } }`, nil, nil)
		r = s.DoAs(t, tokens["ada"], `mutation { resumeType(type: "noop") { paused } }`, nil)
		require.Equal(t, "FORBIDDEN", r.Errors[0].Code())
		var resumed struct{ ResumeType struct{ Paused bool } }
		s.QueryAs(t, tokens["root"], `mutation { resumeType(type: "noop") { paused } }`, nil, &resumed)
		require.False(t, resumed.ResumeType.Paused)

		// A cap on the tenant's waiting tasks: QUOTA_EXCEEDED beyond it.
		s.QueryAs(t, tokens["ada"], `mutation { setTenantTypeControl(type: "noop", input: {maxWaiting: 1}) { maxWaiting } }`, nil, nil)
		r = s.DoAs(t, tokens["otto"], `mutation { createTask(input: {type: "noop"}) { id } }`, nil)
		require.Len(t, r.Errors, 1)
		require.Equal(t, "QUOTA_EXCEEDED", r.Errors[0].Code())

		// Counts are the viewer's tenant's; the shares they see, their own.
		var mine struct {
			TypeControl struct {
				Waiting int
				Shares  []struct{ Tenant string }
			}
		}
		s.QueryAs(t, tokens["vera"], `{ typeControl(type: "noop") { waiting shares { tenant } } }`, nil, &mine)
		require.Equal(t, 1, mine.TypeControl.Waiting)
		require.Len(t, mine.TypeControl.Shares, 1)

		var audits struct {
			AuditLogs struct {
				Edges []struct {
					Node struct{ Action, Outcome, Actor string }
				}
			}
		}
		s.QueryAs(t, tokens["root"], `{ auditLogs(first: 100) { edges { node { action outcome actor } } } }`, nil, &audits)
		seen := map[string]bool{}
		for _, e := range audits.AuditLogs.Edges {
			seen[e.Node.Action+":"+e.Node.Outcome+":"+e.Node.Actor] = true
		}
		for _, want := range []string{"FLOW_CONTROL_SET:FAILED:vera", "FLOW_CONTROL_SET:FAILED:otto", "FLOW_CONTROL_SET:FAILED:ada", "FLOW_CONTROL_SET:OK:root",
			"TYPE_PAUSE:OK:ada", "TYPE_PAUSE:OK:root", "TYPE_RESUME:FAILED:ada", "TYPE_RESUME:OK:root"} {
			require.True(t, seen[want], "audit %s in %v", want, seen)
		}

		// A resubmit of a waiting task by its idempotency key is answered
		// with that task, even at the cap: it is not one more waiting task.
		s.QueryAs(t, tokens["ada"], `mutation { setTenantTypeControl(type: "noop", input: {maxWaiting: 2}) { maxWaiting } }`, nil, nil)
		var keyed [2]struct{ CreateTask struct{ ID string } }
		for i := range keyed {
			s.QueryAs(t, tokens["otto"], `mutation { createTask(input: {type: "noop", idempotencyKey: "nightly-1"}) { id } }`, nil, &keyed[i])
		}
		require.NotEmpty(t, keyed[0].CreateTask.ID)
		require.Equal(t, keyed[0].CreateTask.ID, keyed[1].CreateTask.ID, "the same task, at the cap")
		r = s.DoAs(t, tokens["otto"], `mutation { createTask(input: {type: "noop", idempotencyKey: "nightly-2"}) { id } }`, nil)
		require.Len(t, r.Errors, 1)
		require.Equal(t, "QUOTA_EXCEEDED", r.Errors[0].Code(), "a new key is a new task, beyond the cap")
	})
}
