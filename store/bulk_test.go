package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"taskgraph/ent"
	"taskgraph/internal/dbtest"
	"taskgraph/lifecycle"
	"taskgraph/store"
)

func TestBulkActions(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, b := setup(t, dsn)
		done := newTask(t, s, taskOpts{})
		failed := newTask(t, s, taskOpts{})
		for _, o := range []store.Outcome{{Status: lifecycle.Success}, {Status: lifecycle.Failed, Kind: lifecycle.KindNonRetryable, Error: "no"}} {
			c := claimOne(t, s)
			o.Token = c.Token()
			require.NoError(t, finish(t, s, o))
		}
		a, bb := newTask(t, s, taskOpts{}), newTask(t, s, taskOpts{})
		published := len(b.pub.changes)

		// One transaction; each id fails alone.
		var seen store.Committing
		committed := 0
		ctx := store.WithTxHook(sysCtx, &store.TxHook{
			BeforeCommit: func(_ context.Context, _ *ent.Tx, c store.Committing) error { seen = c; return nil },
			Committed:    func() { committed++ },
		})
		res, err := s.CancelTasks(ctx, []int{a.ID, 999999, done.ID, bb.ID}, "bulk")
		require.NoError(t, err)
		require.Len(t, res, 4)
		require.NoError(t, res[0].Err)
		var nf *store.NotFoundError
		require.ErrorAs(t, res[1].Err, &nf)
		require.Error(t, res[2].Err)
		require.NoError(t, res[3].Err)
		require.Equal(t, 1, committed, "one transaction")
		require.Equal(t, res, seen.Each, "the hook sees the per-id outcomes")
		require.Len(t, seen.Changes, 2)
		for _, id := range []int{a.ID, bb.ID} {
			tk, err := s.TaskByID(sysCtx, id)
			require.NoError(t, err)
			require.Equal(t, lifecycle.Cancelled, tk.Status)
		}
		b.pub.mu.Lock()
		require.Len(t, b.pub.changes, published+2, "only the cancels that happened are published")
		b.pub.mu.Unlock()

		// A retry creates its instance (a guarded write) in the bulk too.
		res, err = s.RetryTasks(sysCtx, []int{failed.ID, a.ID})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		requireTransitionError(t, res[1].Err, lifecycle.Cancelled, lifecycle.RetryPending)
		require.Len(t, instances(t, s, failed.ID), 2)

		// A hook that fails fails the whole bulk action: nothing changes.
		c := newTask(t, s, taskOpts{})
		broken := store.WithTxHook(sysCtx, &store.TxHook{BeforeCommit: func(context.Context, *ent.Tx, store.Committing) error {
			return errors.New("audit table gone")
		}})
		_, err = s.CancelTasks(broken, []int{c.ID}, "")
		require.ErrorContains(t, err, "audit table gone")
		tk, err := s.TaskByID(sysCtx, c.ID)
		require.NoError(t, err)
		require.Equal(t, lifecycle.Pending, tk.Status)
	})
}
