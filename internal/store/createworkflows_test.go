package store_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// chainDef is a workflow of n steps, each after the one before, with the
// idempotency key key ("" for none) and the definition hash hash.
func chainDef(n int, key, hash string) store.NewWorkflow {
	steps := make([]store.NewTask, n)
	for i := range steps {
		steps[i] = newTaskParams(taskOpts{})
		k := fmt.Sprintf("s%d", i)
		steps[i].Title, steps[i].StepKey = k, &k
		if i > 0 {
			steps[i].Parents = []store.Parent{{Step: i - 1}}
		}
	}
	w := store.NewWorkflow{Title: "chain", Owner: "alice", InputHash: hash, Steps: steps}
	if key != "" {
		h := "wf-idem:alice:" + key
		w.IdempotencyKey, w.IdempotencyHash = &key, &h
	}
	return w
}

func createWorkflows(t *testing.T, s *store.Store, ns []store.NewWorkflow) ([]store.CreatedWorkflow, error) {
	t.Helper()
	var out []store.CreatedWorkflow
	err := s.Write(sysCtx, func(tx *store.Tx) error {
		var err error
		out, err = tx.CreateWorkflows(sysCtx, ns)
		return err
	})
	return out, err
}

func countWorkflowsAndTasks(t *testing.T, s *store.Store) (int, int) {
	t.Helper()
	wfs, err := s.Client().Workflow.Query().Count(sysCtx)
	require.NoError(t, err)
	tasks, err := s.Client().Task.Query().Count(sysCtx)
	require.NoError(t, err)
	return wfs, tasks
}

func TestCreateWorkflowsCreatesManyWorkflowsInOneCall(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		s, _ := setup(t, drv.DSN(t))
		var ns []store.NewWorkflow
		for range 30 {
			ns = append(ns, chainDef(3, "", "h"))
		}
		// A diamond, its parents named out of order: a -> (b, c) -> d.
		d := chainDef(4, "", "h")
		d.Steps[2].Parents = []store.Parent{{Step: 0}}
		d.Steps[3].Parents = []store.Parent{{Step: 2}, {Step: 1}}
		ns = append(ns, d)
		res, err := createWorkflows(t, s, ns)
		require.NoError(t, err)
		require.Len(t, res, len(ns))

		seen := map[int]bool{}
		roots := map[int]int{} // root task -> its workflow's item
		steps := make([][]*ent.Task, len(ns))
		for i, r := range res {
			require.True(t, r.Created, "workflow %d", i)
			require.False(t, seen[r.Workflow.ID], "workflow %d is its own", i)
			seen[r.Workflow.ID] = true
			require.Equal(t, len(ns[i].Steps), r.Workflow.StepCount)
			got, err := s.WorkflowSteps(sysCtx, r.Workflow.ID)
			require.NoError(t, err)
			require.Len(t, got, len(ns[i].Steps), "workflow %d has its own steps only", i)
			byKey := map[string]*ent.Task{}
			for _, tk := range got {
				byKey[*tk.StepKey] = tk
			}
			ordered := make([]*ent.Task, len(got))
			for k := range got {
				ordered[k] = byKey[fmt.Sprintf("s%d", k)]
				require.NotNil(t, ordered[k])
			}
			steps[i] = ordered
			roots[ordered[0].ID] = i
			requireStatus(t, s, lifecycle.Pending, ordered[0])
			requireStatus(t, s, lifecycle.WaitingDependency, ordered[1:]...)
			for k, st := range ns[i].Steps {
				var want []int
				for _, p := range st.Parents {
					want = append(want, ordered[p.Step].ID)
				}
				deps, err := s.Client().TaskDependency.Query().All(sysCtx)
				require.NoError(t, err)
				var parents []int
				for _, e := range deps {
					if e.ChildID == ordered[k].ID {
						parents = append(parents, e.ParentID)
					}
				}
				require.ElementsMatch(t, want, parents, "workflow %d step %d: edges within its workflow", i, k)
			}
		}

		// Only the roots are claimable; a root's success releases its own
		// workflow's next step and no other.
		cl := claimAll(t, s)
		require.Len(t, cl, len(ns))
		for id := range cl {
			_, ok := roots[id]
			require.True(t, ok, "task %d claimed is a root", id)
		}
		first := steps[0]
		succeed(t, s, cl[first[0].ID])
		requireStatus(t, s, lifecycle.Pending, first[1])
		requireStatus(t, s, lifecycle.WaitingDependency, first[2], steps[1][1], steps[len(ns)-1][1])
		next := claimAll(t, s)
		require.Len(t, next, 1)
		require.Contains(t, next, first[1].ID)
	})
}

