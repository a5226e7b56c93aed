//go:build long

package app_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/flow"
)

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

// TestRateLimitAcrossNodes: 5 starts a second, two nodes, 70 tasks: the
// limit holds — never more than 5 admission stamps in any second (exactly:
// the gate counts them), never more than 6 actual starts (the claims'
// times) — and every task runs. How much of the rate is used is a figure,
// not a check here (it depends on how fast a loaded machine claims):
// BenchmarkRateUse measures it, and this test logs its starts in the first
// 10 s. A start is stamped with the time its slot in the window freed, not
// with the claim that took it a little later (flow/rate.go), and the gate
// tells the pool when the next slot frees (Store.NextAdmission), so a
// saturated type runs at its rate, not a poll interval under it.
//
// Its two databases run one after the other, not beside the package's
// other tests: four nodes under the race detector on two cores.
func TestRateLimitAcrossNodes(t *testing.T) {
	eachInTurn(t, func(t *testing.T, d dbtest.Driver) {
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
		t.Logf("%d starts in the first 10 s (50 at the full rate); by node %v", n, workers)
		require.LessOrEqual(t, n, 51, "at most 5 a second, give or take one, over the first 10 s")
	})
}

// eachInTurn runs fn on each database, one after the other.
func eachInTurn(t *testing.T, fn func(t *testing.T, d dbtest.Driver)) {
	t.Helper()
	for _, d := range dbtest.Drivers() {
		t.Run(d.Name, func(t *testing.T) { fn(t, d) })
	}
}
