package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/serverbin"
)

// readmeBlock is a fenced ```sh block of README.md: the commands to run
// and, on its "#> " lines, what they print.
type readmeBlock struct {
	line     int    // where it starts in README.md
	section  string // the heading above it
	postgres bool   // ```sh postgres: needs PostgreSQL
	script   string
	want     []string
}

// readmeBlocks extracts the ```sh blocks of a README in order. Blocks
// with another language (```shell, ```json...) are shown, not run.
func readmeBlocks(readme string) []readmeBlock {
	var blocks []readmeBlock
	var cur *readmeBlock
	section := ""
	for i, line := range strings.Split(readme, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "## "):
			section = strings.TrimPrefix(line, "## ")
		case cur == nil && (line == "```sh" || strings.HasPrefix(line, "```sh ")):
			cur = &readmeBlock{line: i + 1, section: section, postgres: strings.Contains(line, "postgres")}
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil && (strings.HasPrefix(line, "#> ") || line == "#>"):
			cur.want = append(cur.want, strings.TrimPrefix(strings.TrimPrefix(line, "#>"), " "))
		case cur != nil:
			cur.script += line + "\n"
		}
	}
	return blocks
}

// matchLine reports whether an output line matches a "#> " pattern:
// literal text in which ... stands for anything.
func matchLine(pattern, line string) bool {
	parts := strings.Split(pattern, "...")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	return regexp.MustCompile(`^` + strings.Join(parts, ".*") + `$`).MatchString(strings.TrimRight(line, " "))
}

// missing returns the first pattern that has no matching line after the
// previous pattern's (the patterns are in order, other lines may come
// between them), or "" when every one matched. A pattern that is only
// "..." matches nothing by itself: it says that lines were left out.
func missing(want, got []string) string {
	at := 0
	for _, w := range want {
		if strings.TrimSpace(w) == "..." {
			continue
		}
		for ; at < len(got) && !matchLine(w, got[at]); at++ {
		}
		if at == len(got) {
			return w
		}
		at++
	}
	return ""
}

// TestREADME runs the README's ```sh blocks in order, in one shell, in an
// empty directory, with the taskgraph binary built from this tree on the
// PATH, and compares what each block prints with its "#> " lines. The
// addresses it uses (127.0.0.1:8080, 808x) are replaced by free ports,
// and TASKGRAPH_ADDR/TASKGRAPH_SERVER point the commands that name no
// address at the first; the blocks marked ```sh postgres get a PostgreSQL
// schema of their own for the database they name.
func TestREADME(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlocks(string(raw))
	if len(blocks) < 5 {
		t.Fatalf("README.md has %d sh blocks; the tour alone has more", len(blocks))
	}
	bin := serverbin.Build(t)
	dir := t.TempDir()
	binDir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(binDir, "taskgraph")); err != nil {
		t.Fatal(err)
	}
	ports := map[string]string{}
	replace := []string{}
	for _, p := range []string{"8080", "8081", "8082", "8083"} {
		free := serverbin.FreeAddr(t)
		ports[p] = free[strings.LastIndex(free, ":")+1:]
		replace = append(replace, "127.0.0.1:"+p, "127.0.0.1:"+ports[p], "localhost:"+p, "localhost:"+ports[p], "0.0.0.0:"+p, "0.0.0.0:"+ports[p])
	}
	pg := ""
	for _, b := range blocks {
		if b.postgres {
			if os.Getenv("TASKGRAPH_TEST_PG") == "off" {
				t.Log("TASKGRAPH_TEST_PG=off: the README's PostgreSQL blocks are not run")
				break
			}
			pg = dbtest.Postgres(t)
			replace = append(replace, "postgres://postgres@127.0.0.1:5432/taskgraph?sslmode=disable", pg)
			break
		}
	}
	sub := strings.NewReplacer(replace...)

	// One script: each block, then a marker with its number. A failing
	// command (not tested with || or &&) is reported with its line.
	var script strings.Builder
	script.WriteString("trap 'echo \"::readme-error:: $BASH_COMMAND exited $?\"' ERR\n")
	var run []readmeBlock
	for _, b := range blocks {
		if b.postgres && pg == "" {
			continue
		}
		run = append(run, b)
		fmt.Fprintf(&script, "%s\necho ::readme-block-%d::\n", sub.Replace(b.script), len(run)-1)
	}
	script.WriteString("kill $(jobs -p) 2>/dev/null; wait\n")
	path := filepath.Join(t.TempDir(), "readme.sh")
	if err := os.WriteFile(path, []byte(script.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", path)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The whole group: the servers the blocks start in the background too.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TASKGRAPH_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "PATH="+binDir+":"+os.Getenv("PATH"), "HOME="+dir,
		"TASKGRAPH_ADDR=127.0.0.1:"+ports["8080"], "TASKGRAPH_SERVER=http://127.0.0.1:"+ports["8080"])
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	if ctx.Err() != nil {
		t.Fatalf("the README's blocks did not finish within 4 minutes; output so far:\n%s", out.String())
	}

	outputs := map[int][]string{}
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		var n int
		if _, err := fmt.Sscanf(l, "::readme-block-%d::", &n); err == nil {
			outputs[n] = lines
			lines = nil
			continue
		}
		lines = append(lines, l)
	}
	for i, b := range run {
		got, ok := outputs[i]
		if !ok {
			t.Fatalf("README.md:%d (%s): the block never finished (%v); output:\n%s", b.line, b.section, runErr, out.String())
		}
		for _, l := range got {
			if strings.HasPrefix(l, "::readme-error::") {
				t.Errorf("README.md:%d (%s): a command failed: %s\noutput of the block:\n%s", b.line, b.section, strings.TrimPrefix(l, "::readme-error:: "), strings.Join(got, "\n"))
			}
		}
		want := make([]string, len(b.want))
		for j, w := range b.want {
			want[j] = sub.Replace(w)
		}
		if m := missing(want, got); m != "" {
			t.Errorf("README.md:%d (%s): the output has no line matching\n\t%s\nafter the lines matched before it; the block printed:\n%s", b.line, b.section, m, strings.Join(got, "\n"))
		}
	}
}

func TestREADMEMatching(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, line string
		ok            bool
	}{
		{"exit 0", "exit 0", true},
		{"exit 0", "exit 3", false},
		{"... task 1 NOOP-... SUCCESS 3000/3000", "15:04:05 task 1 NOOP-20261130-AB SUCCESS 3000/3000", true},
		{"... task 1 NOOP-... SUCCESS 3000/3000", "15:04:05 task 1 NOOP-20261130-AB FAILED 3000/3000", false},
		{"a.b (c)", "a.b (c)", true},
		{"a.b (c)", "axb (c)", false},
	} {
		if got := matchLine(tc.pattern, tc.line); got != tc.ok {
			t.Errorf("matchLine(%q, %q) = %v", tc.pattern, tc.line, got)
		}
	}
	if m := missing([]string{"a", "...", "c"}, []string{"a", "b", "c"}); m != "" {
		t.Errorf("in order: %q missing", m)
	}
	if m := missing([]string{"c", "a"}, []string{"a", "b", "c"}); m != "a" {
		t.Errorf("out of order: want a missing, got %q", m)
	}
	blocks := readmeBlocks("## S\n```sh\necho hi\n#> hi\n```\n```shell\nnot run\n```\n```sh postgres\nx\n```\n")
	if len(blocks) != 2 || blocks[0].script != "echo hi\n" || blocks[0].want[0] != "hi" || blocks[0].section != "S" || !blocks[1].postgres {
		t.Errorf("readmeBlocks: %+v", blocks)
	}
}
