package app_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/external"
)

// wireClaim is a claim's answer as it comes over the wire, each task
// both decoded and as its raw JSON object (to see which fields it has).
type wireClaim struct {
	tasks map[string]external.ClaimedTask       // by step key
	raw   map[string]map[string]json.RawMessage // by step key
}

// claimSteps claims up to max tasks of py.a for c over plain HTTP and
// returns them by step key (keys names each claimed task's step).
func claimSteps(t *testing.T, c *external.Client, keys map[int]string, max int) wireClaim {
	t.Helper()
	body, err := json.Marshal(external.ClaimRequest{WorkerID: "py-parents", Types: []string{"py.a"}, Max: max, WaitSeconds: 5})
	require.NoError(t, err)
	var raw json.RawMessage
	require.NoError(t, c.CallRaw(context.Background(), "claim", body, &raw))
	var typed external.ClaimResponse
	require.NoError(t, json.Unmarshal(raw, &typed))
	var untyped struct{ Tasks []map[string]json.RawMessage }
	require.NoError(t, json.Unmarshal(raw, &untyped))
	out := wireClaim{tasks: map[string]external.ClaimedTask{}, raw: map[string]map[string]json.RawMessage{}}
	for i, ct := range typed.Tasks {
		k, ok := keys[ct.TaskID]
		require.True(t, ok, "task %d is none of the expected steps", ct.TaskID)
		out.tasks[k] = ct
		out.raw[k] = untyped.Tasks[i]
	}
	return out
}

// stepIDs returns the task ids of workflow wf's steps by key, and the
// keys by task id.
func stepIDs(t *testing.T, s *apptest.Server, wf int) (map[string]int, map[int]string) {
	t.Helper()
	steps, err := s.App.Store.Client().Task.Query().Where(task.WorkflowID(wf)).All(auth.NewSystemContext(context.Background()))
	require.NoError(t, err)
	ids, keys := map[string]int{}, map[int]string{}
	for _, st := range steps {
		ids[*st.StepKey] = st.ID
		keys[st.ID] = *st.StepKey
	}
	return ids, keys
}

func createWorkflow(t *testing.T, s *apptest.Server, v auth.Viewer, req engine.WorkflowRequest) (map[string]int, map[int]string) {
	t.Helper()
	wf, err := s.App.Engine.CreateWorkflow(auth.NewContext(context.Background(), v), req)
	require.NoError(t, err)
	return stepIDs(t, s, wf.ID)
}

func pyStep(key string, n int, dependsOn ...string) engine.StepRequest {
	return engine.StepRequest{Key: key, Task: engine.CreateRequest{Type: "py.a", Input: json.RawMessage(`{"n":` + strconv.Itoa(n) + `}`)}, DependsOn: dependsOn}
}

var otto = auth.Viewer{User: "otto", Role: auth.RoleOperator, Source: auth.SourceToken}

// storedResult is a task's result as stored (and shown).
func storedResult(t *testing.T, s *apptest.Server, id int) json.RawMessage {
	t.Helper()
	tk, err := s.App.Store.Client().Task.Get(auth.NewSystemContext(context.Background()), id)
	require.NoError(t, err)
	return json.RawMessage(tk.Result)
}

func completeOK(t *testing.T, c *external.Client, token, result string) {
	t.Helper()
	done, err := c.Complete(context.Background(), external.CompleteRequest{Token: token, Status: "SUCCESS", Result: json.RawMessage(result)})
	require.NoError(t, err)
	require.Equal(t, "SUCCESS", done.TaskStatus)
}

