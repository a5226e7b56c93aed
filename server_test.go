package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/serverbin"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/worker"
)

// binary is the server, built once per test run.
func binary(t *testing.T) string { return serverbin.Build(t) }

func freeAddr(t *testing.T) string { return serverbin.FreeAddr(t) }

func TestStartupFailsFastWithOneLine(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"BadFlag", []string{"-workers", "lots"}, 2, `--workers: "lots" is not a whole number between 1 and 10000`},
		{"UnreachableDatabase", []string{"-db", "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2", "-addr", "127.0.0.1:0"}, 1, "connect to postgres database"},
		{"BadSecretKey", []string{"-secret-key", "short", "-addr", "127.0.0.1:0"}, 2, "--secret-key: the value given (5 characters) is not 64 hex characters"},
		{"OpenOnAPublicAddress", []string{"-addr", "0.0.0.0:0"}, 2, "not a loopback address"},
		{"MissingTokenFile", []string{"-addr", "0.0.0.0:0", "-token-file", "/nonexistent/tokens"}, 1, "token file"},
		{"DataDirectoryUnderAFile", []string{"-addr", "127.0.0.1:0", "-data-dir", "/dev/null/data"}, 1, "data directory /dev/null/data: cannot create it (not a directory); make it writable by the user running taskgraph, or choose another with --data-dir"},
		{"NotADatabase", []string{"-db", "mysql://root@127.0.0.1/x"}, 2, "--db: \"mysql://root@127.0.0.1/x\" is not a database taskgraph can use: mysql is not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(bin, append([]string{"-data-dir", t.TempDir()}, tc.args...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			exit, ok := err.(*exec.ExitError)
			if !ok {
				t.Fatalf("want exit code %d, got %v", tc.code, err)
			}
			if exit.ExitCode() != tc.code {
				t.Fatalf("exit code %d, want %d; stderr: %s", exit.ExitCode(), tc.code, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if tc.code == 1 && len(lines) != 1 {
				t.Fatalf("want one line, got %d:\n%s", len(lines), stderr.String())
			}
			if tc.code == 2 && (len(lines) != 2 || lines[1] != "taskgraph -h lists the flags and commands.") {
				t.Fatalf("want the error and a pointer to -h (not the usage), got:\n%s", stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stderr %q does not mention %q", stderr.String(), tc.want)
			}
		})
	}
}

func gql(t *testing.T, addr, query string, out any) { serverbin.Query(t, addr, "", query, nil, out) }

