package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/store"
)

// TestDeadlinesAreFlaggedOnceAndFinishesDecideMetOrMissed: a task near its
// deadline is flagged at risk once, then missed once (each flag a change
// event), by the database's clock; a finish by the deadline meets it, a
// late finish misses it with no scan; the open tasks the loop reads leave
// out those decided.
func TestDeadlinesAreFlaggedOnceAndFinishesDecideMetOrMissed(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		s, b := setup(t, d.DSN(t))
		at := func(d time.Duration) *time.Time { x := epoch.Add(d); return &x }
		mk := func(deadline *time.Time) store.NewTask {
			n := newTaskParams(taskOpts{runAt: epoch})
			n.Deadline = deadline
			return n
		}
		ts := createAll(t, s, []store.NewTask{mk(at(time.Hour)), mk(at(time.Hour)), mk(at(10 * time.Minute)), mk(nil)})
		early, late, risky, none := ts[0], ts[1], ts[2], ts[3]
		require.Equal(t, store.DeadlineOnTime, store.DeadlineState(early))
		require.Equal(t, "", store.DeadlineState(none))

		flag := func(id int, f string) bool {
			var did bool
			require.NoError(t, s.Write(sysCtx, func(tx *store.Tx) error {
				var err error
				did, err = tx.FlagDeadline(sysCtx, id, f)
				return err
			}))
			return did
		}
		openIDs := func(margin time.Duration) []int {
			open, err := s.OpenDeadlines(sysCtx, s.Now().Add(margin), 0, 100)
			require.NoError(t, err)
			var ids []int
			for _, o := range open {
				ids = append(ids, o.TaskID)
			}
			return ids
		}

		// Within a 15-minute margin only the risky one is near.
		require.Equal(t, []int{risky.ID}, openIDs(15*time.Minute))
		require.True(t, flag(risky.ID, store.DeadlineAtRisk))
		require.False(t, flag(risky.ID, store.DeadlineAtRisk), "at risk once")
		require.False(t, flag(risky.ID, store.DeadlineMissed), "not missed before its deadline")
		require.Equal(t, store.DeadlineAtRisk, store.DeadlineState(reload(t, s, risky.ID)))

		// The first finishes in time.
		c := claimOne(t, s)
		require.Equal(t, early.ID, c.Task.ID)
		require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Success, Result: json.RawMessage(`{}`)}))
		require.Equal(t, store.DeadlineMet, store.DeadlineState(reload(t, s, early.ID)))

		// Two hours later: the second finishes late, the risky one is missed.
		b.clock.Advance(2 * time.Hour)
		c = claimOne(t, s)
		require.Equal(t, late.ID, c.Task.ID)
		require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Success, Result: json.RawMessage(`{}`)}))
		got := reload(t, s, late.ID)
		require.Equal(t, store.DeadlineMissed, store.DeadlineState(got), "a late finish counts as missed")
		require.Nil(t, got.DeadlineMetAt)

		require.Equal(t, []int{risky.ID}, openIDs(0))
		require.True(t, flag(risky.ID, store.DeadlineMissed))
		require.False(t, flag(risky.ID, store.DeadlineMissed), "missed once")
		require.False(t, flag(late.ID, store.DeadlineAtRisk), "decided: not flagged")
		got = reload(t, s, risky.ID)
		require.Equal(t, store.DeadlineMissed, store.DeadlineState(got))
		require.Equal(t, lifecycle.Pending, got.Status, "a flag, not a state")
		require.Empty(t, openIDs(time.Hour))

		b.pub.mu.Lock()
		defer b.pub.mu.Unlock()
		n := 0
		for _, ch := range b.pub.changes {
			if ch.Kind == events.DeadlineChanged {
				require.Equal(t, risky.ID, ch.Task.ID)
				n++
			}
		}
		require.Equal(t, 2, n, "one change event per flag")
	})
}
