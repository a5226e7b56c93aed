//go:build long

package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// TestFairClaimPlanDoesNotDependOnTheBacklog: with 200,000 instances of one
// tenant waiting and 10 of another, in tables never analyzed, the fair
// share's statements (which types have several tenants waiting; the
// tenants waiting for a type, with their weights) and the claim's pick,
// read tenant by tenant, read no more rows than the tenants and the claim
// ask for, never the backlog, and sort only the few candidates.
func TestFairClaimPlanDoesNotDependOnTheBacklog(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresOnly(t)
	ctx := internal(context.Background())
	s, err := Open(ctx, Config{DSN: dsn})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	for _, q := range []string{
		`ALTER TABLE tasks SET (autovacuum_enabled = false)`,
		`ALTER TABLE task_instances SET (autovacuum_enabled = false)`,
		`INSERT INTO tasks (code, type, status, owner, tenant, input, input_hash, timeout_seconds, retry_policy, max_attempts, run_at, updated_at, created_at)
		 SELECT 'NOOP-' || g, 'noop', 'PENDING', 'bench', CASE WHEN g <= 200000 THEN 'big' ELSE 'small' END, '{}', '-', 60, 'none', 1, now() - interval '1 minute', now(), now()
		 FROM generate_series(1, 200010) g`,
		`INSERT INTO task_instances (task_id, instance_no, attempt, status, task_type, tenant, priority, run_at, created_at)
		 SELECT id, 1, 1, 'PENDING', 'noop', tenant, priority, run_at, created_at FROM tasks`,
		`INSERT INTO tenant_quotas (tenant, weight, updated_at) VALUES ('small', 2, now())`,
	} {
		_, err := s.DB().ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	type node struct {
		NodeType     string  `json:"Node Type"`
		RelationName string  `json:"Relation Name"`
		ActualRows   float64 `json:"Actual Rows"`
		ActualLoops  float64 `json:"Actual Loops"`
		RowsRemoved  float64 `json:"Rows Removed by Filter"`
		Plans        []node  `json:"Plans"`
	}
	var walk func(n node, fn func(node))
	walk = func(n node, fn func(node)) {
		fn(n)
		for _, c := range n.Plans {
			walk(c, fn)
		}
	}
	// check fails a plan that scans a table or reads or sorts more than
	// bound rows of task_instances at any node.
	check := func(name, out string, bound float64) {
		var plans []struct {
			Plan node `json:"Plan"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &plans), out)
		require.Len(t, plans, 1)
		walk(plans[0].Plan, func(n node) {
			read := (n.ActualRows + n.RowsRemoved) * max(n.ActualLoops, 1)
			switch {
			case n.NodeType == "Seq Scan" || strings.HasPrefix(n.NodeType, "Bitmap"):
				if n.RelationName == "task_instances" || n.RelationName == "tasks" {
					t.Errorf("%s scans %s (%s): %s", name, n.RelationName, n.NodeType, out)
				}
			case n.NodeType == "Sort" || n.NodeType == "Incremental Sort" || (strings.Contains(n.NodeType, "Index") && n.RelationName == "task_instances"):
				if read > bound {
					t.Errorf("%s: %s reads %.0f rows, more than %.0f: %s", name, n.NodeType, read, bound, out)
				}
			}
		})
	}
	explain := func(q string, args ...any) string {
		var b strings.Builder
		rows, err := s.DB().QueryContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+s.d.rebind(q), args...)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			b.WriteString(line)
		}
		require.NoError(t, rows.Err())
		return b.String()
	}
	check("who waits for which type", explain(waitersSQL(3), "noop", "noop", "noop", "webhook", "webhook", "webhook", "import", "import", "import"), 4)
	check("the tenants waiting", explain(waitingTenantsSQL, "noop", "noop", maxShareTenants), 4)
	w, err := readWaiters(ctx, dbQuerier{s}, []string{"noop", "webhook"})
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"noop": true}, w.multi)
	require.Equal(t, map[string]string{"noop": "big"}, w.first)

	for _, limit := range []int{1, 256, 1000} {
		t.Run(fmt.Sprintf("Limit%d", limit), func(t *testing.T) {
			outs, err := s.ExplainClaim(ctx, []string{"noop", "webhook"}, limit)
			require.NoError(t, err)
			require.Len(t, outs, 2)
			require.Contains(t, outs[0], "taskinstance_tenant_claimable", "the pick reads tenant by tenant")
			// Two tenants, each read up to the claim's limit.
			check(fmt.Sprintf("the pick of %d", limit), outs[0], float64(2*limit+limit))
		})
	}
}
