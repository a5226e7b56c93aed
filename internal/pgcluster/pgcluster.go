// Package pgcluster runs a throwaway PostgreSQL cluster for tests that stop,
// restart or break the database: initdb in a temporary directory, pg_ctl on
// a free loopback port (and a socket in that directory), removed when the
// test ends. It never touches the shared server that TASKGRAPH_TEST_PG
// names. As root (PostgreSQL refuses to run as root) the cluster runs as
// the user postgres.
package pgcluster

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "github.com/lib/pq" // PostgreSQL driver
)

// Cluster is a running (or stopped) throwaway cluster.
type Cluster struct {
	// DSN of its database "postgres", as the superuser postgres, trusted.
	DSN  string
	dir  string
	bin  string
	port int
	cred *syscall.Credential
}

// Start initialises and starts a cluster; it is stopped and removed when
// t ends.
func Start(t testing.TB) *Cluster {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		t.Fatalf("pgcluster: %v (install PostgreSQL's server binaries: initdb, pg_ctl)", err)
	}
	dir, err := os.MkdirTemp("", "taskgraph-pg-")
	if err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	c := &Cluster{dir: dir, bin: bin, port: freePort(t)}
	t.Cleanup(func() {
		_ = c.pgctl("stop", "-m", "immediate", "-w", "-t", "30")
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgcluster: running as root needs the user postgres to run PostgreSQL as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatalf("pgcluster: %v", err)
		}
	}
	if out, err := c.command("initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C").CombinedOutput(); err != nil {
		t.Fatalf("pgcluster: initdb: %v\n%s", err, out)
	}
	c.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", c.port)
	c.Start(t)
	return c
}

// binDir finds initdb and pg_ctl: on the PATH, else in Debian's
// /usr/lib/postgresql/<version>/bin (the newest).
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("initdb and pg_ctl not found")
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func (c *Cluster) data() string { return filepath.Join(c.dir, "data") }

func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd
}

func (c *Cluster) pgctl(args ...string) error {
	args = append([]string{"-D", c.data()}, args...)
	out, err := c.command("pg_ctl", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %w\n%s", args, err, out)
	}
	return nil
}

// Start starts the cluster (again) and waits until it accepts connections.
// Durability is off (fsync, synchronous commit): a test cluster is fast
// and its data are thrown away.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 -c shared_buffers=32MB",
		c.port, c.dir)
	if err := c.pgctl("start", "-w", "-t", "60", "-l", filepath.Join(c.dir, "log"), "-o", opts); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "log"))
		t.Fatalf("pgcluster: %v\n%s", err, tail(log))
	}
	c.waitReady(t)
}

// Stop stops the cluster: "fast" ends every session at once (clients see
// their connections terminated), as a restart by an operator does.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	if err := c.pgctl("stop", "-m", "fast", "-w", "-t", "60"); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
}

func (c *Cluster) waitReady(t testing.TB) {
	t.Helper()
	db, err := sql.Open("postgres", c.DSN)
	if err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgcluster: not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TerminateBackends ends the sessions of other clients whose
// application_name matches like (a LIKE pattern; "%" for all), as an
// operator's pg_terminate_backend does, and returns how many it ended.
func (c *Cluster) TerminateBackends(t testing.TB, like string) int {
	t.Helper()
	db, err := sql.Open("postgres", c.DSN)
	if err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	defer db.Close()
	var n int
	err = db.QueryRow(`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' AND datname IS NOT NULL AND application_name LIKE $1`, like).Scan(&n)
	if err != nil {
		t.Fatalf("pgcluster: terminate backends: %v", err)
	}
	return n
}

func tail(b []byte) []byte {
	if i := len(b) - 4000; i > 0 {
		b = b[i:]
	}
	return bytes.TrimSpace(b)
}
