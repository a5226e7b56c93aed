//go:build long

package reliability

import (
	"context"
	"database/sql"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/importtest"
	"github.com/taskgraph/taskgraph/internal/pgcluster"
)

// cluster is two nodes with every role on a throwaway PostgreSQL, each
// with an SSE and a websocket watcher of the tasks titled prefix.
type cluster struct {
	pg       *pgcluster.Cluster
	db       *sql.DB
	nodes    []*apptest.Server
	logs     []*syncBuffer
	watchers []*watcher
}

func startCluster(t *testing.T, prefix string) *cluster {
	t.Helper()
	c := &cluster{pg: pgcluster.Start(t)}
	var err error
	if c.db, err = sql.Open("postgres", c.pg.DSN); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.db.Close() })
	if _, err := c.db.Exec(recordTable); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// Two nodes, each with a data directory of its own, sharing their
	// files (as nodes on two machines share a bucket).
	files := "file://" + filepath.Join(t.TempDir(), "files")
	for range 2 {
		logs := &syncBuffer{}
		s := apptest.Start(t, c.pg.DSN, nodeOptions(c.db, logs), func(cfg *app.Config) { cfg.BlobURL = files })
		c.nodes, c.logs = append(c.nodes, s), append(c.logs, logs)
	}
	for i, s := range c.nodes {
		name := string(rune('A' + i))
		c.watchers = append(c.watchers,
			startWatcher(ctx, name+"/sse", s, true, prefix),
			startWatcher(ctx, name+"/ws", s, false, prefix))
	}
	// Registered after the nodes: runs before they shut down.
	t.Cleanup(func() { cancel(); stop(c.watchers) })
	waitStarted(t, c.watchers...)
	for _, s := range c.nodes {
		s.WaitSubscribers(t, 2)
	}
	return c
}

// finish waits for every task of the run to end, checks the run, and
// waits for every watcher to have seen every final state.
func (c *cluster) finish(t *testing.T, prefix string, total int) {
	t.Helper()
	cnt := counter{t, c.db}
	waitFor(t, "every task finished", 3*time.Minute, func() (bool, error) {
		n, err := cnt.try(`SELECT count(*) FROM tasks WHERE status NOT IN ('SUCCESS', 'FAILED', 'CANCELLED')`)
		return err == nil && n == 0, err
	})
	t.Log("every task finished")
	// Idle connections of the pool a kill or a restart broke would fail
	// the checks below once each: close them.
	c.db.SetMaxIdleConns(0)
	c.db.SetMaxIdleConns(2)
	checkRecordRun(t, c.db, prefix, total)
	final := finalStates(t, c.db, prefix)
	if len(final) != total {
		t.Fatalf("%d tasks in the run, want %d", len(final), total)
	}
	waitWatchers(t, c.watchers, final, time.Minute)
	for _, w := range c.watchers {
		w.mu.Lock()
		if w.resyncs > 0 {
			t.Errorf("watcher %s was told to resync %d times: the relay should have replayed what it missed", w.name, w.resyncs)
		}
		w.mu.Unlock()
	}
	for i, s := range c.nodes {
		st := s.App.Relay.Stats()
		t.Logf("node %d: %d resyncs (%d failed attempts, %d times clients told to resync); broker: %+v", i, st.Resyncs, st.ResyncFailures, st.ResyncsRequired, s.App.Broker.Stats())
	}
	for i, l := range c.logs {
		for _, bad := range []string{"internal error", "audit record not written", "subscriber fell behind"} {
			if n := l.count(bad); n > 0 {
				t.Errorf("node %d logged %q %d times", i, bad, n)
			}
		}
	}
}

