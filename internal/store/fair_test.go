package store_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// enqueueFor creates n tasks of type noop for tenant, in batches, with
// priorities cycling through prio (none: 0).
func enqueueFor(t *testing.T, s *store.Store, tenant string, n int, prio ...int) {
	t.Helper()
	for done := 0; done < n; {
		var batch []store.NewTask
		for ; done < n && len(batch) < 1000; done++ {
			nt := newTaskParams(taskOpts{})
			nt.Tenant = tenant
			nt.Owner = tenant + "-user"
			if len(prio) > 0 {
				nt.Priority = prio[done%len(prio)]
			}
			batch = append(batch, nt)
		}
		createAll(t, s, batch)
	}
}

// TestFairShareBoundsTheWaitOfASmallTenant: tenant A enqueues 50,000, then
// tenant B 100; with equal weights, claims of 10 start every B task before
// A has started more than 100 + (10+1) more (the bound of the stride
// scheduling in store/fair.go for one node: w_A/w_B per B task, plus one
// claim), B's in order of priority. Without the fair share the claim takes
// A's 50,000 first (they are older).
func TestFairShareBoundsTheWaitOfASmallTenant(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, _ := setup(t, dsn)
		enqueueFor(t, s, "a", 50000)
		enqueueFor(t, s, "b", 100, 3, 1, 2)
		const limit = 10
		aRan, bRan, lastPrio := 0, 0, -1
		for bRan < 100 {
			cl, err := s.Claim(sysCtx, "w", []string{"noop", "webhook"}, limit)
			require.NoError(t, err)
			require.NotEmpty(t, cl)
			require.LessOrEqual(t, len(cl), limit)
			for _, c := range cl {
				switch c.Task.Tenant {
				case "a":
					aRan++
				case "b":
					bRan++
					require.GreaterOrEqual(t, c.Task.Priority, lastPrio, "B's tasks in order of priority")
					lastPrio = c.Task.Priority
				}
			}
		}
		require.LessOrEqual(t, aRan, 100+limit+1, "A ran %d while B's 100 started", aRan)
		require.GreaterOrEqual(t, aRan, 100-limit-1, "equal weights: A's share meanwhile is B's (%d)", aRan)
		// B is done: A takes whole claims again.
		cl, err := s.Claim(sysCtx, "w", []string{"noop"}, limit)
		require.NoError(t, err)
		require.Len(t, cl, limit)
		for _, c := range cl {
			require.Equal(t, "a", c.Task.Tenant)
		}
	})
}

// TestFairShareFollowsWeights: with weights 3:1 (tenant_quotas.weight) the
// shares of 400 claimed tasks are within 10% of 3:1, whether claimed in
// batches of 1 (the share is kept across claims) or of 8; a tenant without
// a quota weighs 1.
func TestFairShareFollowsWeights(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, _ := setup(t, dsn)
		_, err := s.Client().TenantQuota.Create().SetTenant("heavy").SetWeight(3).Save(sysCtx)
		require.NoError(t, err)
		enqueueFor(t, s, "heavy", 1000)
		enqueueFor(t, s, "light", 1000)
		for _, limit := range []int{1, 8} {
			t.Run(fmt.Sprintf("Limit%d", limit), func(t *testing.T) {
				per := map[string]int{}
				for total := 0; total < 400; {
					cl, err := s.Claim(sysCtx, "w", []string{"noop"}, limit)
					require.NoError(t, err)
					require.Len(t, cl, limit)
					for _, c := range cl {
						per[c.Task.Tenant]++
					}
					total += len(cl)
				}
				share := float64(per["heavy"]) / float64(per["heavy"]+per["light"])
				require.InDelta(t, 0.75, share, 0.075, "shares %v", per)
			})
		}
	})
}

// TestFairShareOnTwoNodes: two stores (two nodes, each with its own
// passes) claim concurrently from one PostgreSQL; B's 100 tasks start
// before A has started more than 100 + 2·(10+1) more, plus one claim per
// node for the order in which the claims' results are counted here.
func TestFairShareOnTwoNodes(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresOnly(t)
	s1, _ := setup(t, dsn)
	s2, _ := setup(t, dsn)
	enqueueFor(t, s1, "a", 50000)
	enqueueFor(t, s2, "b", 100)
	const limit = 10
	var mu sync.Mutex
	aRan, bRan := 0, 0
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, s := range []*store.Store{s1, s2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				cl, err := s.Claim(sysCtx, fmt.Sprintf("node-%d", i), []string{"noop"}, limit)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, c := range cl {
					if c.Task.Tenant == "b" {
						bRan++
					} else {
						aRan++
					}
				}
				done := bRan == 100
				mu.Unlock()
				if done {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 100, bRan)
	require.LessOrEqual(t, aRan, 100+2*(limit+1)+2*limit, "A ran %d while B's 100 started", aRan)
}
