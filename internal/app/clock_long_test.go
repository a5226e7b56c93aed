//go:build long

package app_test

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/schedule"
	"github.com/taskgraph/taskgraph/worker"
)

// skewed is a wall clock off by d.
func skewed(d time.Duration) func() time.Time { return func() time.Time { return time.Now().Add(d) } }

// TestOneClockForTheCluster: two nodes on one PostgreSQL, one with its wall
// clock two minutes ahead and one two minutes behind (the database's clock
// is this machine's). Whichever leads the watchdog and the scheduler, no
// execution is timed out while it heartbeats (the lease is 3 s, far less
// than the skew), a schedule fires each slot once, on its slot by the
// database's clock and never early, with no misfire; and each node shows
// its skew on /readyz.
func TestOneClockForTheCluster(t *testing.T) {
	t.Parallel()
	for _, leads := range []time.Duration{2 * time.Minute, -2 * time.Minute} {
		t.Run(fmt.Sprintf("Leader%+.0fs", leads.Seconds()), func(t *testing.T) {
			t.Parallel()
			dsn := dbtest.PostgresOnly(t)
			start := func(skew time.Duration, configure ...func(*app.Config)) *apptest.Server {
				return apptest.Start(t, dsn, app.Options{
					WallClock: skewed(skew),
					Pool:      worker.Config{HeartbeatInterval: 200 * time.Millisecond},
					Watchdog:  worker.WatchdogConfig{Interval: 100 * time.Millisecond, HeartbeatTimeout: 3 * time.Second},
					Scheduler: schedule.SchedulerConfig{MisfireThreshold: 30 * time.Second},
				}, append(configure, func(c *app.Config) { c.NodeRefresh = 200 * time.Millisecond })...)
			}
			leader := start(leads)
			apptest.Eventually(t, 30*time.Second, func() (bool, string) {
				return leader.App.Leader.Leading() && leader.App.SchedulerLeader.Leading(), "the first node leads the watchdog and the scheduler"
			})
			other := start(-leads, func(c *app.Config) { c.BlobURL = leader.App.Artifacts.Location() })

			// Each node sees its skew and says so (still ready).
			for _, s := range []*apptest.Server{leader, other} {
				apptest.Eventually(t, 30*time.Second, func() (bool, string) {
					status, body := readyz(t, s)
					return status == http.StatusOK && containsAll(body, "ready\n", "warning: clock skew"), body
				})
			}

			// And on the Nodes page: each node's offset undoes its skew.
			apptest.Eventually(t, 30*time.Second, func() (bool, string) {
				var out struct {
					ClusterNodes []struct {
						ID            string
						ClockOffsetMs int
						ClockSkewed   bool
					}
				}
				leader.Query(t, `{ clusterNodes { id clockOffsetMs clockSkewed } }`, nil, &out)
				want := map[string]time.Duration{leader.App.Node: -leads, other.App.Node: leads}
				seen := 0
				for _, n := range out.ClusterNodes {
					if skew, ok := want[n.ID]; ok && n.ClockSkewed && (time.Duration(n.ClockOffsetMs)*time.Millisecond-skew).Abs() < 5*time.Second {
						seen++
					}
				}
				return seen == 2, fmt.Sprintf("%+v", out)
			})

			// Executions on both nodes outlive the lease many times over.
			ids := map[string]bool{}
			for i := range 20 {
				var out struct{ CreateTask struct{ ID string } }
				s := []*apptest.Server{leader, other}[i%2]
				s.Query(t, `mutation { createTask(input: {type: "noop", title: "long", input: {sleepMs: 8000}}) { id } }`, nil, &out)
				ids[out.CreateTask.ID] = true
			}
			// A schedule every second, five slots, by the database's clock.
			first := time.Now().UTC().Truncate(time.Second).Add(3 * time.Second)
			id := createSchedule(t, other, map[string]any{
				"name": "five ticks", "cron": "* * * * * *",
				"startAt": first.Format(time.RFC3339), "endAt": first.Add(4 * time.Second).Format(time.RFC3339),
				"overlapPolicy": "ALLOW", "task": map[string]any{"type": "noop", "title": "tick"},
			})
			for id := range ids {
				done := waitTaskFor(t, leader, id, 2*time.Minute)
				require.Equal(t, "SUCCESS", done.Status, "task %s: %s %+v", id, done.LastError, done.Instances)
				require.Len(t, done.Instances, 1, "task %s ran once, never timed out: %+v", id, done.Instances)
			}
			var out struct {
				Schedule struct {
					NextFireAt *string
					Tasks      struct {
						TotalCount int
						Edges      []struct {
							Node struct {
								ScheduleSlot time.Time
								CreatedAt    time.Time
							}
						}
					}
					Events struct {
						Edges []struct{ Node struct{ Kind string } }
					}
				}
			}
			apptest.Eventually(t, time.Minute, func() (bool, string) {
				leader.Query(t, `query($id: ID!) { schedule(id: $id) { nextFireAt tasks(first: 100) { totalCount edges { node { scheduleSlot createdAt } } } events(first: 100) { edges { node { kind } } } } }`, map[string]any{"id": id}, &out)
				return out.Schedule.NextFireAt == nil, fmt.Sprintf("%+v", out)
			})
			require.Equal(t, 5, out.Schedule.Tasks.TotalCount)
			var slots []time.Time
			for _, e := range out.Schedule.Tasks.Edges {
				slots = append(slots, e.Node.ScheduleSlot.UTC())
				require.False(t, e.Node.CreatedAt.Before(e.Node.ScheduleSlot), "slot %s fired early, at %s", e.Node.ScheduleSlot, e.Node.CreatedAt)
			}
			sort.Slice(slots, func(i, j int) bool { return slots[i].Before(slots[j]) })
			for i, s := range slots {
				require.Equal(t, first.Add(time.Duration(i)*time.Second), s, "slot %d", i)
			}
			for _, e := range out.Schedule.Events.Edges {
				require.NotEqual(t, "MISFIRED", e.Node.Kind)
			}
		})
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// waitTaskFor is waitTask with a deadline of its own.
func waitTaskFor(t *testing.T, s *apptest.Server, id string, patience time.Duration) fileTask {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		var out struct{ Task fileTask }
		s.Query(t, `query($id: ID!) { task(id: $id) { id status resultStatus lastError result instances { workerID errorKind lastError } } }`, map[string]any{"id": id}, &out)
		switch out.Task.Status {
		case "SUCCESS", "FAILED", "CANCELLED":
			return out.Task
		}
		require.True(t, time.Now().Before(deadline), "task %s still %s", id, out.Task.Status)
		time.Sleep(50 * time.Millisecond)
	}
}
