package app_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"taskgraph/app"
	"taskgraph/app/apptest"
	"taskgraph/auth"
	"taskgraph/internal/dbtest"
	"taskgraph/schedule"
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

// TestSchedulesAcrossNodes: a schedule every second for ten seconds, three
// nodes sharing one database, each with a scheduler: exactly ten tasks,
// one per slot. On PostgreSQL one scheduler leads; on SQLite all three
// fire: a firing is conditional on the schedule's version, and the
// (schedule, slot) key backs it. (One node runs the workers,
// the others schedule only.)
func TestSchedulesAcrossNodes(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		dsn := d.DSN(t)
		// A slot fired late is still fired, however loaded the machine:
		// what is tested is one task per slot, not punctuality.
		opts := app.Options{Scheduler: schedule.SchedulerConfig{MisfireThreshold: time.Minute}}
		nodes := []*apptest.Server{apptest.Start(t, dsn, opts)}
		for range 2 {
			nodes = append(nodes, apptest.Start(t, dsn, opts, func(c *app.Config) {
				c.Roles = []app.Role{app.RoleAPI, app.RoleWatchdog}
			}))
		}
		start := time.Now().UTC().Truncate(time.Second).Add(2 * time.Second)
		end := start.Add(9 * time.Second)
		id := createSchedule(t, nodes[0], map[string]any{
			"name": "ten ticks", "cron": "* * * * * *", "timezone": "Asia/Shanghai",
			"startAt": start.Format(time.RFC3339), "endAt": end.Format(time.RFC3339),
			"overlapPolicy": "ALLOW", "task": map[string]any{"type": "noop", "title": "tick"},
		})
		var out scheduleTasks
		deadline := time.Now().Add(60 * time.Second)
		for {
			nodes[1].Query(t, scheduleTasksQuery, map[string]any{"id": id}, &out)
			if out.Schedule.NextFireAt == nil && out.Schedule.Tasks.TotalCount >= 10 {
				break
			}
			if !time.Now().Before(deadline) {
				var log struct {
					Schedule struct {
						Events struct {
							Edges []struct{ Node map[string]any }
						}
					}
				}
				nodes[2].Query(t, `query($id: ID!) { schedule(id: $id) { events(first: 100) { edges { node { kind slot message node createdAt } } } } }`, map[string]any{"id": id}, &log)
				t.Fatalf("the schedule has not ended: %+v\nlog: %+v", out, log)
			}
			time.Sleep(100 * time.Millisecond)
		}
		require.Equal(t, 10, out.Schedule.Tasks.TotalCount)
		var slots []time.Time
		for _, e := range out.Schedule.Tasks.Edges {
			slots = append(slots, e.Node.ScheduleSlot.UTC())
			require.Equal(t, id, e.Node.Schedule.ID)
		}
		sort.Slice(slots, func(i, j int) bool { return slots[i].Before(slots[j]) })
		for i, s := range slots {
			require.Equal(t, start.Add(time.Duration(i)*time.Second), s, "slot %d", i)
		}
		// The log line of a firing is written just after its task.
		count := map[string]int{}
		for deadline := time.Now().Add(10 * time.Second); ; {
			var log struct {
				Schedule struct {
					Events struct {
						Edges []struct{ Node struct{ Kind string } }
					}
				}
			}
			nodes[2].Query(t, `query($id: ID!) { schedule(id: $id) { events(first: 100) { edges { node { kind } } } } }`, map[string]any{"id": id}, &log)
			count = map[string]int{}
			for _, e := range log.Schedule.Events.Edges {
				count[e.Node.Kind]++
			}
			if count["FIRED"] >= 10 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		// Every node leads on SQLite: a pass that read the schedule before
		// another node moved it on fires nothing and logs nothing.
		require.Equal(t, map[string]int{"FIRED": 10, "ENDED": 1}, count)
	})
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

