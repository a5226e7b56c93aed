package app_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

type scheduleTasks struct {
	Schedule struct {
		NextFireAt *string
		Tasks      struct {
			TotalCount int
			Edges      []struct {
				Node struct {
					ID           string
					ScheduleSlot time.Time
					Status       string
					Schedule     struct{ ID string }
				}
			}
		}
	}
}

const scheduleTasksQuery = `query($id: ID!) { schedule(id: $id) { nextFireAt tasks(first: 100) { totalCount edges { node { id scheduleSlot status schedule { id } } } } } }`

func createSchedule(t *testing.T, s *apptest.Server, in map[string]any) string {
	t.Helper()
	var out struct{ CreateSchedule struct{ ID string } }
	s.Query(t, `mutation($in: CreateScheduleInput!) { createSchedule(input: $in) { id } }`, map[string]any{"in": in}, &out)
	return out.CreateSchedule.ID
}

// TestScheduleSurvivesRestart: a schedule created on one process is fired
// by the next one on the same database.
func TestScheduleSurvivesRestart(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		dsn := d.DSN(t)
		first := apptest.Start(t, dsn, app.Options{})
		id := createSchedule(t, first, map[string]any{
			"name": "every 2 s", "intervalSeconds": 2, "paused": true,
			"task": map[string]any{"type": "noop"},
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, first.App.Shutdown(ctx))

		second := apptest.Start(t, dsn, app.Options{})
		var resumed struct{ ResumeSchedule struct{ Name string } }
		second.Query(t, `mutation($id: ID!) { resumeSchedule(id: $id) { name } }`, map[string]any{"id": id}, &resumed)
		require.Equal(t, "every 2 s", resumed.ResumeSchedule.Name)
		var out scheduleTasks
		deadline := time.Now().Add(30 * time.Second)
		for {
			second.Query(t, scheduleTasksQuery, map[string]any{"id": id}, &out)
			if out.Schedule.Tasks.TotalCount > 0 && out.Schedule.Tasks.Edges[0].Node.Status == "SUCCESS" {
				break
			}
			require.True(t, time.Now().Before(deadline), "no task fired after the restart: %+v", out)
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// TestScheduleAPI: previews, validation errors and roles through GraphQL.
func TestScheduleAPI(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		path, tokens := apptest.Tokens(t,
			auth.Viewer{User: "ada", Role: auth.RoleAdmin},
			auth.Viewer{User: "otto", Role: auth.RoleOperator},
			auth.Viewer{User: "olga", Role: auth.RoleOperator},
			auth.Viewer{User: "vera", Role: auth.RoleViewer},
		)
		s := apptest.Start(t, dsn, app.Options{}, func(c *app.Config) { c.Access.TokenFile = path })

		var preview struct{ SchedulePreview []time.Time }
		s.QueryAs(t, tokens["vera"], `{ schedulePreview(input: {cron: "0 30 9 * * *", timezone: "Asia/Shanghai"}, count: 3) }`, nil, &preview)
		require.Len(t, preview.SchedulePreview, 3)
		sh, _ := time.LoadLocation("Asia/Shanghai")
		for i, at := range preview.SchedulePreview {
			require.Equal(t, "09:30:00", at.In(sh).Format("15:04:05"))
			if i > 0 {
				require.Equal(t, 24*time.Hour, at.Sub(preview.SchedulePreview[i-1]))
			}
		}
		r := s.DoAs(t, tokens["otto"], `{ schedulePreview(input: {cron: "99 * * * *"}) }`, nil)
		require.Len(t, r.Errors, 1)
		require.Equal(t, "VALIDATION", r.Errors[0].Code())
		require.Equal(t, "cron", fmt.Sprint(r.Errors[0].Extensions["problems"].([]any)[0].(map[string]any)["field"]))

		in := map[string]any{"name": "nightly", "cron": "0 2 * * *", "task": map[string]any{"type": "noop"}}
		r = s.DoAs(t, tokens["vera"], `mutation($in: CreateScheduleInput!) { createSchedule(input: $in) { id } }`, map[string]any{"in": in})
		require.Equal(t, "FORBIDDEN", r.Errors[0].Code())
		r = s.DoAs(t, tokens["otto"], `mutation($in: CreateScheduleInput!) { createSchedule(input: $in) { id } }`,
			map[string]any{"in": map[string]any{"name": "bad", "cron": "0 2 * * *", "task": map[string]any{"type": "nope"}}})
		require.Equal(t, "VALIDATION", r.Errors[0].Code())

		var created struct {
			CreateSchedule struct {
				ID                string
				EffectiveTimezone string
				Upcoming          []time.Time
				MisfirePolicy     string
				OverlapPolicy     string
			}
		}
		s.QueryAs(t, tokens["otto"], `mutation($in: CreateScheduleInput!) { createSchedule(input: $in) { id effectiveTimezone upcoming(count: 2) misfirePolicy overlapPolicy } }`, map[string]any{"in": in}, &created)
		require.Len(t, created.CreateSchedule.Upcoming, 2)
		require.Equal(t, "SKIP", created.CreateSchedule.MisfirePolicy)
		require.Equal(t, "SKIP", created.CreateSchedule.OverlapPolicy)
		id := created.CreateSchedule.ID

		// Another operator neither sees nor changes it; an admin does both.
		r = s.DoAs(t, tokens["olga"], `mutation($id: ID!) { pauseSchedule(id: $id) { id } }`, map[string]any{"id": id})
		require.Equal(t, "NOT_FOUND", r.Errors[0].Code())
		var list struct{ Schedules struct{ TotalCount int } }
		s.QueryAs(t, tokens["olga"], `{ schedules { totalCount } }`, nil, &list)
		require.Zero(t, list.Schedules.TotalCount)
		s.QueryAs(t, tokens["ada"], `{ schedules { totalCount } }`, nil, &list)
		require.Equal(t, 1, list.Schedules.TotalCount)

		var updated struct {
			UpdateSchedule struct {
				Cron            string
				IntervalSeconds *int
				Upcoming        []time.Time
			}
		}
		s.QueryAs(t, tokens["ada"], `mutation($id: ID!) { updateSchedule(id: $id, input: {intervalSeconds: 3600}) { cron intervalSeconds upcoming(count: 2) } }`, map[string]any{"id": id}, &updated)
		require.Empty(t, updated.UpdateSchedule.Cron)
		require.Equal(t, 3600, *updated.UpdateSchedule.IntervalSeconds)
		require.Equal(t, time.Hour, updated.UpdateSchedule.Upcoming[1].Sub(updated.UpdateSchedule.Upcoming[0]))

		var run struct {
			RunScheduleNow struct {
				Owner    string
				Schedule struct{ ID string }
			}
		}
		s.QueryAs(t, tokens["otto"], `mutation($id: ID!) { runScheduleNow(id: $id) { owner schedule { id } } }`, map[string]any{"id": id}, &run)
		require.Equal(t, "otto", run.RunScheduleNow.Owner)
		require.Equal(t, id, run.RunScheduleNow.Schedule.ID)

		var del struct{ DeleteSchedule string }
		s.QueryAs(t, tokens["otto"], `mutation($id: ID!) { deleteSchedule(id: $id) }`, map[string]any{"id": id}, &del)
		require.Equal(t, id, del.DeleteSchedule)
		r = s.DoAs(t, tokens["otto"], `query($id: ID!) { schedule(id: $id) { id } }`, map[string]any{"id": id})
		require.Equal(t, "NOT_FOUND", r.Errors[0].Code())

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
		for _, want := range []string{"SCHEDULE_CREATE:FAILED:vera", "SCHEDULE_CREATE:OK:otto", "SCHEDULE_PAUSE:FAILED:olga", "SCHEDULE_UPDATE:OK:ada", "SCHEDULE_RUN_NOW:OK:otto", "SCHEDULE_DELETE:OK:otto"} {
			require.True(t, seen[want], "audit %s in %v", want, seen)
		}
	})
}

// scheduleLog is a schedule's tasks and log lines, as the API gives them.
type scheduleLog struct {
	Schedule struct {
		Tasks struct {
			Edges []struct {
				Node struct{ ScheduleSlot time.Time }
			}
		}
		Events struct {
			Edges []struct {
				Node struct {
					Kind   string
					Slot   *time.Time
					Missed int
					Node   string
				}
			}
		}
	}
}

const scheduleLogQuery = `query($id: ID!) { schedule(id: $id) { tasks(first: 100) { edges { node { scheduleSlot } } } events(first: 200) { edges { node { kind slot missed node } } } } }`

// slots returns the schedule's task slots, ascending (a slot twice fails
// the test).
func (l scheduleLog) slots(t *testing.T) []time.Time {
	t.Helper()
	var out []time.Time
	seen := map[time.Time]bool{}
	for _, e := range l.Schedule.Tasks.Edges {
		s := e.Node.ScheduleSlot.UTC()
		require.False(t, seen[s], "two tasks for slot %s", s)
		seen[s] = true
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}
