package migrate_test

import (
	"bytes"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/importer"
	"github.com/taskgraph/taskgraph/internal/migrate"
	"github.com/taskgraph/taskgraph/internal/migratecmd"
	"github.com/taskgraph/taskgraph/internal/store"
)

// old is what taskgraph 6365223 wrote (testdata/6365223/README.md).
const old = "testdata/6365223"

// oldSchema is the schema the PostgreSQL dump names.
const oldSchema = "taskgraph_6365223"

// TestUpgradeFromBeforeVersions restores a database and data directory
// that the last taskgraph before versioned migrations wrote, finds it
// unversioned (migrate status; a node refuses it), migrates it (migrate up
// records 0001 without running it), finds its schema that of a fresh
// database, and starts a node on it that finds every task, execution, log
// line, contact and file as the old build left them, and goes on writing.
func TestUpgradeFromBeforeVersions(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		dsn := drv.DSN(t)
		postgres := store.IsPostgres(dsn)
		dir := filepath.Join(old, "sqlite")
		if postgres {
			dir = filepath.Join(old, "postgres")
		}
		dataDir := t.TempDir()
		copyTree(t, dir, dataDir, "taskgraph.db", "dump.sql")
		db, d := openDB(t, dsn)
		if postgres {
			restoreDump(t, db, filepath.Join(dir, "dump.sql"))
		} else {
			b, err := os.ReadFile(filepath.Join(dir, "taskgraph.db"))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(dsn, b, 0o600))
		}

		st, err := migrate.ReadStatus(ctx, db, d)
		require.NoError(t, err)
		require.True(t, st.Unversioned)
		code, out, errOut := runMigrate(t, "status", "--db", dsn)
		require.Equal(t, app.ExitOK, code, errOut)
		require.Contains(t, out, "schema version 1 of ")
		require.Contains(t, out, "unversioned (made before versioned migrations")
		require.Regexp(t, `0001 initial +in place, not recorded`, out, "the names are padded to the longest")

		_, err = store.Open(ctx, store.Config{DSN: dsn})
		var ve *migrate.VersionError
		require.ErrorAs(t, err, &ve, "a node refuses it without --migrate")
		require.True(t, ve.Unversioned)

		code, out, errOut = runMigrate(t, "up", "--db", dsn)
		require.Equal(t, app.ExitOK, code, errOut)
		require.Contains(t, out, "0001 initial: recorded, not run")
		require.Contains(t, out, ": current")

		// The schema the old build made, now versioned, is what the
		// migrations make of a fresh database (the id ranges on SQLite
		// by table name only: the old database has used some).
		fresh, _ := openDB(t, drv.DSN(t))
		_, err = migrate.Up(ctx, fresh, d, migrate.Options{})
		require.NoError(t, err)
		requireSameCatalog(t, catalog(t, fresh, d, false), catalog(t, db, d, false))

		// A node of this tree on the old data directory.
		cfg, err := app.ParseFlags([]string{"--db", dsn, "--data-dir", dataDir, "--role", "api"}, func(string) string { return "" }, nil)
		require.NoError(t, err)
		a, err := app.New(ctx, cfg, app.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Shutdown(ctx) })
		sys := auth.NewSystemContext(ctx)
		c := a.Store.Client()

		tasks, err := c.Task.Query().Order(ent.Asc(task.FieldID)).All(sys)
		require.NoError(t, err)
		require.Len(t, tasks, 6)
		var types, statuses []string
		for _, tk := range tasks {
			types = append(types, tk.Type)
			statuses = append(statuses, string(tk.Status))
		}
		require.Equal(t, []string{"noop", "webhook", "noop", "noop", "import", "export"}, types)
		require.Equal(t, []string{"SUCCESS", "FAILED", "SUCCESS", "CANCELLED", "SUCCESS", "SUCCESS"}, statuses)
		codes := map[bool][2]string{false: {"NOOP-20261201-8PKVAR37", "IMPORT-20261201-1PVVDVN2"}, true: {"NOOP-20261201-X5AXNWYQ", "IMPORT-20261201-PD8KJFAY"}}[postgres]
		require.Equal(t, codes[0], tasks[0].Code)
		require.Equal(t, codes[1], tasks[4].Code)
		require.Equal(t, "first", tasks[0].Title)
		require.Equal(t, int64(200), tasks[0].ProgressDone)
		require.Equal(t, "notify customer", tasks[1].Title)
		var input struct {
			URL  string `json:"url"`
			Body struct {
				Phone string `json:"phone"`
			} `json:"body"`
		}
		require.NoError(t, json.Unmarshal(tasks[1].Input, &input))
		require.Equal(t, "138****5678", input.Body.Phone, "masked as the old build stored it")
		require.Equal(t, "http://127.0.0.1:1/hook?token=******", input.URL)
		require.NotEmpty(t, tasks[1].InputSealed)
		require.Equal(t, "order-42", *tasks[2].IdempotencyKey)
		require.NotNil(t, tasks[4].ResultStatus)
		require.Equal(t, "PARTIAL_SUCCESS", string(*tasks[4].ResultStatus))
		var summary importer.Summary
		require.NoError(t, json.Unmarshal(tasks[4].Result, &summary))
		require.Equal(t, 4, summary.TotalCount)
		require.Equal(t, 2, summary.SuccessCount)
		require.Equal(t, 2, summary.FailedCount)

		instances, err := c.TaskInstance.Query().Order(ent.Asc(taskinstance.FieldID)).All(sys)
		require.NoError(t, err)
		require.Len(t, instances, 7)
		webhook, err := c.TaskInstance.Query().Where(taskinstance.TaskID(tasks[1].ID)).Order(ent.Asc(taskinstance.FieldInstanceNo)).All(sys)
		require.NoError(t, err)
		require.Len(t, webhook, 2, "the failed execution and its manual retry")
		for i, in := range webhook {
			require.Equal(t, i+1, in.InstanceNo)
			require.Equal(t, "FAILED", string(in.Status))
			require.Equal(t, "RETRYABLE", string(*in.ErrorKind))
			require.Contains(t, in.LastError, "connection refused")
		}

		logs, err := c.TaskLog.Query().Order(ent.Asc(tasklog.FieldID)).All(sys)
		require.NoError(t, err)
		require.Len(t, logs, 9)
		var messages []string
		for _, l := range logs {
			if l.TaskID == tasks[1].ID {
				messages = append(messages, l.Message)
			}
		}
		require.Len(t, messages, 5)
		require.Contains(t, messages, "manual retry: instance #2 scheduled")

		auditN, err := c.AuditLog.Query().Count(sys)
		require.NoError(t, err)
		require.Equal(t, 9, auditN)

		contacts, err := importer.ContactReader{DB: a.Store.DB(), Postgres: postgres}.Page(sys, importer.ContactFilter{}, 0, 100)
		require.NoError(t, err)
		require.Len(t, contacts, 2)
		require.Equal(t, "张三", contacts[0].Name)
		require.Equal(t, "13812345678", contacts[0].Phone)
		require.Equal(t, "上海", contacts[0].City)
		require.Equal(t, []string{"vip", "new"}, contacts[0].Tags)
		require.Equal(t, "李四", contacts[1].Name)
		require.Equal(t, tasks[4].ID, contacts[1].TaskID)
		require.Equal(t, 3, contacts[1].RowNo)

		// Every file, through the node's artifact store: its row and its
		// blob, whose size and SHA-256 are the row's.
		files, err := c.Artifact.Query().All(sys)
		require.NoError(t, err)
		var kinds []string
		for _, f := range files {
			kinds = append(kinds, string(f.Kind))
			blob, err := a.Artifacts.Open(sys, f)
			require.NoError(t, err, f.Filename)
			b, err := io.ReadAll(blob)
			require.NoError(t, err)
			require.NoError(t, blob.Close())
			sum := sha256.Sum256(b)
			require.Equal(t, f.Sha256, hex.EncodeToString(sum[:]), f.Filename)
			require.Equal(t, f.Size, int64(len(b)), f.Filename)
			if f.Kind == "ERROR_REPORT" && strings.HasSuffix(f.Filename, ".csv") {
				require.Contains(t, string(b), "is not a valid mobile number")
			}
		}
		sort.Strings(kinds)
		require.Equal(t, []string{"ERROR_REPORT", "ERROR_REPORT", "EXPORT", "SOURCE"}, kinds)

		// And it goes on: the next task takes the next id of its range.
		tk, created, err := a.Store.CreateTask(sys, store.NewTask{Type: "noop", Owner: "local", Input: json.RawMessage(`{}`),
			InputHash: "h", TimeoutSeconds: 60, RetryPolicy: "default", MaxAttempts: 1})
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, tasks[5].ID+1, tk.ID)
	})
}

