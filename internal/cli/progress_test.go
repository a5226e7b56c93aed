package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProgress(t *testing.T) {
	t.Parallel()
	t.Run("ALiveBarOnATerminal", func(t *testing.T) {
		t.Parallel()
		var out strings.Builder
		p := newProgress(&out, true)
		p.task(&TaskFields{Id: "7", Status: "EXECUTING", ProgressDone: 5, ProgressTotal: 10})
		require.Equal(t, "\r\033[K["+strings.Repeat("█", 15)+strings.Repeat("·", 15)+"]  50% 5/10 task 7 EXECUTING", out.String())
		p.task(&TaskFields{Id: "7", Status: "SUCCESS", ProgressDone: 10, ProgressTotal: 10})
		require.True(t, strings.HasSuffix(out.String(), "100% 10/10 task 7 SUCCESS\n"), "the bar's line ends with the task: %q", out.String())
	})
	t.Run("PlainLinesOtherwiseOnePerChange", func(t *testing.T) {
		t.Parallel()
		var out strings.Builder
		p := newProgress(&out, false)
		p.task(&TaskFields{Id: "7", Code: "NOOP-1", Status: "EXECUTING", ProgressDone: 5, ProgressTotal: 10})
		p.task(&TaskFields{Id: "7", Code: "NOOP-1", Status: "EXECUTING", ProgressDone: 5, ProgressTotal: 10})
		p.task(&TaskFields{Id: "7", Code: "NOOP-1", Status: "SUCCESS", ProgressDone: 10, ProgressTotal: 10})
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		require.Len(t, lines, 2)
		require.Regexp(t, `^\d\d:\d\d:\d\d task 7 NOOP-1 EXECUTING 5/10$`, lines[0])
		require.NotContains(t, out.String(), "\r")
	})
}
