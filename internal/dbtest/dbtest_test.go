package dbtest

import (
	"context"
	"database/sql"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/pgcluster"
)

func skipIfOff(t *testing.T) {
	if os.Getenv("TASKGRAPH_TEST_PG") == "off" {
		t.Skip("TASKGRAPH_TEST_PG=off: this test needs PostgreSQL's server programs")
	}
}

// refused is a PostgreSQL address at which nothing answers: a port this
// test held a moment ago.
func refused(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "postgres://postgres@" + addr + "/test?sslmode=disable"
}

// When the default server does not answer, the test process gets a
// cluster of its own, which works, and which every later call (every
// other test of the process) shares.
func TestOwnClusterWhenNoServerAnswers(t *testing.T) {
	skipIfOff(t)
	def := refused(t)
	start := time.Now()
	dsn, err := defaultOrOwn(def)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("own cluster at %s in %s", dsn, time.Since(start).Round(time.Millisecond))
	if dsn == def || strings.Contains(dsn, ":5432/") {
		t.Fatalf("defaultOrOwn(%s) = %s, want a cluster of the process's own", def, dsn)
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dir string
	if err := db.QueryRowContext(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA own_cluster_test; CREATE TABLE own_cluster_test.t (x int); DROP SCHEMA own_cluster_test CASCADE"); err != nil {
		t.Fatal(err)
	}
	again, err := defaultOrOwn(refused(t))
	if err != nil || again != dsn {
		t.Fatalf("a second call: %s %v, want the same cluster %s", again, err, dsn)
	}
	var dir2 string
	if db2, err := sql.Open("postgres", again); err != nil {
		t.Fatal(err)
	} else if err := db2.QueryRowContext(ctx, "SHOW data_directory").Scan(&dir2); err != nil || dir2 != dir {
		t.Fatalf("the second call's cluster is in %q (%v), the first's in %q", dir2, err, dir)
	} else {
		db2.Close()
	}
	if c, err := pgcluster.Shared(); err != nil || c.DSN != dsn {
		t.Fatalf("pgcluster.Shared: %v %v, want %s", c, err, dsn)
	}
}

// A server that answers is used as it is (the process's own cluster
// standing for the default).
func TestDefaultWhenItAnswers(t *testing.T) {
	skipIfOff(t)
	c, err := pgcluster.Shared()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := defaultOrOwn(c.DSN); err != nil || got != c.DSN {
		t.Fatalf("defaultOrOwn(%s) = %s, %v", c.DSN, got, err)
	}
}

// Postgres gives each test a schema of its own on the server.
func TestPostgresSchema(t *testing.T) {
	dsn := PostgresOnly(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	if !strings.HasPrefix(schema, "tg_") {
		t.Fatalf("search_path %q", schema)
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var current string
	if _, err := db.Exec("CREATE TABLE t (x int)"); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT current_schema()").Scan(&current); err != nil || current != schema {
		t.Fatalf("current_schema %q (%v), want %q", current, err, schema)
	}
}
