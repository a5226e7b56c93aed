package cli_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/cli"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// TestReviewCommands: a task that waits for review ends task create
// --wait with exit 5, and each decision of task review moves it on, with
// --json and the exit codes of a waited-for task.
func TestReviewCommands(t *testing.T) {
	t.Parallel()
	srv := apptest.Start(t, filepath.Join(t.TempDir(), "cli.db"), app.Options{Register: func(r *tasktype.Registry) {
		tasktype.Register(r, "check", func(ctx context.Context, job *tasktype.Job, in struct {
			Fail bool `json:"fail"`
		}) error {
			if in.Fail {
				return tasktype.NeedsReview(errors.New("the totals differ by 3"), map[string]int{"difference": 3})
			}
			return nil
		})
	}})
	b := &bundle{srv: srv, env: map[string]string{"TASKGRAPH_SERVER": srv.URL}, dir: t.TempDir()}
	waiting := func(t *testing.T) string {
		t.Helper()
		r := b.cmd(t, "task", "create", "check", "--input", `{"fail": true}`, "--wait", "-q")
		require.Equal(t, cli.ExitReview, r.code, "stderr: %s", r.stderr)
		require.Contains(t, r.stderr, "waits for review: the totals differ by 3")
		return strings.TrimSpace(strings.Split(r.stdout, "\n")[0])
	}
	t.Run("EditWithAnInputFileRunsItAgain", func(t *testing.T) {
		id := waiting(t)
		require.NoError(t, os.WriteFile(filepath.Join(b.dir, "fixed.json"), []byte(`{"fail": false}`), 0o600))
		// Without a reason or a file, nothing is sent.
		require.Equal(t, cli.ExitUsage, b.cmd(t, "task", "review", "edit", id, "--input-file", "fixed.json").code)
		require.Equal(t, cli.ExitUsage, b.cmd(t, "task", "review", "edit", id, "--reason", "fixed").code)
		got := jsonOf[task](t, b.cmd(t, "task", "review", "edit", id, "--input-file", "fixed.json", "--reason", "the totals were fixed", "--json"))
		require.Equal(t, "RETRY_PENDING", got.Status)
		require.Equal(t, cli.ExitOK, b.cmd(t, "task", "watch", id).code)
		// A task no longer waiting for review cannot be decided.
		r := b.cmd(t, "task", "review", "approve", id)
		require.Equal(t, cli.ExitFailure, r.code)
		require.Contains(t, r.stderr, "INVALID_TRANSITION")
	})
	t.Run("ApproveRunsItAgainAsItWas", func(t *testing.T) {
		id := waiting(t)
		require.Equal(t, cli.ExitReview, b.cmd(t, "task", "review", "approve", id, "--wait").code)
	})
	t.Run("AcceptEndsItSuccess", func(t *testing.T) {
		id := waiting(t)
		r := b.cmd(t, "task", "review", "accept", id, "--reason", "a difference of 3 is fine")
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "SUCCESS")
	})
	t.Run("RejectEndsItFailed", func(t *testing.T) {
		id := waiting(t)
		require.Equal(t, cli.ExitUsage, b.cmd(t, "task", "review", "reject", id).code)
		require.Equal(t, cli.ExitFailed, b.cmd(t, "task", "review", "reject", id, "--reason", "wrong month", "--wait").code)
	})
	t.Run("UnknownDecision", func(t *testing.T) {
		require.Equal(t, cli.ExitUsage, b.cmd(t, "task", "review", "maybe", "1").code)
	})
}
