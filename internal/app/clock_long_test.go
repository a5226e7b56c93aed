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

// TestADeadNodeIsRecoveredWithinItsLease: two nodes on one PostgreSQL, one
// with its wall clock two minutes ahead and one two minutes behind. The
// execution runs on one of them, which then stops sending heartbeats (its
// heartbeat interval is an hour: its last beat is its claim, as if it had
// been killed right after it); the other, which runs no handler, leads the
// watchdog. By the times the database recorded, the execution is recovered
// after its lease (3 s) and not before, and within a scan or a few of it,
// not two minutes early or late as judging a node's clock by another's
// would make it; and every one of those times is the database's own.
func TestADeadNodeIsRecoveredWithinItsLease(t *testing.T) {
	t.Parallel()
	const lease = 3 * time.Second
	for _, leads := range []time.Duration{2 * time.Minute, -2 * time.Minute} {
		t.Run(fmt.Sprintf("Leader%+.0fs", leads.Seconds()), func(t *testing.T) {
			t.Parallel()
			dsn := dbtest.PostgresOnly(t)
			start := func(skew, heartbeat time.Duration, configure ...func(*app.Config)) *apptest.Server {
				return apptest.Start(t, dsn, app.Options{
					WallClock: skewed(skew),
					Pool:      worker.Config{HeartbeatInterval: heartbeat},
					Watchdog:  worker.WatchdogConfig{Interval: 100 * time.Millisecond, HeartbeatTimeout: lease},
				}, append(configure, func(c *app.Config) { c.NodeRefresh = 200 * time.Millisecond })...)
			}
			// The leader runs no handler: the execution is the other node's.
			leader := start(leads, 200*time.Millisecond, func(c *app.Config) { c.Roles = []app.Role{app.RoleAPI, app.RoleWatchdog} })
			apptest.Eventually(t, 30*time.Second, func() (bool, string) {
				return leader.App.Leader.Leading(), "the first node leads the watchdog"
			})
			dead := start(-leads, time.Hour, func(c *app.Config) { c.BlobURL = leader.App.Artifacts.Location() })

			var created struct{ CreateTask struct{ ID string } }
			leader.Query(t, `mutation { createTask(input: {type: "noop", title: "dies", maxAttempts: 1, timeoutSeconds: 3600, input: {sleepMs: 600000}}) { id } }`, nil, &created)
			id := created.CreateTask.ID
			done := waitTaskFor(t, leader, id, 2*time.Minute)
			require.Equal(t, "FAILED", done.Status, "task %s: %+v", id, done.Instances)

			var out struct {
				Task struct {
					Instances []struct {
						WorkerID, ErrorKind, LastError     string
						StartedAt, HeartbeatAt, FinishedAt *time.Time
					}
				}
			}
			leader.Query(t, `query($id: ID!) { task(id: $id) { instances { workerID errorKind lastError startedAt heartbeatAt finishedAt } } }`, map[string]any{"id": id}, &out)
			var dbNow time.Time
			require.NoError(t, leader.App.Store.DB().QueryRowContext(t.Context(), "SELECT clock_timestamp()").Scan(&dbNow))

			require.Len(t, out.Task.Instances, 1, "%+v", out.Task.Instances)
			in := out.Task.Instances[0]
			require.Equal(t, dead.App.Node, in.WorkerID, "the execution ran on the node that died")
			require.Equal(t, "TIMEOUT", in.ErrorKind)
			require.Contains(t, in.LastError, "stopped sending heartbeats")
			require.NotNil(t, in.StartedAt)
			require.NotNil(t, in.HeartbeatAt)
			require.NotNil(t, in.FinishedAt)
			// The last beat (stamped by the dead node) and the recovery
			// (stamped by the leader) are both the database's time: before
			// its now, and not minutes off it.
			for name, at := range map[string]time.Time{"started": *in.StartedAt, "last heartbeat": *in.HeartbeatAt, "recovered": *in.FinishedAt} {
				require.False(t, at.After(dbNow), "%s at %s, after the database's now %s", name, at, dbNow)
				require.Less(t, dbNow.Sub(at), time.Minute, "%s at %s, the database's now %s", name, at, dbNow)
			}
			waited := in.FinishedAt.Sub(*in.HeartbeatAt)
			require.GreaterOrEqual(t, waited, lease, "recovered %s after its last heartbeat, within its lease", waited)
			require.Less(t, waited, 30*time.Second, "recovered %s after its last heartbeat (lease %s)", waited, lease)
		})
	}
}
