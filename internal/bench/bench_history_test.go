package bench

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/serverbin"
)

// TestBenchHistory runs `taskgraph bench-history` small, as a user does: on
// PostgreSQL it fills the history by COPY and prints every figure on the
// empty and on the filled history, then the purge of the oldest month,
// which deletes tasks; it refuses SQLite with a usage error.
//
// Not parallel: TestBench checks that its runs leave no bench schema behind,
// and would see this one's while it runs.
func TestBenchHistory(t *testing.T) {
	bin := serverbin.Build(t)
	t.Run("sqlite is refused", func(t *testing.T) {
		cmd := exec.Command(bin, "bench-history", "-db", "")
		cmd.Env = append(os.Environ(), "TASKGRAPH_DB=")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%s", out)
		require.Equal(t, 2, exit.ExitCode())
		require.Contains(t, string(out), "-db must name a PostgreSQL database")
	})
	if os.Getenv("TASKGRAPH_TEST_PG") == "off" {
		return
	}
	cmd := exec.Command(bin, "bench-history", "-db", dbtest.PostgresBase(), "-n", "2000", "-runs", "2", "-burn", "50")
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	text := string(out)
	require.Contains(t, text, "filled 2000 tasks")
	for _, name := range []string{"list page+count, filter none", "list page+count, filter input.region=eu", "countTasks, filter owner",
		"state counts (taskStats)", "bulk preview RETRY over a month", "task detail (with instances)", "watchdog pass", "burn-down of 50"} {
		require.Equal(t, 1, strings.Count(text, "\n"+name+" "), "%s once in:\n%s", name, text)
	}
	// A year of 2,000 tasks: about 160 in the oldest month.
	m := regexp.MustCompile(`retention purge of the oldest month: (\d+) tasks`).FindStringSubmatch(text)
	require.NotNil(t, m, text)
	require.NotEqual(t, "0", m[1], text)
}
