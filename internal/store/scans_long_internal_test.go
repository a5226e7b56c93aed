//go:build long

package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// TestBackgroundScansDoNotReadTheBacklog: the watchdog's read of running
// executions and the retention's pick of finished tasks, on tables never
// analyzed and holding 200,000 rows they must not read: each plan reads an
// index, and no more rows than it returns (or than the purge's limit).
func TestBackgroundScansDoNotReadTheBacklog(t *testing.T) {
	t.Parallel()
	ctx := auth.NewSystemContext(context.Background())
	s, err := Open(ctx, Config{DSN: dbtest.PostgresOnly(t)})
	require.NoError(t, err)
	access.Install(s.Client())
	t.Cleanup(func() { _ = s.Close() })
	old := s.Now().Add(-60 * 24 * time.Hour)
	for _, q := range []string{
		`ALTER TABLE tasks SET (autovacuum_enabled = false)`,
		`ALTER TABLE task_instances SET (autovacuum_enabled = false)`,
		// 200,000 waiting tasks created long ago (the retention must pass
		// them by cheaply... or not at all: they are read through the
		// created_at index only up to the limit of finished ones), and
		// as many finished ones.
		`INSERT INTO tasks (code, type, status, owner, input, input_hash, timeout_seconds, retry_policy, max_attempts, run_at, updated_at, created_at, finished_at)
		 SELECT 'T-' || g, 'noop', CASE WHEN g % 2 = 0 THEN 'SUCCESS' ELSE 'PENDING' END, 'o', '{}', '-', 60, 'none', 1,
			$1, $1, $1::timestamptz + g * interval '1 second', CASE WHEN g % 2 = 0 THEN $1::timestamptz + g * interval '1 second' END
		 FROM generate_series(1, 400000) g`,
		`INSERT INTO task_instances (task_id, instance_no, attempt, status, task_type, priority, run_at, created_at)
		 SELECT id, 1, 1, CASE WHEN status = 'SUCCESS' THEN 'SUCCESS' WHEN id % 20000 = 1 THEN 'EXECUTING' ELSE 'PENDING' END, 'noop', 5, run_at, created_at FROM tasks`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, old)
		}
		_, err := s.DB().ExecContext(ctx, q, args...)
		require.NoError(t, err, q)
	}
	// explain runs q in a transaction as the store runs it (ordered: with
	// the planner settings PurgeFinished sets first).
	explain := func(ordered bool, q string, args ...any) string {
		t.Helper()
		tx, err := s.client.Tx(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		if ordered {
			require.NoError(t, s.d.orderedScans(ctx, &txn{Tx: tx}))
		}
		rows, err := tx.QueryContext(ctx, "EXPLAIN (ANALYZE, FORMAT TEXT) "+s.d.rebind(q), args...)
		require.NoError(t, err)
		defer rows.Close()
		var b strings.Builder
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			b.WriteString(line + "\n")
		}
		require.NoError(t, rows.Err())
		return b.String()
	}

	// The watchdog: the twenty running executions, through their index.
	plan := explain(false, `SELECT id FROM task_instances WHERE status = `+sqlExecuting)
	// Either partial index of the running instances only (the watchdog's,
	// or the tenants' running caps'): both hold the twenty alone.
	require.Regexp(t, `taskinstance_(tenant_)?running`, plan)
	require.NotContains(t, plan, "Seq Scan", plan)
	running, err := s.Executing(ctx)
	require.NoError(t, err)
	require.Equal(t, 20, len(running))

	// The retention: 1,000 of the finished tasks, oldest first, read
	// from the created_at index, passing only the waiting ones between.
	cutoff := s.Now().Add(-30 * 24 * time.Hour)
	plan = explain(true, s.d.purgeSelect(), cutoff, cutoff, 1000)
	require.Contains(t, plan, "task_created_at", plan)
	require.NotContains(t, plan, "Seq Scan", plan)
	require.NotContains(t, plan, "Sort", plan)
	n, err := s.PurgeFinished(ctx, cutoff, 1000)
	require.NoError(t, err)
	require.Equal(t, 1000, n)
}
