package app_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"taskgraph/app"
	"taskgraph/app/apptest"
	"taskgraph/auth"
	"taskgraph/engine"
	"taskgraph/ent"
	"taskgraph/ent/flowstart"
	"taskgraph/ent/taskinstance"
	"taskgraph/flow"
	"taskgraph/internal/dbtest"
	"taskgraph/lifecycle"
	"taskgraph/tasktype"
)

// runs records, for every execution of the "paced" task type, when its
// handler started and ended: an execution's handler runs inside the time
// its instance is EXECUTING, so handlers that overlap prove instances that
// were EXECUTING together.
type runs struct {
	mu    sync.Mutex
	spans [][2]time.Time
}

type pacedInput struct {
	SleepMs int `json:"sleepMs,omitempty"`
}

func (r *runs) register(reg *tasktype.Registry) {
	tasktype.Register(reg, "paced", func(ctx context.Context, job *tasktype.Job, in pacedInput) error {
		start := time.Now()
		select {
		case <-time.After(time.Duration(in.SleepMs) * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		r.mu.Lock()
		r.spans = append(r.spans, [2]time.Time{start, time.Now()})
		r.mu.Unlock()
		return nil
	})
}

// maxOverlap is the most spans open at one instant.
func maxOverlap(spans [][2]time.Time) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, s := range spans {
		edges = append(edges, edge{s[0], 1}, edge{s[1], -1})
	}
	// Ends before starts at the same instant: [start, end).
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	open, most := 0, 0
	for _, e := range edges {
		open += e.delta
		most = max(most, open)
	}
	return most
}

var local = auth.NewContext(context.Background(), auth.Local)

// createPaced creates n tasks of the paced type through one node's engine.
func createPaced(t *testing.T, s *apptest.Server, n, sleepMs int) []int {
	t.Helper()
	ids := make([]int, n)
	for i := range ids {
		tk, err := s.App.Engine.Create(local, engine.CreateRequest{Type: "paced", Input: []byte(`{"sleepMs":` + itoa(sleepMs) + `}`)})
		require.NoError(t, err)
		ids[i] = tk.ID
	}
	return ids
}

// waitAllSucceeded waits until every paced task succeeded.
func waitAllSucceeded(t *testing.T, s *apptest.Server, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		stats, err := s.App.Engine.Stats(local)
		require.NoError(t, err)
		ok := 0
		for _, c := range stats {
			if c.Type == "paced" && c.Status == lifecycle.Success {
				ok = c.Count
			}
		}
		if ok == n {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d of %d paced tasks succeeded", ok, n)
		time.Sleep(50 * time.Millisecond)
	}
}

// startNodes starts the two nodes of a flow test on one database. On
// SQLite they share its file as two processes would: they take turns at
// writing (store/writers.go) and a poll that finds nothing to claim only
// reads, so neither starves the other of the write lock.
func startNodes(t *testing.T, d dbtest.Driver, opts app.Options) []*apptest.Server {
	t.Helper()
	dsn := d.DSN(t)
	return []*apptest.Server{apptest.Start(t, dsn, opts), apptest.Start(t, dsn, opts)}
}

// TestConcurrencyCapAcrossNodes: two nodes, a cap of 2 on a type, 100
// tasks: never more than 2 run at once, across both.
func TestConcurrencyCapAcrossNodes(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		rec := &runs{}
		nodes := startNodes(t, d, app.Options{Register: rec.register})
		a, b := nodes[0], nodes[len(nodes)-1]
		_, err := a.App.Flow.Set(local, "paced", flow.Limits{MaxRunning: ptr(2)})
		require.NoError(t, err)
		createPaced(t, a, 100, 20)
		waitAllSucceeded(t, b, 100, 120*time.Second)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		require.Len(t, rec.spans, 100)
		require.Equal(t, 2, maxOverlap(rec.spans), "at most the cap, and the cap was used")
		// Both nodes ran some: the cap is the cluster's, not one node's
		// (on SQLite too: two processes on one file).
		workers := map[string]bool{}
		insts, err := a.App.Store.Client().TaskInstance.Query().Where(taskinstance.TaskType("paced")).All(local)
		require.NoError(t, err)
		for _, in := range insts {
			workers[in.WorkerID] = true
		}
		require.Len(t, workers, len(nodes), "every node claimed")
	})
}

