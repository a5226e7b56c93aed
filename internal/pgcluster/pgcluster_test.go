package pgcluster

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv, in the environment, makes the test binary a process that
// starts the shared cluster, prints its DSN and waits to be killed.
const helperEnv = "PGCLUSTER_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		c, err := Shared()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(c.DSN)
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until killed
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// skipIfOff skips with TASKGRAPH_TEST_PG=off, which says that this
// machine has no PostgreSQL (CI refuses it).
func skipIfOff(t *testing.T) {
	if os.Getenv("TASKGRAPH_TEST_PG") == "off" {
		t.Skip("TASKGRAPH_TEST_PG=off: this test needs PostgreSQL's server programs")
	}
}

func query(dsn, q string) (string, error) {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var s string
	err = db.QueryRowContext(ctx, q).Scan(&s)
	return s, err
}

// A test's own cluster starts, stops (sessions refused), starts again on
// the same port with its data, and its directory is gone after the test.
func TestStartStopStart(t *testing.T) {
	skipIfOff(t)
	var c *Cluster
	t.Run("cluster", func(t *testing.T) {
		c = Start(t)
		db, err := sql.Open("postgres", c.DSN)
		if err != nil {
			t.Fatal(err)
		}
		_, err = db.Exec("CREATE TABLE kept (x int)")
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		c.Stop(t)
		if _, err := query(c.DSN, "SELECT 'ok'"); err == nil {
			t.Fatal("a stopped cluster answered")
		}
		c.Start(t)
		if n, err := query(c.DSN, "SELECT count(*)::text FROM kept"); err != nil || n != "0" {
			t.Fatalf("after a restart: %q %v", n, err)
		}
		// A session of the application "victim" is ended, others not.
		victim, err := sql.Open("postgres", c.DSN+"&application_name=victim")
		if err != nil {
			t.Fatal(err)
		}
		defer victim.Close()
		conn, err := victim.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := conn.PingContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := c.TerminateBackends(t, "victim"); n != 1 {
			t.Errorf("terminated %d backends, want the victim's", n)
		}
		if err := conn.PingContext(context.Background()); err == nil {
			t.Error("the victim's session survived")
		}
	})
	if _, err := os.Stat(c.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cluster's directory after the test: %v", err)
	}
	if _, err := query(c.DSN, "SELECT 'ok'"); err == nil {
		t.Error("the cluster answers after the test")
	}
	if err := c.guardCmd.Process.Signal(syscall.Signal(0)); err == nil {
		t.Error("the guard runs after the test")
	}
}

// The shared cluster is one per process.
func TestShared(t *testing.T) {
	skipIfOff(t)
	c, err := Shared()
	if err != nil {
		t.Fatal(err)
	}
	if s, err := query(c.DSN, "SELECT 'ok'"); err != nil || s != "ok" {
		t.Fatalf("%q %v", s, err)
	}
	if c2, err := Shared(); err != nil || c2 != c {
		t.Fatalf("a second call: %v %v", c2, err)
	}
}

// However a test process ends (here: kill -9, where nothing of its own
// runs), its shared cluster stops and its directory goes.
func TestSharedEndsWithTheProcess(t *testing.T) {
	skipIfOff(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the helper: %v: %s", err, stderr.String())
	}
	dsn := strings.TrimSpace(line)
	data, err := query(dsn, "SHOW data_directory")
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, qerr := query(dsn, "SELECT 'ok'")
		_, serr := os.Stat(filepath.Dir(data))
		if qerr != nil && errors.Is(serr, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30s after its test process was killed, the cluster answers (%v) or its directory is there (%v)", qerr, serr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The directory of a cluster whose process and guard are gone is removed
// by the next process, its postmaster first stopped; those of live
// processes stay.
func TestRemoveStale(t *testing.T) {
	skipIfOff(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(owner int) string {
		d, err := os.MkdirTemp("", tempPrefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		if err := os.WriteFile(filepath.Join(d, "owner"), []byte(strconv.Itoa(owner)), 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	stale, live := mk(dead.Process.Pid), mk(os.Getppid())
	// A stale cluster that still runs: its guard killed with its process.
	c, err := create()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.remove)
	if err := c.startFirst(); err != nil {
		t.Fatal(err)
	}
	_ = c.guardCmd.Process.Kill()
	_ = c.guardCmd.Wait()
	if err := os.WriteFile(filepath.Join(c.dir, "owner"), []byte(strconv.Itoa(dead.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	removeStale()
	for _, d := range []string{stale, c.dir} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s of a dead process: %v", d, err)
		}
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("%s of a live process: %v", live, err)
	}
	if _, err := query(c.DSN, "SELECT 'ok'"); err == nil {
		t.Error("the stale cluster still answers")
	}
}

// Without initdb the error is one line that says what to install.
func TestNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	old := debianBins
	debianBins = filepath.Join(t.TempDir(), "*", "bin")
	t.Cleanup(func() { debianBins = old })
	_, err := create()
	if !errors.Is(err, ErrNotInstalled) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "apt-get install postgresql") {
		t.Fatalf("create without initdb: %v", err)
	}
}
