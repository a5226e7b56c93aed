package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/external"
)

const declareType = `mutation($in: TaskTypeDeclaration!) { declareTaskType(input: $in) { name external defaultTimeoutSeconds defaultRetryPolicy inputSchema } }`

// workerNode starts a node whose worker credentials run "py.a" (user
// wa) or "py.b" (wb), with an admin (ada) and an operator (otto), and
// declares py.a and py.b.
func workerNode(t *testing.T, dsn string, opts app.Options, configure ...func(*app.Config)) (*apptest.Server, map[string]string) {
	t.Helper()
	path, tokens := apptest.Tokens(t,
		auth.Viewer{User: "ada", Role: auth.RoleAdmin},
		auth.Viewer{User: "otto", Role: auth.RoleOperator},
		auth.Viewer{User: "wa", Role: auth.RoleWorker, Types: []string{"py.a"}},
		auth.Viewer{User: "wb", Role: auth.RoleWorker, Types: []string{"py.b"}},
		auth.Viewer{User: "tina", Role: auth.RoleOperator, Tenant: "t1"},
		auth.Viewer{User: "wt", Role: auth.RoleWorker, Types: []string{"py.a"}, Tenant: "t1"},
		auth.Viewer{User: "wz", Role: auth.RoleWorker, Types: []string{"py.gone"}},
	)
	s := apptest.Start(t, dsn, opts, append([]func(*app.Config){func(c *app.Config) { c.Access.TokenFile = path }}, configure...)...)
	for _, name := range []string{"py.a", "py.b"} {
		r := s.DoAs(t, tokens["ada"], declareType, map[string]any{"in": map[string]any{
			"name": name, "timeoutSeconds": 60, "retryPolicy": "none",
			"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}, "secret": map[string]any{"type": "string"}}, "required": []string{"n"}},
		}})
		require.Empty(t, r.Errors, "%s", r.Errors)
	}
	return s, tokens
}

func createExternal(t *testing.T, s *apptest.Server, token, typ string, input map[string]any) int {
	t.Helper()
	var out struct{ CreateTask struct{ ID string } }
	s.QueryAs(t, token, `mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`, map[string]any{"in": map[string]any{"type": typ, "input": input}}, &out)
	id, err := strconv.Atoi(out.CreateTask.ID)
	require.NoError(t, err)
	return id
}

type taskView struct {
	Status          string
	Result          json.RawMessage
	ProgressDone    int
	CancelRequested bool
	Instances       []struct {
		Status    string
		ErrorKind *string
	}
}

func readTask(t *testing.T, s *apptest.Server, token string, id int) taskView {
	t.Helper()
	var out struct{ Task taskView }
	s.QueryAs(t, token, `query($id: ID!) { task(id: $id) { status result progressDone cancelRequested instances { status errorKind } } }`, map[string]any{"id": id}, &out)
	return out.Task
}

func codeOf(t *testing.T, err error) string {
	t.Helper()
	var e *external.Error
	require.True(t, errors.As(err, &e), "want a refusal, got %v", err)
	return e.Code
}

