package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/cli"
	"github.com/taskgraph/taskgraph/internal/importtest"
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
		require.Contains(t, r.stderr, `--status: "DONE" is not one of PENDING, EXECUTING, SUCCESS, FAILED, RETRY_PENDING, CANCELLED, WAITING_DEPENDENCY or REVIEW_PENDING`)
		r = b.cmd(t, "download", "1", "--kind", "LOG", "--server", srv)
		require.Equal(t, cli.ExitUsage, r.code)
		require.Contains(t, r.stderr, `--kind: "LOG" is not one of `)
		r = b.cmd(t, "download", "-h")
		require.Equal(t, cli.ExitOK, r.code)
		require.Contains(t, r.stdout, "which file: SOURCE, ERROR_REPORT, EXPORT or REPORT")
		require.Contains(t, r.stdout, "xlsx or csv")
		r = b.cmd(t, "task", "list", "-h")
		require.Contains(t, r.stdout, "RETRY_PENDING, CANCELLED, WAITING_DEPENDENCY or REVIEW_PENDING")
	})
}

// TestAnImportOfNothingIsRefusedBeforeAnyTask: an empty CSV, a header row
// alone (CSV and xlsx) are refused as the file's fault, and no task, no
// file is left.
func TestAnImportOfNothingIsRefusedBeforeAnyTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	files := map[string][]byte{
		"empty.csv":  nil,
		"header.csv": []byte("姓名,手机\n"),
	}
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(b.dir, name), content, 0o600))
	}
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "header.xlsx"), importtest.XLSX(t, []string{"姓名", "手机"}, nil), 0o600))
	for _, name := range []string{"empty.csv", "header.csv", "header.xlsx"} {
		r := b.cmd(t, "import", name)
		require.Equal(t, cli.ExitFailure, r.code, name)
		require.Contains(t, r.stderr, "(VALIDATION)", name)
		if name != "empty.csv" {
			require.Contains(t, r.stderr, "has no rows to import (it is empty, or has its header row alone)", name)
		}
	}
	r := b.cmd(t, "task", "list", "--type", "import", "-q")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Empty(t, r.stdout, "no task was created")
}

// TestAContactsExportImportsBack: the file a contacts export writes is
// read by the contacts import: its bilingual headers ("姓名 Name", "手机
// Phone") are the target's, so the file is taken row by row rather than
// refused whole for a header problem; its times carry their zone. (Its
// phones and e-mails are masked, as they are stored: those rows are
// refused one by one, as any row with a masked phone would be.)
func TestAContactsExportImportsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "in.csv"), []byte("姓名,手机,邮箱,城市,生日\n张三,13812345678,zs@example.com,上海,1990-05-01\n李四,13912345678,,深圳,\n"), 0o600))
	r := b.cmd(t, "import", "in.csv", "--wait", "-q")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	r = b.cmd(t, "export", "--source", "contacts", "--format", "csv", "--output", "out.csv")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	out, err := os.ReadFile(filepath.Join(b.dir, "out.csv"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(strings.TrimPrefix(string(out), "\ufeff")), "\n")
	require.Len(t, lines, 3, string(out))
	require.Regexp(t, `,\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\r?$`, lines[1], "the creation time is ISO 8601 in UTC")

	r = b.cmd(t, "import", "out.csv", "--wait", "-q")
	require.NotContains(t, r.stderr, "header", "the export's headers are the import's")
	require.Contains(t, r.stderr, "all 2 rows were refused", "read row by row")
	id := strings.TrimSpace(r.stdout)
	r = b.cmd(t, "download", id, "--format", "csv", "--output", "-")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "is not a valid mobile number", "refused for the masked phone")

	// Unmasked, the same header row imports every row.
	unmasked := strings.NewReplacer("138****5678", "13812345678", "139****5678", "13912345678", "z***@example.com", "zs@example.com").Replace(string(out))
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "again.csv"), []byte(unmasked), 0o600))
	r = b.cmd(t, "import", "again.csv", "--wait", "-q")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	r = b.cmd(t, "task", "get", strings.TrimSpace(r.stdout), "--json")
	var done struct {
		Result struct {
			Status                    string
			SuccessCount, FailedCount int
		}
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &done), r.stdout)
	require.Equal(t, "SUCCESS", done.Result.Status, r.stdout)
	require.Equal(t, 2, done.Result.SuccessCount)
}
