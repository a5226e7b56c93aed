//go:build long

package reliability

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/blobtest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/serverbin"
	"github.com/taskgraph/taskgraph/internal/store"
)

// testnode builds internal/testnode (a server with the "record" task type).
func testnode(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "testnode")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/taskgraph/taskgraph/internal/testnode").CombinedOutput(); err != nil {
		t.Fatalf("build testnode: %v\n%s", err, out)
	}
	return bin
}

type node struct {
	cmd    *exec.Cmd
	addr   string
	stderr *bytes.Buffer
}

// startNode starts a node with a data directory of its own and the files
// at blobURL, shared by the nodes.
func startNode(t *testing.T, bin, dsn, blobURL string) *node {
	t.Helper()
	n := &node{addr: serverbin.FreeAddr(t), stderr: &bytes.Buffer{}}
	n.cmd = exec.Command(bin, "-addr", n.addr, "-db", dsn, "-data-dir", t.TempDir(), "-blob-url", blobURL, "-workers", "16",
		"-heartbeat-timeout", "3s", "-shutdown-grace", "2s", "-log-level", "warn",
		"-secret-key", strings.Repeat("ab", 32))
	n.cmd.Env = append(os.Environ(), "TESTNODE_DB="+dsn)
	n.cmd.Stderr = n.stderr
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n.cmd.ProcessState == nil {
			_ = n.cmd.Process.Kill()
			_ = n.cmd.Wait()
		}
	})
	serverbin.WaitReady(t, n.addr, 30*time.Second, n.stderr.String)
	return n
}

// TestThreeNodesOneKilled: three server processes share one PostgreSQL
// schema and run 2,000 tasks that each record their execution; one node is
// killed with SIGKILL mid-run. Every task must end SUCCESS, no instance may
// run twice, no task may run on two nodes at once, and the killed node's
// executions must be recovered by their lease.
func TestThreeNodesOneKilled(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresOnly(t)
	ctx := context.Background()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE record_executions (instance_id BIGINT PRIMARY KEY, task_id BIGINT NOT NULL, worker TEXT NOT NULL, started_at TIMESTAMPTZ NOT NULL, finished_at TIMESTAMPTZ)`); err != nil {
		t.Fatal(err)
	}
	bin := testnode(t)
	files := blobtest.Dir(t)
	nodes := []*node{startNode(t, bin, dsn, files), startNode(t, bin, dsn, files), startNode(t, bin, dsn, files)}

	s, err := store.Open(ctx, store.Config{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	access.Install(s.Client())
	defer s.Close()
	// Enough for every node to be busy when one is killed (a quarter is
	// done by then); more only makes the test longer.
	const total = 2000
	batch := make([]store.NewTask, total)
	for i := range batch {
		batch[i] = store.NewTask{Type: "record", Owner: "test", Input: json.RawMessage(fmt.Sprintf(`{"sleepMs":%d}`, 5+i%30)),
			InputHash: "-", TimeoutSeconds: 60, RetryPolicy: "default", MaxAttempts: 3}
	}
	if _, err := s.CreateTasks(ctx, batch); err != nil {
		t.Fatal(err)
	}

	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.QueryRow(q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	deadline := time.Now().Add(2 * time.Minute)
	for count(`SELECT count(*) FROM record_executions`) < total/4 {
		if time.Now().After(deadline) {
			t.Fatal("work did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	victim := nodes[1]
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.cmd.Wait()
	victimWorker := fmt.Sprintf("-%d-", victim.cmd.Process.Pid)

	deadline = time.Now().Add(3 * time.Minute)
	for count(`SELECT count(*) FROM tasks WHERE status NOT IN ('SUCCESS', 'FAILED', 'CANCELLED')`) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("tasks left unfinished")
		}
		time.Sleep(100 * time.Millisecond)
	}

	if n := count(`SELECT count(*) FROM tasks WHERE status = 'SUCCESS'`); n != total {
		t.Errorf("%d of %d tasks SUCCESS", n, total)
	}
	if n := count(`SELECT count(*) FROM task_instances WHERE status = 'SUCCESS'`); n != total {
		t.Errorf("%d SUCCESS instances, want one per task", n)
	}
	if n := count(`SELECT count(*) FROM task_instances WHERE last_error LIKE '%record start%'`); n != 0 {
		t.Errorf("%d instances ran twice (their execution record already existed)", n)
	}
	if n := count(`SELECT count(*) FROM task_instances i JOIN record_executions r ON r.instance_id = i.id WHERE i.status = 'SUCCESS' AND r.finished_at IS NOT NULL`); n != total {
		t.Errorf("%d SUCCESS instances with a finished execution record, want %d", n, total)
	}
	// No task ran on two nodes at once: each later execution of a task
	// started after the earlier one had ended (or had been recovered).
	if n := count(`
SELECT count(*) FROM record_executions a
JOIN record_executions b ON a.task_id = b.task_id AND a.instance_id < b.instance_id
JOIN task_instances ia ON ia.id = a.instance_id
WHERE b.started_at < COALESCE(a.finished_at, ia.finished_at)`); n != 0 {
		t.Errorf("%d pairs of executions of one task overlapped", n)
	}
	// The killed node held executions (claimed, running, or finished with
	// their outcome not yet written); the lease recovered every one, and
	// nothing else of that node's.
	unfinished := count(`SELECT count(*) FROM record_executions WHERE worker LIKE $1 AND finished_at IS NULL`, "%"+victimWorker+"%")
	recovered := count(`SELECT count(*) FROM task_instances WHERE worker_id LIKE $1 AND error_kind = 'TIMEOUT' AND last_error LIKE '%stopped sending heartbeats%'`, "%"+victimWorker+"%")
	if recovered == 0 {
		t.Errorf("the killed node held no executions: the test did not kill it mid-run")
	}
	if recovered < unfinished {
		t.Errorf("%d executions were running on the killed node, %d recovered by the lease", unfinished, recovered)
	}
	if n := count(`SELECT count(*) FROM task_instances WHERE worker_id LIKE $1 AND status NOT IN ('SUCCESS') AND NOT (error_kind = 'TIMEOUT' AND last_error LIKE '%stopped sending heartbeats%')`, "%"+victimWorker+"%"); n != 0 {
		t.Errorf("%d of the killed node's instances ended otherwise than SUCCESS or recovered by the lease", n)
	}
	if n := count(`SELECT count(*) FROM task_instances WHERE status = 'EXECUTING'`); n != 0 {
		t.Errorf("%d instances left EXECUTING", n)
	}
	workers := count(`SELECT count(DISTINCT worker) FROM record_executions`)
	if workers != 3 {
		t.Errorf("%d nodes ran tasks, want 3", workers)
	}
	t.Logf("killed node was running %d executions; %d recovered by the lease; %d executions in all", unfinished, recovered, count(`SELECT count(*) FROM record_executions`))

	for _, n := range []*node{nodes[0], nodes[2]} {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		if err := n.cmd.Wait(); err != nil {
			t.Errorf("node exit: %v\n%s", err, n.stderr)
		}
	}
}
