package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/cli"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

type workflow struct {
	ID               string   `json:"id"`
	Code             string   `json:"code"`
	Title            string   `json:"title"`
	Status           string   `json:"status"`
	StepsDone        int      `json:"stepsDone"`
	StepCount        int      `json:"stepCount"`
	OnParentFailure  string   `json:"onParentFailure"`
	AvailableActions []string `json:"availableActions"`
	Steps            []struct {
		ID        string  `json:"id"`
		StepKey   string  `json:"stepKey"`
		Status    string  `json:"status"`
		LastError *string `json:"lastError"`
		Parents   []struct {
			StepKey string `json:"stepKey"`
		} `json:"parents"`
	} `json:"steps"`
}

// hook is a webhook receiver: it answers 400 while refuse is set, and
// holds each request until release is closed.
type hook struct {
	url     string
	release chan struct{}
	refuse  atomic.Bool
}

func newHook(t *testing.T, refuse bool) *hook {
	h := &hook{release: make(chan struct{})}
	h.refuse.Store(refuse)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
		if h.refuse.Load() {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	h.url = srv.URL + "/hook"
	return h
}

// writeFile writes a workflow file into the commands' directory.
func (b *bundle) writeFile(t *testing.T, name string, v any) {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, name), raw, 0o600))
}

// diamond is a → (b, c) → d, b a webhook to url.
func diamond(title, url string) map[string]any {
	return map[string]any{
		"title": title,
		"steps": []map[string]any{
			{"key": "a", "type": "noop", "input": map[string]any{"note": "from a"}},
			{"key": "b", "type": "webhook", "maxAttempts": 1, "input": map[string]any{"url": url}, "dependsOn": []string{"a"}},
			{"key": "c", "type": "noop", "dependsOn": []string{"a"}},
			{"key": "d", "type": "noop", "dependsOn": []string{"b", "c"}},
		},
	}
}

// background runs a command line in a goroutine; its exit code comes on
// the channel.
func (b *bundle) background(t *testing.T, out *syncBuffer, args ...string) <-chan int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	done := make(chan int, 1)
	go func() {
		// No t.Fatal in here: cli.Main itself, ended by the deadline at worst.
		env := &cli.Env{Stdin: strings.NewReader(""), Stdout: out, Stderr: out, Ctx: ctx, Dir: b.dir, Getenv: func(k string) string { return b.env[k] }}
		done <- cli.Main(env, args)
	}()
	return done
}

func wait(t *testing.T, done <-chan int, out *syncBuffer) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(2 * time.Minute):
		t.Fatalf("the command did not end; output:\n%s", out.String())
		return -1
	}
}

