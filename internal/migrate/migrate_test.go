package migrate_test

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/migrate"
	"github.com/taskgraph/taskgraph/internal/store"
)

var ctx = context.Background()

// openDB opens dsn as the store and the migrate command do.
func openDB(t *testing.T, dsn string) (*sql.DB, migrate.Dialect) {
	t.Helper()
	db, d, err := store.OpenDB(dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db, d
}

func TestTheEmbeddedMigrations(t *testing.T) {
	t.Parallel()
	require.GreaterOrEqual(t, migrate.Latest(), 1)
	for _, d := range []migrate.Dialect{migrate.Postgres, migrate.SQLite} {
		ms := migrate.All(d)
		require.Len(t, ms, migrate.Latest(), d)
		for i, m := range ms {
			require.Equal(t, i+1, m.Version)
			require.NotEmpty(t, strings.TrimSpace(m.Up))
			require.NotEmpty(t, strings.TrimSpace(m.Down))
			up, err := migrate.SQL(d, "up", m.Version)
			require.NoError(t, err)
			require.Equal(t, m.Up, up)
		}
		require.Equal(t, "initial", ms[0].Name)
		_, err := migrate.SQL(d, "up", migrate.Latest()+1)
		require.ErrorContains(t, err, "no migration")
		_, err = migrate.SQL(d, "sideways", 1)
		require.Error(t, err)
	}
}

func TestLoadRefusesAnIncompleteSet(t *testing.T) {
	t.Parallel()
	sqlFile := &fstest.MapFile{Data: []byte("SELECT 1;")}
	for name, fsys := range map[string]fstest.MapFS{
		"a gap":         {"d/0001_a.up.sql": sqlFile, "d/0001_a.down.sql": sqlFile, "d/0003_c.up.sql": sqlFile, "d/0003_c.down.sql": sqlFile},
		"no down":       {"d/0001_a.up.sql": sqlFile},
		"two names":     {"d/0001_a.up.sql": sqlFile, "d/0001_b.down.sql": sqlFile},
		"a stray file":  {"d/0001_a.up.sql": sqlFile, "d/0001_a.down.sql": sqlFile, "d/notes.txt": sqlFile},
		"no migrations": {"d/.keep": nil},
	} {
		_, err := migrate.Load(fsys, "d")
		require.Error(t, err, name)
	}
	ms, err := migrate.Load(fstest.MapFS{"d/0001_a.up.sql": sqlFile, "d/0001_a.down.sql": sqlFile, "d/0002_b.up.sql": sqlFile, "d/0002_b.down.sql": sqlFile}, "d")
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.Equal(t, "0002 b", ms[1].String())
}

// TestUpDownUp: every migration goes up, all the way down, and up again,
// leaving the schema it left the first time; down leaves no table of
// taskgraph's behind, and the status follows each step.
func TestUpDownUp(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		db, d := openDB(t, dsn)
		st, err := migrate.ReadStatus(ctx, db, d)
		require.NoError(t, err)
		require.True(t, st.Empty)
		require.Equal(t, 0, st.Version)
		require.Len(t, st.Pending(d), migrate.Latest())
		empty := catalog(t, db, d, true)

		steps, err := migrate.Up(ctx, db, d, migrate.Options{})
		require.NoError(t, err)
		require.Len(t, steps, migrate.Latest())
		first := catalog(t, db, d, true)
		st, err = migrate.ReadStatus(ctx, db, d)
		require.NoError(t, err)
		require.True(t, st.Current())
		require.NoError(t, st.Check())
		require.Len(t, st.Applied, migrate.Latest())
		require.Equal(t, "initial", st.Applied[0].Name)
		require.WithinDuration(t, time.Now(), st.Applied[0].AppliedAt, time.Minute)

		// Up again does nothing.
		steps, err = migrate.Up(ctx, db, d, migrate.Options{})
		require.NoError(t, err)
		require.Empty(t, steps)

		steps, err = migrate.Down(ctx, db, d, migrate.Options{To: 0})
		require.NoError(t, err)
		require.Len(t, steps, migrate.Latest())
		require.Equal(t, migrate.Latest(), steps[0].Version, "newest first")
		st, err = migrate.ReadStatus(ctx, db, d)
		require.NoError(t, err)
		require.True(t, st.Empty)
		// What is left is the empty version table.
		requireSameCatalog(t, empty, strings.ReplaceAll(catalog(t, db, d, true), versionTableCatalog(t, db, d), ""))

		_, err = migrate.Up(ctx, db, d, migrate.Options{})
		require.NoError(t, err)
		requireSameCatalog(t, first, catalog(t, db, d, true))
	})
}

