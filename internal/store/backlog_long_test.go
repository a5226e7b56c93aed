//go:build long

package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

func TestLargeBatchesAreSplit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, _ := setup(t, dsn)
		const n = 4500 // more than two statements' worth
		batch := make([]store.NewTask, n)
		for i := range batch {
			batch[i] = newTaskParams(taskOpts{})
		}
		createAll(t, s, batch)
		var claimed []store.Claimed
		for len(claimed) < n {
			cl, err := s.Claim(ctx, "w1", []string{"noop"}, n)
			require.NoError(t, err)
			require.NotEmpty(t, cl)
			claimed = append(claimed, cl...)
		}
		tokens := make([]store.Token, n)
		logs := make([]store.LogLine, 0, n)
		outcomes := make([]store.Outcome, n)
		for i, c := range claimed {
			tokens[i] = c.Token()
			logs = append(logs, store.LogLine{Token: c.Token(), TaskID: c.Task.ID, Level: tasklog.LevelINFO, Message: "x"})
			outcomes[i] = store.Outcome{Token: c.Token(), Status: lifecycle.Success}
		}
		beat, err := s.Heartbeat(ctx, tokens)
		require.NoError(t, err)
		require.Empty(t, beat.Lost)
		rejected, err := s.RecordWork(ctx, logs, nil)
		require.NoError(t, err)
		require.Empty(t, rejected)
		errs, err := s.Finish(ctx, outcomes)
		require.NoError(t, err)
		require.Len(t, errs, n)
		for _, e := range errs {
			require.NoError(t, e)
		}
		done, err := s.Client().Task.Query().Where(task.StatusEQ(lifecycle.Success)).Count(auth.NewSystemContext(ctx))
		require.NoError(t, err)
		require.Equal(t, n, done)
	})
}

// TestClaimPlanDoesNotDependOnTheBacklog fills never-analyzed tables with
// 200,000 waiting instances (and 200,000 more scheduled for tomorrow), then
// EXPLAIN ANALYZEs the claim's real statement: it must read the claimable
// index in order, no more rows than it claims, and sort nothing but the
// few candidates it picked.
func TestClaimPlanDoesNotDependOnTheBacklog(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresOnly(t)
	s, _ := setup(t, dsn)
	db := s.DB()
	for _, q := range []string{
		`ALTER TABLE tasks SET (autovacuum_enabled = false)`,
		`ALTER TABLE task_instances SET (autovacuum_enabled = false)`,
		`INSERT INTO tasks (code, type, status, owner, input, input_hash, timeout_seconds, retry_policy, max_attempts, run_at, updated_at, created_at)
		 SELECT 'NOOP-' || g, 'noop', 'PENDING', 'bench', '{}', '-', 60, 'none', 1,
			CASE WHEN g <= 200000 THEN $1::timestamptz - interval '1 minute' ELSE $1::timestamptz + interval '1 day' END, $1, $1
		 FROM generate_series(1, 400000) g`,
		`INSERT INTO task_instances (task_id, instance_no, attempt, status, task_type, priority, run_at, created_at)
		 SELECT id, 1, 1, 'PENDING', 'noop', priority, run_at, created_at FROM tasks`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, s.Now())
		}
		_, err := db.ExecContext(sysCtx, q, args...)
		require.NoError(t, err, q)
	}
	var analyzed int
	require.NoError(t, db.QueryRowContext(sysCtx, `SELECT count(*) FROM pg_stat_user_tables WHERE relid IN ('tasks'::regclass, 'task_instances'::regclass) AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)`).Scan(&analyzed))
	require.Zero(t, analyzed, "the tables must never have been analyzed")

	for _, tc := range []struct {
		types []string
		limit int
	}{
		{[]string{"noop"}, 256},
		{[]string{"noop", "webhook", "import", "export", "report"}, 256},
		{[]string{"noop"}, 1},
		// Batches of 1,000 and 2,000 (the pool's default and the most a
		// statement carries): the sizes at which the second statement once
		// read the whole claimable index, the backlog, in a bitmap scan.
		{[]string{"noop"}, 1000},
		{[]string{"noop", "webhook"}, 2000},
	} {
		t.Run(fmt.Sprintf("%dTypesLimit%d", len(tc.types), tc.limit), func(t *testing.T) {
			outs, err := s.ExplainClaim(sysCtx, tc.types, tc.limit)
			require.NoError(t, err)
			require.Len(t, outs, 2)
			bound := float64(len(tc.types) * tc.limit)
			// Which index each statement must read task_instances through:
			// the claimable one to pick, the one-live one to move the
			// picked tasks' instances.
			want := []string{"taskinstance_claimable", "taskinstance_one_live_per_task"}
			for i, out := range outs {
				var plans []struct {
					Plan planNode `json:"Plan"`
				}
				require.NoError(t, json.Unmarshal([]byte(out), &plans), out)
				require.Len(t, plans, 1)
				usedIndex := false
				plans[0].Plan.walk(func(n planNode) {
					read := (n.ActualRows + n.RowsRemoved) * max(n.ActualLoops, 1)
					switch {
					case n.NodeType == "Seq Scan" || strings.HasPrefix(n.NodeType, "Bitmap"):
						t.Errorf("statement %d scans %s (%s): %s", i+1, n.RelationName, n.NodeType, out)
					case n.NodeType == "Sort" || n.NodeType == "Incremental Sort":
						if read > bound {
							t.Errorf("statement %d sorts %.0f rows, more than the %.0f candidates it may pick: %s", i+1, read, bound, out)
						}
					case strings.Contains(n.NodeType, "Index") && n.RelationName == "task_instances":
						if n.IndexName == want[i] {
							usedIndex = true
						}
						if read > bound+float64(tc.limit) {
							t.Errorf("statement %d reads %.0f rows of %s through %s, more than it claims: %s", i+1, read, n.RelationName, n.IndexName, out)
						}
					}
				})
				require.True(t, usedIndex, "statement %d must read %s: %s", i+1, want[i], out)
			}
		})
	}
}
