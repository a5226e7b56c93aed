// Package dbtest gives tests a fresh database of every supported kind:
// a SQLite file in the test's temporary directory, and a PostgreSQL schema of
// its own (dropped afterwards).
//
// The PostgreSQL server is TASKGRAPH_TEST_PG, if set. Unset, it is the
// default (DefaultPostgres) if that answers within a few seconds, else a
// throwaway cluster of the test process's own (internal/pgcluster's
// Shared: initdb and postgres on a free loopback port, one for every test
// of the process, gone with it), so that `go test ./...` needs nothing but
// PostgreSQL's server programs installed. PostgreSQL is not optional: when
// there is no server the test fails, saying what to install or set.
// TASKGRAPH_TEST_PG=off runs the SQLite half alone, for a laptop without
// PostgreSQL; CI never sets it.
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/lib/pq" // PostgreSQL driver

	"github.com/taskgraph/taskgraph/internal/pgcluster"
	"github.com/taskgraph/taskgraph/internal/pgdsn"
)

// DefaultPostgres is used when TASKGRAPH_TEST_PG is unset, if it answers.
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

// PostgresBase is the server tests use (see the package's comment): the
// process's own cluster is started at the first call that needs it. When
// there is no server at all it returns DefaultPostgres, to which
// connections then fail; Postgres(t) says why.
func PostgresBase() string {
	b, err := postgresBase()
	if err != nil {
		return DefaultPostgres
	}
	return b
}

var (
	baseOnce sync.Once
	base     string
	baseErr  error
)

func postgresBase() (string, error) {
	if v := os.Getenv("TASKGRAPH_TEST_PG"); v != "" && v != "off" {
		return v, nil
	}
	baseOnce.Do(func() { base, baseErr = defaultOrOwn(DefaultPostgres) })
	return base, baseErr
}

// answerTimeout is how long the default server has to answer: a server on
// this machine answers in milliseconds.
const answerTimeout = 3 * time.Second

// defaultOrOwn returns def if a PostgreSQL there accepts a session within
// answerTimeout (not just a connection: a stock server that wants a
// password, or has no database "test", is no use to the tests either),
// else the DSN of the process's own cluster.
func defaultOrOwn(def string) (string, error) {
	db, err := sql.Open("postgres", def)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	err = db.PingContext(ctx)
	cancel()
	_ = db.Close()
	if err == nil {
		return def, nil
	}
	c, cerr := pgcluster.Shared()
	if cerr != nil {
		or := ""
		if errors.Is(cerr, pgcluster.ErrNotInstalled) {
			or = ", or point TASKGRAPH_TEST_PG at a server (TASKGRAPH_TEST_PG=off runs only the SQLite half)"
		}
		return "", fmt.Errorf("no PostgreSQL answers at %s (%v), and the test process cannot start one of its own: %v%s", hostOf(def), err, cerr, or)
	}
	return c.DSN, nil
}

func hostOf(dsn string) string { return pgdsn.Where(dsn) }

// Postgres creates a schema of its own and returns a DSN whose search_path
// points at it. The schema is dropped when the test ends.
func Postgres(t testing.TB) string {
	t.Helper()
	base, err := postgresBase()
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
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
	dsn, err := pgdsn.Set(base, "search_path", schema)
	if err != nil {
		t.Fatalf("dbtest: TASKGRAPH_TEST_PG: %v", err)
	}
	return dsn
}

// Form is one way of writing a PostgreSQL DSN.
type Form struct {
	Name string // "URL over TCP", "key=value over a Unix socket"...
	DSN  string
}

// PostgresForms returns the DSN of a new PostgreSQL schema (as Postgres
// does) written in every form libpq accepts: a URL and a key=value
// string, each over TCP and over the server's Unix socket (its first
// unix_socket_directories entry). Every form names the same schema, the
// same database and the same user, so that a test can show that whatever
// form a user gives, every connection of a node works.
func PostgresForms(t testing.TB) []Form {
	t.Helper()
	dsn := Postgres(t)
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var user, dbname, port, sockets, addr string
	if err := db.QueryRowContext(ctx, `SELECT current_user, current_database(), current_setting('port'), current_setting('unix_socket_directories'), coalesce(host(inet_server_addr()), '')`).
		Scan(&user, &dbname, &port, &sockets, &addr); err != nil {
		t.Fatalf("dbtest: read the server's settings: %v", err)
	}
	if addr == "" {
		t.Fatalf("dbtest: the test server %s is not reached over TCP", hostOf(dsn))
	}
	socket, _, _ := strings.Cut(sockets, ",")
	socket = strings.TrimSpace(socket)
	if !strings.HasPrefix(socket, "/") {
		t.Fatalf("dbtest: the test server has no Unix socket directory (unix_socket_directories = %q)", sockets)
	}
	schema := pgdsn.Get(dsn, "search_path")
	password := pgdsn.Get(dsn, "password")
	tcp := &url.URL{Scheme: "postgres", Host: net.JoinHostPort(addr, port), Path: "/" + dbname}
	tcp.User = url.User(user)
	if password != "" {
		tcp.User = url.UserPassword(user, password)
	}
	q := url.Values{"sslmode": {"disable"}, "search_path": {schema}}
	tcp.RawQuery = q.Encode()
	sock := &url.URL{Scheme: "postgres", Path: "/" + dbname, User: tcp.User}
	sq := url.Values{"host": {socket}, "port": {port}, "search_path": {schema}}
	sock.RawQuery = sq.Encode()
	kv := func(host string, extra ...string) string {
		s := "host=" + host + " port=" + port + " user=" + user + " dbname=" + dbname
		if password != "" {
			s, _ = pgdsn.Set(s, "password", password)
		}
		for _, e := range extra {
			s += " " + e
		}
		s, _ = pgdsn.Set(s, "search_path", schema)
		return s
	}
	return []Form{
		{"URL over TCP", tcp.String()},
		{"key=value over TCP", kv(addr, "sslmode=disable")},
		{"URL over a Unix socket", sock.String()},
		{"key=value over a Unix socket", kv(socket)},
	}
}