// versionTableCatalog is the catalog's part about the version table.
func versionTableCatalog(t *testing.T, db *sql.DB, d migrate.Dialect) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(catalog(t, db, d, true), "\n") {
		if strings.Contains(l, migrate.Table) {
			b.WriteString(l)
		}
	}
	return b.String()
}

// TestUpAndDownTo goes one version at a time with To.
func TestUpAndDownTo(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		db, d := openDB(t, dsn)
		for v := 1; v <= migrate.Latest(); v++ {
			steps, err := migrate.Up(ctx, db, d, migrate.Options{To: v})
			require.NoError(t, err)
			require.Len(t, steps, 1)
			require.Equal(t, v, steps[0].Version)
			st, err := migrate.ReadStatus(ctx, db, d)
			require.NoError(t, err)
			require.Equal(t, v, st.Version)
		}
		_, err := migrate.Up(ctx, db, d, migrate.Options{To: migrate.Latest() + 1})
		require.ErrorContains(t, err, "no version")
		for v := migrate.Latest() - 1; v >= 0; v-- {
			steps, err := migrate.Down(ctx, db, d, migrate.Options{To: v})
			require.NoError(t, err)
			require.Len(t, steps, 1)
			require.Equal(t, v+1, steps[0].Version)
		}
		steps, err := migrate.Down(ctx, db, d, migrate.Options{To: 0})
		require.NoError(t, err)
		require.Empty(t, steps, "nothing left to revert")
	})
}

// TestNodesMigratingTogether: several Ups at once on one fresh database
// apply each migration once.
func TestNodesMigratingTogether(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		const n = 4
		var wg sync.WaitGroup
		applied := make([]int, n)
		errs := make([]error, n)
		for i := range n {
			db, d := openDB(t, dsn)
			// Connected first, as the store is before it migrates (a
			// SQLite connection's first statements set the file's
			// journal mode, which connections opening at once would
			// find busy).
			require.NoError(t, db.PingContext(ctx))
			wg.Add(1)
			go func() {
				defer wg.Done()
				steps, err := migrate.Up(ctx, db, d, migrate.Options{})
				applied[i], errs[i] = len(steps), err
			}()
		}
		wg.Wait()
		total := 0
		for i := range n {
			require.NoError(t, errs[i])
			total += applied[i]
		}
		require.Equal(t, migrate.Latest(), total)
	})
}

// TestAFutureSchema: a database migrated by a newer taskgraph (a version
// beyond this binary's latest) is refused by Up and Down and said newer.
func TestAFutureSchema(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		db, d := openDB(t, dsn)
		_, err := migrate.Up(ctx, db, d, migrate.Options{})
		require.NoError(t, err)
		future := migrate.Latest() + 1
		insertVersion(t, db, d, future, "from_the_future")
		st, err := migrate.ReadStatus(ctx, db, d)
		require.NoError(t, err)
		require.True(t, st.Newer())
		require.Equal(t, future, st.Version)
		var ve *migrate.VersionError
		require.ErrorAs(t, st.Check(), &ve)
		require.True(t, ve.Newer())
		require.ErrorContains(t, st.Check(), fmt.Sprintf("version %d, newer than this taskgraph knows (%d)", future, migrate.Latest()))
		_, err = migrate.Up(ctx, db, d, migrate.Options{})
		require.ErrorAs(t, err, &ve)
		_, err = migrate.Down(ctx, db, d, migrate.Options{To: 0})
		require.ErrorContains(t, err, "newer than this taskgraph knows")
	})
}

// TestAPartialSchemaIsRefused: tables of taskgraph's, some missing, no
// version table: neither empty nor what an old taskgraph made.
func TestAPartialSchemaIsRefused(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		db, d := openDB(t, dsn)
		_, err := migrate.Up(ctx, db, d, migrate.Options{To: 1})
		require.NoError(t, err)
		_, err = db.Exec(`DROP TABLE ` + migrate.Table)
		require.NoError(t, err)
		_, err = db.Exec(`DROP TABLE task_logs`)
		require.NoError(t, err)
		st, err := migrate.ReadStatus(ctx, db, d)
		require.NoError(t, err)
		require.True(t, st.Unversioned)
		_, err = migrate.Up(ctx, db, d, migrate.Options{})
		require.ErrorContains(t, err, "but not task_logs")
		_, err = migrate.Down(ctx, db, d, migrate.Options{})
		require.ErrorContains(t, err, "unversioned")
	})
}

