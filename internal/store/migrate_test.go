package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// TestAStartRebuildsNoIndex opens a migrated database again: no index is
// dropped and built anew (a partial index whose predicate PostgreSQL words
// differently would be, at every start, under an exclusive lock).
func TestAStartRebuildsNoIndex(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresOnly(t)
	oids := func() map[string]int64 {
		s, err := store.Open(sysCtx, store.Config{DSN: dsn})
		require.NoError(t, err)
		access.Install(s.Client())
		defer s.Close()
		rows, err := s.DB().Query(`SELECT c.relname, c.oid::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'i'`)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var n string
			var o int64
			require.NoError(t, rows.Scan(&n, &o))
			out[n] = o
		}
		return out
	}
	a := oids()
	b := oids()
	for n, o := range a {
		if b[n] != o {
			t.Errorf("index %s recreated", n)
		}
	}
}
