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
// GraphQL, and a waiting task saying why it waits. (The node runs no
// workers: nothing claims the tasks.)
func TestFlowControlAPI(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		path, tokens := apptest.Tokens(t,
			auth.Viewer{User: "ada", Role: auth.RoleAdmin},
			auth.Viewer{User: "otto", Role: auth.RoleOperator},
			auth.Viewer{User: "vera", Role: auth.RoleViewer},
		)
		s := apptest.Start(t, dsn, app.Options{}, func(c *app.Config) {
			c.Access.TokenFile = path
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
		r := s.DoAs(t, tokens["vera"], set, map[string]any{"t": "noop", "in": map[string]any{"maxRunning": 2}})
		require.Equal(t, "FORBIDDEN", r.Errors[0].Code())
		r = s.DoAs(t, tokens["otto"], set, map[string]any{"t": "nope", "in": map[string]any{"maxRunning": 2}})
		require.Equal(t, "VALIDATION", r.Errors[0].Code())
		r = s.DoAs(t, tokens["otto"], set, map[string]any{"t": "noop", "in": map[string]any{"rateLimit": 0}})
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
		s.QueryAs(t, tokens["otto"], set, map[string]any{"t": "noop", "in": map[string]any{"maxRunning": 2, "rateLimit": 10, "ratePeriodSeconds": 60}}, &got)
		require.Equal(t, 2, got.SetTypeControl.MaxRunning)
		require.Equal(t, 10, got.SetTypeControl.RateLimit)
		require.Equal(t, 60, got.SetTypeControl.RatePeriodSeconds)
		require.Equal(t, "otto", got.SetTypeControl.UpdatedBy)

		until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
		var paused struct {
			PauseType struct {
				Paused      bool
				PausedUntil time.Time
			}
		}
		s.QueryAs(t, tokens["otto"], `mutation($u: Time) { pauseType(type: "noop", until: $u) { paused pausedUntil } }`, map[string]any{"u": until.Format(time.RFC3339)}, &paused)
		require.True(t, paused.PauseType.Paused)
		require.True(t, until.Equal(paused.PauseType.PausedUntil))

		var created struct {
			CreateTask struct {
				Status        string
				WaitingReason struct {
					Kind    string
					Message string
					Until   time.Time
				}
			}
		}
		s.QueryAs(t, tokens["otto"], `mutation { createTask(input: {type: "noop"}) { status waitingReason { kind message until } } }`, nil, &created)
		require.Equal(t, "PENDING", created.CreateTask.Status)
		require.Equal(t, "PAUSED", created.CreateTask.WaitingReason.Kind)
		require.Equal(t, "noop is paused until "+until.Format(time.RFC3339), created.CreateTask.WaitingReason.Message)
		require.True(t, until.Equal(created.CreateTask.WaitingReason.Until))

		var resumed struct{ ResumeType struct{ Paused bool } }
		s.QueryAs(t, tokens["ada"], `mutation { resumeType(type: "noop") { paused } }`, nil, &resumed)
		require.False(t, resumed.ResumeType.Paused)

		var audits struct {
			AuditLogs struct {
				Edges []struct {
					Node struct{ Action, Outcome, Actor string }
				}
			}
		}
		s.QueryAs(t, tokens["ada"], `{ auditLogs(first: 50) { edges { node { action outcome actor } } } }`, nil, &audits)
		seen := map[string]bool{}
		for _, e := range audits.AuditLogs.Edges {
			seen[e.Node.Action+":"+e.Node.Outcome+":"+e.Node.Actor] = true
		}
		for _, want := range []string{"FLOW_CONTROL_SET:FAILED:vera", "FLOW_CONTROL_SET:OK:otto", "TYPE_PAUSE:OK:otto", "TYPE_RESUME:OK:ada"} {
			require.True(t, seen[want], "audit %s in %v", want, seen)
		}
	})
}
