package leader_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/leader"
)

// nodes returns two locks of one deployment, as two nodes hold them.
func nodes(t *testing.T) (*leader.Lock, *leader.Lock) {
	t.Helper()
	dsn := dbtest.PostgresOnly(t)
	var locks [2]*leader.Lock
	for i := range locks {
		db, err := sql.Open("postgres", dsn)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		locks[i] = leader.New(db, leader.WatchdogRole)
	}
	return locks[0], locks[1]
}

func TestLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	t.Run("ReleasedByAStoppingServiceTheLockIsFreeAtOnce", func(t *testing.T) {
		t.Parallel()
		a, b := nodes(t)
		led, err := a.Lead(ctx)
		require.NoError(t, err)
		require.True(t, led)
		// A shutdown whose context is already done still gives the lock up:
		// never to a pooled session that would keep it for nobody.
		a.Release(cancelled)
		led, err = b.Lead(ctx)
		require.NoError(t, err)
		require.True(t, led, "the other node leads as soon as the lock is released")
	})
	t.Run("ACancelledCallerChangesNothing", func(t *testing.T) {
		t.Parallel()
		a, b := nodes(t)
		led, err := a.Lead(cancelled)
		require.Error(t, err)
		require.False(t, led)
		led, err = b.Lead(ctx)
		require.NoError(t, err)
		require.True(t, led, "a cancelled attempt took no lock")
		led, err = b.Lead(cancelled)
		require.Error(t, err)
		require.True(t, led, "the leader stays the leader")
		led, err = a.Lead(ctx)
		require.NoError(t, err)
		require.False(t, led, "one leader")
	})
}
