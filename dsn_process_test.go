package main

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/serverbin"
)

// TestEveryDSNFormServes runs the server on the test database written in
// every form (a URL and key=value, over TCP and a Unix socket) and finds
// it ready: the store, the relay, the alerts' listener and the leader
// locks all connect. A key=value DSN used to leave /readyz unanswered for
// ever (the relay's listening connection named a host that does not
// exist).
func TestEveryDSNFormServes(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	data := t.TempDir() // one deployment: the same database, the same files
	for _, f := range dbtest.PostgresForms(t) {
		t.Run(f.Name, func(t *testing.T) {
			addr := freeAddr(t)
			cmd := exec.Command(bin, "-addr", addr, "-data-dir", data, "-db", f.DSN, "-shutdown-grace", "1s")
			stderr := &serverbin.Output{}
			cmd.Stderr = stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill() //nolint:errcheck // exited on success
			serverbin.WaitReady(t, addr, 60*time.Second, stderr.String)
			var out struct{ CreateTask struct{ ID string } }
			gql(t, addr, `mutation { createTask(input: {type: "noop", input: {}}) { id } }`, &out)
			if out.CreateTask.ID == "" {
				t.Fatalf("no task created: %s", stderr.String())
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("exit: %v\n%s", err, stderr.String())
			}
		})
	}
}

// TestSIGTERMStopsAServerWhoseDatabaseNeverAnswers: the database accepts
// connections and never says a word (a hung server, a black-holing proxy).
// The process is still starting (opening the store) when SIGTERM comes,
// and stops, saying why, rather than ignore it.
func TestSIGTERMStopsAServerWhoseDatabaseNeverAnswers(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	for _, dsn := range []string{"postgres://u@%s/none?sslmode=disable", "host=%s port=%s dbname=none sslmode=disable"} {
		t.Run(strings.Fields(dsn)[0][:5], func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			accepted := make(chan net.Conn, 64)
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					accepted <- c // held open, never answered
				}
			}()
			host, port, _ := net.SplitHostPort(ln.Addr().String())
			db := fmt.Sprintf(dsn, ln.Addr().String())
			if strings.HasPrefix(dsn, "host=") {
				db = fmt.Sprintf(dsn, host, port)
			}
			cmd := exec.Command(bin, "-addr", freeAddr(t), "-data-dir", t.TempDir(), "-db", db, "-shutdown-grace", "1s")
			stderr := &serverbin.Output{}
			cmd.Stderr = stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill() //nolint:errcheck // exited on success
			c := <-accepted          // the process waits on the silent database
			defer c.Close()
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case err := <-exited:
				exit, ok := err.(*exec.ExitError)
				if !ok || exit.ExitCode() != 1 {
					t.Fatalf("exit %v, want code 1; stderr: %s", err, stderr.String())
				}
				if !strings.Contains(stderr.String(), "stopped before it started") {
					t.Fatalf("stderr does not say the start was interrupted: %s", stderr.String())
				}
			case <-time.After(2 * time.Minute): // a hang guard, far past the grace
				_ = cmd.Process.Kill()
				t.Fatalf("SIGTERM ignored while the database does not answer; stderr: %s", stderr.String())
			}
		})
	}
}

// TestClientFlagsBeforeTheCommand: the binary hands a client command the
// flags written before its name (they went to the server's flags, which
// have no --server).
func TestClientFlagsBeforeTheCommand(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary(t), "--server", "http://127.0.0.1:1", "--json", "task", "list")
	stderr := &serverbin.Output{}
	cmd.Stderr = stderr
	err := cmd.Run()
	exit, ok := err.(*exec.ExitError)
	if !ok || exit.ExitCode() != 1 {
		t.Fatalf("exit %v, want 1 (the server cannot be reached); stderr: %s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "cannot reach the server at http://127.0.0.1:1") {
		t.Fatalf("the command did not use --server: %s", stderr.String())
	}
}
