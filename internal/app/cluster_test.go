package app_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/leader"
	"github.com/taskgraph/taskgraph/worker"
)

// apiOnly and workerOnly split a cluster in two nodes on one database.
func apiOnly(c *app.Config)    { c.Roles = []app.Role{app.RoleAPI} }
func workerOnly(c *app.Config) { c.Roles = []app.Role{app.RoleWorker, app.RoleWatchdog} }

// Slow pool: with polling and heartbeats an hour apart, only the relay can
// wake node B or bring it a cancel.
var relayOnly = app.Options{Pool: worker.Config{PollInterval: time.Hour, HeartbeatInterval: time.Hour}}

func createVia(t *testing.T, s *apptest.Server, in map[string]any) string {
	t.Helper()
	var out struct{ CreateTask struct{ ID string } }
	s.Query(t, `mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`, map[string]any{"in": in}, &out)
	return out.CreateTask.ID
}

func TestCluster(t *testing.T) {
	t.Parallel()
	t.Run("ASubscriberOnOneNodeSeesInOrderWhatAnotherNodeRuns", func(t *testing.T) {
		t.Parallel()
		dsn := dbtest.PostgresOnly(t)
		a := apptest.Start(t, dsn, app.Options{}, apiOnly)
		apptest.Start(t, dsn, relayOnly, workerOnly)
		ws := a.DialWS(t, nil)
		ws.Subscribe("1", `subscription { taskUpdated(where: {type: "noop"}) { id status version } }`, nil)
		a.WaitSubscribers(t, 1)
		var seen []string
		for range 5 {
			createVia(t, a, map[string]any{"type": "noop"})
		}
		last := map[string]int{}
		done := 0
		for done < 5 {
			tk := ws.NextTask()
			require.Greater(t, tk.Version, last[tk.ID], "versions of task %s in order", tk.ID)
			last[tk.ID] = tk.Version
			seen = append(seen, tk.ID+":"+tk.Status)
			if tk.Status == "SUCCESS" {
				done++
			}
		}
		for id := range last {
			require.Subset(t, seen, []string{id + ":PENDING", id + ":EXECUTING", id + ":SUCCESS"})
		}
	})
	t.Run("ACancelOnOneNodeStopsAHandlerOnAnother", func(t *testing.T) {
		t.Parallel()
		dsn := dbtest.PostgresOnly(t)
		a := apptest.Start(t, dsn, app.Options{}, apiOnly)
		apptest.Start(t, dsn, relayOnly, workerOnly)
		id := createVia(t, a, map[string]any{"type": "noop", "input": map[string]any{"sleepMs": 600000}})
		ws := a.DialWS(t, nil)
		ws.Subscribe("1", `subscription($id: ID!) { taskUpdated(id: $id) { id status cancelRequested version } }`, map[string]any{"id": id})
		for ws.NextTask().Status != "EXECUTING" {
		}
		var out struct{ CancelTask apptest.Task }
		a.Query(t, `mutation($id: ID!) { cancelTask(id: $id, reason: "from node A") { status cancelRequested } }`, map[string]any{"id": id}, &out)
		require.True(t, out.CancelTask.CancelRequested)
		for ws.NextTask().Status != "CANCELLED" {
		}
	})
	t.Run("EventsResumeAfterTheListeningConnectionIsKilled", func(t *testing.T) {
		t.Parallel()
		dsn := dbtest.PostgresOnly(t)
		a := apptest.Start(t, dsn, app.Options{}, apiOnly)
		b := apptest.Start(t, dsn, relayOnly, workerOnly)
		ws := a.DialWS(t, nil)
		ws.Subscribe("1", `subscription { taskUpdated(where: {type: "noop"}) { id status version } }`, nil)
		a.WaitSubscribers(t, 1)

		db, err := sql.Open("postgres", dsn)
		require.NoError(t, err)
		defer db.Close()
		res, err := db.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, "taskgraph-relay-"+a.App.Node)
		require.NoError(t, err)
		n, _ := res.RowsAffected()
		require.EqualValues(t, 1, n, "node A's listening connection")
		// Work done on node B while A may not be listening.
		tk, err := b.App.Engine.Create(auth.NewContext(context.Background(), auth.Local), engine.CreateRequest{Type: "noop"})
		require.NoError(t, err)
		b.App.Pool.Wake()
		for {
			got := ws.NextTask()
			if got.Status == "SUCCESS" && got.ID == itoa(tk.ID) {
				break
			}
		}
		deadline := time.Now().Add(20 * time.Second)
		for a.App.Relay.Stats().Resyncs == 0 {
			require.True(t, time.Now().Before(deadline), "node A never noticed it had lost its connection")
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("OneWatchdogLeadsAndAnotherTakesOverWhenItDies", func(t *testing.T) {
		t.Parallel()
		dsn := dbtest.PostgresOnly(t)
		ctx := context.Background()
		var dbs [2]*sql.DB
		var locks [2]*leader.Lock
		for i := range dbs {
			db, err := sql.Open("postgres", dsn)
			require.NoError(t, err)
			defer db.Close()
			dbs[i], locks[i] = db, leader.New(db, leader.WatchdogRole)
		}
		for range 20 {
			led := 0
			for _, l := range locks {
				ok, err := l.Lead(ctx)
				require.NoError(t, err)
				if ok {
					led++
				}
			}
			require.Equal(t, 1, led, "exactly one leads")
		}
		first := 0
		if locks[1].Leading() {
			first = 1
		}
		// The leader's process dies: PostgreSQL ends its session, and the
		// session's lock with it.
		res, err := dbs[1-first].ExecContext(ctx, `
SELECT pg_terminate_backend(l.pid) FROM pg_locks l,
	(SELECT ('x' || substr(md5(current_database() || '/' || current_schema() || '/' || $1), 1, 16))::bit(64)::bigint AS k) key
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
	AND l.classid::bigint = (key.k >> 32) & 4294967295 AND l.objid::bigint = key.k & 4294967295`, leader.WatchdogRole)
		require.NoError(t, err)
		n, _ := res.RowsAffected()
		require.EqualValues(t, 1, n, "the leader's session")
		deadline := time.Now().Add(20 * time.Second)
		for {
			ok, err := locks[1-first].Lead(ctx)
			require.NoError(t, err)
			if ok {
				break
			}
			require.True(t, time.Now().Before(deadline), "no takeover")
			time.Sleep(50 * time.Millisecond)
		}
		// A different deployment (another schema) elects its own leader.
		other, err := sql.Open("postgres", dbtest.PostgresOnly(t))
		require.NoError(t, err)
		defer other.Close()
		ok, err := leader.New(other, leader.WatchdogRole).Lead(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	})
	t.Run("MetricsAreExposed", func(t *testing.T) {
		t.Parallel()
		dsn := dbtest.PostgresOnly(t)
		s := apptest.Start(t, dsn, app.Options{})
		id := createVia(t, s, map[string]any{"type": "noop"})
		ws := s.DialWS(t, nil)
		ws.Subscribe("1", `subscription($id: ID!) { taskUpdated(id: $id) { id status } }`, map[string]any{"id": id})
		for ws.NextTask().Status != "SUCCESS" {
		}
		resp, err := http.Get(s.URL + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, want := range []string{
			`taskgraph_tasks{status="SUCCESS",type="noop"} 1`,
			`taskgraph_claims_total 1`,
			`taskgraph_executions_total{error_kind="",outcome="SUCCESS",type="noop"} 1`,
			`taskgraph_execution_duration_seconds_count{type="noop"} 1`,
			`taskgraph_subscribers 1`,
			`taskgraph_event_fanout_lag_seconds_count`,
			`taskgraph_watchdog_leader 1`,
			`taskgraph_relay_resyncs_total 0`,
		} {
			require.Contains(t, string(body), want)
		}
	})
}

func itoa(id int) string { b, _ := json.Marshal(id); return strings.Trim(string(b), `"`) }

// Retention is tested here, on both databases, through the assembled node.
func TestRetention(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		s := apptest.Start(t, d.DSN(t), app.Options{}, func(c *app.Config) { c.Retention = 24 * time.Hour })
		ctx := auth.NewContext(context.Background(), auth.Local)
		done, err := s.App.Engine.Create(ctx, engine.CreateRequest{Type: "noop"})
		require.NoError(t, err)
		waiting, err := s.App.Engine.Create(ctx, engine.CreateRequest{Type: "noop", RunAt: ptr(time.Now().Add(time.Hour))})
		require.NoError(t, err)
		deadline := time.Now().Add(20 * time.Second)
		for {
			tk, err := s.App.Store.TaskByID(ctx, done.ID)
			require.NoError(t, err)
			if tk.Status == lifecycle.Success {
				break
			}
			require.True(t, time.Now().Before(deadline))
			time.Sleep(10 * time.Millisecond)
		}
		res, err := s.App.Retention.Pass(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Purged, "nothing is old enough yet")
		n, err := s.App.Store.PurgeFinished(ctx, time.Now().Add(time.Minute), 10)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = s.App.Store.TaskByID(ctx, done.ID)
		require.Error(t, err, "the finished task is gone")
		left, err := s.App.Store.Client().TaskInstance.Query().Count(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, left, "with its instances; the waiting task's stays")
		_, err = s.App.Store.TaskByID(ctx, waiting.ID)
		require.NoError(t, err)
		var _ *ent.Task
	})
}

func ptr[T any](v T) *T { return &v }

// Notification channels are database-wide: a deployment in another schema
// of the same database must not hear this one (task ids collide).
func TestClusterIsolatedFromOtherSchemas(t *testing.T) {
	t.Parallel()
	mine, theirs := dbtest.PostgresOnly(t), dbtest.PostgresOnly(t)
	a := apptest.Start(t, mine, app.Options{}, apiOnly)
	other := apptest.Start(t, theirs, app.Options{})
	ws := a.DialWS(t, nil)
	ws.Subscribe("1", `subscription { taskUpdated { id status version } }`, nil)
	a.WaitSubscribers(t, 1)
	// The other deployment's task 1 runs to SUCCESS; ours is created after.
	id := createVia(t, other, map[string]any{"type": "noop"})
	require.Equal(t, "1", id)
	o := other.DialWS(t, nil)
	o.Subscribe("1", `subscription { taskUpdated(id: 1) { id status } }`, nil)
	for o.NextTask().Status != "SUCCESS" {
	}
	mineID := createVia(t, a, map[string]any{"type": "noop", "runAt": time.Now().Add(time.Hour).Format(time.RFC3339)})
	require.Equal(t, "1", mineID)
	got := ws.NextTask()
	require.Equal(t, "PENDING", got.Status, "the first change this subscriber sees is its own deployment's")
	require.Equal(t, 1, got.Version)
	require.Zero(t, a.App.Relay.Stats().Received, "nothing heard from the other schema")
}