// TestWorkerProtocolDiamondGetsParentsResults: a diamond A -> (B, C) -> D
// of an external type, run entirely by one worker over the protocol:
// each claim of a step carries its parents' results by step key, as
// stored (masked), and their outcomes; a step without parents carries
// neither field.
func TestWorkerProtocolDiamondGetsParentsResults(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, tokens := workerNode(t, dsn, app.Options{})
		wa := &external.Client{URL: s.URL, Token: tokens["wa"]}
		ids, keys := createWorkflow(t, s, otto, engine.WorkflowRequest{Title: "diamond", Steps: []engine.StepRequest{
			pyStep("a", 1), pyStep("b", 2, "a"), pyStep("c", 3, "a"), pyStep("d", 4, "b", "c"),
		}})

		got := claimSteps(t, wa, keys, 10)
		require.Len(t, got.tasks, 1, "only the root is claimable")
		require.NotContains(t, got.raw["a"], "parents", "a task without parents carries none")
		require.NotContains(t, got.raw["a"], "parentOutcomes")
		completeOK(t, wa, got.tasks["a"].Token, `{"rows":3,"password":"hunter2"}`)
		aResult := storedResult(t, s, ids["a"])
		require.NotContains(t, string(aResult), "hunter2", "the result is stored masked")

		got = claimSteps(t, wa, keys, 10)
		require.Len(t, got.tasks, 2, "a released both children")
		for _, k := range []string{"b", "c"} {
			ct := got.tasks[k]
			require.Len(t, ct.Parents, 1)
			require.JSONEq(t, string(aResult), string(ct.Parents["a"]), "%s gets a's result as stored: masked", k)
			require.NotContains(t, string(got.raw[k]["parents"]), "hunter2")
			require.Equal(t, external.ParentOutcome{TaskID: ids["a"], Code: storedCode(t, s, ids["a"]), Status: "SUCCESS", Result: ct.Parents["a"]}, ct.ParentOutcomes["a"])
		}
		_, err := wa.CompleteMany(context.Background(), []external.CompleteRequest{
			{Token: got.tasks["b"].Token, Status: "SUCCESS", Result: json.RawMessage(`{"from":"b"}`)},
			{Token: got.tasks["c"].Token, Status: "SUCCESS", Result: json.RawMessage(`{"from":"c"}`)},
		})
		require.NoError(t, err)

		got = claimSteps(t, wa, keys, 10)
		require.Len(t, got.tasks, 1)
		d := got.tasks["d"]
		require.Len(t, d.Parents, 2)
		require.JSONEq(t, `{"from":"b"}`, string(d.Parents["b"]))
		require.JSONEq(t, `{"from":"c"}`, string(d.Parents["c"]))
		require.Len(t, d.ParentOutcomes, 2)
		for _, k := range []string{"b", "c"} {
			require.Equal(t, ids[k], d.ParentOutcomes[k].TaskID)
			require.Equal(t, "SUCCESS", d.ParentOutcomes[k].Status)
			require.Empty(t, d.ParentOutcomes[k].Error)
		}
		// The wire names, as docs/workers.md and the OpenAPI file say.
		var outcomes map[string]map[string]any
		require.NoError(t, json.Unmarshal(got.raw["d"]["parentOutcomes"], &outcomes))
		require.Equal(t, map[string]any{"taskId": float64(ids["b"]), "code": storedCode(t, s, ids["b"]), "status": "SUCCESS", "result": map[string]any{"from": "b"}}, outcomes["b"])
		completeOK(t, wa, d.Token, `{"done":true}`)
	})
}

func storedCode(t *testing.T, s *apptest.Server, id int) string {
	t.Helper()
	tk, err := s.App.Store.Client().Task.Get(auth.NewSystemContext(context.Background()), id)
	require.NoError(t, err)
	return tk.Code
}

