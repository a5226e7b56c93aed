package store

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// livePlanNode is a node of PostgreSQL's EXPLAIN (ANALYZE, FORMAT JSON).
type livePlanNode struct {
	NodeType        string         `json:"Node Type"`
	RelationName    string         `json:"Relation Name"`
	IndexName       string         `json:"Index Name"`
	ActualRows      float64        `json:"Actual Rows"`
	ActualLoops     float64        `json:"Actual Loops"`
	RemovedByJoin   float64        `json:"Rows Removed by Join Filter"`
	RemovedByFilter float64        `json:"Rows Removed by Filter"`
	Plans           []livePlanNode `json:"Plans"`
}

func (n livePlanNode) walk(fn func(livePlanNode)) {
	fn(n)
	for _, c := range n.Plans {
		c.walk(fn)
	}
}

// TestLiveStatementsReadByKeyOnAnalyzedHistory: the statements the hot
// path sends for a batch of running executions (the heartbeat, the
// finish's two updates) read those rows by key, however many other tasks
// are running and whatever the history. On PostgreSQL the history is
// ANALYZEd before any task runs, as a long one is (its sample holds no
// live row, so status = 'EXECUTING' is estimated at one row): with the
// status a constant of the statement, the finish's task update read every
// task and the derived table again for each running one (a burn-down on a
// filled history ran at a tenth of its rate on an empty one), and the
// instance update and the heartbeat read every running instance. Each
// statement is explained as the store plans it, for its arguments and as
// a prepared statement's generic plan, in a transaction rolled back; then
// the heartbeat and the finish run for real, on both databases.
func TestLiveStatementsReadByKeyOnAnalyzedHistory(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		ctx := internal(context.Background())
		s, err := Open(ctx, Config{DSN: dsn})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		const history, running, batch = 20000, 1000, 400
		if s.d.postgres() {
			for _, q := range []string{
				`ALTER TABLE tasks SET (autovacuum_enabled = false)`,
				`ALTER TABLE task_instances SET (autovacuum_enabled = false)`,
				fmt.Sprintf(`INSERT INTO tasks (code, type, status, owner, input, input_hash, timeout_seconds, retry_policy, max_attempts, run_at, updated_at, created_at, finished_at)
 SELECT 'DONE-' || g, 'noop', 'SUCCESS', 'bench', '{}', '-', 60, 'none', 1, now(), now(), now(), now() FROM generate_series(1, %d) g`, history),
				`INSERT INTO task_instances (created_at, instance_no, status, attempt, task_type, priority, run_at, task_id, finished_at)
 SELECT now(), 1, 'SUCCESS', 1, 'noop', 0, now(), id, now() FROM tasks`,
				`ANALYZE tasks`, `ANALYZE task_instances`,
			} {
				_, err := s.DB().ExecContext(ctx, q)
				require.NoError(t, err, q)
			}
		}
		news := make([]NewTask, running)
		for i := range news {
			news[i] = NewTask{Type: "noop", Owner: "bench", Input: json.RawMessage(`{}`), InputHash: "-",
				TimeoutSeconds: 60, RetryPolicy: "none", MaxAttempts: 1}
		}
		res, err := s.CreateTasks(ctx, news)
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err)
		}
		var claimed []Claimed
		for len(claimed) < running {
			cl, err := s.Claim(ctx, "w", []string{"noop"}, running-len(claimed))
			require.NoError(t, err)
			require.NotEmpty(t, cl)
			claimed = append(claimed, cl...)
		}
		mine := claimed[:batch]
		now := s.Now()

		// The heartbeat's statement, as heartbeat builds it.
		hb := [][]any{make([]any, batch), make([]any, batch), make([]any, batch)}
		for i, c := range mine {
			hb[0][i], hb[2][i] = int64(c.Instance.ID), string(lifecycle.Executing)
		}
		v, vArgs := s.d.valuesTable("v", []string{"iid", "moved", "live_status"}, []colType{colInt, colTime, colText}, hb)
		keys, keyArgs := s.d.liveByKeys("task_instances.id", hb[0])
		heartbeat := s.d.heartbeatSQL(v, keys)
		heartbeatArgs := append(append([]any{now}, vArgs...), keyArgs...)

		// The finish's two statements, as finish builds them, for SUCCESS.
		fi := make([][]any, len(finishInstanceCols))
		ft := make([][]any, len(finishTaskCols))
		for _, c := range mine {
			for col, x := range []any{int64(c.Instance.ID), c.Instance.Version, string(lifecycle.Success), nil, nil, nil, nil, string(lifecycle.Executing)} {
				fi[col] = append(fi[col], x)
			}
			for col, x := range []any{int64(c.Task.ID), string(lifecycle.Success), nil, nil, nil, string(lifecycle.Executing)} {
				ft[col] = append(ft[col], x)
			}
		}
		v, vArgs = s.d.valuesTable("v", finishInstanceCols, finishInstanceTypes, fi)
		keys, keyArgs = s.d.liveByKeys("task_instances.id", fi[0])
		instances := s.d.finishInstancesSQL(v, keys)
		instancesArgs := append(append([]any{now}, vArgs...), keyArgs...)
		v, vArgs = s.d.valuesTable("v", finishTaskCols, finishTaskTypes, ft)
		keys, keyArgs = s.d.liveByKeys("tasks.id", ft[0])
		tasks := s.d.finishTasksSQL(v, keys)
		tasksArgs := append(append([]any{now, now, now, now, now, now}, vArgs...), keyArgs...)

		if s.d.postgres() {
			for _, st := range []struct {
				name string
				q    string
				args []any
			}{{"heartbeat", heartbeat, heartbeatArgs}, {"finish instances", instances, instancesArgs}, {"finish tasks", tasks, tasksArgs}} {
				for _, generic := range []bool{false, true} {
					plan := explainLive(t, s, st.q, st.args, generic)
					var moved float64
					plan.walk(func(n livePlanNode) {
						if n.RelationName != "tasks" && n.RelationName != "task_instances" {
							return
						}
						where := fmt.Sprintf("%s (generic plan: %v): %s on %s %s", st.name, generic, n.NodeType, n.RelationName, n.IndexName)
						assert.NotEqual(t, "Seq Scan", n.NodeType, where)
						assert.LessOrEqual(t, n.ActualRows*n.ActualLoops+n.RemovedByFilter, float64(batch), "%s: rows read", where)
						if n.NodeType == "ModifyTable" {
							moved = n.ActualRows
						}
					})
					plan.walk(func(n livePlanNode) {
						assert.Zero(t, n.RemovedByJoin, "%s (generic plan: %v): %s joins rows it drops", st.name, generic, n.NodeType)
					})
					assert.Equal(t, float64(batch), moved, "%s (generic plan: %v): rows moved", st.name, generic)
				}
			}
		}

		// For real: every execution of the batch is alive, then ends.
		tokens := make([]Token, batch)
		outcomes := make([]Outcome, batch)
		for i, c := range mine {
			tokens[i] = c.Token()
			outcomes[i] = Outcome{Token: c.Token(), Status: lifecycle.Success, Task: c.Task}
		}
		beat, err := s.Heartbeat(ctx, tokens)
		require.NoError(t, err)
		require.Empty(t, beat.Lost)
		errs, err := s.Finish(ctx, outcomes)
		require.NoError(t, err)
		for _, e := range errs {
			require.NoError(t, e)
		}
		var done, live int
		require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM tasks WHERE status = 'SUCCESS' AND owner = 'bench' AND code NOT LIKE 'DONE-%'`).Scan(&done))
		require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM task_instances WHERE status = 'EXECUTING'`).Scan(&live))
		require.Equal(t, batch, done)
		require.Equal(t, running-batch, live)
	})
}

