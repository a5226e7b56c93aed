package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// TestInputPathIndex: PostgreSQL has the GIN index that serves equality
// searches in the input (jsonb_path_ops), SQLite has none (it would be a
// b-tree over whole JSON texts), and a second start changes neither.
func TestInputPathIndex(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		for range 2 {
			s, err := store.Open(sysCtx, store.Config{DSN: dsn})
			require.NoError(t, err)
			var def string
			if s.Dialect() == "postgres" {
				err = s.DB().QueryRow(`SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'task_input_path'`).Scan(&def)
				require.NoError(t, err)
				require.Contains(t, def, "USING gin (input jsonb_path_ops)")
			} else {
				var n int
				err = s.DB().QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'task_input_path'`).Scan(&n)
				require.NoError(t, err)
				require.Zero(t, n)
			}
			require.NoError(t, s.Close())
		}
	})
}

func TestParsePath(t *testing.T) {
	t.Parallel()
	keys, err := store.ParsePath("customer.home_city.zip-code")
	require.NoError(t, err)
	require.Equal(t, []string{"customer", "home_city", "zip-code"}, keys)
	for _, bad := range []string{"", ".", "a.", "1a", "a b", "a.$", `a"`, "a.b.c.d.e.f.g.h.i"} {
		_, err := store.ParsePath(bad)
		require.Error(t, err, bad)
	}
}