// TestSignalsShutDownGracefully runs the real server, starts a long task and
// a short one, sends SIGTERM, and checks ARCHITECTURE.md, "Shutdown": the
// short task finished within the grace period, the long one was released as
// INTERRUPTED -> RETRY_PENDING, and nothing is left EXECUTING.
func TestSignalsShutDownGracefully(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	cmd := exec.Command(bin, "-addr", addr, "-data-dir", dir, "-shutdown-grace", "1500ms", "-log-format", "json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill() //nolint:errcheck // already exited on success
	serverbin.WaitReady(t, addr, 20*time.Second, stderr.String)
	deadline := time.Now().Add(20 * time.Second)
	var long, short struct{ CreateTask struct{ ID string } }
	gql(t, addr, `mutation { createTask(input: {type: "noop", input: {sleepMs: 600000}}) { id } }`, &long)
	gql(t, addr, `mutation { createTask(input: {type: "noop", input: {sleepMs: 500}}) { id } }`, &short)
	for {
		var st struct{ Task struct{ Status string } }
		gql(t, addr, `{ task(id: `+short.CreateTask.ID+`) { status } }`, &st)
		if st.Task.Status == "EXECUTING" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("task never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, stderr.String())
	}

	s, err := store.Open(context.Background(), store.Config{DSN: filepath.Join(dir, "taskgraph.db")})
	if err != nil {
		t.Fatal(err)
	}
	access.Install(s.Client())
	defer s.Close()
	ctx := auth.NewSystemContext(context.Background())
	n, err := s.Client().TaskInstance.Query().Where(taskinstance.StatusEQ(lifecycle.Executing)).Count(ctx)
	if err != nil || n != 0 {
		t.Fatalf("%d instances left EXECUTING (%v)", n, err)
	}
	check := func(id string, want lifecycle.Status) {
		var taskID int
		fmt.Sscan(id, &taskID)
		tk, err := s.TaskByID(ctx, taskID)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Status != want {
			t.Fatalf("task %d is %s, want %s", taskID, tk.Status, want)
		}
	}
	check(short.CreateTask.ID, lifecycle.Success)
	check(long.CreateTask.ID, lifecycle.RetryPending)
	var longID int
	fmt.Sscan(long.CreateTask.ID, &longID)
	ins, err := s.Client().TaskInstance.Query().Where(taskinstance.TaskID(longID)).Order(taskinstance.ByInstanceNo()).All(ctx)
	if err != nil || len(ins) != 2 || ins[0].ErrorKind == nil || *ins[0].ErrorKind != lifecycle.KindInterrupted {
		t.Fatalf("long task's instances: %v %v", ins, err)
	}
}

// startLine runs the binary with args until it logs its start line (as
// JSON), then stops it and returns that line.
func startLine(t *testing.T, args ...string) map[string]any {
	t.Helper()
	return startLineEnv(t, nil, args...)
}

// startLineEnv is startLine with the environment's GOGC and GOMEMLIMIT
// replaced by env's variables (nil: both unset).
func startLineEnv(t *testing.T, env []string, args ...string) map[string]any {
	t.Helper()
	cmd := exec.Command(binary(t), append(args, "--log-format", "json", "--data-dir", t.TempDir())...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(v string) bool { return strings.HasPrefix(v, "GOGC=") || strings.HasPrefix(v, "GOMEMLIMIT=") })
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := make(chan map[string]any)
	go func() {
		defer close(lines)
		dec := json.NewDecoder(stderr)
		for {
			var m map[string]any
			if dec.Decode(&m) != nil {
				return
			}
			if m["msg"] == "taskgraph started" {
				lines <- m
			}
		}
	}()
	select {
	case m, ok := <-lines:
		if !ok {
			t.Fatalf("%v exited without starting", args)
		}
		return m
	case <-time.After(30 * time.Second):
		t.Fatalf("%v: no start line within 30 s", args)
	}
	return nil
}

func TestStartLineSaysWhatRuns(t *testing.T) {
	t.Parallel()
	t.Run("AnAPINodeWithItsAddressAsGiven", func(t *testing.T) {
		t.Parallel()
		tokens := filepath.Join(t.TempDir(), "tokens")
		line := auth.TokenLine(auth.NewToken(), auth.Viewer{User: "ops", Role: auth.RoleAdmin})
		if err := os.WriteFile(tokens, []byte(line+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		m := startLine(t, "--addr", "0.0.0.0:0", "--token-file", tokens, "--role", "api")
		if addr, _ := m["addr"].(string); !strings.HasPrefix(addr, "http://0.0.0.0:") {
			t.Fatalf("addr %q is not the address given (0.0.0.0, not [::])", addr)
		}
		if m["roles"] != "api" {
			t.Fatalf("roles %v, want api", m["roles"])
		}
		if _, ok := m["workers"]; ok {
			t.Fatalf("an api-only node runs no workers, yet logs workers=%v", m["workers"])
		}
	})
	t.Run("TheSQLiteFileByItsAbsolutePath", func(t *testing.T) {
		t.Parallel()
		// A bare switch (--playground) followed by another flag.
		m := startLine(t, "--playground", "--addr", "127.0.0.1:0", "--db", "tasks.db")
		wd, _ := os.Getwd()
		if m["file"] != filepath.Join(wd, "tasks.db") {
			t.Fatalf("file %v, want %s", m["file"], filepath.Join(wd, "tasks.db"))
		}
		t.Cleanup(func() {
			for _, suffix := range []string{"", "-wal", "-shm", "-queue.lock", "-write.lock"} {
				_ = os.Remove(filepath.Join(wd, "tasks.db"+suffix))
			}
		})
		if m["roles"] != "api,watchdog,worker" || m["workers"] != float64(worker.ConcurrencyDefault) {
			t.Fatalf("roles %v, workers %v", m["roles"], m["workers"])
		}
		if m["gogc"] != float64(app.GCPercentDefault) {
			t.Fatalf("gogc %v, want the server's default %d", m["gogc"], app.GCPercentDefault)
		}
		if want := app.GCMemoryLimit(os.ReadFile); m["gomemlimit"] != float64(want) || want <= 0 {
			t.Fatalf("gomemlimit %v, want %d (a share of this machine's memory)", m["gomemlimit"], want)
		}
	})
	t.Run("GOGCAndGOMEMLIMITFromTheEnvironmentWin", func(t *testing.T) {
		t.Parallel()
		for env, want := range map[string][2]float64{
			"GOGC=50":         {50, float64(app.GCMemoryLimit(os.ReadFile))},
			"GOGC=off":        {-1, float64(app.GCMemoryLimit(os.ReadFile))},
			"GOMEMLIMIT=1GiB": {app.GCPercentDefault, 1 << 30},
			"GOMEMLIMIT=off":  {app.GCPercentDefault, -1},
		} {
			m := startLineEnv(t, []string{env}, "--addr", "127.0.0.1:0")
			if m["gogc"] != want[0] || m["gomemlimit"] != want[1] {
				t.Errorf("%s: gogc %v and gomemlimit %v, want %v and %v", env, m["gogc"], m["gomemlimit"], want[0], want[1])
			}
		}
	})
}

func TestHelpAndExitCodes(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	run := func(args ...string) (int, string, string) {
		cmd := exec.Command(bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if exit, ok := err.(*exec.ExitError); ok {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, stdout.String(), stderr.String()
	}
	code, out, _ := run("-h")
	if code != 0 {
		t.Fatalf("-h exits %d, want 0", code)
	}
	for _, c := range commands {
		if !strings.Contains(out, "  "+c.name+" ") || !strings.Contains(out, c.summary) {
			t.Fatalf("-h does not list %s with its line:\n%s", c.name, out)
		}
	}
	if !strings.Contains(out, "--workers int") || !strings.Contains(out, "--playground\n") {
		t.Fatalf("-h does not type its flags:\n%s", out)
	}
	if code, _, _ := run("help"); code != 0 {
		t.Fatalf("help exits %d", code)
	}
	for _, c := range commands {
		if code, _, errOut := run(c.name, "-h"); code != 0 {
			t.Fatalf("%s -h exits %d, want 0: %s", c.name, code, errOut)
		}
	}
	code, out, errOut := run("--nope")
	if code != 2 || out != "" || strings.Count(errOut, "--nope") != 1 || strings.Contains(errOut, "--workers") {
		t.Fatalf("an unknown flag: exit %d (want 2), the error once and no usage; stdout %q, stderr %q", code, out, errOut)
	}
}
