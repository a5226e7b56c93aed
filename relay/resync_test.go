package relay

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"taskgraph/access"
	"taskgraph/events"
	"taskgraph/internal/dbtest"
	"taskgraph/store"
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
