package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/serverbin"
)

// root is the module's root, from this package's directory.
const root = ".."

// pages returns the documentation's markdown files whose sh blocks run:
// README.md and docs/*.md, as paths from the module's root.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, d := range docs {
		out = append(out, "docs/"+filepath.Base(d))
	}
	return out
}

// readPage returns the text of a page named by its path from the root.
func readPage(t *testing.T, page string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// shBlock is a fenced ```sh block of a page: the commands to run and, on
// its "#> " lines, what they print.
type shBlock struct {
	line    int      // where it starts in its page
	section string   // the heading above it
	tags    []string // the words after ```sh: postgres, s3
	script  string
	want    []string
}

// blockTags are the words a ```sh block may carry after sh: postgres (it
// needs PostgreSQL: each database it names gets a schema of its own) and
// s3 (it runs an S3 server; TASKGRAPH_TEST_S3=off leaves it out).
var blockTags = []string{"postgres", "s3"}

func (b shBlock) has(tag string) bool { return slices.Contains(b.tags, tag) }

// shBlocks extracts the ```sh blocks of a page in order. Blocks with
// another language (```shell, ```json...) are shown, not run.
func shBlocks(page string) []shBlock {
	var blocks []shBlock
	var cur *shBlock
	section := ""
	for i, line := range strings.Split(page, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "#"):
			if h := strings.TrimLeft(line, "#"); strings.HasPrefix(h, " ") {
				section = strings.TrimSpace(h)
			}
		case cur == nil && (line == "```sh" || strings.HasPrefix(line, "```sh ")):
			cur = &shBlock{line: i + 1, section: section, tags: strings.Fields(strings.TrimPrefix(line, "```sh"))}
		case cur == nil && strings.HasPrefix(line, "```"):
			// Another block: skip to its end, its lines are not headings.
			cur = &shBlock{line: -1}
		case cur != nil && line == "```":
			if cur.line > 0 {
				blocks = append(blocks, *cur)
			}
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

// rewrittenPorts are the ports the blocks may name on 127.0.0.1,
// localhost or 0.0.0.0: each page gets free ports in their place.
var rewrittenPorts = []string{"7070", "8080", "8081", "8082", "8083", "8084", "8085", "8086", "8087", "8088", "8089"}

// postgresURL is how a block names a PostgreSQL database; each one a
// page names is given a schema of its own.
var postgresURL = regexp.MustCompile(`postgres://postgres@127\.0\.0\.1:5432/[A-Za-z0-9_]+\?sslmode=disable`)

// TestDocs runs the ```sh blocks of README.md and of every docs/*.md,
// and compares what each block prints with its "#> " lines. Each page
// runs on its own, in parallel with the others: its blocks in order, in
// one shell, in an empty directory of its own, with the taskgraph binary
// built from this tree on the PATH, so that a page's blocks may use what
// its earlier blocks set up (a server, a variable) and nothing else. The
// addresses they use (127.0.0.1:8080 to 8089, 7070) are replaced by free
// ports of the page's, TASKGRAPH_ADDR/TASKGRAPH_SERVER point the commands
// that name no address at its 8080, and each database its ```sh postgres
// blocks name is a PostgreSQL schema of its own.
func TestDocs(t *testing.T) {
	t.Parallel()
	type page struct {
		name   string
		blocks []shBlock
	}
	var run []page
	for _, name := range pages(t) {
		blocks := shBlocks(readPage(t, name))
		if name == "README.md" && len(blocks) < 3 {
			t.Fatalf("README.md has %d sh blocks; the tour alone has more", len(blocks))
		}
		for _, b := range blocks {
			for _, tag := range b.tags {
				if !slices.Contains(blockTags, tag) {
					t.Errorf("%s:%d: ```sh %s: %q is not a tag a block may carry (%s)", name, b.line, strings.Join(b.tags, " "), tag, strings.Join(blockTags, ", "))
				}
			}
		}
		if len(blocks) > 0 {
			run = append(run, page{name, blocks})
		}
	}
	if t.Failed() {
		return
	}
	bin := serverbin.Build(t)
	binDir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(binDir, "taskgraph")); err != nil {
		t.Fatal(err)
	}
	// The blocks that install Go programs use the Go caches of the
	// machine (a page's HOME is its own directory, empty).
	goEnv, err := exec.Command("go", "env", "GOMODCACHE", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	caches := strings.Fields(string(goEnv))
	if len(caches) != 2 {
		t.Fatalf("go env GOMODCACHE GOCACHE: %q", goEnv)
	}
	// The pages that take longest start first: those that run an S3
	// server, then those on PostgreSQL (their nodes), then the others.
	weight := func(p page) int {
		w := 0
		for _, b := range p.blocks {
			switch {
			case b.has("s3"):
				w += 100
			case b.has("postgres"):
				w += 10
			default:
				w++
			}
		}
		return w
	}
	slices.SortStableFunc(run, func(a, b page) int { return weight(b) - weight(a) })
	for _, p := range run {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			runPage(t, p.name, p.blocks, binDir, []string{"GOMODCACHE=" + caches[0], "GOCACHE=" + caches[1]})
		})
	}
}