func TestCreateWorkflowsAnswersAnIdempotencyKeyWithItsFirstWorkflow(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		s, _ := setup(t, drv.DSN(t))
		res, err := createWorkflows(t, s, []store.NewWorkflow{chainDef(2, "k1", "h"), chainDef(2, "k2", "h"), chainDef(2, "k1", "h"), chainDef(2, "", "h")})
		require.NoError(t, err)
		require.True(t, res[0].Created)
		require.True(t, res[1].Created)
		require.False(t, res[2].Created, "the same key twice in one call is one workflow")
		require.Equal(t, res[0].Workflow.ID, res[2].Workflow.ID)
		require.True(t, res[3].Created)
		wfs, tasks := countWorkflowsAndTasks(t, s)
		require.Equal(t, 3, wfs)
		require.Equal(t, 6, tasks)

		again, err := createWorkflows(t, s, []store.NewWorkflow{chainDef(2, "k2", "h"), chainDef(2, "k1", "h")})
		require.NoError(t, err)
		require.False(t, again[0].Created)
		require.Equal(t, res[1].Workflow.ID, again[0].Workflow.ID)
		require.False(t, again[1].Created)
		require.Equal(t, res[0].Workflow.ID, again[1].Workflow.ID)
		wfs, tasks = countWorkflowsAndTasks(t, s)
		require.Equal(t, 3, wfs)
		require.Equal(t, 6, tasks, "no step created again")

		// CreateWorkflow answers the same.
		var wf *ent.Workflow
		var created bool
		require.NoError(t, s.Write(sysCtx, func(tx *store.Tx) error {
			wf, created, err = tx.CreateWorkflow(sysCtx, chainDef(2, "k1", "h"))
			return err
		}))
		require.False(t, created)
		require.Equal(t, res[0].Workflow.ID, wf.ID)
	})
}

func TestCreateWorkflowsConflictFailsTheWholeCall(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		s, _ := setup(t, drv.DSN(t))
		_, err := createWorkflows(t, s, []store.NewWorkflow{chainDef(2, "k", "h")})
		require.NoError(t, err)

		// A key used before for another definition.
		_, err = createWorkflows(t, s, []store.NewWorkflow{chainDef(2, "x", "h"), chainDef(3, "", "h"), chainDef(2, "k", "other")})
		var ce *store.ConflictError
		require.ErrorAs(t, err, &ce)
		require.ErrorIs(t, err, store.ErrConflict)
		require.Contains(t, err.Error(), "workflow 2:")
		wfs, tasks := countWorkflowsAndTasks(t, s)
		require.Equal(t, 1, wfs, "nothing of the call was created")
		require.Equal(t, 2, tasks)

		// A key used twice in one call for two definitions.
		_, err = createWorkflows(t, s, []store.NewWorkflow{chainDef(2, "y", "h"), chainDef(2, "y", "other")})
		require.ErrorAs(t, err, &ce)
		require.Contains(t, err.Error(), "workflow 1:")
		wfs, tasks = countWorkflowsAndTasks(t, s)
		require.Equal(t, 1, wfs)
		require.Equal(t, 2, tasks)

		// CreateWorkflow returns the conflict as it is.
		err = s.Write(sysCtx, func(tx *store.Tx) error {
			_, _, err := tx.CreateWorkflow(sysCtx, chainDef(2, "k", "other"))
			return err
		})
		require.True(t, errors.As(err, &ce))
		require.Equal(t, ce.Error(), err.Error())
	})
}

// TestCreateWorkflowsOfMoreRowsThanAStatementHolds creates more workflows
// in one call than one insert holds on SQLite (its parameters), with keys,
// and again: every one created once, then answered.
func TestCreateWorkflowsOfMoreRowsThanAStatementHolds(t *testing.T) {
	t.Parallel() // about a minute on SQLite with -race: beside the others
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		s, _ := setup(t, drv.DSN(t))
		const n = 2_400
		ns := make([]store.NewWorkflow, n)
		for i := range ns {
			ns[i] = chainDef(1, fmt.Sprintf("k%d", i), "h")
		}
		res, err := createWorkflows(t, s, ns)
		require.NoError(t, err)
		ids := map[int]bool{}
		for i, r := range res {
			require.True(t, r.Created, "workflow %d", i)
			require.Equal(t, "k"+fmt.Sprint(i), *r.Workflow.IdempotencyKey)
			ids[r.Workflow.ID] = true
		}
		require.Len(t, ids, n)
		again, err := createWorkflows(t, s, ns)
		require.NoError(t, err)
		for i, r := range again {
			require.False(t, r.Created, "workflow %d", i)
			require.Equal(t, res[i].Workflow.ID, r.Workflow.ID)
		}
		wfs, tasks := countWorkflowsAndTasks(t, s)
		require.Equal(t, n, wfs)
		require.Equal(t, n, tasks)
	})
}