// TestExternalTaskTypes: declaring and deleting external types through
// GraphQL, by admins only, audited; they show in taskTypes, validate the
// inputs of their tasks, and the node's own pool never claims them.
func TestExternalTaskTypes(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, tokens := workerNode(t, dsn, app.Options{})
		r := s.DoAs(t, tokens["otto"], declareType, map[string]any{"in": map[string]any{"name": "py.c", "timeoutSeconds": 60}})
		require.Equal(t, "FORBIDDEN", r.Errors[0].Code())
		for _, in := range []map[string]any{
			{"name": "Bad Name", "timeoutSeconds": 60},
			{"name": "py.c", "timeoutSeconds": 0},
			{"name": "py.c", "timeoutSeconds": 60, "retryPolicy": "nope"},
			{"name": "py.c", "timeoutSeconds": 60, "inputSchema": map[string]any{"type": "nope"}},
		} {
			r := s.DoAs(t, tokens["ada"], declareType, map[string]any{"in": in})
			require.Equal(t, "VALIDATION", r.Errors[0].Code(), "%v", in)
		}
		r = s.DoAs(t, tokens["ada"], declareType, map[string]any{"in": map[string]any{"name": "noop", "timeoutSeconds": 60}})
		require.Equal(t, "CONFLICT", r.Errors[0].Code(), "a built-in type is not shadowed")

		var types struct {
			TaskTypes []struct {
				Name     string
				External bool
			}
		}
		s.QueryAs(t, tokens["otto"], `{ taskTypes { name external } }`, nil, &types)
		ext := map[string]bool{}
		for _, tt := range types.TaskTypes {
			ext[tt.Name] = tt.External
		}
		require.True(t, ext["py.a"])
		require.False(t, ext["noop"])

		r = s.DoAs(t, tokens["otto"], `mutation { createTask(input: {type: "py.a", input: {n: "x"}}) { id } }`, nil)
		require.Equal(t, "VALIDATION", r.Errors[0].Code(), "the declared schema is enforced")
		id := createExternal(t, s, tokens["otto"], "py.a", map[string]any{"n": 1})

		// Deleted: no new task; the existing one stays.
		var del struct{ DeleteTaskType bool }
		s.QueryAs(t, tokens["ada"], `mutation { deleteTaskType(name: "py.b") }`, nil, &del)
		require.True(t, del.DeleteTaskType)
		r = s.DoAs(t, tokens["ada"], `mutation { deleteTaskType(name: "py.b") }`, nil)
		require.Equal(t, "NOT_FOUND", r.Errors[0].Code())
		r = s.DoAs(t, tokens["ada"], `mutation { deleteTaskType(name: "noop") }`, nil)
		require.Equal(t, "CONFLICT", r.Errors[0].Code())
		r = s.DoAs(t, tokens["otto"], `mutation { createTask(input: {type: "py.b", input: {n: 1}}) { id } }`, nil)
		require.Equal(t, "VALIDATION", r.Errors[0].Code())

		// Audited, as the other admin actions.
		ctx := auth.NewSystemContext(context.Background())
		n, err := s.App.Store.Client().AuditLog.Query().Where(auditlog.ActionIn(auditlog.ActionTASK_TYPE_DECLARE, auditlog.ActionTASK_TYPE_DELETE)).Count(ctx)
		require.NoError(t, err)
		require.Equal(t, 2+1+4+1+3, n, "two declared, one forbidden, four invalid, one conflict; three deletes")

		// Another node's catalog (a restart) loads the declared types.
		n2, err := s.App.External.Sync(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, n2)

		// The node's pool never claims it: a built-in task created after it
		// runs to its end while it stays PENDING.
		later := createExternal(t, s, tokens["otto"], "noop", map[string]any{})
		apptest.Eventually(t, 30*time.Second, func() (bool, string) {
			st := readTask(t, s, tokens["otto"], later).Status
			return st == "SUCCESS", "the noop task is " + st
		})
		require.Equal(t, "PENDING", readTask(t, s, tokens["otto"], id).Status)
	})
}