// runMigrate runs taskgraph migrate with args and no environment.
func runMigrate(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = migratecmd.Run(args, &out, &errOut, func(string) string { return "" })
	return code, out.String(), errOut.String()
}

// restoreDump runs a plain pg_dump of oldSchema in the current schema of
// db: every name the dump qualifies with its schema is given the current
// one; the dump's own CREATE SCHEMA and its emptying of the search_path
// (which would stay with the pooled connection) are left out, as are
// psql's meta-commands.
func restoreDump(t *testing.T, db *sql.DB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var schema string
	require.NoError(t, db.QueryRow(`SELECT current_schema()`).Scan(&schema))
	var script strings.Builder
	for _, line := range strings.SplitAfter(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, `\`),
			strings.HasPrefix(line, "CREATE SCHEMA "),
			strings.HasPrefix(line, "SELECT pg_catalog.set_config('search_path'"):
			continue
		}
		script.WriteString(strings.ReplaceAll(line, oldSchema+".", schema+"."))
	}
	_, err = db.Exec(script.String())
	require.NoError(t, err)
}

// copyTree copies the files under src into dst, but for those named skip.
func copyTree(t *testing.T, src, dst string, skip ...string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		for _, s := range skip {
			if rel == s {
				return nil
			}
		}
		if e.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o750)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	require.NoError(t, err)
}
