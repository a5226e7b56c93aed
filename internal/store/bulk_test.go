package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/store"
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

		// One transaction, with a write of the caller's; each id fails
		// alone.
		var res []store.Each
		runs := 0
		err := s.Write(sysCtx, func(tx *store.Tx) error {
			runs++
			var err error
			if res, err = tx.CancelTasks(sysCtx, []int{a.ID, 999999, done.ID, bb.ID}, "bulk"); err != nil {
				return err
			}
			_, err = tx.Ent().AuditLog.Create().SetActor("test").SetRole("system").SetAction(auditlog.ActionCANCEL_MANY).
				SetTaskIds([]int{a.ID, bb.ID}).SetOutcome(auditlog.OutcomePARTIAL).Save(sysCtx)
			return err
		})
		require.NoError(t, err)
		require.Equal(t, 1, runs, "one transaction")
		require.Len(t, res, 4)
		require.NoError(t, res[0].Err)
		var nf *store.NotFoundError
		require.ErrorAs(t, res[1].Err, &nf)
		require.Error(t, res[2].Err)
		require.NoError(t, res[3].Err)
		n, err := s.Client().AuditLog.Query().Count(sysCtx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the caller's write committed with the cancels")
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

		// A write of the caller's that fails fails the whole bulk action:
		// nothing changes, nothing is published.
		c := newTask(t, s, taskOpts{})
		published = len(b.pub.changes)
		err = s.Write(sysCtx, func(tx *store.Tx) error {
			if _, err := tx.CancelTasks(sysCtx, []int{c.ID}, ""); err != nil {
				return err
			}
			return errors.New("audit table gone")
		})
		require.ErrorContains(t, err, "audit table gone")
		b.pub.mu.Lock()
		require.Len(t, b.pub.changes, published, "a rolled-back cancel is not published")
		b.pub.mu.Unlock()
		tk, err := s.TaskByID(sysCtx, c.ID)
		require.NoError(t, err)
		require.Equal(t, lifecycle.Pending, tk.Status)
	})
}

// A page of a bulk cancel moves its waiting tasks together and the others
// one by one: each id ends as CancelTasks would end it, in the page's
// order, and only what the bulk task's owner may see is touched.
func TestActPageCancel(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, b := setup(t, dsn)
		newTask(t, s, taskOpts{})
		bulk := claimOne(t, s)
		running := newTask(t, s, taskOpts{})
		claimOne(t, s)
		finished := newTask(t, s, taskOpts{})
		require.NoError(t, finish(t, s, store.Outcome{Token: claimOne(t, s).Token(), Status: lifecycle.Success}))
		w1, w2 := newTask(t, s, taskOpts{}), newTask(t, s, taskOpts{})
		bobs := newTask(t, s, taskOpts{owner: "bob"})
		published := len(b.pub.changes)

		alice := auth.NewContext(context.Background(), auth.Viewer{User: "alice", Role: auth.RoleOperator})
		ids := []int{w1.ID, bobs.ID, running.ID, finished.ID, 999999, w2.ID}
		res, err := s.ActPage(alice, store.Page{Token: bulk.Token(), TaskID: bulk.Task.ID, Action: lifecycle.ActionCancel, IDs: ids, Reason: "sweep",
			Checkpoint: func([]store.Each) (string, map[string]any) { return "page", nil }})
		require.NoError(t, err)
		require.Len(t, res, len(ids))
		for i, id := range ids {
			require.Equal(t, id, res[i].ID, "outcomes in the page's order")
		}
		var nf *store.NotFoundError
		require.NoError(t, res[0].Err)
		require.Equal(t, lifecycle.Cancelled, res[0].Task.Status)
		require.ErrorAs(t, res[1].Err, &nf, "another user's task is not the owner's to cancel")
		require.NoError(t, res[2].Err)
		require.True(t, res[2].Task.CancelRequested, "a running task is asked to stop")
		requireTransitionError(t, res[3].Err, lifecycle.Success, lifecycle.Cancelled)
		require.ErrorAs(t, res[4].Err, &nf)
		require.NoError(t, res[5].Err)

		for id, want := range map[int]lifecycle.Status{w1.ID: lifecycle.Cancelled, w2.ID: lifecycle.Cancelled, bobs.ID: lifecycle.Pending, running.ID: lifecycle.Executing, finished.ID: lifecycle.Success} {
			tk, err := s.TaskByID(sysCtx, id)
			require.NoError(t, err)
			require.Equal(t, want, tk.Status, "task %d", id)
			if want == lifecycle.Cancelled {
				require.Equal(t, "sweep", tk.CancelReason)
				insts := instances(t, s, id)
				require.Len(t, insts, 1)
				require.Equal(t, lifecycle.Cancelled, insts[0].Status, "the instance moved with its task")
			}
		}
		b.pub.mu.Lock()
		changes := b.pub.changes[published:]
		b.pub.mu.Unlock()
		got := map[int]events.ChangeKind{}
		for _, c := range changes {
			got[c.Task.ID] = c.Kind
			if c.Task.ID == w1.ID || c.Task.ID == w2.ID {
				require.Equal(t, lifecycle.Cancelled, c.Task.Status, "published as written")
			}
		}
		require.Equal(t, map[int]events.ChangeKind{w1.ID: events.Transitioned, w2.ID: events.Transitioned, running.ID: events.CancelRequested}, got)

		// A stale token applies nothing.
		_, err = s.ActPage(alice, store.Page{Token: store.Token{InstanceID: bulk.Instance.ID, Version: bulk.Instance.Version + 7}, TaskID: bulk.Task.ID,
			Action: lifecycle.ActionCancel, IDs: []int{bobs.ID}, Checkpoint: func([]store.Each) (string, map[string]any) { return "page", nil }})
		require.ErrorIs(t, err, store.ErrStaleToken)
	})
}
