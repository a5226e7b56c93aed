//go:build long

package store_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// A root, 9,998 steps after it, and one step after all of them: 10,000
// steps. The fan-out is released by the root's finish, the fan-in once,
// by whichever batch of finishes ends the last of its parents.
func TestTenThousandStepFanOutAndFanIn(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		s, bundle := setup(t, drv.DSN(t))
		const middle = 9_998
		steps := make([]store.NewTask, 0, middle+2)
		root := newTaskParams(taskOpts{})
		steps = append(steps, root)
		join := newTaskParams(taskOpts{})
		for i := range middle {
			n := newTaskParams(taskOpts{})
			n.Title = fmt.Sprint(i)
			n.Parents = []store.Parent{{Step: 0}}
			steps = append(steps, n)
			join.Parents = append(join.Parents, store.Parent{Step: i + 1})
		}
		steps = append(steps, join)
		ts := createAll(t, s, steps)
		joinTask := ts[len(ts)-1]
		require.Equal(t, middle, instances(t, s, joinTask.ID)[0].WaitingOn)

		cl := claimAll(t, s)
		require.Len(t, cl, 1)
		succeed(t, s, cl[ts[0].ID])
		pending, err := s.Client().Task.Query().Where(task.StatusEQ(lifecycle.Pending)).Count(sysCtx)
		require.NoError(t, err)
		require.Equal(t, middle, pending, "the root's finish released every step after it")

		for done := 0; done < middle; {
			claimed, err := s.Claim(sysCtx, "w1", []string{"noop"}, 500)
			require.NoError(t, err)
			require.NotEmpty(t, claimed)
			outs := make([]store.Outcome, len(claimed))
			for i, c := range claimed {
				require.NotEqual(t, joinTask.ID, c.Task.ID, "the fan-in ran before its parents ended")
				outs[i] = store.Outcome{Token: c.Token(), Status: lifecycle.Success}
			}
			errs, err := s.Finish(sysCtx, outs)
			require.NoError(t, err)
			for _, e := range errs {
				require.NoError(t, e)
			}
			done += len(claimed)
		}
		requireStatus(t, s, lifecycle.Pending, joinTask)
		require.Equal(t, 1, released(bundle, joinTask.ID))
		cl = claimAll(t, s)
		require.Len(t, cl, 1)
		succeed(t, s, cl[joinTask.ID])
	})
}
