// Package pgcluster runs throwaway PostgreSQL clusters for tests: initdb in
// a temporary directory, postgres (by pg_ctl) on a free loopback port and a
// socket in that directory, durability off. Two kinds share the code:
//
//   - Start(t): a cluster of one test's own, which the test may stop, start
//     again and break (the reliability suite); removed when the test ends.
//   - Shared(): the cluster of the whole test process, started at the first
//     call and shared by every test of the process (internal/dbtest's, when
//     no PostgreSQL answers at the default address).
//
// Neither touches the server that TASKGRAPH_TEST_PG names. As root
// (PostgreSQL refuses to run as root) the clusters run as the user postgres.
//
// However the test process ends — its tests done, a failed one's os.Exit, a
// panic, go test's timeout, kill -9 — its clusters stop and their
// directories go. Each cluster has a guard: a shell whose standard input is
// a pipe that only the test process holds open. When that process is gone,
// for whatever reason, the kernel closes the pipe; the guard's read returns,
// and it stops the cluster (immediate shutdown) and removes its directory.
// Not a parent-death signal on postgres: that fires when the OS thread that
// started it ends, which the Go runtime may do while the process lives (a
// goroutine that locked its thread and returned), and a thread kept for it
// needs a goroutine that never returns, which the goleak checks of many of
// the packages' TestMain report. The directory of a cluster whose guard
// was killed with its test process is removed by the next test process
// that starts one (removeStale), after stopping its postmaster if it runs.
package pgcluster

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
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

	guard    *os.File // the write end of the guard's standard input
	guardCmd *exec.Cmd
}

// Start initialises and starts a cluster of t's own; it is stopped and
// removed when t ends.
func Start(t testing.TB) *Cluster {
	t.Helper()
	c, err := create()
	if err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	t.Cleanup(c.remove)
	if err := c.startFirst(); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	return c
}

var (
	sharedOnce    sync.Once
	sharedCluster *Cluster
	sharedErr     error
)

// Shared returns the test process's own cluster, initialised and started
// at the first call (a couple of seconds); later calls return the same
// one, or the same error. Tests must not stop it: it ends with the process.
func Shared() (*Cluster, error) {
	sharedOnce.Do(func() {
		c, err := create()
		if err == nil {
			if err = c.startFirst(); err != nil {
				c.remove()
			}
		}
		if err != nil {
			sharedErr = err
			return
		}
		sharedCluster = c
	})
	return sharedCluster, sharedErr
}

const tempPrefix = "taskgraph-pg-"

// create makes a cluster's directory, its guard and its data (initdb); it
// is not started. On an error it leaves nothing.
func create() (c *Cluster, err error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	var uid, gid int
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, the tests run PostgreSQL as the user postgres (PostgreSQL refuses root), and there is none: %v (Debian's postgresql package makes it)", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	removeStale()
	dir, err := os.MkdirTemp("", tempPrefix)
	if err != nil {
		return nil, err
	}
	c = &Cluster{dir: dir, bin: bin, cred: cred}
	defer func() {
		if err != nil {
			c.remove()
			c = nil
		}
	}()
	// Whose it is, so that a later process can remove it once this one is
	// gone (removeStale), should the guard be gone too.
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return c, err
	}
	if cred != nil {
		if err := os.Chown(dir, uid, gid); err != nil {
			return c, err
		}
	}
	if err := c.startGuard(); err != nil {
		return c, err
	}
	if out, err := c.command("initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C").CombinedOutput(); err != nil {
		return c, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return c, nil
}

// guardScript waits for the end of its standard input (the test process
// is gone), then stops the cluster and removes its directory. $1 is
// pg_ctl, $2 the data directory, $3 the cluster's directory.
const guardScript = `read -r _
"$1" -D "$2" stop -m immediate -w -t 30 >/dev/null 2>&1
rm -rf "$3"
`

func (c *Cluster) startGuard() error {
	r, w, err := os.Pipe() // close-on-exec: no other child holds it
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", guardScript, "pgcluster-guard", filepath.Join(c.bin, "pg_ctl"), c.data(), c.dir)
	cmd.Stdin = r
	cmd.Dir = "/"
	// Its own process group: a ^C at the terminal ends the test process,
	// whose end the guard is there to see, not the guard.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = w.Close()
		return fmt.Errorf("start the cluster's guard: %w", err)
	}
	c.guard, c.guardCmd = w, cmd
	return nil
}