// TestWorkerProtocolRunAnywayGetsParentsOutcomes: a cleanup step that
// runs whatever its parents did (RUN_ANYWAY) is claimed after its
// parent failed, and its claim says how each parent ended: the failed
// one's error, and the CANCELLED state and reason of the step the
// failure cancelled; neither left a result.
func TestWorkerProtocolRunAnywayGetsParentsOutcomes(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, tokens := workerNode(t, dsn, app.Options{})
		wa := &external.Client{URL: s.URL, Token: tokens["wa"]}
		cleanup := pyStep("cleanup", 3, "work", "publish")
		cleanup.OnParentFailure = engine.PolicyRunAnyway
		ids, keys := createWorkflow(t, s, otto, engine.WorkflowRequest{Title: "with cleanup", Steps: []engine.StepRequest{
			pyStep("work", 1), pyStep("publish", 2, "work"), cleanup,
		}})

		got := claimSteps(t, wa, keys, 10)
		require.Len(t, got.tasks, 1)
		done, err := wa.Complete(context.Background(), external.CompleteRequest{Token: got.tasks["work"].Token, Status: "FAILED",
			Error: &external.CompleteError{Kind: "NON_RETRYABLE", Message: "disk full, password=hunter2"}})
		require.NoError(t, err)
		require.Equal(t, "FAILED", done.TaskStatus)

		got = claimSteps(t, wa, keys, 10)
		require.Len(t, got.tasks, 1, "publish was cancelled; the cleanup runs")
		c := got.tasks["cleanup"]
		require.Len(t, c.ParentOutcomes, 2)
		work := c.ParentOutcomes["work"]
		require.Equal(t, ids["work"], work.TaskID)
		require.Equal(t, "FAILED", work.Status)
		require.Contains(t, work.Error, "disk full")
		require.NotContains(t, work.Error, "hunter2", "the error as stored: masked")
		require.Empty(t, work.Result)
		publish := c.ParentOutcomes["publish"]
		require.Equal(t, "CANCELLED", publish.Status)
		require.Contains(t, publish.Error, "failed", "the cancel's reason: parent ... failed")
		require.JSONEq(t, `{"work":null,"publish":null}`, string(got.raw["cleanup"]["parents"]), "both keys, no result")
		completeOK(t, wa, c.Token, `{"cleaned":true}`)
	})
}

// TestWorkerProtocolParentsStayInTheirTenant: a tenant's workflow is
// claimed by that tenant's worker only, with its parents' results; a task
// a platform administrator made wait for another tenant's task is claimed
// by its own tenant's worker without that parent's result or outcome.
func TestWorkerProtocolParentsStayInTheirTenant(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, tokens := workerNode(t, dsn, app.Options{})
		wa := &external.Client{URL: s.URL, Token: tokens["wa"]}
		wt := &external.Client{URL: s.URL, Token: tokens["wt"]}
		tina := auth.Viewer{User: "tina", Role: auth.RoleOperator, Tenant: "t1", Source: auth.SourceToken}
		ids, keys := createWorkflow(t, s, tina, engine.WorkflowRequest{Title: "t1's", Steps: []engine.StepRequest{pyStep("a", 1), pyStep("b", 2, "a")}})

		require.Empty(t, claimSteps(t, wa, keys, 10).tasks, "the other tenant's worker takes nothing of t1's")
		got := claimSteps(t, wt, keys, 10)
		require.Len(t, got.tasks, 1)
		completeOK(t, wt, got.tasks["a"].Token, `{"t1":"private"}`)

		// A task of the tenant without a name ("") that waits for t1's a:
		// only a platform administrator sees both to make it.
		pat := auth.Viewer{User: "pat", Role: auth.RolePlatform, Source: auth.SourceToken}
		cross, err := s.App.Engine.Create(auth.NewContext(context.Background(), pat), engine.CreateRequest{Type: "py.a", Input: json.RawMessage(`{"n":9}`), DependsOn: []int{ids["a"]}})
		require.NoError(t, err)
		require.Empty(t, cross.Tenant)
		keys[cross.ID] = "cross"

		got = claimSteps(t, wt, keys, 10)
		require.Len(t, got.tasks, 1, "t1's worker takes t1's b only")
		b := got.tasks["b"]
		require.JSONEq(t, `{"t1":"private"}`, string(b.Parents["a"]), "its own tenant's parent's result")
		require.Equal(t, "SUCCESS", b.ParentOutcomes["a"].Status)

		got = claimSteps(t, wa, keys, 10)
		require.Len(t, got.tasks, 1)
		require.Contains(t, got.tasks, "cross")
		require.NotContains(t, got.raw["cross"], "parents", "t1's result does not reach another tenant's worker")
		require.NotContains(t, got.raw["cross"], "parentOutcomes")
		require.NotContains(t, mustJSON(got.raw["cross"]), "private")

		// Neither acts on the other's: the tenant checks of the calls hold.
		_, err = wa.Complete(context.Background(), external.CompleteRequest{Token: b.Token, Status: "SUCCESS"})
		require.Equal(t, "FORBIDDEN", codeOf(t, err))
		completeOK(t, wt, b.Token, `{}`)
		completeOK(t, wa, got.tasks["cross"].Token, `{}`)
	})
}

