package store_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// B and C finish at the same instant on two nodes (two stores on one
// database, each with its own connections, as two nodes have): D is
// released exactly once, by one of them.
func TestParentsEndingTogetherOnTwoNodesReleaseTheChildOnce(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		dsn := drv.DSN(t)
		s1, b1 := setup(t, dsn)
		s2, b2 := setup(t, dsn)
		const rounds = 10
		var joins []*ent.Task
		var pairs [][2]store.Claimed
		for range rounds {
			a, b, c, d := diamond(t, s1, "")
			succeed(t, s1, claimAll(t, s1)[a.ID])
			cl := claimAll(t, s2)
			require.Len(t, cl, 2)
			joins = append(joins, d)
			pairs = append(pairs, [2]store.Claimed{cl[b.ID], cl[c.ID]})
		}
		nodes := [2]*store.Store{s1, s2}
		for _, p := range pairs {
			var wg sync.WaitGroup
			start := make(chan struct{})
			errs := make([]error, 2)
			for i := range 2 {
				wg.Go(func() {
					<-start
					res, err := nodes[i].Finish(sysCtx, []store.Outcome{{Token: p[i].Token(), Status: lifecycle.Success}})
					if err == nil {
						err = res[0]
					}
					errs[i] = err
				})
			}
			close(start)
			wg.Wait()
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
		}
		for _, d := range joins {
			requireStatus(t, s1, lifecycle.Pending, d)
			require.Equal(t, 1, released(b1, d.ID)+released(b2, d.ID), "task %d released by one node, once", d.ID)
			require.Zero(t, instances(t, s1, d.ID)[0].WaitingOn)
		}
		got := map[int]int{}
		for _, s := range nodes {
			for id := range claimAll(t, s) {
				got[id]++
			}
		}
		require.Len(t, got, rounds, "each join claimed once")
		for _, n := range got {
			require.Equal(t, 1, n)
		}
	})
}
