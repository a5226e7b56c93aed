package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/external"
)

// pyDriver runs the reference client (clients/python/taskgraph_worker.py)
// with one handler for "py.a": it logs, reports progress (1 of 1), sleeps
// input.sleepMs (watching for a cancel) and returns {"double": 2n}. Each
// start prints "started <taskId> <token>".
const pyDriver = `
import sys, time
sys.path.insert(0, sys.argv[1])
from taskgraph_worker import Worker
w = Worker(sys.argv[2], token=sys.argv[3], worker_id=sys.argv[4], concurrency=int(sys.argv[5]), wait_seconds=1)

@w.handler("py.a")
def handle(job):
    sys.stdout.write("started %d %s\n" % (job.task_id, job.token))  # one write: print() from several threads merges lines
    sys.stdout.flush()
    n = job.input["n"]
    job.log("doing %d" % n, n=n)
    job.progress(1, 1)
    end = time.monotonic() + job.input.get("sleepMs", 0) / 1000.0
    while time.monotonic() < end and not job.cancelled.is_set():
        time.sleep(0.01)
    return {"double": 2 * n}

w.run()
print("stopped requests", w.requests, "drained", w.drained.is_set(), flush=True)
`

// pyWorker is a running Python worker process.
type pyWorker struct {
	cmd     *exec.Cmd
	mu      sync.Mutex
	started map[int]string // task id -> token
	lines   []string
	done    chan error
}

func startPython(t *testing.T, url, token, id string, concurrency int) *pyWorker {
	t.Helper()
	return startPythonDriver(t, pyDriver, url, token, id, concurrency)
}

// startPythonDriver runs driver (a script taking pyDriver's arguments)
// as startPython runs pyDriver.
func startPythonDriver(t *testing.T, driver, url, token, id string, concurrency int) *pyWorker {
	t.Helper()
	script := filepath.Join(t.TempDir(), "driver.py")
	require.NoError(t, os.WriteFile(script, []byte(driver), 0o600))
	client, err := filepath.Abs("../../clients/python")
	require.NoError(t, err)
	cmd := exec.Command("python3", script, client, url, token, id, strconv.Itoa(concurrency))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	w := &pyWorker{cmd: cmd, started: map[int]string{}, done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			if len(f) == 3 && f[0] == "started" {
				id, _ := strconv.Atoi(f[1])
				w.started[id] = f[2]
			}
			w.mu.Unlock()
		}
		w.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})
	return w
}

func (w *pyWorker) token(id int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.started[id]
}

func createMany(t *testing.T, s *apptest.Server, typ string, inputs []map[string]any) []int {
	t.Helper()
	ctx := auth.NewContext(context.Background(), auth.Viewer{User: "otto", Role: auth.RoleOperator, Source: auth.SourceToken})
	var ids []int
	for _, in := range inputs {
		raw, err := json.Marshal(in)
		require.NoError(t, err)
		tk, err := s.App.Engine.Create(ctx, engine.CreateRequest{Type: typ, Input: raw})
		require.NoError(t, err)
		ids = append(ids, tk.ID)
	}
	return ids
}

func statusOf(t *testing.T, s *apptest.Server, id int) lifecycle.Status {
	t.Helper()
	tk, err := s.App.Store.Client().Task.Get(auth.NewSystemContext(context.Background()), id)
	require.NoError(t, err)
	return tk.Status
}

