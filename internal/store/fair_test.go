package store_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"

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

// enqueueOf creates n tasks of type ty for tenant.
func enqueueOf(t *testing.T, s *store.Store, tenant, ty string, n int) {
	t.Helper()
	batch := make([]store.NewTask, n)
	for i := range batch {
		batch[i] = newTaskParams(taskOpts{typ: ty})
		batch[i].Tenant, batch[i].Owner = tenant, tenant+"-user"
	}
	createAll(t, s, batch)
}

// TestTenantRunningCap: a tenant whose quota caps its running instances
// (tenant_quotas.max_running) has at most that many running across all
// its types, whatever the claim asks; every type it waits for gets a
// part over the claims; a slot freed by a finish is taken at the next
// claim (HeldAtCap says so); another tenant is not held; a claim of the
// tenant's own (a worker of the tenant) keeps the cap too.
func TestTenantRunningCap(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, _ := setup(t, dsn)
		_, err := s.Client().TenantQuota.Create().SetTenant("capped").SetMaxRunning(3).Save(sysCtx)
		require.NoError(t, err)
		enqueueOf(t, s, "capped", "noop", 20)
		enqueueOf(t, s, "capped", "webhook", 20)
		enqueueOf(t, s, "free", "noop", 10)
		types := []string{"noop", "webhook"}
		count := func(cl []store.Claimed) map[string]int {
			per := map[string]int{}
			for _, c := range cl {
				per[c.Task.Tenant]++
			}
			return per
		}
		cl, err := s.Claim(sysCtx, "w", types, 100)
		require.NoError(t, err)
		require.Equal(t, map[string]int{"capped": 3, "free": 10}, count(cl))
		require.True(t, s.HeldAtCap(), "a tenant at its cap: a finish may free a slot")
		running := cl
		again, err := s.Claim(sysCtx, "w", types, 100)
		require.NoError(t, err)
		require.Empty(t, again, "the capped tenant is at its cap, the other has nothing left")
		perType := map[string]int{}
		for round := range 8 {
			var keep []store.Claimed
			for _, c := range running {
				if c.Task.Tenant == "capped" && len(keep) == 0 && round%2 == 0 {
					keep = append(keep, c) // one stays running
					continue
				}
				require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Success}))
			}
			var cl []store.Claimed
			var err error
			if round == 7 {
				cl, err = s.ClaimOfTenant(sysCtx, "w", "capped", types, 100)
			} else {
				cl, err = s.Claim(sysCtx, "w", types, 100)
			}
			require.NoError(t, err)
			require.Equal(t, 3-len(keep), count(cl)["capped"], "round %d: the freed slots are taken, no more", round)
			for _, c := range cl {
				perType[c.Task.Type]++
			}
			running = append(keep, cl...)
		}
		require.Positive(t, perType["noop"])
		require.Positive(t, perType["webhook"], "every type the tenant waits for gets a part: %v", perType)
	})
}

// TestTenantRunningCapOnTwoNodes: two nodes claiming and finishing the
// capped tenant's tasks concurrently on PostgreSQL never have more than
// its cap running at once (the quota's row is locked by each claim).
func TestTenantRunningCapOnTwoNodes(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresOnly(t)
	s1, _ := setup(t, dsn)
	s2, _ := setup(t, dsn)
	_, err := s1.Client().TenantQuota.Create().SetTenant("capped").SetMaxRunning(4).Save(sysCtx)
	require.NoError(t, err)
	enqueueOf(t, s1, "capped", "noop", 300)
	var mu sync.Mutex
	most, done := 0, 0
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, s := range []*store.Store{s1, s2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				cl, err := s.Claim(sysCtx, fmt.Sprintf("node-%d", i), []string{"noop"}, 3)
				if err != nil {
					errs <- err
					return
				}
				var inDB int
				if err := s.DB().QueryRowContext(sysCtx, `SELECT count(*) FROM task_instances WHERE status = 'EXECUTING' AND tenant = 'capped'`).Scan(&inDB); err != nil {
					errs <- err
					return
				}
				// What the database holds right after the claim (finishes
				// only lower it meanwhile).
				mu.Lock()
				most = max(most, inDB)
				mu.Unlock()
				for _, c := range cl {
					if _, err := s.Finish(sysCtx, []store.Outcome{{Token: c.Token(), Status: lifecycle.Success}}); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					done++
					mu.Unlock()
				}
				mu.Lock()
				all := done == 300
				mu.Unlock()
				if all {
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
	require.Equal(t, 300, done)
	require.LessOrEqual(t, most, 4, "never more than the cap running")
	require.Greater(t, most, 1, "both nodes ran the tenant's tasks at once")
}
