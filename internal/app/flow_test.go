package app_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/flowstart"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/flow"
	"github.com/taskgraph/taskgraph/internal/tasktype"
	"github.com/taskgraph/taskgraph/worker"
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
func createPaced(t testing.TB, s *apptest.Server, n, sleepMs int) []int {
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
func waitAllSucceeded(t testing.TB, s *apptest.Server, n int, within time.Duration) {
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

// TestCapHandOff: a slot a finishing execution frees under a type's cap
// is taken at once by the next waiting task, on the same node or another
// (through the change feed and the relay), not at the next poll: with
// polls an hour apart, three tasks at a cap of 1 all run, one after the
// other. (How long a hand-off takes is BenchmarkCapHandOff's.)
func TestCapHandOff(t *testing.T) {
	t.Parallel()
	hourly := app.Options{Pool: worker.Config{PollInterval: time.Hour}}
	t.Run("OnOneNode", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
			rec := &runs{}
			opts := hourly
			opts.Register = rec.register
			a := apptest.Start(t, d.DSN(t), opts)
			_, err := a.App.Flow.Set(local, "paced", flow.Limits{MaxRunning: ptr(1)})
			require.NoError(t, err)
			createPaced(t, a, 3, 100)
			waitAllSucceeded(t, a, 3, 60*time.Second)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			require.Equal(t, 1, maxOverlap(rec.spans), "one at a time")
		})
	})
	t.Run("FromOneNodeToAnother", func(t *testing.T) {
		t.Parallel()
		dsn := dbtest.PostgresOnly(t)
		rec := &runs{}
		opts := hourly
		opts.Register = rec.register
		a := apptest.Start(t, dsn, opts)
		_, err := a.App.Flow.Set(local, "paced", flow.Limits{MaxRunning: ptr(1)})
		require.NoError(t, err)
		// A runs the first task and then claims nothing more; B, started
		// once the first runs, must take the next ones, and only A's end
		// of the first can wake it (B's own claims find the cap full).
		first := createPaced(t, a, 1, 3000)[0]
		require.Eventually(t, func() bool {
			tk, err := a.App.Store.Client().Task.Get(local, first)
			return err == nil && tk.Status == lifecycle.Executing
		}, 30*time.Second, 10*time.Millisecond)
		a.App.Pool.StopClaiming()
		b := apptest.Start(t, dsn, opts)
		createPaced(t, a, 2, 50)
		waitAllSucceeded(t, a, 3, 60*time.Second)
		insts, err := a.App.Store.Client().TaskInstance.Query().Where(taskinstance.TaskType("paced")).All(local)
		require.NoError(t, err)
		byWorker := map[string]int{}
		for _, in := range insts {
			byWorker[in.WorkerID]++
		}
		require.Equal(t, map[string]int{a.App.Pool.ID(): 1, b.App.Pool.ID(): 2}, byWorker)
	})
}

// TestResumeWakesWorkers: a change of a flow control that releases waiting
// tasks without changing any of them (here a paused type resumed) makes
// the worker pools look for work at once, this node's and, through the
// relay, the others', not at their next poll: with polls an hour apart,
// the paused type's tasks all run after the resume.
func TestResumeWakesWorkers(t *testing.T) {
	t.Parallel()
	hourly := app.Options{Pool: worker.Config{PollInterval: time.Hour}}
	t.Run("OnOneNode", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
			opts := hourly
			opts.Register = (&runs{}).register
			a := apptest.Start(t, d.DSN(t), opts)
			_, err := a.App.Flow.Pause(local, "paced", nil)
			require.NoError(t, err)
			createPaced(t, a, 3, 0)
			_, err = a.App.Flow.Resume(local, "paced")
			require.NoError(t, err)
			waitAllSucceeded(t, a, 3, 60*time.Second)
		})
	})
	t.Run("FromOneNodeToAnother", func(t *testing.T) {
		t.Parallel()
		dsn := dbtest.PostgresOnly(t)
		opts := hourly
		opts.Register = (&runs{}).register
		a := apptest.Start(t, dsn, opts)
		a.App.Pool.StopClaiming()
		b := apptest.Start(t, dsn, opts)
		_, err := a.App.Flow.Pause(local, "paced", nil)
		require.NoError(t, err)
		// Their creation wakes B, whose claim finds the type paused; only
		// A's resume can wake it again.
		createPaced(t, a, 3, 0)
		_, err = a.App.Flow.Resume(local, "paced")
		require.NoError(t, err)
		waitAllSucceeded(t, a, 3, 60*time.Second)
		insts, err := a.App.Store.Client().TaskInstance.Query().Where(taskinstance.TaskType("paced")).All(local)
		require.NoError(t, err)
		for _, in := range insts {
			require.Equal(t, b.App.Pool.ID(), in.WorkerID)
		}
	})
}
