package relay

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/store"
)

type resyncBundle struct {
	store  *store.Store
	broker *events.Broker
	sub    *events.Subscription[events.TaskChange]
	l      *Listener
}

// setupResync opens a store on a database of its own with n tasks, a
// broker with one client subscription, and a listener configured by cfg.
func setupResync(t *testing.T, n int, cfg Config) resyncBundle {
	t.Helper()
	dsn := dbtest.PostgresOnly(t)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DSN: dsn})
	require.NoError(t, err)
	access.Install(st.Client())
	t.Cleanup(func() { _ = st.Close() })
	tasks := make([]store.NewTask, n)
	for i := range tasks {
		tasks[i] = store.NewTask{Type: "noop", Owner: "test", Input: json.RawMessage(`{}`), InputHash: "-", TimeoutSeconds: 60, RetryPolicy: "default", MaxAttempts: 1}
	}
	_, err = st.CreateTasks(ctx, tasks)
	require.NoError(t, err)
	b := events.NewBroker(events.Config{Backlog: 1000})
	t.Cleanup(b.Close)
	sub := b.SubscribeTasks(nil, 1000)
	cfg.DSN, cfg.DB, cfg.Node, cfg.Client, cfg.Broker = dsn, st.DB(), "a", st.Client(), b
	l, err := Listen(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(l.Close)
	return resyncBundle{store: st, broker: b, sub: sub, l: l}
}

// waitStats waits until cond holds of the listener's counters.
func waitStats(t *testing.T, l *Listener, cond func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := l.Stats()
		if cond(st) {
			return st
		}
		require.True(t, time.Now().Before(deadline), "listener stats: %+v", st)
		time.Sleep(10 * time.Millisecond)
	}
}

func drain(sub *events.Subscription[events.TaskChange]) []events.TaskChange {
	var out []events.TaskChange
	for {
		select {
		case c, ok := <-sub.C:
			if !ok {
				return out
			}
			out = append(out, c)
		default:
			return out
		}
	}
}

func TestResync(t *testing.T) {
	t.Parallel()
	t.Run("ReplaysWhatChangedPageByPageAndNeverTwice", func(t *testing.T) {
		t.Parallel()
		b := setupResync(t, 7, Config{ResyncPage: 2})
		b.l.Missed()
		waitStats(t, b.l, func(s Stats) bool { return s.Resyncs == 1 })
		got := drain(b.sub)
		require.Len(t, got, 7, "every changed task, across four pages")
		ids := map[int]bool{}
		for _, c := range got {
			require.True(t, c.Latest)
			ids[c.Task.ID] = true
		}
		require.Len(t, ids, 7)

		b.l.Missed()
		waitStats(t, b.l, func(s Stats) bool { return s.Resyncs == 2 })
		require.Empty(t, drain(b.sub), "replayed again, nothing is news")
	})
	t.Run("PastItsLimitTellsClientsToResync", func(t *testing.T) {
		t.Parallel()
		b := setupResync(t, 7, Config{ResyncLimit: 3})
		b.l.Missed()
		waitStats(t, b.l, func(s Stats) bool { return s.ResyncsRequired == 1 })
		for range b.sub.C {
		}
		require.ErrorIs(t, b.sub.Err(), events.ErrResyncRequired)
	})
	t.Run("AReconnectionReplaysFromWhenTheConnectionWasLost", func(t *testing.T) {
		t.Parallel()
		// The connection is lost a minute ago; a resync runs while it is
		// still down (its re-read cannot see what commits after it). Then
		// tasks change (12 s ago, while the node was deaf), and the
		// connection comes back behind a notification received before
		// the loss, whose late delivery is a sign of life: the resync
		// the reconnection asks for re-reads from the loss, not from
		// that delivery.
		b := setupResync(t, 3, Config{PingInterval: time.Hour})
		ctx := auth.NewSystemContext(context.Background())
		b.l.mu.Lock()
		b.l.healthy = time.Now().Add(-time.Minute)
		b.l.mu.Unlock()
		b.l.disconnected()
		_, err := b.l.resync(ctx)
		require.NoError(t, err)
		require.Len(t, drain(b.sub), 3)
		_, err = b.store.DB().Exec(`UPDATE tasks SET version = version + 1, updated_at = now() - interval '12 seconds'`)
		require.NoError(t, err)
		tasks, err := b.store.Client().Task.Query().All(ctx)
		require.NoError(t, err)
		before := b.l.Stats().Resyncs
		for _, p := range encode("b", []events.TaskChange{{Kind: events.Transitioned, Task: tasks[0]}}, nil) {
			b.l.pql.Notify <- &pq.Notification{Extra: p}
		}
		b.l.pql.Notify <- nil // pq: reconnected, notifications may have been lost
		waitStats(t, b.l, func(s Stats) bool { return s.Resyncs > before })
		latest := map[int]int64{}
		deadline := time.Now().Add(10 * time.Second)
		for len(latest) < 3 || latest[tasks[1].ID] < tasks[1].Version || latest[tasks[2].ID] < tasks[2].Version {
			select {
			case c := <-b.sub.C:
				latest[c.Task.ID] = max(latest[c.Task.ID], c.Task.Version)
			case <-time.After(time.Until(deadline)):
				t.Fatalf("changes made while the connection was lost were not replayed: latest versions seen %v, want %d, %d and %d",
					latest, tasks[0].Version, tasks[1].Version, tasks[2].Version)
			}
		}
	})
	t.Run("AReconnectionDuringAResyncIsNotClearedByIt", func(t *testing.T) {
		t.Parallel()
		// The connection is lost; a resync starts while it is down, and
		// the connection comes back before the resync ends. The
		// reconnection asks for a re-read from the very time the resync
		// read (the loss), but the resync may not have seen what
		// committed since it read: its end must not clear that request.
		var reconnect func()
		b := setupResync(t, 1, Config{PingInterval: time.Hour, OnResync: func() {
			if reconnect != nil {
				reconnect()
				reconnect = nil
			}
		}})
		b.l.resyncer.Stop() // the test runs the resyncs itself
		b.l.mu.Lock()
		b.l.healthy = time.Now().Add(-time.Minute)
		b.l.mu.Unlock()
		b.l.disconnected()
		reconnect = b.l.lost
		_, err := b.l.resync(auth.NewSystemContext(context.Background()))
		require.NoError(t, err)
		b.l.mu.Lock()
		missed := b.l.missedSince
		b.l.mu.Unlock()
		require.False(t, missed.IsZero(), "the reconnection's re-read is still to do")
	})
	t.Run("AFailedResyncIsRetriedUntilItWorks", func(t *testing.T) {
		t.Parallel()
		b := setupResync(t, 3, Config{})
		_, err := b.store.DB().Exec(`ALTER TABLE tasks RENAME TO tasks_away`)
		require.NoError(t, err)
		b.l.Missed()
		waitStats(t, b.l, func(s Stats) bool { return s.ResyncFailures >= 2 })
		require.Zero(t, b.l.Stats().Resyncs)
		_, err = b.store.DB().Exec(`ALTER TABLE tasks_away RENAME TO tasks`)
		require.NoError(t, err)
		waitStats(t, b.l, func(s Stats) bool { return s.Resyncs == 1 })
		require.Len(t, drain(b.sub), 3)
	})
}
