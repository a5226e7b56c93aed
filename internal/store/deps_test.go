package store_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/store"
)

// diamond creates A -> (B, C) -> D in one call, with the given policy on
// every edge.
func diamond(t *testing.T, s *store.Store, policy string) (a, b, c, d *ent.Task) {
	t.Helper()
	steps := make([]store.NewTask, 4)
	for i, key := range []string{"a", "b", "c", "d"} {
		steps[i] = newTaskParams(taskOpts{})
		steps[i].Title = key
		steps[i].StepKey = &key
	}
	steps[1].Parents = []store.Parent{{Step: 0, Policy: policy}}
	steps[2].Parents = []store.Parent{{Step: 0, Policy: policy}}
	steps[3].Parents = []store.Parent{{Step: 1, Policy: policy}, {Step: 2, Policy: policy}}
	ts := createAll(t, s, steps)
	return ts[0], ts[1], ts[2], ts[3]
}

func claimAll(t *testing.T, s *store.Store) map[int]store.Claimed {
	t.Helper()
	cl, err := s.Claim(sysCtx, "w1", []string{"noop"}, 100)
	require.NoError(t, err)
	out := map[int]store.Claimed{}
	for _, c := range cl {
		out[c.Task.ID] = c
	}
	return out
}

func requireStatus(t *testing.T, s *store.Store, want lifecycle.Status, ts ...*ent.Task) {
	t.Helper()
	for _, tk := range ts {
		require.Equal(t, want, reload(t, s, tk.ID).Status, "task %s", tk.Title)
		requireMirrored(t, s, tk.ID)
	}
}

// released counts the published changes that moved task id to PENDING
// (its release).
func released(b *testBundle, id int) int {
	b.pub.mu.Lock()
	defer b.pub.mu.Unlock()
	n := 0
	for _, c := range b.pub.changes {
		if c.Kind == events.Transitioned && c.Task.ID == id && c.Task.Status == lifecycle.Pending {
			n++
		}
	}
	return n
}

func succeed(t *testing.T, s *store.Store, c store.Claimed) {
	t.Helper()
	require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Success, Result: json.RawMessage(`{"ok":true}`)}))
}

func TestDiamondRunsTheJoinOnceAfterBoth(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		s, bundle := setup(t, drv.DSN(t))
		a, b, c, d := diamond(t, s, "")
		requireStatus(t, s, lifecycle.Pending, a)
		requireStatus(t, s, lifecycle.WaitingDependency, b, c, d)

		cl := claimAll(t, s)
		require.Len(t, cl, 1, "only the root is claimable")
		succeed(t, s, cl[a.ID])
		requireStatus(t, s, lifecycle.Pending, b, c)
		requireStatus(t, s, lifecycle.WaitingDependency, d)

		cl = claimAll(t, s)
		require.Len(t, cl, 2)
		succeed(t, s, cl[b.ID])
		requireStatus(t, s, lifecycle.WaitingDependency, d)
		require.Empty(t, claimAll(t, s), "D waits for C")
		succeed(t, s, cl[c.ID])
		requireStatus(t, s, lifecycle.Pending, d)
		require.Equal(t, 1, released(bundle, d.ID))

		cl = claimAll(t, s)
		require.Len(t, cl, 1)
		succeed(t, s, cl[d.ID])
		requireStatus(t, s, lifecycle.Success, a, b, c, d)
		require.Equal(t, 1, released(bundle, d.ID))
	})
}

// Two parents of one child succeed at the same instant, in two
// transactions: the child is released once, by one of them (on SQLite the
// writes are serial; on PostgreSQL the instance's row lock orders them).
func TestParentsEndingTogetherReleaseTheChildOnce(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		s, bundle := setup(t, drv.DSN(t))
		const rounds = 20
		var joins []*ent.Task
		var pairs [][2]store.Claimed
		for range rounds {
			a, b, c, d := diamond(t, s, "")
			cl := claimAll(t, s)
			succeed(t, s, cl[a.ID])
			cl = claimAll(t, s)
			require.Len(t, cl, 2)
			joins = append(joins, d)
			pairs = append(pairs, [2]store.Claimed{cl[b.ID], cl[c.ID]})
		}
		for _, p := range pairs {
			var wg sync.WaitGroup
			start := make(chan struct{})
			errs := make([]error, 2)
			for i := range 2 {
				wg.Go(func() {
					<-start
					res, err := s.Finish(sysCtx, []store.Outcome{{Token: p[i].Token(), Status: lifecycle.Success}})
					if err == nil {
						err = res[0]
					}
					errs[i] = err
				})
			}
			close(start)
			wg.Wait()
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
		}
		for _, d := range joins {
			requireStatus(t, s, lifecycle.Pending, d)
			require.Equal(t, 1, released(bundle, d.ID), "task %d", d.ID)
			require.Zero(t, instances(t, s, d.ID)[0].WaitingOn)
		}
		require.Len(t, claimAll(t, s), rounds)
	})
}

