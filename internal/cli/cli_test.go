package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/cli"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// syncBuffer is an output written by a command running in a goroutine
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// run is one command line against a server.
type run struct {
	code           int
	stdout, stderr string
}

type bundle struct {
	srv *apptest.Server
	env map[string]string
	dir string // the commands' working directory
}

// setup starts one server for a test and its subtests.
func setup(t *testing.T, configure ...func(*app.Config)) *bundle {
	t.Helper()
	srv := apptest.Start(t, filepath.Join(t.TempDir(), "cli.db"), app.Options{}, configure...)
	return &bundle{srv: srv, env: map[string]string{"TASKGRAPH_SERVER": srv.URL}, dir: t.TempDir()}
}

// cmd runs a command line to its end (at most a minute).
func (b *bundle) cmd(t *testing.T, args ...string) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return b.cmdCtx(t, ctx, "", args...)
}

func (b *bundle) cmdCtx(t *testing.T, ctx context.Context, stdin string, args ...string) run {
	t.Helper()
	var stdout, stderr syncBuffer
	env := &cli.Env{Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr, Ctx: ctx, Dir: b.dir,
		Getenv: func(k string) string { return b.env[k] }}
	code := cli.Main(env, args)
	if ctx.Err() == context.DeadlineExceeded {
		t.Fatalf("%v did not end within its deadline; stdout %q, stderr %q", args, stdout.String(), stderr.String())
	}
	return run{code, stdout.String(), stderr.String()}
}

// jsonOf decodes a command's --json output (one document).
func jsonOf[T any](t *testing.T, r run) T {
	t.Helper()
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	var v T
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), r.stdout)
	return v
}

type task struct {
	ID               string   `json:"id"`
	Code             string   `json:"code"`
	Status           string   `json:"status"`
	ProgressDone     int      `json:"progressDone"`
	AvailableActions []string `json:"availableActions"`
	LastError        *string  `json:"lastError"`
	Result           json.RawMessage
	Instances        []struct {
		InstanceNo int    `json:"instanceNo"`
		Status     string `json:"status"`
	} `json:"instances"`
}

func TestTaskCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t.Run("CreateGetListForScripts", func(t *testing.T) {
		created := jsonOf[task](t, b.cmd(t, "task", "create", "noop", "--title", "from the cli", "--json", "--input", `{"note": "13812345678"}`))
		require.Equal(t, "PENDING", created.Status)
		got := jsonOf[task](t, b.cmd(t, "task", "get", created.ID, "--json"))
		require.Equal(t, created.Code, got.Code)
		r := b.cmd(t, "task", "list", "--json", "--search", "from the cli")
		require.Equal(t, 0, r.code, r.stderr)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Len(t, lines, 1, "one JSON document per line")
		require.Contains(t, lines[0], created.Code)
	})
	t.Run("TablesForPeople", func(t *testing.T) {
		r := b.cmd(t, "task", "create", "noop", "--title", "for people")
		require.Equal(t, 0, r.code, r.stderr)
		require.Regexp(t, `^task \d+ NOOP-\S+ noop PENDING\n$`, r.stdout)
		id := strings.Fields(r.stdout)[1]
		r = b.cmd(t, "task", "list")
		require.Regexp(t, `(?m)^ID +CODE +TYPE +STATUS +PROGRESS +CREATED +TITLE$`, r.stdout)
		require.Regexp(t, `(?m)^`+id+` +NOOP-\S+ +noop +\S+ .*for people$`, r.stdout)
		r = b.cmd(t, "task", "get", id)
		require.Regexp(t, `(?m)^Title +for people$`, r.stdout)
	})
	t.Run("IdempotentCreate", func(t *testing.T) {
		a := jsonOf[task](t, b.cmd(t, "task", "create", "noop", "--idempotency-key", "cli-1", "--json"))
		c := jsonOf[task](t, b.cmd(t, "task", "create", "noop", "--idempotency-key", "cli-1", "--json"))
		require.Equal(t, a.ID, c.ID)
	})
	t.Run("ErrorsSayWhatTheServerSaid", func(t *testing.T) {
		r := b.cmd(t, "task", "get", "987654")
		require.Equal(t, cli.ExitFailure, r.code)
		require.Equal(t, "taskgraph task get: task 987654 not found (NOT_FOUND)\n", r.stderr)
		r = b.cmd(t, "task", "create", "rocket")
		require.Equal(t, cli.ExitFailure, r.code)
		require.Contains(t, r.stderr, `unknown task type "rocket"`)
		require.Contains(t, r.stderr, "(VALIDATION)")
	})
	t.Run("UsageErrorsExit2AndHelpExits0", func(t *testing.T) {
		r := b.cmd(t, "task", "get")
		require.Equal(t, cli.ExitUsage, r.code)
		require.Equal(t, "taskgraph task get: missing ID\ntaskgraph task get -h shows its usage.\n", r.stderr)
		require.Equal(t, cli.ExitUsage, b.cmd(t, "task", "create", "noop", "--input", "{nope").code)
		require.Equal(t, cli.ExitUsage, b.cmd(t, "task", "list", "--nope").code)
		require.Equal(t, cli.ExitUsage, b.cmd(t, "task", "fly").code)
		for _, args := range [][]string{{"task", "-h"}, {"task", "get", "-h"}, {"import", "-h"}, {"token", "-h"}, {"watch", "--help"}} {
			r := b.cmd(t, args...)
			require.Equal(t, cli.ExitOK, r.code, "%v", args)
			require.Contains(t, r.stdout, "Usage: taskgraph")
		}
	})
	t.Run("AServerThatIsNotThere", func(t *testing.T) {
		r := b.cmd(t, "task", "list", "--server", "http://127.0.0.1:1")
		require.Equal(t, cli.ExitFailure, r.code)
		require.Contains(t, r.stderr, "cannot reach the server at http://127.0.0.1:1")
		require.Equal(t, cli.ExitUsage, b.cmd(t, "task", "list", "--server", "127.0.0.1:8080").code)
	})
}

func TestWaitingExitsWithTheOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t.Run("SuccessIs0", func(t *testing.T) {
		r := b.cmd(t, "task", "create", "noop", "--input", `{"sleepMs": 50}`, "--wait")
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, " SUCCESS")
	})
	t.Run("FailedIs3", func(t *testing.T) {
		r := b.cmd(t, "task", "create", "webhook", "--max-attempts", "1", "--input", `{"url": "http://127.0.0.1:1/hook"}`, "--wait", "--json")
		require.Equal(t, cli.ExitFailed, r.code, r.stderr)
		require.Contains(t, r.stderr, "FAILED")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		var last task
		require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &last))
		require.Equal(t, "FAILED", last.Status)
		// watch on a task that has already ended answers at once.
		require.Equal(t, cli.ExitFailed, b.cmd(t, "task", "watch", last.ID).code)
		require.Equal(t, cli.ExitFailed, b.cmd(t, "watch", "-id", last.ID).code, "the older form")
	})
	t.Run("CancelledIs4", func(t *testing.T) {
		created := jsonOf[task](t, b.cmd(t, "task", "create", "noop", "--input", `{"sleepMs": 600000}`, "--json"))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var out syncBuffer
		done := make(chan int, 1)
		go func() {
			// No t.Fatal in here: cli.Main itself, ended by cancel at worst.
			env := &cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Ctx: ctx, Getenv: func(k string) string { return b.env[k] }}
			done <- cli.Main(env, []string{"task", "watch", created.ID, "--json"})
		}()
		b.srv.WaitSubscribers(t, 1)
		require.Equal(t, cli.ExitOK, b.cmd(t, "task", "cancel", created.ID).code)
		select {
		case code := <-done:
			require.Equal(t, cli.ExitCancelled, code, out.String())
		case <-time.After(30 * time.Second):
			t.Fatal("watch did not end after the task was cancelled")
		}
	})
	t.Run("FollowKeepsGoingAfterTheEnd", func(t *testing.T) {
		failed := b.cmd(t, "task", "create", "webhook", "--max-attempts", "1", "--input", `{"url": "http://127.0.0.1:1/hook"}`, "--wait", "--json")
		require.Equal(t, cli.ExitFailed, failed.code)
		var ft task
		require.NoError(t, json.Unmarshal([]byte(strings.Split(failed.stdout, "\n")[0]), &ft))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var out syncBuffer
		done := make(chan int, 1)
		go func() {
			env := &cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Ctx: ctx, Getenv: func(k string) string { return b.env[k] }}
			done <- cli.Main(env, []string{"task", "watch", ft.ID, "--follow"})
		}()
		b.srv.WaitSubscribers(t, 1)
		// The watch has shown where the task is (it reads that once
		// subscribed) before the retry moves it on.
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(out.String(), " FAILED") {
			require.True(t, time.Now().Before(deadline), "--follow did not show the task: %s", out.String())
			time.Sleep(20 * time.Millisecond)
		}
		// After FAILED, a retry runs it again: --follow sees it.
		require.Equal(t, cli.ExitFailed, b.cmd(t, "task", "retry", ft.ID, "--wait").code)
		deadline = time.Now().Add(30 * time.Second)
		for strings.Count(out.String(), " FAILED") < 2 {
			require.True(t, time.Now().Before(deadline), "--follow did not show the retry: %s", out.String())
			select {
			case code := <-done:
				t.Fatalf("--follow ended (%d) after the first FAILED: %s", code, out.String())
			case <-time.After(20 * time.Millisecond):
			}
		}
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("--follow did not stop when interrupted")
		}
	})
}