// TestPythonWorker: the reference Python client runs pythonTasks tasks (1,000 in the long tier) of an
// external type, each SUCCESS once with its result, logs and progress
// stored, and seen live on GraphQL subscriptions (a watched task's log
// line while it runs, its progress before its end); a cancel reaches it at its next heartbeat; SIGTERM lets the
// running handler finish and the worker exit.
func TestPythonWorker(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		// Heartbeats every 300 ms bring a cancel fast; the lease is the
		// default's, so that a loaded machine (the race detector, SQLite's
		// one writer behind 50 slots' completes) does not get live
		// executions recovered and run twice.
		s, tokens := workerNode(t, dsn, app.Options{WorkerHeartbeat: 300 * time.Millisecond}, func(c *app.Config) { c.HeartbeatTimeout = 30 * time.Second })
		const n = pythonTasks
		inputs := make([]map[string]any, n)
		for i := range inputs {
			inputs[i] = map[string]any{"n": i}
		}
		ids := createMany(t, s, "py.a", inputs)
		// One watched live, subscribed before the worker starts: its log
		// line arrives while it runs (it sleeps after logging), its
		// progress as a change while it is still EXECUTING.
		watched := createMany(t, s, "py.a", []map[string]any{{"n": -1, "sleepMs": 2000}})[0]
		ws := s.DialWS(t, map[string]any{"Authorization": "Bearer " + tokens["otto"]})
		ws.Subscribe("logs", `subscription($id: ID!) { taskLogAppended(taskId: $id) { message } }`, map[string]any{"id": watched})
		ws.Subscribe("task", `subscription($id: ID!) { taskUpdated(id: $id) { status progressDone } }`, map[string]any{"id": watched})
		s.WaitSubscribers(t, 1)
		w := startPython(t, s.URL, tokens["wa"], "py-1", 50)
		var sawLog, sawProgress bool
		for !sawLog || !sawProgress {
			m := ws.Next()
			require.Equal(t, "next", m.Type, "%s", m.Payload)
			var p struct {
				Data struct {
					TaskLogAppended *struct{ Message string }
					TaskUpdated     *struct {
						Status       string
						ProgressDone int
					}
				}
			}
			require.NoError(t, json.Unmarshal(m.Payload, &p))
			switch {
			case m.ID == "logs" && p.Data.TaskLogAppended != nil && p.Data.TaskLogAppended.Message == "doing -1":
				sawLog = true
				require.Equal(t, lifecycle.Executing, statusOf(t, s, watched), "the line came while the task ran")
			case m.ID == "task" && p.Data.TaskUpdated != nil && p.Data.TaskUpdated.ProgressDone == 1:
				sawProgress = true
				require.Equal(t, "EXECUTING", p.Data.TaskUpdated.Status, "the progress came before the end")
			}
		}
		ids = append(ids, watched)
		ctx := auth.NewSystemContext(context.Background())
		c := s.App.Store.Client()
		apptest.Eventually(t, 5*time.Minute, func() (bool, string) {
			done, err := c.Task.Query().Where(task.Type("py.a"), task.StatusEQ(lifecycle.Success)).Count(ctx)
			require.NoError(t, err)
			return done == n+1, strconv.Itoa(done) + " done"
		})
		tasks, err := c.Task.Query().Where(task.IDIn(ids...)).WithInstances().All(ctx)
		require.NoError(t, err)
		for _, tk := range tasks {
			require.Len(t, tk.Edges.Instances, 1, "each ran once")
			var in struct{ N int }
			require.NoError(t, json.Unmarshal([]byte(tk.Input), &in))
			require.JSONEq(t, `{"double":`+strconv.Itoa(2*in.N)+`}`, string(tk.Result))
			require.Equal(t, int64(1), tk.ProgressDone)
		}
		logs, err := c.TaskLog.Query().Where(tasklog.TaskIDIn(ids...), tasklog.MessageHasPrefix("doing ")).Count(ctx)
		require.NoError(t, err)
		require.Equal(t, n+1, logs)

		// A cancel of a running external task reaches the worker.
		long := createMany(t, s, "py.a", []map[string]any{{"n": 1, "sleepMs": 600000}})[0]
		apptest.Eventually(t, 30*time.Second, func() (bool, string) { return w.token(long) != "", "not started" })
		r := s.DoAs(t, tokens["otto"], `mutation($id: ID!) { cancelTask(id: $id, reason: "stop") { id } }`, map[string]any{"id": long})
		require.Empty(t, r.Errors)
		apptest.Eventually(t, 30*time.Second, func() (bool, string) {
			st := statusOf(t, s, long)
			return st == lifecycle.Cancelled, string(st)
		})

		// SIGTERM: the running handler finishes, the worker exits 0.
		last := createMany(t, s, "py.a", []map[string]any{{"n": 5, "sleepMs": 1000}})[0]
		apptest.Eventually(t, 30*time.Second, func() (bool, string) { return w.token(last) != "", "not started" })
		require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
		select {
		case err := <-w.done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Fatal("the worker did not stop after SIGTERM")
		}
		require.Equal(t, lifecycle.Success, statusOf(t, s, last), "it finished what ran")
		w.mu.Lock()
		t.Logf("python worker: %v", w.lines[len(w.lines)-1])
		w.mu.Unlock()
	})
}

// workerRow is an external worker as the API shows it.
type workerRow struct {
	ID, Name, Tenant, User, Language, Version, State string
	Types                                            []string
	Draining                                         bool
	RunningExecutions                                []struct{ TaskID string }
}

const workersQuery = `{ externalWorkers { id name tenant user language version state types draining runningExecutions { taskId } } }`

func workerNamed(t *testing.T, s *apptest.Server, token, name string) (workerRow, bool) {
	t.Helper()
	var out struct{ ExternalWorkers []workerRow }
	s.QueryAs(t, token, workersQuery, nil, &out)
	for _, w := range out.ExternalWorkers {
		if w.Name == name {
			return w, true
		}
	}
	return workerRow{}, false
}