func TestAFailedParentCancelsItsDependents(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		s, _ := setup(t, drv.DSN(t))
		a, b, c, d := diamond(t, s, "")
		cl := claimAll(t, s)
		require.NoError(t, finish(t, s, store.Outcome{Token: cl[a.ID].Token(), Status: lifecycle.Failed, Kind: lifecycle.KindNonRetryable, Error: "bad"}))
		requireStatus(t, s, lifecycle.Failed, a)
		requireStatus(t, s, lifecycle.Cancelled, b, c, d)
		for _, tk := range []*ent.Task{b, c, d} {
			got := reload(t, s, tk.ID)
			require.Equal(t, fmt.Sprintf("parent %s failed", a.Code), got.CancelReason)
			require.Equal(t, lifecycle.KindCancelled, *instances(t, s, tk.ID)[0].ErrorKind)
		}
		require.Empty(t, claimAll(t, s))
	})
}

func TestACancelledParentCancelsItsDependents(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		s, _ := setup(t, drv.DSN(t))
		a, b, c, d := diamond(t, s, "")
		_, err := s.CancelTask(sysCtx, a.ID, "not needed")
		require.NoError(t, err)
		requireStatus(t, s, lifecycle.Cancelled, a, b, c, d)
		require.Equal(t, fmt.Sprintf("parent %s was cancelled", a.Code), reload(t, s, d.ID).CancelReason)

		// A waiting step is cancelled by hand like a pending one, and
		// its own dependents with it.
		_, b2, c2, d2 := diamond(t, s, "")
		_, err = s.CancelTask(sysCtx, b2.ID, "")
		require.NoError(t, err)
		requireStatus(t, s, lifecycle.Cancelled, b2, d2)
		requireStatus(t, s, lifecycle.WaitingDependency, c2)
	})
}

func TestWaitPolicyKeepsDependentsUntilARetrySucceeds(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		s, bundle := setup(t, drv.DSN(t))
		a, b, c, d := diamond(t, s, store.Wait)
		cl := claimAll(t, s)
		require.NoError(t, finish(t, s, store.Outcome{Token: cl[a.ID].Token(), Status: lifecycle.Failed, Kind: lifecycle.KindNonRetryable, Error: "bad"}))
		requireStatus(t, s, lifecycle.Failed, a)
		requireStatus(t, s, lifecycle.WaitingDependency, b, c, d)

		_, err := s.RetryTask(sysCtx, a.ID)
		require.NoError(t, err)
		cl = claimAll(t, s)
		require.Len(t, cl, 1)
		succeed(t, s, cl[a.ID])
		requireStatus(t, s, lifecycle.Pending, b, c)
		requireStatus(t, s, lifecycle.WaitingDependency, d)
		require.Equal(t, 1, released(bundle, b.ID))
	})
}

func TestATaskAddedAfterExistingOnes(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		s, _ := setup(t, drv.DSN(t))
		done := newTask(t, s, taskOpts{})
		succeed(t, s, claimOne(t, s))
		running := newTask(t, s, taskOpts{})
		runningClaim := claimOne(t, s)
		failed := newTask(t, s, taskOpts{})
		require.NoError(t, finish(t, s, store.Outcome{Token: claimOne(t, s).Token(), Status: lifecycle.Failed, Kind: lifecycle.KindNonRetryable, Error: "bad"}))

		// After a parent that succeeded: nothing to wait for.
		n := newTaskParams(taskOpts{})
		n.Parents = []store.Parent{{ID: done.ID}}
		after := newTaskFrom(t, s, n)
		requireStatus(t, s, lifecycle.Pending, after)

		// After one that runs: it waits, and is released by its success.
		n.Parents = []store.Parent{{ID: done.ID}, {ID: running.ID}, {ID: running.ID}}
		waits := newTaskFrom(t, s, n)
		requireStatus(t, s, lifecycle.WaitingDependency, waits)
		require.Equal(t, 1, instances(t, s, waits.ID)[0].WaitingOn)
		succeed(t, s, runningClaim)
		requireStatus(t, s, lifecycle.Pending, waits)

		// After one that failed, cancelling with it: refused, nothing made.
		n.Parents = []store.Parent{{ID: failed.ID}}
		_, _, err := s.CreateTask(sysCtx, n)
		var ce *store.ConflictError
		require.ErrorAs(t, err, &ce)
		// After one that does not exist: not found.
		n.Parents = []store.Parent{{ID: failed.ID + 1000}}
		_, _, err = s.CreateTask(sysCtx, n)
		require.ErrorIs(t, err, store.ErrNotFound)
		count, err := s.Client().Task.Query().Count(sysCtx)
		require.NoError(t, err)
		require.Equal(t, 5, count)
	})
}

func newTaskFrom(t *testing.T, s *store.Store, n store.NewTask) *ent.Task {
	t.Helper()
	tk, created, err := s.CreateTask(sysCtx, n)
	require.NoError(t, err)
	require.True(t, created)
	return tk
}
