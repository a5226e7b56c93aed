package app_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/migrate"
	"github.com/taskgraph/taskgraph/internal/store"
)

// TestANodeChecksTheSchemaVersion: a node starts on an empty database
// (initialised) and on one at the latest version; it refuses, in one line
// naming the command to run, a database that needs migrations, unless told
// --migrate; and it refuses one migrated by a newer taskgraph whatever it
// is told, saying both versions.
func TestANodeChecksTheSchemaVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	config := func(t *testing.T, dsn string) app.Config {
		c, err := app.ParseFlags([]string{"--db", dsn, "--data-dir", t.TempDir(), "--role", "api"}, func(string) string { return "" }, nil)
		require.NoError(t, err)
		return c
	}
	open := func(t *testing.T, dsn string) (*sql.DB, migrate.Dialect) {
		db, d, err := store.OpenDB(dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		return db, d
	}
	start := func(t *testing.T, c app.Config) error {
		a, err := app.New(ctx, c, app.Options{})
		if err == nil {
			require.NoError(t, a.Shutdown(ctx))
		}
		return err
	}
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		t.Run("empty, then current", func(t *testing.T) {
			t.Parallel()
			dsn := drv.DSN(t)
			require.NoError(t, start(t, config(t, dsn)))
			db, d := open(t, dsn)
			st, err := migrate.ReadStatus(ctx, db, d)
			require.NoError(t, err)
			require.True(t, st.Current(), "initialised to the latest version")
			require.NoError(t, start(t, config(t, dsn)))
		})
		t.Run("unversioned", func(t *testing.T) {
			t.Parallel()
			dsn := drv.DSN(t)
			db, d := open(t, dsn)
			// What a taskgraph before versioned migrations made: 0001's
			// tables, no version table.
			_, err := migrate.Up(ctx, db, d, migrate.Options{To: 1})
			require.NoError(t, err)
			_, err = db.Exec(`DROP TABLE ` + migrate.Table)
			require.NoError(t, err)
			c := config(t, dsn)
			err = start(t, c)
			require.ErrorContains(t, err, "the database schema is unversioned")
			require.ErrorContains(t, err, fmt.Sprintf("this taskgraph runs on version %d, recorded", migrate.Latest()))
			require.ErrorContains(t, err, "run `taskgraph migrate up --db ")
			require.ErrorContains(t, err, "or start the node with --migrate")
			st, err := migrate.ReadStatus(ctx, db, d)
			require.NoError(t, err)
			require.True(t, st.Unversioned, "a refusal changes nothing")

			c.Migrate = true
			require.NoError(t, start(t, c))
			st, err = migrate.ReadStatus(ctx, db, d)
			require.NoError(t, err)
			require.True(t, st.Current())
			require.NoError(t, start(t, config(t, dsn)), "migrated: it starts without --migrate")
		})
		t.Run("newer", func(t *testing.T) {
			t.Parallel()
			dsn := drv.DSN(t)
			db, d := open(t, dsn)
			_, err := migrate.Up(ctx, db, d, migrate.Options{})
			require.NoError(t, err)
			q := `INSERT INTO ` + migrate.Table + ` (version, name, applied_at) VALUES (?, 'from_a_newer_taskgraph', ?)`
			if d == migrate.Postgres {
				q = strings.NewReplacer("?, '", "$1, '", "', ?", "', $2").Replace(q)
			}
			_, err = db.Exec(q, migrate.Latest()+1, time.Now().UTC())
			require.NoError(t, err)

			// Main: one line on stderr, exit 1, --migrate or not.
			for _, extra := range [][]string{nil, {"--migrate"}} {
				var stderr bytes.Buffer
				args := append([]string{"--db", dsn, "--data-dir", t.TempDir(), "--role", "api", "--addr", "127.0.0.1:0"}, extra...)
				code := app.Main(args, app.Options{}, &stderr)
				require.Equal(t, app.ExitFailure, code, stderr.String())
				lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
				require.Len(t, lines, 1, stderr.String())
				require.Contains(t, lines[0], fmt.Sprintf("the database schema is at version %d, newer than this taskgraph knows (%d)", migrate.Latest()+1, migrate.Latest()))
				require.Contains(t, lines[0], fmt.Sprintf("taskgraph migrate down --to %d --db ", migrate.Latest()))
			}
		})
	})
}
