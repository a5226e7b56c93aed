package store

import (
	"context"
	"fmt"
	"strings"
)

// vacuumTables are the tables every claim, heartbeat and finish updates:
// without autovacuum their dead row versions pile up.
var vacuumTables = []string{"tasks", "task_instances", "task_logs", "cluster_nodes"}

// AutovacuumOff says, on PostgreSQL, whether autovacuum is off for the
// tables the store churns: the server's autovacuum (or track_counts, which
// it needs) off, or autovacuum_enabled = false on some of those tables in
// this schema. It returns "" when autovacuum runs (and always on SQLite,
// which has no autovacuum daemon to miss: it reuses freed pages itself).
// Without it every update leaves a dead row version that nothing removes:
// tables and indexes grow, claims and scans slow down, and in the end
// the server stops to prevent transaction-ID wraparound
// (docs/operations.md, "Autovacuum").
func (s *Store) AutovacuumOff(ctx context.Context) (string, error) {
	if !s.Postgres() {
		return "", nil
	}
	var why []string
	for _, setting := range []string{"autovacuum", "track_counts"} {
		var v string
		if err := s.db.QueryRowContext(ctx, "SELECT current_setting($1)", setting).Scan(&v); err != nil {
			return "", fmt.Errorf("read the server's %s setting: %w", setting, err)
		}
		if v != "on" {
			why = append(why, fmt.Sprintf("the server's %s = %s", setting, v))
		}
	}
	rows, err := s.db.QueryContext(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relname = ANY($1::text[])
		AND EXISTS (SELECT 1 FROM unnest(c.reloptions) o
			WHERE lower(o) IN ('autovacuum_enabled=false', 'autovacuum_enabled=off', 'autovacuum_enabled=0', 'autovacuum_enabled=no', 'autovacuum_enabled=f', 'autovacuum_enabled=n'))
		ORDER BY c.relname`, "{"+strings.Join(vacuumTables, ",")+"}")
	if err != nil {
		return "", fmt.Errorf("read the tables' autovacuum settings: %w", err)
	}
	defer rows.Close()
	var off []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return "", err
		}
		off = append(off, name)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	if len(off) > 0 {
		why = append(why, "autovacuum_enabled = false on "+strings.Join(off, ", "))
	}
	if len(why) == 0 {
		return "", nil
	}
	return "autovacuum is off (" + strings.Join(why, "; ") + "): dead rows of every update pile up and nothing removes them; see docs/operations.md, Autovacuum", nil
}
