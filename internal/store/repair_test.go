package store_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// TestOneBadRowIsOneBadRow breaks pairs behind the store's back (as a hand
// edit or a restored backup would): the claim and the finish go on with the
// others, refuse only the broken pair, and the repair mends each kind.
func TestOneBadRowIsOneBadRow(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, _ := setup(t, dsn)
		raw := func(q string, args ...any) {
			t.Helper()
			for n := 1; s.Postgres() && strings.Contains(q, "?"); n++ {
				q = strings.Replace(q, "?", fmt.Sprintf("$%d", n), 1)
			}
			_, err := s.DB().ExecContext(sysCtx, q, args...)
			require.NoError(t, err)
		}
		batch := make([]store.NewTask, 6)
		for i := range batch {
			batch[i] = newTaskParams(taskOpts{})
		}
		tasks := createAll(t, s, batch)

		// A waiting instance of a finished task is not claimed, and does
		// not fail the claim of the others.
		raw(`UPDATE tasks SET status = ? WHERE id = ?`, string(lifecycle.Success), tasks[1].ID)
		// A waiting instance of a running task, likewise.
		raw(`UPDATE tasks SET status = ? WHERE id = ?`, string(lifecycle.Executing), tasks[2].ID)
		cl, err := s.Claim(sysCtx, "w", []string{"noop"}, 10)
		require.NoError(t, err)
		require.Len(t, cl, 4)
		claimed := map[int]store.Claimed{}
		for _, c := range cl {
			claimed[c.Task.ID] = c
		}
		require.NotContains(t, claimed, tasks[1].ID)
		require.NotContains(t, claimed, tasks[2].ID)

		// A running instance of a cancelled task fails its own outcome only.
		raw(`UPDATE tasks SET status = ? WHERE id = ?`, string(lifecycle.Cancelled), tasks[3].ID)
		// A running instance of a waiting task, likewise.
		raw(`UPDATE tasks SET status = ? WHERE id = ?`, string(lifecycle.Pending), tasks[4].ID)
		before := s.Inconsistencies()
		var outcomes []store.Outcome
		for _, id := range []int{tasks[0].ID, tasks[3].ID, tasks[4].ID, tasks[5].ID} {
			outcomes = append(outcomes, store.Outcome{Token: claimed[id].Token(), Status: lifecycle.Success, Task: claimed[id].Task})
		}
		errs, err := s.Finish(sysCtx, outcomes)
		require.NoError(t, err, "an inconsistent pair never fails the batch")
		require.NoError(t, errs[0])
		require.ErrorIs(t, errs[1], store.ErrInconsistent)
		require.ErrorIs(t, errs[2], store.ErrInconsistent)
		require.NoError(t, errs[3])
		require.Equal(t, before+2, s.Inconsistencies())
		require.Equal(t, lifecycle.Success, reload(t, s, tasks[0].ID).Status)
		require.Equal(t, lifecycle.Success, reload(t, s, tasks[5].ID).Status)

		// The repair mends the four.
		res, err := s.Repair(sysCtx, 0)
		require.NoError(t, err)
		require.Equal(t, 4, res.Mended, "%+v", res)
		require.Equal(t, lifecycle.Cancelled, instances(t, s, tasks[1].ID)[0].Status, "the orphan waiting instance is cancelled")
		require.Equal(t, lifecycle.RetryPending, reload(t, s, tasks[2].ID).Status, "the task waits again with its instance")
		require.Equal(t, lifecycle.Failed, instances(t, s, tasks[3].ID)[0].Status, "the orphan running instance fails")
		require.Equal(t, lifecycle.Executing, reload(t, s, tasks[4].ID).Status, "the task runs with its instance")
		for _, id := range []int{tasks[2].ID, tasks[4].ID} {
			requireMirrored(t, s, id)
		}

		// After the repair the mended pairs move on as any other: the
		// running one finishes, the waiting one is claimed.
		errs, err = s.Finish(sysCtx, []store.Outcome{{Token: claimed[tasks[4].ID].Token(), Status: lifecycle.Success}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		c := claimOne(t, s)
		require.Equal(t, tasks[2].ID, c.Task.ID)
		requireMirrored(t, s, tasks[4].ID)
		requireMirrored(t, s, tasks[2].ID)

		// Nothing is left to mend.
		res, err = s.Repair(sysCtx, 0)
		require.NoError(t, err)
		require.Zero(t, res.Mended)
	})
}
