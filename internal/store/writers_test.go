package store_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// openTwice opens two stores on one SQLite file, as two processes would.
func openTwice(t *testing.T) (a, b *store.Store) {
	t.Helper()
	path := dbtest.SQLite(t)
	open := func() *store.Store {
		s, err := store.Open(sysCtx, store.Config{DSN: path})
		require.NoError(t, err)
		access.Install(s.Client())
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	}
	return open(), open()
}

// TestSQLiteWritersTakeTurns: two stores (processes) on one SQLite file,
// one writing back to back without a pause, the other now and then: the
// second waits for at most a couple of the first one's transactions, not
// for a gap SQLite's busy handler, which sleeps up to 100 ms between
// tries, happens to find (it would see hundreds go by, and fail with
// "database is locked" after its busy timeout).
func TestSQLiteWritersTakeTurns(t *testing.T) {
	t.Parallel()
	busy, other := openTwice(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var written atomic.Int64
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		// Each transaction of the busy one creates a batch: long enough
		// that the other one's own work outside the lock (a fraction of a
		// millisecond without the race detector) is not counted as
		// several of the busy one's transactions going by.
		batch := make([]store.NewTask, 100)
		for i := range batch {
			batch[i] = newTaskParams(taskOpts{typ: "busy"})
		}
		for ctx.Err() == nil {
			if _, err := busy.CreateTasks(sysCtx, batch); err != nil {
				t.Error(err)
				return
			}
			written.Add(1)
		}
	}()
	for written.Load() < 5 { // the busy one is under way
		select {
		case <-stopped:
			t.Fatal("the busy writer stopped")
		case <-time.After(time.Millisecond):
		}
	}
	const writes = 20
	most := int64(0)
	for range writes {
		before := written.Load()
		_, _, err := other.CreateTask(sysCtx, newTaskParams(taskOpts{typ: "other"}))
		require.NoError(t, err)
		most = max(most, written.Load()-before)
	}
	cancel()
	<-stopped
	t.Logf("the busy writer wrote %d times in all, at most %d while one write of the other waited", written.Load(), most)
	require.LessOrEqual(t, most, int64(3), "the other writer's turn comes after a transaction or two of the busy one")
}

// TestSQLiteClaimOfNothingTakesNoWriteLock: a poll that finds nothing to
// claim reads only, and returns while another process holds the write
// lock.
func TestSQLiteClaimOfNothingTakesNoWriteLock(t *testing.T) {
	t.Parallel()
	holder, poller := openTwice(t)
	newTask(t, poller, taskOpts{typ: "elsewhere"})
	tx, err := holder.DB().BeginTx(context.Background(), nil) // BEGIN IMMEDIATE: the write lock
	require.NoError(t, err)
	_, err = tx.Exec(`UPDATE tasks SET title = 'held' WHERE 0`)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		claimed, err := poller.Claim(context.Background(), "w", []string{"noop"}, 10)
		if err == nil && len(claimed) > 0 {
			t.Errorf("claimed %d", len(claimed))
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the claim of nothing waited for the write lock")
	}
	require.NoError(t, tx.Rollback())
	// With something to claim, it writes (once the lock is free).
	newTask(t, poller, taskOpts{})
	claimed, err := poller.Claim(context.Background(), "w", []string{"noop"}, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
}
