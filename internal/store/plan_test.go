package store_test

import (
	"context"
	"fmt"

	"strings"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// planNode is a node of PostgreSQL's EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	ActualRows   float64    `json:"Actual Rows"`
	ActualLoops  float64    `json:"Actual Loops"`
	RowsRemoved  float64    `json:"Rows Removed by Filter"`
	Plans        []planNode `json:"Plans"`
}

func (n planNode) walk(fn func(planNode)) {
	fn(n)
	for _, c := range n.Plans {
		c.walk(fn)
	}
}

// TestClaimPlanOnSQLite checks SQLite's plan of the claim: each task type is
// read from the claimable index in order (SQLite keeps no statistics unless
// told to ANALYZE, so the plan is the same for any backlog); the only sort
// is of the candidates of all types together.
func TestClaimPlanOnSQLite(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, dbtest.SQLite(t))
	outs, err := s.ExplainClaim(sysCtx, []string{"noop", "webhook", "import"}, 256)
	require.NoError(t, err)
	require.Len(t, outs, 2)
	out := outs[0]
	require.Regexp(t, `SEARCH task_instances USING INDEX taskinstance_(one_live_per_task|task_id_instance_no) \(task_id=\?\)`, outs[1])
	require.Equal(t, 3, strings.Count(out, "SEARCH task_instances USING INDEX taskinstance_claimable (task_type=?"), out)
	require.NotContains(t, out, "SCAN task_instances", out)
	require.Equal(t, 1, strings.Count(out, "USE TEMP B-TREE"), out)
}

// testGate admits a fixed room per type and records what was claimed.
type testGate struct {
	room    map[string]int
	claimed map[string]int
}

func (g *testGate) Admit(ctx context.Context, q store.Querier, types []string, clock func() time.Time) (store.Admission, error) {
	// The gate runs in the claim's transaction: it can read.
	var one int
	rows, err := q.Query(ctx, "SELECT 1")
	if err != nil {
		return store.Admission{}, err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(&one); err != nil {
			return store.Admission{}, err
		}
	}
	record := func(ctx context.Context, q store.Querier, claimed map[string]int) error {
		for k, v := range claimed {
			g.claimed[k] += v
		}
		return nil
	}
	return store.Admission{Now: clock(), Room: g.room, Record: record}, rows.Err()
}

// TestGateLimitsTheClaim: a type absent from the gate's answer is not
// claimed, a type with room takes at most that, Unlimited takes the
// claim's limit, and the gate hears what was claimed.
func TestGateLimitsTheClaim(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		g := &testGate{room: map[string]int{"noop": 2, "export": store.Unlimited}, claimed: map[string]int{}}
		s, err := store.Open(sysCtx, store.Config{DSN: dsn, Gate: g})
		require.NoError(t, err)
		access.Install(s.Client())
		t.Cleanup(func() { _ = s.Close() })
		var batch []store.NewTask
		for _, ty := range []string{"noop", "webhook", "export"} {
			for range 5 {
				batch = append(batch, newTaskParams(taskOpts{typ: ty}))
			}
		}
		createAll(t, s, batch)
		cl, err := s.Claim(sysCtx, "w", []string{"noop", "webhook", "export"}, 4)
		require.NoError(t, err)
		per := map[string]int{}
		for _, c := range cl {
			per[c.Task.Type]++
		}
		require.Equal(t, 4, len(cl))
		require.LessOrEqual(t, per["noop"], 2)
		require.Zero(t, per["webhook"])
		require.Equal(t, per, g.claimed)
		cl, err = s.Claim(sysCtx, "w", []string{"noop", "webhook", "export"}, 100)
		require.NoError(t, err)
		for _, c := range cl {
			per[c.Task.Type]++
		}
		require.Equal(t, map[string]int{"noop": 4, "export": 5}, per, "noop: 2 a claim; webhook: none")
	})
}

// TestClaimEachCapsEveryTypeAndKeepsPriorityAcrossThem: one claim of
// several types takes at most each type's cap, and limit in all, in claim
// order across the types: a capped type's urgent task is taken ahead of
// another type's backlog, not after it.
func TestClaimEachCapsEveryTypeAndKeepsPriorityAcrossThem(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, _ := setup(t, dsn)
		var batch []store.NewTask
		for range 10 {
			batch = append(batch, newTaskParams(taskOpts{typ: "noop"}))
		}
		for i := range 4 {
			n := newTaskParams(taskOpts{typ: "import"})
			n.Priority = -i // more urgent than every noop (priority 0)
			batch = append(batch, n)
		}
		createAll(t, s, batch)

		cl, err := s.ClaimEach(sysCtx, "w", []string{"noop", "import"}, []int{10, 2}, 5)
		require.NoError(t, err)
		var got []string
		for _, c := range cl {
			got = append(got, fmt.Sprintf("%s/%d", c.Task.Type, c.Task.Priority))
		}
		require.Equal(t, []string{"import/-3", "import/-2", "noop/0", "noop/0", "noop/0"}, got,
			"the import's cap of 2, taken first by priority; the rest of the limit from noop")

		cl, err = s.ClaimEach(sysCtx, "w", []string{"noop", "import"}, []int{0, 5}, 5)
		require.NoError(t, err)
		got = got[:0]
		for _, c := range cl {
			got = append(got, fmt.Sprintf("%s/%d", c.Task.Type, c.Task.Priority))
		}
		require.Equal(t, []string{"import/-1", "import/0"}, got, "a cap of 0 takes none of that type")

		_, err = s.ClaimEach(sysCtx, "w", []string{"noop", "import"}, []int{1}, 5)
		require.ErrorContains(t, err, "1 caps for 2 types")
	})
}

