// Package dbtest gives tests a fresh database of every supported kind:
// a SQLite file in the test's temporary directory, and a PostgreSQL schema of
// its own (dropped afterwards) in the database named by TASKGRAPH_TEST_PG.
//
// PostgreSQL is not optional: when it cannot be reached the test fails,
// saying how to point it at a server. TASKGRAPH_TEST_PG=off runs the SQLite
// half alone, for a laptop without PostgreSQL; CI never sets it.
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/lib/pq" // PostgreSQL driver
)

// DefaultPostgres is used when TASKGRAPH_TEST_PG is unset.
const DefaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Driver is one kind of database.
type Driver struct {
	Name string
	// DSN returns the DSN of a new, empty database for t.
	DSN func(t testing.TB) string
}

// Drivers returns SQLite and, unless TASKGRAPH_TEST_PG=off, PostgreSQL.
func Drivers() []Driver {
	ds := []Driver{{Name: "SQLite", DSN: SQLite}}
	if os.Getenv("TASKGRAPH_TEST_PG") != "off" {
		ds = append(ds, Driver{Name: "Postgres", DSN: Postgres})
	}
	return ds
}

// Run runs fn as a parallel sub-test once per driver.
func Run(t *testing.T, fn func(t *testing.T, dsn string)) {
	t.Helper()
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, d.DSN(t))
		})
	}
}

// Each runs fn as a parallel sub-test once per driver, giving it the driver
// so that fn's own parallel sub-tests can each take a database of their own.
func Each(t *testing.T, fn func(t *testing.T, d Driver)) {
	t.Helper()
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, d)
		})
	}
}

// PostgresOnly returns a new PostgreSQL database for a test that is about
// PostgreSQL itself (LISTEN/NOTIFY, advisory locks, several nodes). With
// TASKGRAPH_TEST_PG=off the test is skipped, saying why; CI never sets it.
func PostgresOnly(t *testing.T) string {
	t.Helper()
	if os.Getenv("TASKGRAPH_TEST_PG") == "off" {
		t.Skip("TASKGRAPH_TEST_PG=off: this test needs PostgreSQL")
	}
	return Postgres(t)
}

// SQLite returns the path of a new SQLite file.
func SQLite(t testing.TB) string {
	return filepath.Join(t.TempDir(), "taskgraph.db")
}

// PostgresBase is the server tests use.
func PostgresBase() string {
	if v := os.Getenv("TASKGRAPH_TEST_PG"); v != "" && v != "off" {
		return v
	}
	return DefaultPostgres
}

// Postgres creates a schema of its own and returns a DSN whose search_path
// points at it. The schema is dropped when the test ends.
func Postgres(t testing.TB) string {
	t.Helper()
	base := PostgresBase()
	db, err := sql.Open("postgres", base)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		t.Fatalf("dbtest: PostgreSQL at %s is not reachable (%v). Start it, point TASKGRAPH_TEST_PG at another server, or set TASKGRAPH_TEST_PG=off to run only the SQLite half.", base, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "tg_" + hex.EncodeToString(b[:])
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		_ = db.Close()
		t.Fatalf("dbtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Logf("dbtest: drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
