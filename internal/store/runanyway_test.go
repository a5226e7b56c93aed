package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

func fail(t *testing.T, s *store.Store, c store.Claimed) {
	t.Helper()
	require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Failed, Kind: lifecycle.KindNonRetryable, Error: "bad"}))
}

// A → (B, C) → D, D running anyway after B and C; E runs anyway after D's
// sibling X, which is cancelled with A (A → X cancels).
func TestRunAnywayWaitsForEveryParentToEnd(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		s, bundle := setup(t, drv.DSN(t))
		a, b, c, d := diamond(t, s, "")
		// D again, along RUN_ANYWAY edges.
		n := newTaskParams(taskOpts{})
		n.Parents = []store.Parent{{ID: b.ID, Policy: store.RunAnyway}, {ID: c.ID, Policy: store.RunAnyway}}
		cleanup := newTaskFrom(t, s, n)
		require.Equal(t, 2, instances(t, s, cleanup.ID)[0].WaitingOn)

		succeed(t, s, claimAll(t, s)[a.ID])
		cl := claimAll(t, s)
		fail(t, s, cl[b.ID])
		requireStatus(t, s, lifecycle.Cancelled, d)
		requireStatus(t, s, lifecycle.WaitingDependency, cleanup)
		require.Equal(t, 1, instances(t, s, cleanup.ID)[0].WaitingOn, "B's failure counted")

		// A manual retry of B: the cleanup awaits B's new outcome.
		_, err := s.RetryTask(sysCtx, b.ID)
		require.NoError(t, err)
		require.Equal(t, 2, instances(t, s, cleanup.ID)[0].WaitingOn)
		succeed(t, s, claimAll(t, s)[b.ID])
		requireStatus(t, s, lifecycle.WaitingDependency, cleanup)
		succeed(t, s, cl[c.ID])
		requireStatus(t, s, lifecycle.Pending, cleanup)
		require.Equal(t, 1, released(bundle, cleanup.ID))

		// A parent cancelled by the cascade counts too.
		a2, b2, _, _ := diamond(t, s, "")
		n.Parents = []store.Parent{{ID: b2.ID, Policy: store.RunAnyway}}
		after := newTaskFrom(t, s, n)
		fail(t, s, claimAll(t, s)[a2.ID])
		requireStatus(t, s, lifecycle.Cancelled, b2)
		requireStatus(t, s, lifecycle.Pending, after)

		// Added after a parent that failed: nothing to wait for.
		n.Parents = []store.Parent{{ID: a2.ID, Policy: store.RunAnyway}}
		late := newTaskFrom(t, s, n)
		requireStatus(t, s, lifecycle.Pending, late)

		outcomes, err := s.ParentResults(sysCtx, []int{cleanup.ID, after.ID})
		require.NoError(t, err)
		byKey := func(rs []store.ParentResult) map[string]store.ParentResult {
			m := map[string]store.ParentResult{}
			for _, r := range rs {
				m[r.Key] = r
			}
			return m
		}
		got := byKey(outcomes[cleanup.ID])
		require.Equal(t, lifecycle.Success, got["b"].Status)
		require.Empty(t, got["b"].Error, "b's earlier failure is not its outcome")
		require.JSONEq(t, `{"ok":true}`, string(got["b"].Result))
		got = byKey(outcomes[after.ID])
		require.Equal(t, lifecycle.Cancelled, got["b"].Status)
		require.Equal(t, "parent "+a2.Code+" failed", got["b"].Error)
	})
}