// TestPythonWorkerDrained: the Python worker shows in externalWorkers
// (who it says it is, its credentials, its types, what it runs); an admin
// drains it mid-run (audited): its claims take nothing and answer
// draining, it finishes what runs and exits; nothing is lost — every task
// ran once to SUCCESS or waits for another worker, which runs the rest.
func TestPythonWorkerDrained(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, tokens := workerNode(t, dsn, app.Options{WorkerHeartbeat: 300 * time.Millisecond}, func(c *app.Config) { c.HeartbeatTimeout = 30 * time.Second })
		// More than it can run before the drain reaches it, on a busy
		// machine too: 60 of 300 ms on 3 slots take 6 s.
		const n = 60
		inputs := make([]map[string]any, n)
		for i := range inputs {
			inputs[i] = map[string]any{"n": i, "sleepMs": 300}
		}
		ids := createMany(t, s, "py.a", inputs)
		w := startPython(t, s.URL, tokens["wa"], "py-drained", 3)
		var row workerRow
		apptest.Eventually(t, 60*time.Second, func() (bool, string) {
			var ok bool
			row, ok = workerNamed(t, s, tokens["ada"], "py-drained")
			return ok && len(row.RunningExecutions) > 0, "not listed running"
		})
		require.Equal(t, "python", row.Language)
		require.NotEmpty(t, row.Version)
		require.Equal(t, []string{"py.a"}, row.Types)
		require.Equal(t, "wa", row.User)
		require.Equal(t, "LIVE", row.State)
		r := s.DoAs(t, tokens["otto"], `mutation($id: ID!) { drainWorker(id: $id, drain: true) { id } }`, map[string]any{"id": row.ID})
		require.Equal(t, "FORBIDDEN", r.Errors[0].Code(), "operators may not drain")
		var drained struct{ DrainWorker workerRow }
		s.QueryAs(t, tokens["ada"], `mutation($id: ID!) { drainWorker(id: $id, drain: true) { id state draining } }`, map[string]any{"id": row.ID}, &drained)
		require.Equal(t, "DRAINING", drained.DrainWorker.State)

		select {
		case err := <-w.done:
			require.NoError(t, err)
		case <-time.After(90 * time.Second):
			t.Fatal("the drained worker did not stop")
		}
		w.mu.Lock()
		last := w.lines[len(w.lines)-1]
		ran := len(w.started)
		w.mu.Unlock()
		require.True(t, strings.HasSuffix(last, "drained True"), "it stopped because it was drained: %s", last)
		require.Less(t, ran, n, "it stopped before the end")

		// Nothing lost: what it started ended SUCCESS once; nothing is left
		// EXECUTING; the rest waits.
		ctx := auth.NewSystemContext(context.Background())
		c := s.App.Store.Client()
		tasks, err := c.Task.Query().Where(task.IDIn(ids...)).WithInstances().All(ctx)
		require.NoError(t, err)
		for _, tk := range tasks {
			if w.token(tk.ID) != "" {
				require.Equal(t, lifecycle.Success, tk.Status, "task %d started: it finished", tk.ID)
				continue
			}
			require.Contains(t, []lifecycle.Status{lifecycle.Pending, lifecycle.RetryPending}, tk.Status, "task %d waits", tk.ID)
		}
		n2, err := c.AuditLog.Query().Where(auditlog.ActionEQ(auditlog.ActionWORKER_DRAIN), auditlog.OutcomeEQ(auditlog.OutcomeOK)).Count(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n2, "the drain is audited")

		// A drained worker's claim takes nothing and says so.
		wa := &external.Client{URL: s.URL, Token: tokens["wa"]}
		got, err := wa.Claim(context.Background(), external.ClaimRequest{WorkerID: "py-drained", Types: []string{"py.a"}, Max: 10})
		require.NoError(t, err)
		require.True(t, got.Draining)
		require.Empty(t, got.Tasks)

		// Another worker runs the rest.
		startPython(t, s.URL, tokens["wa"], "py-next", 10)
		apptest.Eventually(t, 120*time.Second, func() (bool, string) {
			done, err := c.Task.Query().Where(task.IDIn(ids...), task.StatusEQ(lifecycle.Success)).Count(ctx)
			require.NoError(t, err)
			return done == n, strconv.Itoa(done) + " done"
		})
		tasks, err = c.Task.Query().Where(task.IDIn(ids...)).WithInstances().All(ctx)
		require.NoError(t, err)
		for _, tk := range tasks {
			succeeded := 0
			for _, in := range tk.Edges.Instances {
				if in.Status == lifecycle.Success {
					succeeded++
				}
			}
			require.Equal(t, 1, succeeded, "task %d ran to SUCCESS once", tk.ID)
		}
	})
}
