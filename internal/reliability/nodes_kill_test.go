package reliability

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/clusternode"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/nodes"
	"github.com/taskgraph/taskgraph/internal/serverbin"
	"github.com/taskgraph/taskgraph/internal/store"
)

// TestKilledNodeShowsGone: a server killed with SIGKILL cannot say it is
// stopping; its row in the node registry shows LIVE while its lease holds
// and GONE once it ran out.
func TestKilledNodeShowsGone(t *testing.T) {
	t.Parallel()
	bin := serverbin.Build(t)
	dbtest.Run(t, func(t *testing.T, dsn string) {
		ctx := auth.NewSystemContext(context.Background())
		addr := serverbin.FreeAddr(t)
		var stderr bytes.Buffer
		cmd := exec.Command(bin, "-addr", addr, "-db", dsn, "-data-dir", t.TempDir(), "-log-level", "warn",
			"-node-refresh", "200ms", "-node-lease", "2s", "-secret-key", strings.Repeat("ab", 32))
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		serverbin.WaitReady(t, addr, 30*time.Second, stderr.String)

		st, err := store.Open(ctx, store.Config{DSN: dsn})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		pid := cmd.Process.Pid
		row := func() *ent.ClusterNode {
			n, err := st.Client().ClusterNode.Query().Where(clusternode.Pid(pid)).Only(ctx)
			if err != nil && !ent.IsNotFound(err) {
				t.Fatal(err)
			}
			return n
		}
		waitUntil(t, 30*time.Second, func() bool {
			n := row()
			return n != nil && nodes.StateOf(n, time.Now()) == nodes.Live
		}, func() string { return "the node did not register itself LIVE" })

		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		killed := time.Now()
		last := row()
		waitUntil(t, 30*time.Second, func() bool {
			last = row()
			return nodes.StateOf(last, time.Now()) == nodes.Gone
		}, func() string { return "the killed node never showed GONE" })
		if last.StoppedAt != nil {
			t.Errorf("a killed node marked itself stopped")
		}
		// Its last refresh came before the kill, and its lease ended at
		// most one lease after that.
		if last.LastSeenAt.After(killed) {
			t.Errorf("last seen %s, after it was killed (%s)", last.LastSeenAt, killed)
		}
		if got := last.ExpiresAt.Sub(last.LastSeenAt); got != 2*time.Second {
			t.Errorf("lease %s, want the 2s of --node-lease", got)
		}
	})
}

func waitUntil(t *testing.T, timeout time.Duration, cond func() bool, why func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(why())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