// explainLive returns the plan of q with args by EXPLAIN ANALYZE in a
// transaction rolled back: as planned for its arguments (what a statement
// run once gets) or, generic, as the generic plan of a prepared statement
// (what PostgreSQL may settle on for a statement the store prepares once
// and runs again and again).
func explainLive(t *testing.T, s *Store, q string, args []any, generic bool) livePlanNode {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	q = s.d.rebind(q)
	stmt := "EXPLAIN (ANALYZE, FORMAT JSON) " + q
	if generic {
		_, err := tx.ExecContext(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, "PREPARE live_plan AS "+q)
		require.NoError(t, err)
		// EXECUTE takes no parameters of its own: the arguments as literals.
		ps := make([]string, len(args))
		for i, a := range args {
			if v, ok := a.(driver.Valuer); ok {
				a, err = v.Value()
				require.NoError(t, err)
			}
			switch x := a.(type) {
			case nil:
				ps[i] = "NULL"
			case time.Time:
				ps[i] = "'" + x.UTC().Format(time.RFC3339Nano) + "'"
			case []byte:
				ps[i] = "'" + strings.ReplaceAll(string(x), "'", "''") + "'"
			case string:
				ps[i] = "'" + strings.ReplaceAll(x, "'", "''") + "'"
			default:
				ps[i] = fmt.Sprint(x)
			}
		}
		stmt, args = "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE live_plan("+strings.Join(ps, ", ")+")", nil
	}
	var out string
	require.NoError(t, tx.QueryRowContext(ctx, stmt, args...).Scan(&out))
	if generic {
		_, err = tx.ExecContext(ctx, `DEALLOCATE live_plan`) // of the session, not the transaction
		require.NoError(t, err)
	}
	var plans []struct {
		Plan livePlanNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &plans), out)
	require.Len(t, plans, 1)
	return plans[0].Plan
}