// TestAFailingMigrationLeavesNothing: a migration's statements and its
// record are one transaction.
func TestAFailingMigrationLeavesNothing(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		db, d := openDB(t, dsn)
		// A table 0001 creates is in the way: its CREATE TABLE fails
		// after others have run.
		_, err := db.Exec(`CREATE TABLE task_logs (id integer)`)
		require.NoError(t, err)
		before := catalog(t, db, d, true)
		_, err = migrate.Up(ctx, db, d, migrate.Options{})
		require.ErrorContains(t, err, "0001 initial")
		requireSameCatalog(t, before, catalog(t, db, d, true))
	})
}

func insertVersion(t *testing.T, db *sql.DB, d migrate.Dialect, v int, name string) {
	t.Helper()
	q := `INSERT INTO ` + migrate.Table + ` (version, name, applied_at) VALUES (?, ?, ?)`
	if d == migrate.Postgres {
		q = `INSERT INTO ` + migrate.Table + ` (version, name, applied_at) VALUES ($1, $2, $3)`
	}
	_, err := db.Exec(q, v, name, time.Now().UTC())
	require.NoError(t, err)
}

// catalog describes db's schema in rows of text, in a stable order: the
// tables' columns (type, nullability, default, identity start), the
// indexes (definition, predicate) and the storage parameters on
// PostgreSQL; on SQLite, the columns, the indexes, their predicates and,
// with seq, the id ranges in sqlite_sequence (without: a database in use
// has moved them on, and has rows for tables whose range starts at 0).
// PostgreSQL words a predicate it reads back from a dump with other casts
// (ARRAY[('A'::character varying)::text] for ARRAY['A'::character
// varying]::text[]): predicates are compared without casts and
// parentheses.
func catalog(t *testing.T, db *sql.DB, d migrate.Dialect, seq bool) string {
	t.Helper()
	var queries []string
	if d == migrate.Postgres {
		queries = []string{
			`SELECT table_name, column_name, data_type, is_nullable, COALESCE(column_default, ''), is_identity, COALESCE(identity_start, '')
			 FROM information_schema.columns WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position`,
			`SELECT tablename, indexname, replace(indexdef, current_schema() || '.', '') FROM pg_indexes WHERE schemaname = current_schema() ORDER BY 1, 2`,
			`SELECT relname, relkind, COALESCE(array_to_string(reloptions, ','), '') FROM pg_class WHERE relnamespace = current_schema()::regnamespace ORDER BY 1`,
			`SELECT conname, contype, conrelid::regclass::text FROM pg_constraint WHERE connamespace = current_schema()::regnamespace ORDER BY 1`,
		}
	} else {
		queries = []string{
			`SELECT m.name, p.cid, p.name, p.type, p."notnull", COALESCE(p.dflt_value, ''), p.pk FROM sqlite_master m, pragma_table_xinfo(m.name) p WHERE m.type = 'table' AND m.name <> 'sqlite_sequence' ORDER BY 1, 2`,
			`SELECT m.name, l.name, l."unique", l.origin, l.partial FROM sqlite_master m, pragma_index_list(m.name) l WHERE m.type = 'table' ORDER BY 1, 2`,
			`SELECT l.name, x.seqno, COALESCE(x.name, ''), x."desc", x.key FROM sqlite_master m, pragma_index_list(m.name) l, pragma_index_xinfo(l.name) x WHERE m.type = 'table' ORDER BY 1, 2`,
			`SELECT name, COALESCE(sql, '') FROM sqlite_master WHERE type = 'index' ORDER BY 1`,
		}
		var n int
		require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name = 'sqlite_sequence'`).Scan(&n))
		if n > 0 && seq { // once an AUTOINCREMENT table was made
			queries = append(queries, `SELECT name, seq FROM sqlite_sequence ORDER BY 1`)
		}
	}
	var b strings.Builder
	for _, q := range queries {
		rows, err := db.Query(q)
		require.NoError(t, err, q)
		cols, err := rows.Columns()
		require.NoError(t, err)
		for rows.Next() {
			vals := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			for i, v := range vals {
				if i > 0 {
					b.WriteString(" | ")
				}
				b.WriteString(v.String)
			}
			b.WriteString("\n")
		}
		require.NoError(t, rows.Err())
		rows.Close()
	}
	out := b.String()
	if d == migrate.Postgres {
		lines := strings.Split(out, "\n")
		for i, l := range lines {
			if head, pred, ok := strings.Cut(l, " WHERE "); ok {
				lines[i] = head + " WHERE " + strings.NewReplacer("(", "", ")", "").Replace(casts.ReplaceAllString(pred, ""))
			}
		}
		out = strings.Join(lines, "\n")
	}
	// SQLite keeps an index's statement as it was written; the words
	// matter (the predicate), the spacing and quoting not.
	return spaces.ReplaceAllString(strings.ReplaceAll(out, "`", ""), " ")
}

var casts = regexp.MustCompile(`::[a-z ]+(\[\])?`)

var spaces = regexp.MustCompile(`[ \t]+`)

// requireSameCatalog fails with the rows that differ between two catalogs.
func requireSameCatalog(t *testing.T, want, got string) {
	t.Helper()
	if want == got {
		return
	}
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var diff []string
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			diff = append(diff, "- "+l)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			diff = append(diff, "+ "+l)
		}
	}
	if len(diff) == 0 {
		diff = append(diff, "(the same rows in another order)")
	}
	t.Fatalf("the schemas differ (- expected, + actual):\n%s", strings.Join(diff, "\n"))
}