// TestStatusFiltersUseAnIndex: tasks keep no index on status, so a filter
// on a rare status is served by attention_status (or the running
// instances) through StatusHints. The hinted query returns what the plain
// one returns, and on PostgreSQL its plan reads the index, not the table.
func TestStatusFiltersUseAnIndex(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, _ := setup(t, dsn)
		batch := make([]store.NewTask, 300)
		for i := range batch {
			batch[i] = newTaskParams(taskOpts{maxAttempts: 1})
		}
		createAll(t, s, batch)
		cl, err := s.Claim(sysCtx, "w", []string{"noop"}, 200)
		require.NoError(t, err)
		outcomes := make([]store.Outcome, len(cl))
		for i, c := range cl {
			outcomes[i] = store.Outcome{Token: c.Token(), Status: lifecycle.Success, Task: c.Task}
			switch i % 50 {
			case 0:
				outcomes[i] = store.Outcome{Token: c.Token(), Status: lifecycle.Failed, Kind: lifecycle.KindNonRetryable, Error: "boom", Task: c.Task}
			case 1:
				outcomes[i] = store.Outcome{Token: c.Token(), Status: lifecycle.Failed, Kind: lifecycle.KindRetryable, Error: "again", Retry: &store.Retry{RunAt: epoch, Attempt: 2}}
			}
		}
		errs, err := s.Finish(sysCtx, outcomes[:190])
		require.NoError(t, err)
		for _, e := range errs {
			require.NoError(t, e)
		}
		for _, id := range []int{cl[0].Task.ID, cl[1].Task.ID, cl[195].Task.ID, cl[60].Task.ID} {
			requireMirrored(t, s, id)
		}
		for _, want := range [][]lifecycle.Status{{lifecycle.Failed}, {lifecycle.RetryPending}, {lifecycle.Executing}, {lifecycle.Failed, lifecycle.Cancelled}, {lifecycle.Success}} {
			plain := &ent.TaskWhereInput{StatusIn: want}
			hinted := &ent.TaskWhereInput{StatusIn: want}
			store.StatusHints(hinted)
			ids := func(w *ent.TaskWhereInput) []int {
				q, err := w.Filter(s.Client().Task.Query())
				require.NoError(t, err)
				out, err := q.Order(ent.Asc(task.FieldID)).IDs(sysCtx)
				require.NoError(t, err)
				return out
			}
			require.Equal(t, ids(plain), ids(hinted), "%v", want)
		}
		require.Len(t, func() []int {
			w := &ent.TaskWhereInput{Status: ptr(lifecycle.Failed)}
			store.StatusHints(w)
			q, _ := w.Filter(s.Client().Task.Query())
			out, _ := q.IDs(sysCtx)
			return out
		}(), 4)

		if !s.Postgres() {
			return
		}
		// Among 200,000 finished tasks, never analyzed, the statement ent
		// sends for a hinted filter, explained.
		_, err = s.DB().ExecContext(sysCtx, `ALTER TABLE tasks SET (autovacuum_enabled = false)`)
		require.NoError(t, err)
		_, err = s.DB().ExecContext(sysCtx, `INSERT INTO tasks (code, type, status, owner, input, input_hash, timeout_seconds, retry_policy, max_attempts, run_at, updated_at, created_at, finished_at)
		 SELECT 'DONE-' || g, 'noop', 'SUCCESS', 'bench', '{}', '-', 60, 'none', 1, $1, $1, $1, $1 FROM generate_series(1, 200000) g`, s.Now())
		require.NoError(t, err)
		var stmt string
		var args []any
		c := ent.NewClient(ent.Driver(debugDriver(s, &stmt, &args)))
		w := &ent.TaskWhereInput{Status: ptr(lifecycle.Failed)}
		store.StatusHints(w)
		q, err := w.Filter(c.Task.Query())
		require.NoError(t, err)
		_, err = q.Order(ent.Desc(task.FieldCreatedAt)).Limit(50).IDs(sysCtx)
		require.NoError(t, err)
		rows, err := s.DB().QueryContext(sysCtx, "EXPLAIN "+stmt, args...)
		require.NoError(t, err)
		var all strings.Builder
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			all.WriteString(line + "\n")
		}
		require.NoError(t, rows.Close())
		require.Contains(t, all.String(), "task_attention_status_created_at", all.String())
		require.NotContains(t, all.String(), "Seq Scan on tasks", all.String())

		// The count countTasks and bulkPreview send for the same hinted
		// filter (the engine hints every filter it counts) reads the index too.
		_, err = q.Count(sysCtx)
		require.NoError(t, err)
		require.Contains(t, stmt, "COUNT", stmt)
		rows, err = s.DB().QueryContext(sysCtx, "EXPLAIN "+stmt, args...)
		require.NoError(t, err)
		all.Reset()
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			all.WriteString(line + "\n")
		}
		require.NoError(t, rows.Close())
		require.Contains(t, all.String(), "task_attention_status_created_at", all.String())
		require.NotContains(t, all.String(), "Seq Scan on tasks", all.String())
	})
}

func ptr[T any](v T) *T { return &v }

// recordingDriver is an ent driver over the store's database that keeps
// the last query it was asked to run.
type recordingDriver struct {
	dialect.Driver
	stmt *string
	args *[]any
}

func debugDriver(s *store.Store, stmt *string, args *[]any) dialect.Driver {
	return recordingDriver{Driver: entsql.OpenDB(dialect.Postgres, s.DB()), stmt: stmt, args: args}
}

func (d recordingDriver) Query(ctx context.Context, query string, args, v any) error {
	*d.stmt = query
	*d.args, _ = args.([]any)
	return d.Driver.Query(ctx, query, args, v)
}