func TestImportExportDownload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dir := b.dir
	csv := filepath.Join(dir, "contacts.csv")
	require.NoError(t, os.WriteFile(csv, []byte("姓名,手机,城市\n张三,13812345678,上海\n王五,12345,深圳\n"), 0o600))
	r := b.cmd(t, "import", "contacts.csv", "--wait")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^task (\d+) IMPORT-\S+ PENDING$`, r.stdout)
	require.Contains(t, r.stdout, `"status":"PARTIAL_SUCCESS"`)
	id := strings.Fields(r.stdout)[1]

	r = b.cmd(t, "download", id, "--format", "csv")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	name := strings.Fields(r.stdout)[0]
	require.Regexp(t, `^IMPORT-\S+-errors\.csv$`, name)
	report, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	require.Contains(t, string(report), "is not a valid mobile number")

	r = b.cmd(t, "download", id, "--kind", "EXPORT")
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "task "+id+" has no EXPORT file (yet) (NOT_FOUND)")

	r = b.cmd(t, "export", "--source", "contacts", "--format", "csv", "--output", "-")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "上海")
	require.NotContains(t, r.stdout, "深圳", "the bad row was not imported")
}

func TestBulkCreateFromJSONLines(t *testing.T) {
	t.Parallel()
	b := setup(t)
	file := filepath.Join(t.TempDir(), "tasks.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(`{"type": "noop", "title": "one"}
# a comment

{"type": "rocket"}
{"type": "noop", "title": "two", "idempotencyKey": "bulk-2"}
`), 0o600))
	r := b.cmd(t, "task", "create", "--file", file)
	require.Equal(t, cli.ExitFailure, r.code, "a refused line fails the command")
	require.Regexp(t, `(?m)^line 1: created task \d+ NOOP-\S+ PENDING$`, r.stdout)
	require.Regexp(t, `(?m)^line 4: .*unknown task type "rocket".* \(VALIDATION\)$`, r.stdout)
	require.Regexp(t, `(?m)^line 5: created task \d+ NOOP-\S+ PENDING$`, r.stdout)
	require.Contains(t, r.stderr, "1 of 3 lines were refused")

	r = b.cmdCtx(t, context.Background(), `{"type": "noop", "idempotencyKey": "bulk-2"}`, "task", "create", "--file", "-", "--json")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `"line":1`)
}

func TestTokensAndAuthentication(t *testing.T) {
	t.Parallel()
	var path string
	var tokens map[string]string
	b := setup(t, func(c *app.Config) {
		path, tokens = apptest.Tokens(t, auth.Viewer{User: "ops", Role: auth.RoleOperator})
		c.Access.TokenFile = path
	})
	r := b.cmd(t, "task", "list")
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "(UNAUTHENTICATED)")
	b.env["TASKGRAPH_TOKEN"] = tokens["ops"]
	created := jsonOf[task](t, b.cmd(t, "task", "create", "noop", "--json"))
	require.NotEmpty(t, created.ID)
	require.Equal(t, cli.ExitOK, b.cmd(t, "task", "watch", created.ID).code, "subscriptions carry the token too")

	r = b.cmd(t, "token", "--user", "alice", "--role", "viewer")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	var tok, line string
	for _, l := range strings.Split(r.stdout, "\n") {
		if v, ok := strings.CutPrefix(l, "token: "); ok {
			tok = v
		}
		if v, ok := strings.CutPrefix(l, "line:  "); ok {
			line = v
		}
	}
	require.Equal(t, auth.TokenLine(tok, auth.Viewer{User: "alice", Role: auth.RoleViewer}), line)
	r = b.cmdCtx(t, context.Background(), tok+"\n", "token", "--hash")
	require.Equal(t, auth.HashToken(tok)+"\n", r.stdout)
	require.Equal(t, cli.ExitUsage, b.cmd(t, "token", "--role", "boss", "--user", "x").code)
}

func TestLogs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.cmd(t, "task", "create", "webhook", "--max-attempts", "1", "--input", `{"url": "http://127.0.0.1:1/hook"}`, "--wait")
	require.Equal(t, cli.ExitFailed, r.code)
	id := strings.Fields(r.stdout)[1]
	r = b.cmd(t, "task", "logs", id)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^\S+ \S+ WARN +attempt 1 failed \(RETRYABLE\)`, r.stdout)
}