// TestWorkerProtocol: a worker claims external tasks with their unmasked
// input and fencing tokens, beats, logs, reports progress and completes;
// a zombie's writes are FENCED, a cancel reaches it at its next beat,
// its credentials run their types only and read nothing, and bad calls
// are typed errors that lose nothing.
func TestWorkerProtocol(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		// The lease is long enough for the checks between two beats under
		// -race on a loaded machine (a 3 s one expired there now and then).
		s, tokens := workerNode(t, dsn, app.Options{}, func(c *app.Config) { c.HeartbeatTimeout = 10 * time.Second })
		ctx := context.Background()
		wa := &external.Client{URL: s.URL, Token: tokens["wa"]}
		const secret = "13912345678"

		id := createExternal(t, s, tokens["otto"], "py.a", map[string]any{"n": 7, "secret": secret})
		got, err := wa.Claim(ctx, external.ClaimRequest{WorkerID: "py-1", Language: "python", Version: "3.11", Types: []string{"py.a"}, Max: 10, WaitSeconds: 5})
		require.NoError(t, err)
		require.Len(t, got.Tasks, 1)
		c := got.Tasks[0]
		require.Equal(t, id, c.TaskID)
		require.Contains(t, string(c.Input), secret, "the worker gets the unmasked input")
		require.Equal(t, fmt.Sprintf("%d.%d", c.InstanceID, c.Version), c.Token)
		require.Equal(t, 1, c.Attempt)
		require.False(t, c.Deadline.IsZero())
		require.Positive(t, got.HeartbeatIntervalSeconds)
		var stored struct {
			Task struct{ Input json.RawMessage }
		}
		s.QueryAs(t, tokens["otto"], `query($id: ID!) { task(id: $id) { input } }`, map[string]any{"id": id}, &stored)
		require.NotContains(t, string(stored.Task.Input), secret, "the stored input stays masked")

		beat, err := wa.Heartbeat(ctx, c.Token)
		require.NoError(t, err)
		require.True(t, beat.Tasks[0].OK)
		require.False(t, beat.Tasks[0].CancelRequested)
		var wr external.WriteResponse
		require.NoError(t, wa.Call(ctx, "log", external.LogRequest{Lines: []external.LogItem{{Token: c.Token, Message: "calling " + secret}}}, &wr))
		require.Empty(t, wr.Refused)
		require.NoError(t, wa.Call(ctx, "progress", external.ProgressRequest{Tasks: []external.ProgressItem{{Token: c.Token, Done: 3, Total: 7}}}, &wr))
		require.Empty(t, wr.Refused)
		require.Equal(t, 3, readTask(t, s, tokens["otto"], id).ProgressDone)

		// Bad calls: typed errors, and the execution goes on.
		require.Equal(t, "VALIDATION", codeOf(t, wa.CallRaw(ctx, "complete", []byte(`{"token":`), nil)))
		require.Equal(t, "VALIDATION", codeOf(t, wa.CallRaw(ctx, "complete", []byte(`{"token":"x","status":"SUCCESS"}`), nil)))
		require.Equal(t, "VALIDATION", codeOf(t, wa.CallRaw(ctx, "complete", []byte(`{"token":"`+c.Token+`","status":"DONE"}`), nil)))
		_, err = wa.Complete(ctx, external.CompleteRequest{Token: c.Token, Status: "CANCELLED"})
		require.Equal(t, "VALIDATION", codeOf(t, err), "no cancel was asked")
		_, err = wa.Claim(ctx, external.ClaimRequest{WorkerID: "py-1", Types: []string{"py.zzz"}, Max: 1})
		require.Equal(t, "FORBIDDEN", codeOf(t, err), "a type the credentials do not name")
		open := &external.Client{URL: s.URL, Token: tokens["ada"]}
		_, err = open.Claim(ctx, external.ClaimRequest{WorkerID: "py-1", Types: []string{"py.a"}, Max: 1})
		require.Equal(t, "FORBIDDEN", codeOf(t, err), "an admin's token is not a worker's")
		anon := &external.Client{URL: s.URL}
		_, err = anon.Claim(ctx, external.ClaimRequest{WorkerID: "py-1", Types: []string{"py.a"}, Max: 1})
		require.Equal(t, "UNAUTHENTICATED", codeOf(t, err))
		big := `{"blob":"` + strings.Repeat("x", external.MaxResultBytes) + `"}`
		_, err = wa.Complete(ctx, external.CompleteRequest{Token: c.Token, Status: "SUCCESS", Result: json.RawMessage(big)})
		require.Equal(t, "LIMIT_EXCEEDED", codeOf(t, err))
		require.Equal(t, "EXECUTING", readTask(t, s, tokens["otto"], id).Status, "nothing lost")
		wrongVersion := fmt.Sprintf("%d.%d", c.InstanceID, c.Version+1)
		_, err = wa.Complete(ctx, external.CompleteRequest{Token: wrongVersion, Status: "SUCCESS"})
		require.Equal(t, "FENCED", codeOf(t, err), "a token of another version")

		// Scope: wb may not touch py.a's execution; nor may a worker read.
		wb := &external.Client{URL: s.URL, Token: tokens["wb"]}
		_, err = wb.Complete(ctx, external.CompleteRequest{Token: c.Token, Status: "SUCCESS"})
		require.Equal(t, "FORBIDDEN", codeOf(t, err))
		_, err = wb.Claim(ctx, external.ClaimRequest{WorkerID: "py-2", Types: []string{"py.a"}, Max: 1})
		require.Equal(t, "FORBIDDEN", codeOf(t, err))
		resp := s.Request(t, map[string][]string{"Authorization": {"Bearer " + tokens["wa"]}, "Content-Type": {"application/json"}}, []byte(`{"query":"{ tasks(first: 5) { totalCount } }"}`))
		require.NotEmpty(t, resp.Errors)
		require.Equal(t, "FORBIDDEN", resp.Errors[0].Code(), "GraphQL refuses a worker")

		beat, err = wa.Heartbeat(ctx, c.Token) // the checks above took a while under -race
		require.NoError(t, err)
		require.True(t, beat.Tasks[0].OK)
		done, err := wa.Complete(ctx, external.CompleteRequest{Token: c.Token, Status: "SUCCESS", Result: json.RawMessage(`{"called":"` + secret + `","ok":true}`)})
		require.NoError(t, err)
		require.Equal(t, "SUCCESS", done.TaskStatus)
		tv := readTask(t, s, tokens["otto"], id)
		require.Equal(t, "SUCCESS", tv.Status)
		require.Contains(t, string(tv.Result), `"ok":true`)
		require.NotContains(t, string(tv.Result), secret, "the result is masked as the pool masks it")
		_, err = wa.Complete(ctx, external.CompleteRequest{Token: c.Token, Status: "SUCCESS"})
		require.Equal(t, "FENCED", codeOf(t, err), "a second outcome")
		require.NoError(t, wa.Call(ctx, "log", external.LogRequest{Lines: []external.LogItem{{Token: c.Token, Message: "late"}}}, &wr))
		require.Len(t, wr.Refused, 1)
		require.Equal(t, "FENCED", wr.Refused[0].Error.Code)

		// complete-many: each outcome answered in order, in one call.
		id5 := createExternal(t, s, tokens["otto"], "py.a", map[string]any{"n": 5})
		got, err = wa.Claim(ctx, external.ClaimRequest{WorkerID: "py-1", Types: []string{"py.a"}, Max: 10, WaitSeconds: 5})
		require.NoError(t, err)
		require.Len(t, got.Tasks, 1)
		many, err := wa.CompleteMany(ctx, []external.CompleteRequest{
			{Token: c.Token, Status: "SUCCESS"},
			{Token: got.Tasks[0].Token, Status: "SUCCESS", Result: json.RawMessage(`{"five":5}`)},
			{Token: got.Tasks[0].Token, Status: "BOGUS"},
		})
		require.NoError(t, err)
		require.Len(t, many.Results, 3)
		require.Equal(t, "FENCED", many.Results[0].Error.Code)
		require.Equal(t, "SUCCESS", many.Results[1].TaskStatus)
		require.Equal(t, "VALIDATION", many.Results[2].Error.Code)
		require.Equal(t, "SUCCESS", readTask(t, s, tokens["otto"], id5).Status)

		// A failure: the kind and the policy decide (retry policy none).
		id2 := createExternal(t, s, tokens["otto"], "py.a", map[string]any{"n": 2})
		got, err = wa.Claim(ctx, external.ClaimRequest{WorkerID: "py-1", Types: []string{"py.a"}, Max: 10, WaitSeconds: 5})
		require.NoError(t, err)
		require.Len(t, got.Tasks, 1)
		done, err = wa.Complete(ctx, external.CompleteRequest{Token: got.Tasks[0].Token, Status: "FAILED", Error: &external.CompleteError{Kind: "NON_RETRYABLE", Message: "bad customer " + secret}})
		require.NoError(t, err)
		require.Equal(t, "FAILED", done.TaskStatus)
		tv = readTask(t, s, tokens["otto"], id2)
		require.Equal(t, "FAILED", tv.Status)
		require.Equal(t, "NON_RETRYABLE", *tv.Instances[0].ErrorKind)

		// A cancel reaches the worker at its next heartbeat.
		id3 := createExternal(t, s, tokens["otto"], "py.a", map[string]any{"n": 3})
		got, err = wa.Claim(ctx, external.ClaimRequest{WorkerID: "py-1", Types: []string{"py.a"}, Max: 10, WaitSeconds: 5})
		require.NoError(t, err)
		require.Len(t, got.Tasks, 1)
		r := s.DoAs(t, tokens["otto"], `mutation($id: ID!) { cancelTask(id: $id, reason: "enough") { id } }`, map[string]any{"id": id3})
		require.Empty(t, r.Errors)
		beat, err = wa.Heartbeat(ctx, got.Tasks[0].Token)
		require.NoError(t, err)
		require.True(t, beat.Tasks[0].CancelRequested)
		require.Equal(t, "enough", beat.Tasks[0].CancelReason)
		done, err = wa.Complete(ctx, external.CompleteRequest{Token: got.Tasks[0].Token, Status: "CANCELLED"})
		require.NoError(t, err)
		require.Equal(t, "CANCELLED", done.TaskStatus)

		// A worker that stops beating is recovered by the watchdog (10 s
		// heartbeat timeout); its late writes are fenced; the task ends once.
		id4 := createExternal(t, s, tokens["otto"], "py.a", map[string]any{"n": 4})
		got, err = wa.Claim(ctx, external.ClaimRequest{WorkerID: "py-dead", Types: []string{"py.a"}, Max: 10, WaitSeconds: 5})
		require.NoError(t, err)
		require.Len(t, got.Tasks, 1)
		zombie := got.Tasks[0].Token
		apptest.Eventually(t, 60*time.Second, func() (bool, string) {
			tv := readTask(t, s, tokens["otto"], id4)
			return tv.Status == "FAILED" || tv.Status == "RETRY_PENDING", tv.Status
		})
		tv = readTask(t, s, tokens["otto"], id4)
		require.Equal(t, string(lifecycle.KindTimeout), *tv.Instances[len(tv.Instances)-1].ErrorKind)
		_, err = wa.Complete(ctx, external.CompleteRequest{Token: zombie, Status: "SUCCESS"})
		require.Equal(t, "FENCED", codeOf(t, err))
		beat, err = wa.Heartbeat(ctx, zombie)
		require.NoError(t, err)
		require.False(t, beat.Tasks[0].OK)
		require.Equal(t, "FENCED", beat.Tasks[0].Error.Code)
		require.NotEqual(t, "SUCCESS", readTask(t, s, tokens["otto"], id4).Status)
	})
}