// runPage runs the blocks of one page and checks what they print.
func runPage(t *testing.T, name string, blocks []shBlock, binDir string, goEnv []string) {
	var replace []string
	dsns := map[string]string{}
	var run []shBlock
	for _, b := range blocks {
		switch {
		case b.has("postgres") && os.Getenv("TASKGRAPH_TEST_PG") == "off":
			t.Logf("%s:%d: TASKGRAPH_TEST_PG=off: this PostgreSQL block is not run", name, b.line)
			continue
		case b.has("s3") && os.Getenv("TASKGRAPH_TEST_S3") == "off":
			t.Logf("%s:%d: TASKGRAPH_TEST_S3=off: this S3 block is not run", name, b.line)
			continue
		}
		if b.has("postgres") {
			for _, u := range postgresURL.FindAllString(b.script, -1) {
				if dsns[u] == "" {
					dsns[u] = dbtest.Postgres(t)
					replace = append(replace, u, dsns[u])
				}
			}
		}
		run = append(run, b)
	}
	ports := map[string]string{}
	for _, p := range rewrittenPorts {
		free := serverbin.FreeAddr(t)
		ports[p] = free[strings.LastIndex(free, ":")+1:]
		for _, host := range []string{"127.0.0.1:", "localhost:", "0.0.0.0:"} {
			replace = append(replace, host+p, host+ports[p])
		}
	}
	sub := strings.NewReplacer(replace...)

	// One script: each block, then a marker with its number. A failing
	// command (not tested with || or &&) is reported with its line.
	var script strings.Builder
	script.WriteString("trap 'echo \"::docs-error:: $BASH_COMMAND exited $?\"' ERR\n")
	for i, b := range run {
		fmt.Fprintf(&script, "%s\necho ::docs-block-%d::\n", sub.Replace(b.script), i)
	}
	script.WriteString("kill $(jobs -p) 2>/dev/null; wait\n")
	path := filepath.Join(t.TempDir(), "page.sh")
	if err := os.WriteFile(path, []byte(script.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
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
		if !strings.HasPrefix(kv, "TASKGRAPH_") && !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "GOPATH=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, goEnv...)
	cmd.Env = append(cmd.Env, "PATH="+binDir+":"+os.Getenv("PATH"), "HOME="+dir, "GOPATH="+filepath.Join(dir, "go"),
		"TASKGRAPH_ADDR=127.0.0.1:"+ports["8080"], "TASKGRAPH_SERVER=http://127.0.0.1:"+ports["8080"])
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	runErr := cmd.Run()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	if ctx.Err() != nil {
		t.Fatalf("%s: the blocks did not finish within 4 minutes; output so far:\n%s", name, out.String())
	}
	t.Logf("%s: %d blocks in %s", name, len(run), time.Since(start).Round(100*time.Millisecond))

	outputs := map[int][]string{}
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		var n int
		if _, err := fmt.Sscanf(l, "::docs-block-%d::", &n); err == nil {
			outputs[n] = lines
			lines = nil
			continue
		}
		lines = append(lines, l)
	}
	for i, b := range run {
		got, ok := outputs[i]
		if !ok {
			t.Fatalf("%s:%d (%s): the block never finished (%v); output:\n%s", name, b.line, b.section, runErr, out.String())
		}
		for _, l := range got {
			if strings.HasPrefix(l, "::docs-error::") {
				t.Errorf("%s:%d (%s): a command failed: %s\noutput of the block:\n%s", name, b.line, b.section, strings.TrimPrefix(l, "::docs-error:: "), strings.Join(got, "\n"))
			}
		}
		want := make([]string, len(b.want))
		for j, w := range b.want {
			want[j] = sub.Replace(w)
		}
		if m := missing(want, got); m != "" {
			t.Errorf("%s:%d (%s): the output has no line matching\n\t%s\nafter the lines matched before it; the block printed:\n%s", name, b.line, b.section, m, strings.Join(got, "\n"))
		}
	}
}

func TestDocsMatching(t *testing.T) {
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
	blocks := shBlocks("## S\n```sh\necho hi\n#> hi\n```\n```shell\n# not a heading\n```\n### T\n```sh postgres s3\nx\n```\n")
	if len(blocks) != 2 || blocks[0].script != "echo hi\n" || blocks[0].want[0] != "hi" || blocks[0].section != "S" ||
		!blocks[1].has("postgres") || !blocks[1].has("s3") || blocks[1].section != "T" || blocks[0].has("postgres") {
		t.Errorf("shBlocks: %+v", blocks)
	}
}
