package retention_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/fakeclock"
	"github.com/taskgraph/taskgraph/internal/retention"
	"github.com/taskgraph/taskgraph/internal/servicetest"
	"github.com/taskgraph/taskgraph/internal/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var sysCtx = auth.NewSystemContext(context.Background())

var epoch = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

func open(t *testing.T, dsn string) (*store.Store, *fakeclock.Clock) {
	t.Helper()
	clock := fakeclock.New(epoch)
	st, err := store.Open(context.Background(), store.Config{DSN: dsn, Clock: clock.Now})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st, clock
}

func create(t *testing.T, st *store.Store, cancel bool) *ent.Task {
	t.Helper()
	tk, _, err := st.CreateTask(sysCtx, store.NewTask{Type: "noop", Owner: "alice", Input: json.RawMessage(`{}`), InputHash: "h",
		TimeoutSeconds: 60, RetryPolicy: "retry_3_5", MaxAttempts: 3})
	require.NoError(t, err)
	if cancel {
		tk, err = st.CancelTask(sysCtx, tk.ID, "done with it")
		require.NoError(t, err)
		require.Equal(t, lifecycle.Cancelled, tk.Status)
	}
	return tk
}

func TestPurger(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("PurgesWhatFinishedBeforeTheAge", func(t *testing.T) {
			t.Parallel()
			st, clock := open(t, d.DSN(t))
			old := []*ent.Task{create(t, st, true), create(t, st, true), create(t, st, true)}
			waiting := create(t, st, false)
			clock.Advance(2 * time.Hour)
			recent := create(t, st, true)
			p, err := retention.New(retention.Config{Age: time.Hour, Batch: 2}, st)
			require.NoError(t, err)
			res, err := p.Pass(context.Background())
			require.NoError(t, err)
			require.Equal(t, 3, res.Purged, "in two batches")
			require.Equal(t, epoch.Add(time.Hour), res.Before.UTC())
			for _, tk := range old {
				_, err := st.TaskByID(sysCtx, tk.ID)
				require.Error(t, err, "task %d is purged", tk.ID)
			}
			for _, tk := range []*ent.Task{waiting, recent} {
				_, err := st.TaskByID(sysCtx, tk.ID)
				require.NoError(t, err, "task %d stays", tk.ID)
			}
			res, err = p.Pass(context.Background())
			require.NoError(t, err)
			require.Zero(t, res.Purged)
		})
		t.Run("OffWithoutAnAge", func(t *testing.T) {
			t.Parallel()
			st, clock := open(t, d.DSN(t))
			tk := create(t, st, true)
			clock.Advance(24 * 365 * time.Hour)
			p, err := retention.New(retention.Config{}, st)
			require.NoError(t, err)
			res, err := p.Pass(context.Background())
			require.NoError(t, err)
			require.Zero(t, res.Purged)
			require.NoError(t, p.Start(context.Background()))
			require.False(t, p.Running(), "retention off: nothing runs")
			_, err = st.TaskByID(sysCtx, tk.ID)
			require.NoError(t, err)
		})
		t.Run("OnlyTheLeaderPurges", func(t *testing.T) {
			t.Parallel()
			st, clock := open(t, d.DSN(t))
			tk := create(t, st, true)
			clock.Advance(2 * time.Hour)
			p, err := retention.New(retention.Config{Age: time.Hour, Leader: func(context.Context) (bool, error) { return false, nil }}, st)
			require.NoError(t, err)
			require.False(t, p.RunOnce(context.Background()))
			_, err = st.TaskByID(sysCtx, tk.ID)
			require.NoError(t, err)
		})
		t.Run("StartStopStress", func(t *testing.T) {
			t.Parallel()
			st, _ := open(t, d.DSN(t))
			p, err := retention.New(retention.Config{Age: time.Hour, Interval: time.Millisecond}, st)
			require.NoError(t, err)
			servicetest.StressStartStop(t, p)
			require.False(t, p.Running())
		})
	})
}