// TestWorkerTenants: a worker's credentials claim and act on their own
// tenant's tasks only, run their own types only, read no task; a type
// nobody declared is NOT_FOUND.
func TestWorkerTenants(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, tokens := workerNode(t, dsn, app.Options{})
		ctx := context.Background()
		wa := &external.Client{URL: s.URL, Token: tokens["wa"]}
		wt := &external.Client{URL: s.URL, Token: tokens["wt"]}
		// The other tenant's task first: a claim that ignored tenants
		// would take it.
		theirs := createExternal(t, s, tokens["otto"], "py.a", map[string]any{"n": 1})
		mine := createExternal(t, s, tokens["tina"], "py.a", map[string]any{"n": 2})

		got, err := wt.Claim(ctx, external.ClaimRequest{WorkerID: "t1-w", Types: []string{"py.a"}, Max: 1})
		require.NoError(t, err)
		require.Len(t, got.Tasks, 1)
		require.Equal(t, mine, got.Tasks[0].TaskID, "t1's worker takes t1's task")
		minetok := got.Tasks[0].Token
		got, err = wt.Claim(ctx, external.ClaimRequest{WorkerID: "t1-w", Types: []string{"py.a"}, Max: 10})
		require.NoError(t, err)
		require.Empty(t, got.Tasks, "nothing else of t1's waits; the other tenant's is not for it")
		require.Equal(t, "PENDING", readTask(t, s, tokens["otto"], theirs).Status)

		got, err = wa.Claim(ctx, external.ClaimRequest{WorkerID: "w", Types: []string{"py.a"}, Max: 10})
		require.NoError(t, err)
		require.Len(t, got.Tasks, 1)
		require.Equal(t, theirs, got.Tasks[0].TaskID, "the worker without a tenant takes that tenant's task only")
		theirtok := got.Tasks[0].Token

		// Neither acts on the other's execution: complete, beat, log, progress.
		_, err = wt.Complete(ctx, external.CompleteRequest{Token: theirtok, Status: "SUCCESS"})
		require.Equal(t, "FORBIDDEN", codeOf(t, err))
		_, err = wt.Heartbeat(ctx, theirtok)
		require.Equal(t, "FORBIDDEN", codeOf(t, err))
		require.Equal(t, "FORBIDDEN", codeOf(t, wt.Call(ctx, "log", external.LogRequest{Lines: []external.LogItem{{Token: theirtok, Message: "x"}}}, nil)))
		require.Equal(t, "FORBIDDEN", codeOf(t, wt.Call(ctx, "progress", external.ProgressRequest{Tasks: []external.ProgressItem{{Token: theirtok, Done: 1, Total: 2}}}, nil)))
		_, err = wa.CompleteMany(ctx, []external.CompleteRequest{{Token: minetok, Status: "SUCCESS"}})
		require.Equal(t, "FORBIDDEN", codeOf(t, err))
		require.Equal(t, "EXECUTING", readTask(t, s, tokens["otto"], theirs).Status, "nothing written")
		require.Equal(t, "EXECUTING", readTask(t, s, tokens["tina"], mine).Status, "nothing written")

		// Type B, reading tasks, an undeclared type.
		_, err = wt.Claim(ctx, external.ClaimRequest{WorkerID: "t1-w", Types: []string{"py.b"}, Max: 1})
		require.Equal(t, "FORBIDDEN", codeOf(t, err))
		resp := s.Request(t, map[string][]string{"Authorization": {"Bearer " + tokens["wt"]}, "Content-Type": {"application/json"}}, []byte(`{"query":"{ tasks(first: 5) { totalCount } }"}`))
		require.NotEmpty(t, resp.Errors)
		require.Equal(t, "FORBIDDEN", resp.Errors[0].Code(), "GraphQL refuses a worker")
		wz := &external.Client{URL: s.URL, Token: tokens["wz"]}
		_, err = wz.Claim(ctx, external.ClaimRequest{WorkerID: "z", Types: []string{"py.gone"}, Max: 1})
		require.Equal(t, "NOT_FOUND", codeOf(t, err), "an unknown type")

		// Each completes its own.
		done, err := wt.Complete(ctx, external.CompleteRequest{Token: minetok, Status: "SUCCESS"})
		require.NoError(t, err)
		require.Equal(t, "SUCCESS", done.TaskStatus)
		done, err = wa.Complete(ctx, external.CompleteRequest{Token: theirtok, Status: "SUCCESS"})
		require.NoError(t, err)
		require.Equal(t, "SUCCESS", done.TaskStatus)
	})
}