// TestRateLimitAcrossNodes: 5 starts a second, two nodes, for 10 s: the
// limit holds — never more than 5 admission stamps in any second (exactly:
// the gate counts them), never more than 6 actual starts (the claims'
// times) — and is used: 50 in the first 10 s, give or take one. A start is
// stamped with the time its slot in the window freed, not with the claim
// that took it a little later (flow/rate.go), so the claims' reaction
// times are not lost at every second however slow the node; and the gate
// tells the pool when the next slot frees (Store.NextAdmission), so a
// saturated type runs at its rate, not a poll interval under it.
//
// Not parallel with the package's other tests (its two databases run
// together): a claim may make up at most P/N (200 ms) of its lateness, and
// four nodes under the race detector next to the package's hundred other
// tests on a two-core machine claim later than that now and then.
func TestRateLimitAcrossNodes(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		rec := &runs{}
		nodes := startNodes(t, d, app.Options{Register: rec.register})
		a := nodes[0]
		_, err := a.App.Flow.Set(local, "paced", flow.Limits{RateLimit: ptr(5), RatePeriodSeconds: ptr(1)})
		require.NoError(t, err)
		// Every task waits before the first may start: the rate, not the
		// pace of creation, decides.
		_, err = a.App.Flow.Pause(local, "paced", nil)
		require.NoError(t, err)
		createPaced(t, a, 70, 0)
		// The stamps live in flow_starts for two periods: read them as
		// they come.
		stamps := watchStamps(t, a)
		_, err = a.App.Flow.Resume(local, "paced")
		require.NoError(t, err)
		waitAllSucceeded(t, a, 70, 60*time.Second)
		insts, err := a.App.Store.Client().TaskInstance.Query().
			Where(taskinstance.TaskType("paced")).
			Order(ent.Asc(taskinstance.FieldStartedAt)).
			All(local)
		require.NoError(t, err)
		var starts []time.Time
		workers := map[string]int{}
		for _, in := range insts {
			starts = append(starts, *in.StartedAt)
			workers[in.WorkerID]++
		}
		admitted := stamps()
		require.Len(t, admitted, 70, "every start's stamp was read")
		require.LessOrEqual(t, mostInASecond(admitted), 5, "stamps: at most 5 in any second")
		require.LessOrEqual(t, mostInASecond(starts), 6, "actual starts: at most 6 in any second")
		first := starts[0]
		n := 0
		for _, s := range starts {
			if s.Sub(first) < 10*time.Second {
				n++
			}
		}
		t.Logf("%d starts in the first 10 s; by node %v", n, workers)

		want := 49
		if raceEnabled {
			// Under the race detector with the rest of the suite beside
			// it (CI), PostgreSQL's claims too came more than P/N late
			// now and then: 48 of 50 measured.
			want = 45
		}
		if d.Name == "SQLite" && raceEnabled {
			// Two processes' writes alternate on one file, each several
			// times slower under the race detector: with the rest of the
			// suite running beside it (CI), claims came more than P/N
			// late and 46 of 50 were measured (alone, 50). The bound
			// leaves room for a busier machine; the ceilings above are
			// exact whatever the load.
			want = 40
		}
		require.GreaterOrEqual(t, n, want, "5 a second, give or take one, over the first 10 s")
		require.LessOrEqual(t, n, 51, "5 a second, give or take one, over the first 10 s")
	})
}

// mostInASecond is the most times in any second [t, t+1s).
func mostInASecond(times []time.Time) int {
	ts := append([]time.Time(nil), times...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	most := 0
	for i := range ts {
		j := i
		for j < len(ts) && ts[j].Sub(ts[i]) < time.Second {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// watchStamps reads the paced type's flow_starts rows every 50 ms, until
// the returned function is called, which returns every start's stamp
// seen. A row lives two periods after its claim (2 s here): a
// row is never missed unless a read is that late, and then the test's
// count of stamps fails, never a bound.
func watchStamps(t *testing.T, s *apptest.Server) func() []time.Time {
	t.Helper()
	seen := map[int]*ent.FlowStart{}
	stop, done := make(chan struct{}), make(chan struct{})
	read := func() {
		rows, err := s.App.Store.Client().FlowStart.Query().Where(flowstart.TaskType("paced")).All(auth.NewSystemContext(context.Background()))
		if err != nil {
			t.Errorf("read flow_starts: %v", err)
			return
		}
		for _, r := range rows {
			seen[r.ID] = r
		}
	}
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			read()
			select {
			case <-stop:
				read()
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	finish := func() []time.Time {
		once.Do(func() { close(stop); <-done })
		var out []time.Time
		for _, r := range seen {
			for range r.Count {
				out = append(out, *r.AdmittedAt)
			}
		}
		return out
	}
	t.Cleanup(func() { finish() })
	return finish
}

// TestPauseWithExpiry: a type paused for two seconds starts nothing
// before then, and everything after, by itself.
func TestPauseWithExpiry(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		rec := &runs{}
		s := apptest.Start(t, dsn, app.Options{Register: rec.register})
		until := time.Now().Add(4 * time.Second)
		_, err := s.App.Flow.Pause(local, "paced", &until)
		require.NoError(t, err)
		ids := createPaced(t, s, 5, 0)
		if time.Now().Before(until) {
			tk, err := s.App.Engine.Task(local, ids[0])
			require.NoError(t, err)
			w, err := s.App.Flow.WaitReason(local, tk)
			require.NoError(t, err)
			if time.Now().Before(until) {
				require.NotNil(t, w, "a paused type's task waits")
				require.Equal(t, flow.Paused, w.Kind)
			}
		}
		waitAllSucceeded(t, s, 5, 30*time.Second)
		insts, err := s.App.Store.Client().TaskInstance.Query().Where(taskinstance.TaskType("paced")).All(local)
		require.NoError(t, err)
		for _, in := range insts {
			require.False(t, in.StartedAt.Before(until.UTC().Truncate(time.Microsecond)), "started %s, paused until %s", in.StartedAt, until)
		}
	})
}
