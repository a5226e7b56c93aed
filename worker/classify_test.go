package worker_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// TestLockContentionIsResource: a handler's error that is lock contention
// (PostgreSQL's deadlock 40P01 and lock not available 55P03, SQLite's
// busy or locked) is RESOURCE — the retry waits the longer schedule — as
// is a full disk; other errors stay RETRYABLE, and a kind the handler gave
// wins.
func TestLockContentionIsResource(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		&pq.Error{Code: "40P01", Message: "deadlock detected"},
		&pq.Error{Code: "55P03", Message: `could not obtain lock on row in relation "tasks"`},
		fmt.Errorf("claim: %w", &pq.Error{Code: "40P01"}),
		errors.New("database is locked (5) (SQLITE_BUSY)"),
	} {
		require.Equal(t, lifecycle.KindResource, tasktype.Classify(err), "%v", err)
	}
	for _, err := range []error{
		&pq.Error{Code: "23505", Message: "duplicate key value violates unique constraint"},
		errors.New("lock the door"),
	} {
		require.Equal(t, lifecycle.KindRetryable, tasktype.Classify(err), "%v", err)
	}
	require.Equal(t, lifecycle.KindNonRetryable, tasktype.Classify(tasktype.NonRetryable(&pq.Error{Code: "55P03"})), "the handler's kind wins")

	t.Run("SQLiteBusy", func(t *testing.T) {
		t.Parallel()
		// A real SQLITE_BUSY: one connection holds the write lock, the
		// other does not wait for it.
		path := filepath.Join(t.TempDir(), "busy.db")
		holder, err := sql.Open("sqlite", path)
		require.NoError(t, err)
		t.Cleanup(func() { holder.Close() })
		holder.SetMaxOpenConns(1)
		_, err = holder.Exec(`CREATE TABLE t (x INTEGER)`)
		require.NoError(t, err)
		tx, err := holder.Begin()
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback() })
		_, err = tx.Exec(`INSERT INTO t VALUES (1)`)
		require.NoError(t, err)
		other, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(0)")
		require.NoError(t, err)
		t.Cleanup(func() { other.Close() })
		_, err = other.Exec(`INSERT INTO t VALUES (2)`)
		require.Error(t, err)
		require.Equal(t, lifecycle.KindResource, tasktype.Classify(fmt.Errorf("write: %w", err)), "%v", err)
	})
	t.Run("PostgresLockNotAvailable", func(t *testing.T) {
		t.Parallel()
		// A real 55P03: a row locked by one transaction, asked for with
		// NOWAIT by another.
		db, err := sql.Open("postgres", dbtest.PostgresOnly(t))
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err = db.ExecContext(ctx, `CREATE TABLE t (x INTEGER PRIMARY KEY); INSERT INTO t VALUES (1)`)
		require.NoError(t, err)
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback() })
		_, err = tx.ExecContext(ctx, `SELECT x FROM t WHERE x = 1 FOR UPDATE`)
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, `SELECT x FROM t WHERE x = 1 FOR UPDATE NOWAIT`)
		var pqErr *pq.Error
		require.ErrorAs(t, err, &pqErr)
		require.Equal(t, pq.ErrorCode("55P03"), pqErr.Code)
		require.Equal(t, lifecycle.KindResource, tasktype.Classify(err), "%v", err)
	})
}