// TestWorkflowCommands: create a workflow from a file, watch it live to
// its end (the exit code says how), read it, list it, cancel one; on both
// databases.
func TestWorkflowCommands(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		srv := apptest.Start(t, dsn, app.Options{})
		b := &bundle{srv: srv, env: map[string]string{"TASKGRAPH_SERVER": srv.URL}, dir: t.TempDir()}

		t.Run("WatchFollowsTheStepsLiveAndExits0", func(t *testing.T) {
			h := newHook(t, false)
			b.writeFile(t, "diamond.json", diamond("cli diamond", h.url))
			wf := jsonOf[workflow](t, b.cmd(t, "workflow", "create", "--file", "diamond.json", "--json"))
			require.Equal(t, 4, wf.StepCount)
			require.Len(t, wf.Steps, 4)

			var out syncBuffer
			done := b.background(t, &out, "workflow", "watch", wf.ID)
			b.srv.WaitSubscribers(t, 1)
			// b is held by the hook until now: the rest happens while
			// watch listens.
			close(h.release)
			require.Equal(t, cli.ExitOK, wait(t, done, &out), out.String())
			s := out.String()
			for _, key := range []string{"b", "d"} {
				require.Regexp(t, `(?m)^\S+ step `+key+` \(task \d+ \S+\) SUCCESS$`, s)
			}
			require.Regexp(t, `(?m)^\S+ workflow `+wf.ID+` `+regexp.QuoteMeta(wf.Code)+` SUCCESS 4/4 steps\n\z`, s, "the last line is the workflow's end")

			// Watching a workflow that has ended answers at once, in JSON too.
			r := b.cmd(t, "workflow", "watch", wf.Code, "--json")
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			var last struct{ Workflow workflow }
			require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &last), r.stdout)
			require.Equal(t, "SUCCESS", last.Workflow.Status)
			require.Equal(t, 4, last.Workflow.StepsDone)

			got := jsonOf[workflow](t, b.cmd(t, "workflow", "get", wf.ID, "--json"))
			require.Equal(t, "SUCCESS", got.Status)
			parents := map[string][]string{}
			for _, st := range got.Steps {
				require.Equal(t, "SUCCESS", st.Status, st.StepKey)
				for _, p := range st.Parents {
					parents[st.StepKey] = append(parents[st.StepKey], p.StepKey)
				}
			}
			require.Equal(t, map[string][]string{"b": {"a"}, "c": {"a"}, "d": {"b", "c"}}, parents)

			r = b.cmd(t, "workflow", "get", strings.ToLower(wf.Code))
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			require.Regexp(t, `(?m)^Status +SUCCESS$`, r.stdout)
			require.Regexp(t, `(?m)^Progress +4/4 steps succeeded$`, r.stdout)
			require.Regexp(t, `(?m)^  KEY +TASK +TYPE +STATUS +WAITS FOR +ERROR$`, r.stdout)
			require.Regexp(t, `(?m)^  d +\d+ +noop +SUCCESS +b,c *$`, r.stdout)
		})

		t.Run("AFailedStepCancelsItsDependentsAndWatchExits3", func(t *testing.T) {
			h := newHook(t, true)
			close(h.release)
			b.writeFile(t, "failing.json", diamond("cli failing", h.url))
			r := b.cmd(t, "workflow", "create", "--file", "failing.json", "--watch")
			require.Equal(t, cli.ExitFailed, r.code, r.stdout+r.stderr)
			require.Regexp(t, `(?m)^workflow \d+ WF-\S+ (PENDING|EXECUTING) 0/4 steps$`, r.stdout, "the created workflow first")
			require.Regexp(t, `(?m)^\S+ step b \(task \d+ \S+\) FAILED: .*400`, r.stdout)
			require.Regexp(t, `(?m)^\S+ step d \(task \d+ \S+\) CANCELLED: parent WEBHOO-\S+ failed$`, r.stdout)
			require.Regexp(t, `(?m)^\S+ workflow \d+ \S+ FAILED 2/4 steps$`, r.stdout)
			require.Regexp(t, `^taskgraph workflow create: workflow \d+ FAILED \(2/4 steps succeeded\)\n$`, r.stderr)

			// Retry the workflow once the receiver accepts: b and d run
			// again, a and c are kept.
			id := regexp.MustCompile(`(?m)^workflow (\d+) `).FindStringSubmatch(r.stdout)[1]
			before := jsonOf[workflow](t, b.cmd(t, "workflow", "get", id, "--json"))
			require.Contains(t, before.AvailableActions, "RETRY_WORKFLOW")
			h.refuse.Store(false)
			r = b.cmd(t, "workflow", "retry", id, "--reason", "receiver fixed", "--wait")
			require.Equal(t, cli.ExitOK, r.code, r.stdout+r.stderr)
			require.Regexp(t, `(?m)^\S+ step d \(task \d+ \S+\) SUCCESS$`, r.stdout)
			require.Regexp(t, `(?m)^\S+ workflow `+id+` \S+ SUCCESS 4/4 steps$`, r.stdout)
			after := jsonOf[workflow](t, b.cmd(t, "workflow", "get", id, "--json"))
			require.Equal(t, "SUCCESS", after.Status)
			r = b.cmd(t, "workflow", "retry", id)
			require.Equal(t, cli.ExitFailure, r.code, "nothing to re-run")
			require.Contains(t, r.stderr, "INVALID_TRANSITION")
		})

		t.Run("CancelAndExit4", func(t *testing.T) {
			b.writeFile(t, "slow.json", map[string]any{"title": "cli slow", "steps": []map[string]any{
				{"key": "slow", "type": "noop", "input": map[string]any{"sleepMs": 600000}},
				{"key": "after", "type": "noop", "dependsOn": []string{"slow"}},
			}})
			r := b.cmd(t, "workflow", "create", "--file", "slow.json", "-q")
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			id := strings.TrimSpace(r.stdout)
			require.Regexp(t, `^\d+$`, id)
			got := jsonOf[workflow](t, b.cmd(t, "workflow", "get", id, "--json"))
			require.Equal(t, []string{"CANCEL"}, got.AvailableActions)
			r = b.cmd(t, "workflow", "cancel", id, "--reason", "not today", "--wait")
			require.Equal(t, cli.ExitCancelled, r.code, r.stdout+r.stderr)
			require.Regexp(t, `(?m)^workflow `+id+` \S+ \S+ 0/2 steps$`, r.stdout)
			// The cancel's answer, then (unless it was the end already) the end.
			require.Regexp(t, `(?m)^(\S+ )?workflow `+id+` \S+ CANCELLED 0/2 steps\n\z`, r.stdout)
			got = jsonOf[workflow](t, b.cmd(t, "workflow", "get", id, "--json"))
			require.Equal(t, "CANCELLED", got.Status)
			require.Equal(t, []string{"RETRY_WORKFLOW"}, got.AvailableActions, "no cancel; a retry")
			for _, s := range got.Steps {
				require.Equal(t, "CANCELLED", s.Status, s.StepKey)
			}
			// Cancelling it again changes nothing.
			r = b.cmd(t, "workflow", "cancel", id)
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			require.Regexp(t, `^workflow `+id+` \S+ CANCELLED 0/2 steps\n$`, r.stdout)
		})

		t.Run("IdempotentByKey", func(t *testing.T) {
			b.writeFile(t, "one.json", map[string]any{"steps": []map[string]any{{"key": "x", "type": "noop"}}})
			b.writeFile(t, "other.json", map[string]any{"steps": []map[string]any{{"key": "y", "type": "noop"}}})
			first := jsonOf[workflow](t, b.cmd(t, "workflow", "create", "--file", "one.json", "--key", "cli-key", "--title", "keyed", "--json"))
			again := jsonOf[workflow](t, b.cmd(t, "workflow", "create", "--file", "one.json", "--key", "cli-key", "--title", "keyed", "--json"))
			require.Equal(t, first.ID, again.ID)
			require.Equal(t, "keyed", again.Title)
			r := b.cmd(t, "workflow", "create", "--file", "other.json", "--key", "cli-key")
			require.Equal(t, cli.ExitFailure, r.code)
			require.Contains(t, r.stderr, "(CONFLICT)")
			// stdin, and a policy given on the command line.
			r = b.cmdCtx(t, context.Background(), `{"steps": [{"key": "s", "type": "noop"}]}`, "workflow", "create", "--file", "-", "--on-parent-failure", "wait", "--json")
			require.Equal(t, "WAIT", jsonOf[workflow](t, r).OnParentFailure)
		})

		t.Run("List", func(t *testing.T) {
			for i := range 3 {
				b.writeFile(t, "listed.json", map[string]any{"title": fmt.Sprintf("listed %d", i), "steps": []map[string]any{{"key": "x", "type": "noop"}}})
				require.Equal(t, cli.ExitOK, b.cmd(t, "workflow", "create", "--file", "listed.json", "-q").code)
			}
			r := b.cmd(t, "workflow", "list", "--search", "LISTED", "--json")
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			require.Len(t, lines, 3, "one JSON document per line")
			var newest workflow
			require.NoError(t, json.Unmarshal([]byte(lines[0]), &newest))
			require.Equal(t, "listed 2", newest.Title, "newest first")

			r = b.cmd(t, "workflow", "list", "--search", "listed", "--first", "2")
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			require.Regexp(t, `(?m)^ID +CODE +STATUS +STEPS +CREATED +TITLE$`, r.stdout)
			require.Regexp(t, `(?m)^\d+ +WF-\S+ +\S+ +\d/1 +.* listed 2$`, r.stdout)
			require.Contains(t, r.stdout, "(2 of 3; --all for every one)")
			r = b.cmd(t, "workflow", "list", "--search", "listed", "--first", "2", "--all", "-q")
			require.Len(t, strings.Fields(r.stdout), 3)
		})

		t.Run("BadInputIsRefusedBeforeAnythingIsCreated", func(t *testing.T) {
			before := b.cmd(t, "workflow", "list", "--all", "-q").stdout
			require.NoError(t, os.WriteFile(filepath.Join(b.dir, "typo.json"), []byte(`{"stpes": []}`), 0o600))
			r := b.cmd(t, "workflow", "create", "--file", "typo.json")
			require.Equal(t, cli.ExitUsage, r.code)
			require.Contains(t, r.stderr, `unknown field "stpes"`)
			b.writeFile(t, "cycle.json", map[string]any{"steps": []map[string]any{
				{"key": "x", "type": "noop", "dependsOn": []string{"y"}},
				{"key": "y", "type": "noop", "dependsOn": []string{"x"}},
			}})
			r = b.cmd(t, "workflow", "create", "--file", "cycle.json")
			require.Equal(t, cli.ExitFailure, r.code)
			require.Contains(t, r.stderr, "(VALIDATION)")
			require.Equal(t, cli.ExitUsage, b.cmd(t, "workflow", "create").code)
			require.Equal(t, cli.ExitUsage, b.cmd(t, "workflow", "create", "--file", "missing.json").code)
			require.Equal(t, cli.ExitUsage, b.cmd(t, "workflow", "create", "--file", "cycle.json", "--on-parent-failure", "sometimes").code)
			require.Equal(t, before, b.cmd(t, "workflow", "list", "--all", "-q").stdout, "nothing was created")

			r = b.cmd(t, "workflow", "get", "987654")
			require.Equal(t, cli.ExitFailure, r.code)
			require.Contains(t, r.stderr, "NOT_FOUND")
			r = b.cmd(t, "workflow", "watch", "WF-20200101-NOPE")
			require.Equal(t, cli.ExitFailure, r.code)
			require.Contains(t, r.stderr, "not found")
			require.Equal(t, cli.ExitUsage, b.cmd(t, "workflow", "fly").code)
			r = b.cmd(t, "workflow", "-h")
			require.Equal(t, cli.ExitOK, r.code)
			require.Contains(t, r.stdout, "watch ID")
		})
	})
}