// pyParentsDriver runs the reference client with a "py.a" handler that
// fails NON_RETRYABLE when input.fail is set, and otherwise returns what
// it was given of its parents: job.parents, and job.parent_outcomes as
// [task_id, code, status, result, error] by key.
const pyParentsDriver = `
import sys
sys.path.insert(0, sys.argv[1])
from taskgraph_worker import Worker, NonRetryableError
w = Worker(sys.argv[2], token=sys.argv[3], worker_id=sys.argv[4], concurrency=int(sys.argv[5]), wait_seconds=1)

@w.handler("py.a")
def handle(job):
    sys.stdout.write("started %d %s\n" % (job.task_id, job.token))
    sys.stdout.flush()
    if job.input.get("fail"):
        raise NonRetryableError("disk full")
    return {"n": job.input["n"], "parents": job.parents,
            "outcomes": {k: [o.task_id, o.code, o.status, o.result, o.error] for k, o in job.parent_outcomes.items()}}

w.run()
`

// TestPythonWorkerGetsParents: the reference Python client runs a
// workflow: a diamond a -> (b, c) -> d, and a cleanup that runs after d
// and after x, which fails. Each handler is given its parents' results
// by step key (job.parents) and their outcomes (job.parent_outcomes):
// the cleanup, x's FAILED status and error; a root, neither.
func TestPythonWorkerGetsParents(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, tokens := workerNode(t, dsn, app.Options{})
		cleanup := pyStep("cleanup", 6, "d", "x")
		cleanup.OnParentFailure = engine.PolicyRunAnyway
		fail := pyStep("x", 5)
		fail.Task.Input = json.RawMessage(`{"n":5,"fail":true}`)
		ids, _ := createWorkflow(t, s, otto, engine.WorkflowRequest{Title: "python diamond", Steps: []engine.StepRequest{
			pyStep("a", 1), pyStep("b", 2, "a"), pyStep("c", 3, "a"), pyStep("d", 4, "b", "c"), fail, cleanup,
		}})
		startPythonDriver(t, pyParentsDriver, s.URL, tokens["wa"], "py-parents", 4)
		apptest.Eventually(t, time.Minute, func() (bool, string) {
			st := statusOf(t, s, ids["cleanup"])
			return st.Terminal(), "the cleanup is " + string(st)
		})
		for _, k := range []string{"a", "b", "c", "d", "cleanup"} {
			require.Equal(t, lifecycle.Success, statusOf(t, s, ids[k]), k)
		}
		type given struct {
			N        int
			Parents  map[string]json.RawMessage
			Outcomes map[string][]any
		}
		read := func(key string) given {
			var g given
			require.NoError(t, json.Unmarshal(storedResult(t, s, ids[key]), &g), key)
			return g
		}
		a := read("a")
		require.Empty(t, a.Parents, "a root has no parents")
		require.Empty(t, a.Outcomes)
		b := read("b")
		require.JSONEq(t, string(storedResult(t, s, ids["a"])), string(b.Parents["a"]), "b gets a's result")
		d := read("d")
		require.Len(t, d.Parents, 2)
		require.JSONEq(t, string(storedResult(t, s, ids["b"])), string(d.Parents["b"]))
		require.JSONEq(t, string(storedResult(t, s, ids["c"])), string(d.Parents["c"]))
		require.Equal(t, []any{float64(ids["c"]), storedCode(t, s, ids["c"]), "SUCCESS"}, d.Outcomes["c"][:3])
		require.Equal(t, "", d.Outcomes["c"][4])

		c := read("cleanup")
		require.Equal(t, lifecycle.Failed, statusOf(t, s, ids["x"]))
		x := c.Outcomes["x"]
		require.Equal(t, []any{float64(ids["x"]), storedCode(t, s, ids["x"]), "FAILED", nil}, x[:4], "x's outcome, no result")
		require.Contains(t, x[4], "disk full", "x's error")
		require.JSONEq(t, `null`, string(c.Parents["x"]))
		require.Equal(t, "SUCCESS", c.Outcomes["d"][2])
		require.JSONEq(t, string(storedResult(t, s, ids["d"])), string(c.Parents["d"]))
	})
}