// remove stops the cluster (if it runs), removes its directory, and lets
// its guard go.
func (c *Cluster) remove() {
	_ = c.pgctl("stop", "-m", "immediate", "-w", "-t", "30")
	_ = os.RemoveAll(c.dir)
	if c.guard != nil {
		_ = c.guard.Close()
		_ = c.guardCmd.Wait()
		c.guard = nil
	}
}

// removeStale removes the clusters of test processes that are gone and
// whose guards did not (killed with them, say): it stops a postmaster that
// still runs in one.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner"))
		if err != nil {
			continue // not one of these, or being made
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		stopStalePostmaster(filepath.Join(d, "data"))
		_ = os.RemoveAll(d)
	}
}

// stopStalePostmaster ends the postmaster of data, if one runs there: the
// first line of postmaster.pid, if that process's working directory is
// data (a postmaster works in its data directory; another process may
// have the pid since).
func stopStalePostmaster(data string) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 0 {
		return
	}
	real, err := filepath.EvalSymlinks(data)
	if err != nil {
		return
	}
	if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err != nil || cwd != real {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGQUIT) // immediate shutdown
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// debianBins is where Debian's postgresql packages put the server's
// programs, off the PATH.
var debianBins = "/usr/lib/postgresql/*/bin"

// binDir finds initdb and pg_ctl: on the PATH, else in Debian's
// /usr/lib/postgresql/<version>/bin (the newest).
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob(debianBins)
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		_, err1 := os.Stat(filepath.Join(d, "initdb"))
		_, err2 := os.Stat(filepath.Join(d, "pg_ctl"))
		if err1 == nil && err2 == nil {
			return d, nil
		}
	}
	return "", ErrNotInstalled
}

// ErrNotInstalled says that initdb and pg_ctl are neither on the PATH nor
// where Debian installs them, and what to install.
var ErrNotInstalled = errors.New("PostgreSQL's server programs (initdb, pg_ctl) are not installed: install them (Debian: apt-get install postgresql)")

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
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

// startFirst picks the cluster's port and starts it: on another port if
// another process took the one it picked in the meantime.
func (c *Cluster) startFirst() error {
	var err error
	for range 3 {
		if c.port, err = freePort(); err != nil {
			return err
		}
		c.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", c.port)
		if err = c.start(); err == nil || !strings.Contains(err.Error(), "could not bind") {
			return err
		}
	}
	return err
}

// start starts the cluster and waits until it accepts connections.
// Durability is off (fsync, synchronous commit): a test cluster is fast and
// its data are thrown away.
func (c *Cluster) start() error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 -c shared_buffers=32MB",
		c.port, c.dir)
	log := filepath.Join(c.dir, "log")
	if err := c.pgctl("start", "-w", "-t", "60", "-l", log, "-o", opts); err != nil {
		b, _ := os.ReadFile(log)
		return fmt.Errorf("%v\n%s", err, tail(b))
	}
	return c.waitReady()
}

// Start starts the cluster again and waits until it accepts connections.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	if err := c.start(); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
}

// Stop stops the cluster: "fast" ends every session at once (clients see
// their connections terminated), as a restart by an operator does.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	if err := c.pgctl("stop", "-m", "fast", "-w", "-t", "60"); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
}

func (c *Cluster) waitReady() error {
	db, err := sql.Open("postgres", c.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 30s: %v", err)
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
