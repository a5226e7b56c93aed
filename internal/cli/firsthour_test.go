package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/cli"
)

// TestWhatANewUserTypes: the command lines a new user following the
// README wrote, against a real server, with their exit codes.
func TestWhatANewUserTypes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env["TASKGRAPH_SERVER"] = "http://127.0.0.1:1" // only the flags name the server
	srv := b.srv.URL

	t.Run("ClientFlagsBeforeTheCommand", func(t *testing.T) {
		r := b.cmd(t, "--server", srv, "task", "create", "noop", "--wait", "-q")
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		id := strings.TrimSpace(r.stdout)
		require.Regexp(t, `^\d+$`, id)
		r = b.cmd(t, "--server="+srv, "--json", "task", "get", id)
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		require.Equal(t, "SUCCESS", jsonOf[task](t, r).Status)
		r = b.cmd(t, "task", "--server", srv, "get", id, "--json")
		require.Equal(t, "SUCCESS", jsonOf[task](t, r).Status, "between task and its command too")
	})
	t.Run("TaskCodesWhereverIds", func(t *testing.T) {
		created := jsonOf[task](t, b.cmd(t, "task", "create", "noop", "--json", "--server", srv, "--max-attempts", "1"))
		for _, code := range []string{created.Code, strings.ToLower(created.Code)} {
			r := b.cmd(t, "task", "get", code, "--json", "--server", srv)
			got := jsonOf[task](t, r)
			require.Equal(t, created.ID, got.ID)
			r = b.cmd(t, "task", "watch", code, "-q", "--server", srv)
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			r = b.cmd(t, "task", "logs", code, "--server", srv)
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
		}
		r := b.cmd(t, "task", "get", "NOOP-20000101-NOTHERE", "--server", srv)
		require.Equal(t, cli.ExitFailure, r.code)
		require.Contains(t, r.stderr, "task NOOP-20000101-NOTHERE not found")
	})
	t.Run("GetSaysOneAttempt", func(t *testing.T) {
		r := b.cmd(t, "task", "create", "noop", "--wait", "-q", "--server", srv, "--max-attempts", "1")
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		r = b.cmd(t, "task", "get", strings.TrimSpace(r.stdout), "--server", srv)
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		require.Regexp(t, `(?m)^Retry\s+\S+, at most 1 attempt$`, r.stdout)
	})
	t.Run("LogsPrintTheirFields", func(t *testing.T) {
		require.NoError(t, os.WriteFile(filepath.Join(b.dir, "c.csv"), []byte("姓名,手机\n张三,13812345678\n"), 0o600))
		r := b.cmd(t, "import", "c.csv", "--wait", "-q", "--server", srv)
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		id := strings.TrimSpace(r.stdout)
		r = b.cmd(t, "task", "logs", id, "--server", srv)
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		require.Regexp(t, `(?m) import finished .*\bwritten=1\b`, r.stdout)
		r = b.cmd(t, "task", "logs", id, "--json", "--server", srv)
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		found := false
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			var line struct {
				Message string
				Fields  map[string]any
			}
			require.NoError(t, json.Unmarshal([]byte(l), &line), l)
			if line.Message == "import finished" {
				found = true
				require.EqualValues(t, 1, line.Fields["written"], l)
			}
		}
		require.True(t, found, r.stdout)
	})
	t.Run("AWrongEnumListsTheValues", func(t *testing.T) {
		r := b.cmd(t, "task", "list", "--status", "DONE", "--server", srv)
		require.Equal(t, cli.ExitUsage, r.code)
		require.Contains(t, r.stderr, `--status: "DONE" is not one of PENDING, EXECUTING, SUCCESS, FAILED, RETRY_PENDING or CANCELLED`)
		r = b.cmd(t, "download", "1", "--kind", "LOG", "--server", srv)
		require.Equal(t, cli.ExitUsage, r.code)
		require.Contains(t, r.stderr, `--kind: "LOG" is not one of `)
		r = b.cmd(t, "download", "-h")
		require.Equal(t, cli.ExitOK, r.code)
		require.Contains(t, r.stdout, "which file: SOURCE, ERROR_REPORT, EXPORT or REPORT")
		require.Contains(t, r.stdout, "xlsx or csv")
		r = b.cmd(t, "task", "list", "-h")
		require.Contains(t, r.stdout, "RETRY_PENDING or CANCELLED")
	})
}
