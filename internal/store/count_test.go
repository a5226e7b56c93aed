package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// TestCountTasks: a count within its budget is exact and is what ent's
// Count says, for the viewer (the access filter applies); on PostgreSQL a
// count past its budget is an estimate from a sample of the table, whose
// 95% interval holds the true count, for a filter spread over the table,
// one clustered in a part of it and one that matches nothing.
func TestCountTasks(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, _ := setup(t, dsn)
		batch := make([]store.NewTask, 30)
		for i := range batch {
			o := taskOpts{}
			if i%3 == 0 {
				o.owner, o.typ = "bob", "other"
			}
			batch[i] = newTaskParams(o)
		}
		createAll(t, s, batch)
		alice := auth.NewContext(context.Background(), auth.Viewer{User: "alice", Role: auth.RoleViewer})
		count := func(ctx context.Context, budget time.Duration, preds ...func(*ent.TaskQuery) *ent.TaskQuery) store.Count {
			t.Helper()
			c, err := s.CountTasks(ctx, func(ctx context.Context) error {
				q := s.Client().Task.Query()
				for _, p := range preds {
					q = p(q)
				}
				_, err := q.IDs(ctx)
				return err
			}, budget)
			require.NoError(t, err)
			return c
		}
		ofType := func(typ string) func(*ent.TaskQuery) *ent.TaskQuery {
			return func(q *ent.TaskQuery) *ent.TaskQuery { return q.Where(task.Type(typ)) }
		}
		exact := func(n int) store.Count { return store.Count{N: n, Exact: true, Low: n, High: n} }
		require.Equal(t, exact(30), count(sysCtx, time.Second))
		require.Equal(t, exact(30), count(sysCtx, 0), "no budget: counted")
		require.Equal(t, exact(10), count(sysCtx, time.Second, ofType("other")))
		require.Equal(t, exact(20), count(alice, time.Second), "alice sees her own")
		require.Equal(t, exact(0), count(alice, time.Second, ofType("other")))

		allIDs := func(ctx context.Context) error { _, err := s.Client().Task.Query().IDs(ctx); return err }
		byType := func(g store.GroupCounts, typ string) store.Count {
			return g.Count(func(k []string) bool { return k[0] == typ })
		}
		g, err := s.CountTasksBy(sysCtx, allIDs, time.Second, "type", "status")
		require.NoError(t, err)
		require.True(t, g.Exact)
		require.ElementsMatch(t, [][]string{{"noop", "PENDING"}, {"other", "PENDING"}}, g.Groups())
		require.Equal(t, exact(10), byType(g, "other"))
		g, err = s.CountTasksBy(alice, allIDs, time.Second, "type", "status")
		require.NoError(t, err)
		require.Equal(t, [][]string{{"noop", "PENDING"}}, g.Groups(), "alice's own")
		_, err = s.CountTasksBy(sysCtx, allIDs, time.Second, "type; DROP TABLE tasks")
		require.Error(t, err, "only a task column")

		_, err = s.CountTasks(sysCtx, func(context.Context) error { return nil }, time.Second)
		require.Error(t, err, "a query not run through the client is no count")

		if !s.Postgres() {
			return
		}
		// 200,000 finished tasks: a tenth of each page of type "spread",
		// the first 20,000 of type "old"; a count of them takes more than
		// a millisecond, so it is estimated.
		_, err = s.DB().ExecContext(sysCtx, `INSERT INTO tasks (code, type, status, owner, input, input_hash, timeout_seconds, retry_policy, max_attempts, run_at, updated_at, created_at, finished_at)
		 SELECT 'DONE-' || g, CASE WHEN g <= 20000 THEN 'old' WHEN g % 10 = 0 THEN 'spread' ELSE 'noop' END, 'SUCCESS', 'alice', '{}', '-', 60, 'none', 1, $1, $1, $1, $1 FROM generate_series(1, 200000) g`, s.Now())
		require.NoError(t, err)
		_, err = s.DB().ExecContext(sysCtx, `ANALYZE tasks`)
		require.NoError(t, err)
		for _, c := range []struct {
			typ  string
			want int
		}{{"spread", 18000}, {"old", 20000}, {"nothing", 0}, {"noop", 162000 + 20}} {
			got := count(sysCtx, time.Millisecond, ofType(c.typ))
			t.Logf("%s: %d counted, estimated %+v", c.typ, c.want, got)
			require.False(t, got.Exact, c.typ)
			require.LessOrEqual(t, got.Low, c.want, "%s: %+v", c.typ, got)
			require.GreaterOrEqual(t, got.High, c.want, "%s: %+v", c.typ, got)
			require.LessOrEqual(t, got.High-got.Low, 200030/10, "%s: an interval of at most a tenth of the table: %+v", c.typ, got)
			require.Greater(t, got.Sampled, 0.0, c.typ)
			require.Less(t, got.Sampled, 0.5, c.typ)
		}
		require.Equal(t, exact(18000), count(sysCtx, time.Minute, ofType("spread")), "within the budget: counted")
		// The access filter holds in the sample: alice's estimate holds her
		// 18,000; bob, who owns none of them, gets an interval near 0.
		got := count(alice, time.Millisecond, ofType("spread"))
		require.False(t, got.Exact)
		require.True(t, got.Low <= 18000 && 18000 <= got.High, "%+v", got)
		bob := auth.NewContext(context.Background(), auth.Viewer{User: "bob", Role: auth.RoleViewer})
		got = count(bob, time.Millisecond, ofType("spread"))
		require.Equal(t, 0, got.N, "%+v", got)
		require.Less(t, got.High, 100, "%+v", got)

		// Grouped, past the budget: each group's estimate, and a sum of
		// groups', holds the true count.
		g, err = s.CountTasksBy(sysCtx, allIDs, time.Millisecond, "type", "status")
		require.NoError(t, err)
		require.False(t, g.Exact)
		require.Contains(t, g.Groups(), []string{"spread", "SUCCESS"})
		for typ, want := range map[string]int{"spread": 18000, "old": 20000, "other": 10, "noop": 162020} {
			got := byType(g, typ)
			t.Logf("by type %s: %d counted, estimated %+v", typ, want, got)
			require.LessOrEqual(t, got.Low, want, typ)
			require.GreaterOrEqual(t, got.High, want, typ)
		}
		all := g.Count(func([]string) bool { return true })
		require.InDelta(t, 200030, all.N, 2000, "%+v", all)
	})
}
