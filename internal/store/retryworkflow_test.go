package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// chainWorkflow creates the workflow a → b → c (and a → w along a WAIT
// edge) and returns its id and steps.
func chainWorkflow(t *testing.T, s *store.Store) (int, map[string]*ent.Task) {
	t.Helper()
	keys := []string{"a", "b", "c", "w"}
	steps := make([]store.NewTask, len(keys))
	for i, key := range keys {
		steps[i] = newTaskParams(taskOpts{})
		steps[i].Title = key
		steps[i].StepKey = &key
	}
	steps[1].Parents = []store.Parent{{Step: 0}}
	steps[2].Parents = []store.Parent{{Step: 1}}
	steps[3].Parents = []store.Parent{{Step: 0, Policy: store.Wait}}
	var wf *ent.Workflow
	require.NoError(t, s.Write(sysCtx, func(tx *store.Tx) error {
		var err error
		wf, _, err = tx.CreateWorkflow(sysCtx, store.NewWorkflow{Title: "chain", Owner: "system", InputHash: "h", Steps: steps})
		return err
	}))
	got, err := s.WorkflowSteps(sysCtx, wf.ID)
	require.NoError(t, err)
	out := map[string]*ent.Task{}
	for _, tk := range got {
		out[*tk.StepKey] = tk
	}
	return wf.ID, out
}

func retryWorkflow(t *testing.T, s *store.Store, id int) ([]*ent.Task, error) {
	t.Helper()
	var moved []*ent.Task
	err := s.Write(sysCtx, func(tx *store.Tx) error {
		var err error
		moved, err = tx.RetryWorkflow(sysCtx, id, "again")
		return err
	})
	return moved, err
}

func TestRetryWorkflowWaitsForTheParentsItReruns(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		s, bundle := setup(t, drv.DSN(t))
		id, st := chainWorkflow(t, s)
		_, err := retryWorkflow(t, s, id)
		require.ErrorIs(t, err, lifecycle.ErrInvalidTransition, "nothing failed yet")

		cl := claimAll(t, s)
		require.NoError(t, finish(t, s, store.Outcome{Token: cl[st["a"].ID].Token(), Status: lifecycle.Failed, Kind: lifecycle.KindNonRetryable, Error: "bad"}))
		requireStatus(t, s, lifecycle.Failed, st["a"])
		requireStatus(t, s, lifecycle.Cancelled, st["b"], st["c"])
		requireStatus(t, s, lifecycle.WaitingDependency, st["w"])

		moved, err := retryWorkflow(t, s, id)
		require.NoError(t, err)
		require.Len(t, moved, 3, "a, b and c; w still waits")
		requireStatus(t, s, lifecycle.RetryPending, st["a"])
		requireStatus(t, s, lifecycle.WaitingDependency, st["b"], st["c"], st["w"])
		for _, k := range []string{"b", "c"} {
			ins := instances(t, s, st[k].ID)
			require.Len(t, ins, 2)
			require.Equal(t, lifecycle.WaitingDependency, ins[1].Status)
			require.Equal(t, 1, ins[1].WaitingOn, "%s waits for its parent, re-run", k)
			require.Empty(t, reload(t, s, st[k].ID).CancelReason)
		}
		_, err = retryWorkflow(t, s, id)
		require.ErrorIs(t, err, lifecycle.ErrInvalidTransition, "nothing left to re-run")

		for _, k := range []string{"a", "b", "c"} {
			cl := claimAll(t, s)
			require.Contains(t, cl, st[k].ID, "%s runs next", k)
			if k == "a" {
				require.Len(t, cl, 1)
			}
			for _, c := range cl {
				succeed(t, s, c)
			}
		}
		requireStatus(t, s, lifecycle.Success, st["a"], st["b"], st["c"], st["w"])
		require.Equal(t, 1, released(bundle, st["c"].ID), "c released once, after the retry")

		// A step cancelled by hand, whose parent succeeded, runs at once.
		id2, st2 := chainWorkflow(t, s)
		succeed(t, s, claimAll(t, s)[st2["a"].ID])
		_, err = s.CancelTask(sysCtx, st2["b"].ID, "")
		require.NoError(t, err)
		requireStatus(t, s, lifecycle.Cancelled, st2["b"], st2["c"])
		_, err = retryWorkflow(t, s, id2)
		require.NoError(t, err)
		requireStatus(t, s, lifecycle.Pending, st2["b"])
		requireStatus(t, s, lifecycle.WaitingDependency, st2["c"])
		require.Zero(t, instances(t, s, st2["b"].ID)[1].WaitingOn)

		_, err = retryWorkflow(t, s, id2+1000)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}