// logs --follow prints the lines already written, then each new one as it
// is committed (a retry's attempt here), exactly once, until interrupted.
func TestLogsFollow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.cmd(t, "task", "create", "webhook", "--max-attempts", "1", "--input", `{"url": "http://127.0.0.1:1/hook"}`, "--wait")
	require.Equal(t, cli.ExitFailed, r.code)
	id := strings.Fields(r.stdout)[1]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan int, 1)
	go func() {
		env := &cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Ctx: ctx, Getenv: func(k string) string { return b.env[k] }}
		done <- cli.Main(env, []string{"task", "logs", id, "--follow"})
	}()
	b.srv.WaitSubscribers(t, 1)
	// The lines written before are printed first (the stream is opened
	// before they are paged, so the wait is for the pages).
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "attempt 1 failed") {
		require.True(t, time.Now().Before(deadline), "--follow did not print the lines written before: %s", out.String())
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, cli.ExitFailed, b.cmd(t, "task", "retry", id, "--wait").code)
	deadline = time.Now().Add(30 * time.Second)
	// A manual retry starts a new run of attempts: its line says attempt 1
	// again.
	for strings.Count(out.String(), "attempt 1 failed") < 2 {
		require.True(t, time.Now().Before(deadline), "--follow did not print the retry's lines: %s", out.String())
		select {
		case code := <-done:
			t.Fatalf("--follow ended (%d) on its own: %s", code, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	select {
	case code := <-done:
		require.Equal(t, cli.ExitOK, code, out.String())
	case <-time.After(30 * time.Second):
		t.Fatal("--follow did not stop when interrupted")
	}
	require.Equal(t, 2, strings.Count(out.String(), "attempt 1 failed"), "no line twice: %s", out.String())
	require.Equal(t, 2, strings.Count(out.String(), "request failed"), "no line twice: %s", out.String())
}

// TestRelativeLinksResolveAgainstTheServerAsked: a server that does not
// know the address it is reached by (--addr 0.0.0.0, no --public-url)
// hands out relative download links; download and export fetch them from
// --server. They failed with `unsupported protocol scheme ""`.
func TestRelativeLinksResolveAgainstTheServerAsked(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *app.Config) { c.Network.PublicURL = "" })
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "contacts.csv"), []byte("姓名,手机\n张三,13812345678\n王五,12345\n"), 0o600))
	r := b.cmd(t, "import", "contacts.csv", "--wait", "-q")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	id := strings.TrimSpace(r.stdout)

	var link struct {
		ArtifactDownloadURL struct{ URL string } `json:"artifactDownloadUrl"`
	}
	b.srv.Query(t, `mutation($id: ID!) { artifactDownloadUrl(taskId: $id, kind: ERROR_REPORT) { url } }`, map[string]any{"id": id}, &link)
	require.True(t, strings.HasPrefix(link.ArtifactDownloadURL.URL, "/download/"), "the server hands out a relative link: %q", link.ArtifactDownloadURL.URL)

	r = b.cmd(t, "download", id, "--format", "csv", "--server", b.srv.URL)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Regexp(t, `^IMPORT-\S+-errors\.csv \(`, r.stdout)

	r = b.cmd(t, "export", "--source", "contacts", "--format", "csv", "--output", "-")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "张三")
}
