package store_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/store"
)

// notices records the calls of a store's BeforeCommit.
type notices struct {
	mu      sync.Mutex
	foreign []int // task ids of the changes of foreign transactions
	own     int
}

func (n *notices) before(_ context.Context, _ func(context.Context, string, ...any) error, changes []events.TaskChange, _ []*ent.TaskLog, foreign bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !foreign {
		n.own++
		return nil
	}
	for _, c := range changes {
		n.foreign = append(n.foreign, c.Task.ID)
	}
	return nil
}

// TestCreateInTheCallersTransaction: tasks created in a transaction of the
// store's caller (Store.In) exist for nobody else until the caller
// commits, and not at all after a rollback; they are published only after
// the commit (on SQLite by the store once it sees the rows; on PostgreSQL
// by the relay, told in the transaction that it is a foreign one); the
// caller's transaction stays usable after an item's conflict.
func TestCreateInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		b := &testBundle{}
		var s *store.Store
		b.pub = &recorder{t: t, client: func() *ent.Client { return s.Client() }}
		n := &notices{}
		s, err := store.Open(sysCtx, store.Config{DSN: dsn, Publisher: b.pub, BeforeCommit: n.before})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		count := func() int {
			c, err := s.Client().Task.Query().Count(sysCtx)
			require.NoError(t, err)
			return c
		}
		in := func(tx *sql.Tx, ns ...store.NewTask) []store.Created {
			t.Helper()
			var out []store.Created
			require.NoError(t, s.In(sysCtx, tx, func(tx *store.Tx) error {
				var err error
				out, err = tx.CreateTasks(sysCtx, ns)
				return err
			}))
			return out
		}
		published := func(tk *ent.Task) bool {
			b.pub.mu.Lock()
			defer b.pub.mu.Unlock()
			for _, c := range b.pub.changes {
				if c.Task.Code == tk.Code && c.Kind == events.Created {
					return true
				}
			}
			return false
		}

		// A rollback leaves nothing, and publishes nothing.
		tx, err := s.DB().BeginTx(sysCtx, nil)
		require.NoError(t, err)
		gone := in(tx, newTaskParams(taskOpts{}))
		require.True(t, gone[0].Created)
		require.NoError(t, tx.Rollback())
		require.Equal(t, 0, count())

		// Before the commit, nobody else sees the task, nor claims it.
		tx, err = s.DB().BeginTx(sysCtx, nil)
		require.NoError(t, err)
		kept := in(tx, newTaskParams(taskOpts{key: "order-42"}), newTaskParams(taskOpts{key: "order-42"}))
		require.True(t, kept[0].Created)
		require.Equal(t, kept[0].Task.ID, kept[1].Task.ID, "one key, one task, within the transaction too")
		if s.Postgres() {
			// SQLite has one writer: the caller's transaction holds it.
			require.Equal(t, 0, count())
			cl, err := s.Claim(sysCtx, "w1", []string{"noop"}, 10)
			require.NoError(t, err)
			require.Empty(t, cl)
		}
		// The same key again in the transaction is the same task; another
		// payload is a conflict of that item alone, and the transaction
		// goes on.
		again := in(tx, newTaskParams(taskOpts{key: "order-42"}), newTaskParams(taskOpts{key: "order-42", hash: "other"}), newTaskParams(taskOpts{}))
		require.False(t, again[0].Created)
		require.Equal(t, kept[0].Task.ID, again[0].Task.ID)
		var ce *store.ConflictError
		require.ErrorAs(t, again[1].Err, &ce)
		require.True(t, again[2].Created)
		require.False(t, published(kept[0].Task), "published before the commit")
		require.NoError(t, tx.Commit())
		require.Equal(t, 2, count())
		requireMirrored(t, s, kept[0].Task.ID)

		if s.Postgres() {
			// In the caller's transaction, so that the relay's
			// notifications go with its commit (the rolled-back one's
			// with its rollback).
			n.mu.Lock()
			require.Subset(t, n.foreign, []int{kept[0].Task.ID, again[2].Task.ID}, "told as foreign, for the relay")
			require.Zero(t, n.own)
			n.mu.Unlock()
		} else {
			// The store sees the commit and publishes both; never the
			// task rolled back, looked for in the same passes.
			require.Eventually(t, func() bool { return published(kept[0].Task) && published(again[2].Task) }, 10*time.Second, 5*time.Millisecond)
			require.False(t, published(gone[0].Task), "the rolled-back task was published")
		}
		cl, err := s.Claim(sysCtx, "w1", []string{"noop"}, 10)
		require.NoError(t, err)
		require.Len(t, cl, 2, "claimable once committed")

		// A key committed by the caller is found by the store's own
		// creates.
		tk, created, err := s.CreateTask(sysCtx, newTaskParams(taskOpts{key: "order-42"}))
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, kept[0].Task.ID, tk.ID)
	})
}