// TestWatchersSurviveAPostgresRestart: two nodes run 1,500 short tasks,
// each watched (titles "e2-...") by an SSE and a websocket client on each
// node; PostgreSQL stops for five seconds in the middle. While it is down
// clients get UNAVAILABLE (uploads and downloads 503) and the nodes are
// not ready; afterwards every task ends SUCCESS once, nothing ran twice at
// the same time, and every watcher sees every task's final state, in
// order, without duplicates and without being told to resync.
func TestWatchersSurviveAPostgresRestart(t *testing.T) {
	t.Parallel()
	const prefix, total = "e2-", 1500
	c := startCluster(t, prefix)
	a := c.nodes[0]
	// Something to download during the outage, and tasks outside the
	// watchers' filter.
	local := auth.NewContext(context.Background(), auth.Local)
	file, err := a.App.Artifacts.Save(local, artifact.Meta{Owner: auth.Local.User, Kind: artifact.KindExport, Filename: "x.csv", ContentType: "text/csv"}, strings.NewReader("a\n1\n"))
	if err != nil {
		t.Fatal(err)
	}
	link := a.URL + a.App.Links.Sign(file, auth.Local).Path
	recordTasks(t, a, "other-", 20)
	recordTasks(t, a, prefix, total)

	cnt := counter{t, c.db}
	waitFor(t, "a quarter of the tasks done", 2*time.Minute, func() (bool, error) {
		n, err := cnt.try(`SELECT count(*) FROM tasks WHERE status = 'SUCCESS'`)
		return err == nil && n >= total/4, err
	})
	t.Log("stopping PostgreSQL")
	c.pg.Stop(t)
	// The outage lasts five seconds, whatever the checks below take.
	back := time.Now().Add(5 * time.Second)

	failed := 0
	for _, s := range c.nodes {
		for range 10 {
			for _, q := range []string{
				`{ tasks(first: 5) { totalCount } }`,
				`mutation { createTask(input: {type: "noop"}) { id } }`,
			} {
				r := s.Do(t, q, nil)
				if len(r.Errors) != 1 || r.Errors[0].Code() != "UNAVAILABLE" || r.Errors[0].Extensions["retryable"] != true {
					t.Fatalf("during the outage %s answered %+v, want UNAVAILABLE (retryable)", q, r.Errors)
				}
				failed++
			}
		}
		if status, _, err := get(s.URL + "/readyz"); err != nil || status != http.StatusServiceUnavailable {
			t.Errorf("/readyz during the outage: %d %v", status, err)
		}
	}
	if status, hdr, err := get(link); err != nil || status != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Errorf("a download during the outage: %d (Retry-After %q) %v", status, hdr.Get("Retry-After"), err)
	}
	if r, status := importtest.Upload(t, a, "c.csv", []byte("姓名,手机\n张三,13812345678\n"), "contacts", nil, ""); status != http.StatusServiceUnavailable {
		t.Errorf("an upload during the outage: %d %+v", status, r.Errors)
	}
	time.Sleep(time.Until(back))
	c.pg.Start(t)
	t.Log("PostgreSQL restarted")

	for _, s := range c.nodes {
		waitFor(t, "ready again", time.Minute, func() (bool, error) {
			status, err := readyz(s.URL)
			return status == http.StatusOK, err
		})
	}
	c.finish(t, prefix, total)
	for i, l := range c.logs {
		// Each outage is logged once, with a count, not per request.
		if n := l.count("msg=\"outage: "); n < 1 || n > 3 {
			t.Errorf("node %d logged %d outages for %d failed requests:\n%s", i, n, failed, grep(l.String(), "outage"))
		}
	}
}

// TestWatchersSurviveTerminatedBackends: while two nodes run 800 tasks,
// every PostgreSQL session of theirs (queries, listening connections, the
// leader's lock) is terminated, fifteen times, a few hundred milliseconds
// apart. Nothing is lost, nothing runs twice at once, every watcher sees
// every final state.
func TestWatchersSurviveTerminatedBackends(t *testing.T) {
	t.Parallel()
	const prefix, total = "kill-", 800
	c := startCluster(t, prefix)
	recordTasks(t, c.nodes[0], prefix, total)
	killed := 0
	for range 15 {
		killed += c.pg.TerminateBackends(t, "%")
		time.Sleep(300 * time.Millisecond) // the pace of the kills
	}
	if killed == 0 {
		t.Fatal("no session was terminated")
	}
	c.finish(t, prefix, total)
	resyncs := int64(0)
	for _, s := range c.nodes {
		resyncs += s.App.Relay.Stats().Resyncs
	}
	if resyncs == 0 {
		t.Error("no node resynced: the listening connections were never terminated")
	}
	t.Logf("%d sessions terminated; %d resyncs", killed, resyncs)
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