// TestWhatZeroOneMakes checks how 0001 is read: its tables, columns and
// indexes, which an unversioned database must have.
func TestWhatZeroOneMakes(t *testing.T) {
	t.Parallel()
	for _, d := range []migrate.Dialect{migrate.Postgres, migrate.SQLite} {
		tables, columns, indexes := migrate.Base(d)
		require.Len(t, tables, 16, d)
		require.Contains(t, tables, "tasks")
		require.Contains(t, tables, "contacts")
		require.Equal(t, []string{"id", "created_at", "instance_id", "level", "message", "fields", "task_id"}, columns["task_logs"], d)
		require.Contains(t, columns["cluster_nodes"], "leading", d)
		require.Equal(t, "task_instances", indexes["taskinstance_one_live_per_task"], d)
		_, gin := indexes["task_input_path"]
		require.Equal(t, d == migrate.Postgres, gin, "the GIN index is PostgreSQL's")
	}
}

// TestAnUnversionedSchemaIsChecked: migrate up records 0001 on a database
// without a version table only when it has 0001's schema; an index of an
// older schema (keys unique per owner, before tenants) or a missing
// column is named, and nothing is recorded.
func TestAnUnversionedSchemaIsChecked(t *testing.T) {
	t.Parallel()
	unversioned := func(t *testing.T, dsn string) (*sql.DB, migrate.Dialect) {
		db, d := openDB(t, dsn)
		_, err := migrate.Up(ctx, db, d, migrate.Options{To: 1})
		require.NoError(t, err)
		_, err = db.Exec(`DROP TABLE ` + migrate.Table)
		require.NoError(t, err)
		return db, d
	}
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		t.Run("as 0001 made it", func(t *testing.T) {
			t.Parallel()
			db, d := unversioned(t, drv.DSN(t))
			steps, err := migrate.Up(ctx, db, d, migrate.Options{})
			require.NoError(t, err)
			require.True(t, steps[0].Recorded)
			require.Equal(t, 1, steps[0].Version)
			require.Len(t, steps, migrate.Latest())
		})
		t.Run("an index of an older schema", func(t *testing.T) {
			t.Parallel()
			db, d := unversioned(t, drv.DSN(t))
			_, err := db.Exec(`CREATE UNIQUE INDEX task_owner_idempotency_key ON tasks (owner, idempotency_key) WHERE idempotency_key IS NOT NULL`)
			require.NoError(t, err)
			_, err = migrate.Up(ctx, db, d, migrate.Options{})
			require.ErrorContains(t, err, "an index 0001 does not make: task_owner_idempotency_key on tasks")
			st, err := migrate.ReadStatus(ctx, db, d)
			require.NoError(t, err)
			require.True(t, st.Unversioned, "nothing recorded")
		})
		t.Run("a missing column", func(t *testing.T) {
			t.Parallel()
			db, d := unversioned(t, drv.DSN(t))
			_, err := db.Exec(`ALTER TABLE task_logs DROP COLUMN fields`)
			require.NoError(t, err)
			_, err = migrate.Up(ctx, db, d, migrate.Options{})
			require.ErrorContains(t, err, "no column task_logs.fields")
		})
	})
}
