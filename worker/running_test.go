package worker

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// runningExecution makes an execution of instance id and type typ, and the
// context its cancel ends.
func runningExecution(id int, typ string) (*execution, context.Context) {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &execution{c: claimed(id, typ), cancel: cancel, done: make(chan struct{})}, ctx
}

func TestRunningSetKeepsExecutionsByInstanceTaskAndType(t *testing.T) {
	t.Parallel()
	r := newRunningSet()
	a, actx := runningExecution(1, "import")
	b, _ := runningExecution(2, "import")
	c, cctx := runningExecution(3, "export")
	r.add(a)
	r.add(b)
	r.add(c)
	require.Equal(t, 3, r.count())
	total, perType := r.usage()
	require.Equal(t, 3, total)
	require.Equal(t, map[string]int{"import": 2, "export": 1}, perType)
	perType["import"] = 99
	_, again := r.usage()
	require.Equal(t, 2, again["import"], "usage returns a copy")

	require.Same(t, a, r.instance(1))
	require.Same(t, c, r.task(1003))
	require.Nil(t, r.instance(4))
	require.Nil(t, r.task(4))

	r.cancel(1, errLost)
	require.ErrorIs(t, context.Cause(actx), errLost)
	r.cancel(4, errLost) // nobody runs it: nothing happens

	r.task(1003).requestCancel("asked by alice")
	require.ErrorIs(t, context.Cause(cctx), errCancelRequested)
	abandoned, reason := c.ending()
	require.False(t, abandoned)
	require.Equal(t, "asked by alice", reason)

	require.True(t, r.remove(a))
	require.False(t, r.remove(a), "removed once")
	total, perType = r.usage()
	require.Equal(t, 2, total)
	require.Equal(t, map[string]int{"import": 1, "export": 1}, perType)
	require.Nil(t, r.instance(1))
	require.Nil(t, r.task(1001))
}

func TestRunningSetSnapshotLeavesOutAbandonedExecutions(t *testing.T) {
	t.Parallel()
	r := newRunningSet()
	a, _ := runningExecution(1, "noop")
	b, _ := runningExecution(2, "noop")
	r.add(a)
	r.add(b)
	require.ElementsMatch(t, []*execution{a, b}, r.snapshot())

	left := r.abandonAll()
	require.ElementsMatch(t, []*execution{a, b}, left)
	require.Empty(t, r.snapshot(), "nothing of an abandoned execution is to be written")
	require.Equal(t, 2, r.count(), "they run until their handlers return")
	abandoned, _ := a.ending()
	require.True(t, abandoned)
}

// TestRunningSetUnderConcurrency runs what the pool's goroutines do at
// once — handlers added and removed, the heartbeat loop's snapshots and
// cancels, the event loop's cancels by task, the flusher's cancels of lost
// executions, capacity reads — for -race to check, and checks that the
// set ends empty and every cancel reached its execution.
func TestRunningSetUnderConcurrency(t *testing.T) {
	t.Parallel()
	const workers, each = 8, 200
	r := newRunningSet()
	types := []string{"a", "b", "c"}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for i := range 3 {
		readers.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				id := n%(workers*each) + 1
				switch i {
				case 0: // the heartbeat loop
					for _, ex := range r.snapshot() {
						_ = ex.c.Token()
					}
					r.cancel(id, errLost)
				case 1: // the event loop
					if ex := r.task(id + 1000); ex != nil {
						ex.requestCancel("by events")
					}
				case 2: // the fetch loop
					total, perType := r.usage()
					sum := 0
					for _, typ := range types {
						if perType[typ] < 0 {
							t.Errorf("type %s: %d running", typ, perType[typ])
						}
						sum += perType[typ]
					}
					if sum != total {
						t.Errorf("%d running, %d by type", total, sum)
					}
					_ = r.count()
				}
			}
		})
	}
	var handlers sync.WaitGroup
	for w := range workers {
		handlers.Go(func() {
			for i := range each {
				id := w*each + i + 1
				ex, ctx := runningExecution(id, types[id%len(types)])
				r.add(ex)
				r.cancel(id, errStalled)
				if cause := context.Cause(ctx); cause == nil {
					t.Errorf("instance %d: cancel did not reach its execution", id)
				}
				_, _ = ex.ending()
				if !r.remove(ex) {
					t.Errorf("instance %d: not removed", id)
				}
			}
		})
	}
	handlers.Wait()
	close(stop)
	readers.Wait()
	require.Zero(t, r.count())
	total, perType := r.usage()
	require.Zero(t, total)
	require.Empty(t, perType, "types with nothing running are forgotten")
}
