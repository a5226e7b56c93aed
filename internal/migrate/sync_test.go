package migrate_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"ariga.io/atlas/sql/postgres"
	atlas "ariga.io/atlas/sql/schema"
	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"entgo.io/ent/dialect/sql/schema"
	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	entmigrate "github.com/taskgraph/taskgraph/ent/migrate"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/migrate"
)

// TestMigrationsMatchTheEntSchema applies every migration to a fresh
// database and asks ent what it would change to reach ent/schema: nothing,
// or whoever changed ent/schema (or a migration) must write the migration
// that goes with it. The failure prints ent's statements, the start of
// that migration.
func TestMigrationsMatchTheEntSchema(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		db, d := openDB(t, dsn)
		_, err := migrate.Up(ctx, db, d, migrate.Options{})
		require.NoError(t, err)
		if diff := entDiff(t, db, d); diff != "" {
			t.Fatalf("the migrations (internal/migrate/%s) and ent/schema differ; a migration that brings the first to the second would run:\n%s", d, diff)
		}
	})
}

// TestTheSyncTestSeesADifference makes sure the test above can fail: a
// database with a column and an index less than the migrations make has a
// difference.
func TestTheSyncTestSeesADifference(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		db, d := openDB(t, dsn)
		_, err := migrate.Up(ctx, db, d, migrate.Options{})
		require.NoError(t, err)
		_, err = db.Exec(`DROP INDEX task_created_at`)
		require.NoError(t, err)
		_, err = db.Exec(`ALTER TABLE task_logs DROP COLUMN fields`)
		require.NoError(t, err)
		diff := entDiff(t, db, d)
		require.Contains(t, diff, "task_created_at")
		require.Contains(t, diff, "fields")
	})
}

// TestPartialIndexPredicatesMatchTheEntSchema compares each partial
// index's predicate as PostgreSQL keeps it with ent's, worded by
// PostgreSQL the same way (an index built with ent's predicate on a copy of
// the table): the diff above leaves predicates out on PostgreSQL (see
// keepPredicates), and they are lifecycle's status lists. SQLite keeps
// the predicate in the words it was given, which the diff compares.
func TestPartialIndexPredicatesMatchTheEntSchema(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresOnly(t)
	db, d := openDB(t, dsn)
	_, err := migrate.Up(ctx, db, d, migrate.Options{})
	require.NoError(t, err)
	pred := func(index string) string {
		var p sql.NullString
		require.NoError(t, db.QueryRow(`SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE c.relname = $1 AND c.relnamespace = current_schema()::regnamespace`, index).Scan(&p))
		return p.String
	}
	n := 0
	for _, tbl := range entmigrate.Tables {
		for _, idx := range tbl.Indexes {
			if idx.Annotation == nil || idx.Annotation.Where == "" {
				continue
			}
			n++
			copyName := "copy_" + tbl.Name
			_, err := db.Exec(fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (LIKE %s)`, copyName, tbl.Name))
			require.NoError(t, err)
			cols := make([]string, len(idx.Columns))
			for i, c := range idx.Columns {
				cols[i] = c.Name
			}
			_, err = db.Exec(fmt.Sprintf(`CREATE INDEX copy_%s ON %s (%s) WHERE %s`, idx.Name, copyName, strings.Join(cols, ", "), idx.Annotation.Where))
			require.NoError(t, err)
			require.Equal(t, pred("copy_"+idx.Name), pred(idx.Name), "the predicate of %s", idx.Name)
		}
	}
	require.Greater(t, n, 5, "ent/schema's partial indexes")
}

// entDiff is what ent's automatic migration (the one the store ran at every
// start before versions) would execute on db, with the options it ran
// with, columns dropped too: "" when db is the ent schema.
func entDiff(t *testing.T, db *sql.DB, d migrate.Dialect) string {
	t.Helper()
	// ent's migration writes to its package-level table descriptors.
	entMu.Lock()
	defer entMu.Unlock()
	name := dialect.SQLite
	if d == migrate.Postgres {
		name = dialect.Postgres
	}
	client := ent.NewClient(ent.Driver(entsql.OpenDB(name, db)))
	var buf bytes.Buffer
	err := client.Schema.WriteTo(context.Background(), &buf,
		entmigrate.WithForeignKeys(false), entmigrate.WithDropIndex(true), entmigrate.WithDropColumn(true),
		schema.WithDiffHook(keepPredicates), schema.WithDiffHook(postgresOnlyIndexes(d == migrate.Postgres)))
	require.NoError(t, err)
	// The writer frames what it writes in a transaction.
	out := regexp.MustCompile(`(?m)^(BEGIN|COMMIT);\n?`).ReplaceAllString(buf.String(), "")
	return strings.TrimSpace(out)
}

var entMu sync.Mutex

// keepPredicates drops from a migration the changes of a partial index's
// predicate alone. PostgreSQL keeps a predicate in its own words
// ("((status)::text = ANY ((ARRAY['PENDING'::character varying, ...])"),
// which never equal the schema's (TestPartialIndexPredicatesMatchTheEntSchema
// compares them in PostgreSQL's words).
func keepPredicates(next schema.Differ) schema.Differ {
	return schema.DiffFunc(func(current, desired *atlas.Schema) ([]atlas.Change, error) {
		changes, err := next.Diff(current, desired)
		if err != nil {
			return nil, err
		}
		out := changes[:0]
		for _, c := range changes {
			if mt, ok := c.(*atlas.ModifyTable); ok {
				kept := mt.Changes[:0]
				for _, tc := range mt.Changes {
					if mi, ok := tc.(*atlas.ModifyIndex); ok && mi.Change == atlas.ChangeAttr && hasPredicate(mi.From) && hasPredicate(mi.To) {
						continue
					}
					kept = append(kept, tc)
				}
				mt.Changes = kept
				if len(kept) == 0 {
					continue
				}
			}
			out = append(out, c)
		}
		return out, nil
	})
}

func hasPredicate(idx *atlas.Index) bool {
	for _, a := range idx.Attrs {
		if _, ok := a.(*postgres.IndexPredicate); ok {
			return true
		}
	}
	return false
}

// pgOnlyIndexes are the indexes of the schema that only PostgreSQL has: a
// GIN index on SQLite would be a b-tree over whole JSON texts, which no
// query uses.
var pgOnlyIndexes = map[string]bool{"task_input_path": true}

// postgresOnlyIndexes leaves pgOnlyIndexes out of a SQLite diff.
func postgresOnlyIndexes(pg bool) schema.DiffHook {
	return func(next schema.Differ) schema.Differ {
		return schema.DiffFunc(func(current, desired *atlas.Schema) ([]atlas.Change, error) {
			changes, err := next.Diff(current, desired)
			if err != nil || pg {
				return changes, err
			}
			out := changes[:0]
			for _, c := range changes {
				switch c := c.(type) {
				case *atlas.AddTable:
					kept := make([]*atlas.Index, 0, len(c.T.Indexes))
					for _, idx := range c.T.Indexes {
						if !pgOnlyIndexes[idx.Name] {
							kept = append(kept, idx)
						}
					}
					c.T.Indexes = kept
				case *atlas.ModifyTable:
					kept := c.Changes[:0]
					for _, tc := range c.Changes {
						if ai, ok := tc.(*atlas.AddIndex); ok && pgOnlyIndexes[ai.I.Name] {
							continue
						}
						kept = append(kept, tc)
					}
					c.Changes = kept
					if len(kept) == 0 {
						continue
					}
				}
				out = append(out, c)
			}
			return out, nil
		})
	}
}
