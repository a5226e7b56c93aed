//go:build long

package reliability

import (
	"database/sql"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/blobtest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/serverbin"
)

// TestWorkflowChildSurvivesAKillAfterItsParent: node A runs a workflow's
// parent step and is killed with SIGKILL right after the parent's SUCCESS
// is committed and before anything claimed the child (the child's type is
// paused cluster-wide, so no node may start it). The release was part of
// the parent's committing transaction, so nothing is lost with A: once
// node B is up and the type resumed, the child runs exactly once, on B,
// with the parent's result, and the workflow ends SUCCESS. The fan-in
// variant does the same with three parents of one child: the last
// parent's success released it, and it receives all three results.
func TestWorkflowChildSurvivesAKillAfterItsParent(t *testing.T) {
	t.Parallel()
	for _, shape := range []struct {
		name    string
		parents []string
	}{{"one parent", []string{"parent"}}, {"fan-in", []string{"p1", "p2", "p3"}}} {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			killAfterParents(t, shape.parents)
		})
	}
}

// killAfterParents runs TestWorkflowChildSurvivesAKillAfterItsParent for a
// child of parents, the i-th of which emits {"rows": 42+i}.
func killAfterParents(t *testing.T, parents []string) {
	dsn := dbtest.PostgresOnly(t)
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE relay_executions (instance_id BIGINT PRIMARY KEY, task_id BIGINT NOT NULL, worker TEXT NOT NULL, parents JSONB NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	bin := testnode(t)
	files := blobtest.Dir(t)
	a := startWorkflowNode(t, bin, dsn, files)

	var paused struct{ PauseType struct{ Paused bool } }
	serverbin.Query(t, a.addr, "", `mutation { pauseType(type: "relay.c") { paused } }`, nil, &paused)
	if !paused.PauseType.Paused {
		t.Fatal("relay.c not paused")
	}
	type step struct{ ID, StepKey, Status string }
	var created struct {
		CreateWorkflow struct {
			ID    string
			Steps []step
		}
	}
	var defs []map[string]any
	for i, p := range parents {
		defs = append(defs, map[string]any{"key": p, "type": "relay.p", "input": map[string]any{"emit": map[string]any{"rows": 42 + i}}, "maxAttempts": 1})
	}
	defs = append(defs, map[string]any{"key": "child", "type": "relay.c", "dependsOn": parents, "maxAttempts": 1})
	serverbin.Query(t, a.addr, "", `mutation($in: CreateWorkflowInput!) { createWorkflow(input: $in) { id steps { id stepKey status } } }`,
		map[string]any{"in": map[string]any{"key": "kill-after-parent", "steps": defs}}, &created)
	wf := created.CreateWorkflow.ID
	ids := map[string]string{}
	for _, s := range created.CreateWorkflow.Steps {
		ids[s.StepKey] = s.ID
	}
	if len(ids) != len(parents)+1 || ids["child"] == "" {
		t.Fatalf("steps: %+v", created.CreateWorkflow.Steps)
	}
	read := func(addr string) (status string, steps map[string]string) {
		var out struct {
			Workflow struct {
				Status string
				Steps  []step
			}
		}
		serverbin.Query(t, addr, "", `query($id: ID!) { workflow(id: $id) { status steps { id stepKey status } } }`,
			map[string]any{"id": wf}, &out)
		steps = map[string]string{}
		for _, s := range out.Workflow.Steps {
			steps[s.StepKey] = s.Status
		}
		return out.Workflow.Status, steps
	}
	var steps map[string]string
	waitUntil(t, 30*time.Second, func() bool {
		_, steps = read(a.addr)
		for _, p := range parents {
			if steps[p] != "SUCCESS" {
				return false
			}
		}
		return true
	}, func() string { return "the parents never all succeeded: " + a.stderr.String() })
	// The window: the parents' successes are committed, the child
	// released and not claimed.
	if steps["child"] != "PENDING" {
		t.Fatalf("child %s once its parents succeeded, want PENDING (released, not claimed)", steps["child"])
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()

	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.QueryRow(q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	if n := count(`SELECT count(*) FROM task_instances WHERE task_id = $1 AND (started_at IS NOT NULL OR worker_id <> '')`, ids["child"]); n != 0 {
		t.Fatalf("the child had %d claimed instances before any node could claim it", n)
	}

	b := startWorkflowNode(t, bin, dsn, files)
	serverbin.Query(t, b.addr, "", `mutation { resumeType(type: "relay.c") { paused } }`, nil, &paused)
	var status string
	waitUntil(t, 30*time.Second, func() bool {
		status, steps = read(b.addr)
		return status == "SUCCESS"
	}, func() string { return "the workflow never succeeded: " + status + " " + b.stderr.String() })
	if steps["child"] != "SUCCESS" {
		t.Fatalf("child %s in a successful workflow", steps["child"])
	}

	if n := count(`SELECT count(*) FROM task_instances WHERE task_id = $1`, ids["child"]); n != 1 {
		t.Errorf("the child has %d instances, want 1", n)
	}
	if n := count(`SELECT count(*) FROM relay_executions WHERE task_id = $1`, ids["child"]); n != 1 {
		t.Errorf("the child ran %d times, want once", n)
	}
	var parentWorker, childWorker, received string
	if err := db.QueryRow(`SELECT worker FROM relay_executions WHERE task_id = $1`, ids[parents[0]]).Scan(&parentWorker); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT worker, parents FROM relay_executions WHERE task_id = $1`, ids["child"]).Scan(&childWorker, &received); err != nil {
		t.Fatal(err)
	}
	if childWorker == parentWorker {
		t.Errorf("the child ran on %s, the killed node", childWorker)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal([]byte(received), &got); err != nil {
		t.Fatalf("parents %s: %v", received, err)
	}
	if len(got) != len(parents) {
		t.Errorf("the child received %d parents' results (%s), want %d", len(got), received, len(parents))
	}
	for i, p := range parents {
		var fromParent struct{ Rows int }
		if err := json.Unmarshal(got[p], &fromParent); err != nil || fromParent.Rows != 42+i {
			t.Errorf("the child received parents %s, want %s's {\"rows\":%d}", received, p, 42+i)
		}
	}
}

type wfNode struct {
	cmd    *exec.Cmd
	addr   string
	stderr *serverbin.Output // read while the process writes it
}

// startWorkflowNode starts a testnode with a data directory of its own,
// the files at blobURL (shared by the nodes) and a short heartbeat timeout
// (the watchdog's recovery of a killed node's executions).
func startWorkflowNode(t *testing.T, bin, dsn, blobURL string) *wfNode {
	t.Helper()
	n := &wfNode{addr: serverbin.FreeAddr(t), stderr: &serverbin.Output{}}
	n.cmd = exec.Command(bin, "-addr", n.addr, "-db", dsn, "-data-dir", t.TempDir(), "-blob-url", blobURL, "-workers", "4",
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