// TestMisfireAfterANodeWasDown: a schedule fires every second on a node;
// the node stops; more than five slots pass with no node up; a new node
// on the same database catches up by the schedule's misfire policy —
// SKIP: no task for the missed slots, one MISFIRED line for them, and
// firing goes on from the next slot; RUN_ONCE: one task for them all (as
// their last slot), then firing goes on. (Slots found less than the
// misfire threshold late, 1 s here, are fired late as usual.)
func TestMisfireAfterANodeWasDown(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"SKIP", "RUN_ONCE"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
				dsn := d.DSN(t)
				opts := app.Options{Scheduler: schedule.SchedulerConfig{MisfireThreshold: time.Second}}
				first := apptest.Start(t, dsn, opts)
				id := createSchedule(t, first, map[string]any{
					"name": "every second", "cron": "* * * * * *", "misfirePolicy": policy, "overlapPolicy": "ALLOW",
					"task": map[string]any{"type": "noop"},
				})
				read := func(s *apptest.Server) scheduleLog {
					var l scheduleLog
					s.Query(t, scheduleLogQuery, map[string]any{"id": id}, &l)
					return l
				}
				// It fires a couple of slots, then its node stops.
				for deadline := time.Now().Add(30 * time.Second); len(read(first).Schedule.Tasks.Edges) < 2; {
					require.True(t, time.Now().Before(deadline), "the first node fired nothing")
					time.Sleep(100 * time.Millisecond)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				stopped := time.Now()
				require.NoError(t, first.App.Shutdown(ctx))
				// No node for seven seconds: the six whole seconds after
				// the stop are five or more slots, each found more than
				// the threshold late.
				time.Sleep(time.Until(stopped.Add(7 * time.Second)))

				second := apptest.Start(t, dsn, opts)
				var l scheduleLog
				var missed []int
				for deadline := time.Now().Add(60 * time.Second); ; {
					l = read(second)
					missed = nil
					for i, e := range l.Schedule.Events.Edges {
						if e.Node.Kind == "MISFIRED" {
							missed = append(missed, i)
						}
					}
					fired := 0
					for _, e := range l.Schedule.Events.Edges {
						if e.Node.Kind == "FIRED" && e.Node.Node == second.App.Node {
							fired++
						}
					}
					if len(missed) > 0 && fired >= 3 {
						break
					}
					require.True(t, time.Now().Before(deadline), "the second node has not caught up: %+v", l)
					time.Sleep(100 * time.Millisecond)
				}
				require.Len(t, missed, 1, "one MISFIRED line for the slots missed while no node ran: %+v", l.Schedule.Events)
				miss := l.Schedule.Events.Edges[missed[0]].Node
				require.Equal(t, second.App.Node, miss.Node)
				require.GreaterOrEqual(t, miss.Missed, 5, "the node was down for five slots or more")

				// The slots each node fired.
				byNode := map[time.Time]string{}
				for _, e := range l.Schedule.Events.Edges {
					if e.Node.Kind == "FIRED" {
						byNode[e.Node.Slot.UTC()] = e.Node.Node
					}
				}
				slots := l.slots(t)
				var before, after []time.Time
				for _, s := range slots {
					switch byNode[s] {
					case first.App.Node:
						before = append(before, s)
					case second.App.Node:
						after = append(after, s)
					default:
						t.Fatalf("slot %s: no FIRED line of either node", s)
					}
				}
				require.NotEmpty(t, before)
				last := before[len(before)-1]
				firstMissed := last.Add(time.Second)
				// The misses start right after the last slot fired — or at
				// it, when the stopping node created that slot's task but
				// stopped before it moved the schedule on: the next node
				// then finds that slot among the missed ones, taken, and
				// counts it out (scheduler.commit).
				require.Contains(t, []time.Time{firstMissed, last}, miss.Slot.UTC(), "the misses start right after the last slot fired")
				lastMissed := firstMissed.Add(time.Duration(miss.Missed-1) * time.Second)
				var want []time.Time
				if policy == "RUN_ONCE" {
					want = append(want, lastMissed) // one task for all of them
				}
				for s := lastMissed.Add(time.Second); !s.After(after[len(after)-1]); s = s.Add(time.Second) {
					want = append(want, s) // then every slot, from the next one
				}
				require.Equal(t, want, after, "the second node's tasks (missed %s to %s)", firstMissed, lastMissed)
				for _, s := range before[1:] {
					require.True(t, s.Before(firstMissed))
				}
			})
		})
	}
}
