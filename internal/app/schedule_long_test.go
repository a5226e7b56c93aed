//go:build long

package app_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/schedule"
)

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
