package tg_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// TestAnOutsideModuleUsesTheLibrary builds the shop example as a module of
// its own in a temporary directory, as a team would write it (its go.mod
// requires taskgraph, replaced by this checkout), and runs it on both
// databases: it may import only the library and its value types; its
// order saved with CreateTx in its own transaction runs once with its typed
// result; the order rolled back leaves no row in any table and no event on
// the subscription it opened before; it serves the API from its own mux.
func TestAnOutsideModuleUsesTheLibrary(t *testing.T) {
	t.Parallel()
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(repo, "examples", "shop", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	// What it imports of taskgraph: the library and its values, nothing else.
	for _, m := range regexp.MustCompile(`"(github\.com/taskgraph/taskgraph[^"]*)"`).FindAllStringSubmatch(string(src), -1) {
		if m[1] != module+"/tg" && m[1] != module+"/tg/tgtype" {
			t.Fatalf("the example imports %s: an outside module can import only tg and tg/tgtype", m[1])
		}
	}
	dir := t.TempDir()
	gomod := "module example.com/shop\n\ngo 1.26\n\nrequire github.com/taskgraph/taskgraph v0.0.0\n\nreplace github.com/taskgraph/taskgraph => " + repo + "\n"
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": src} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	goCmd("mod", "tidy")
	bin := filepath.Join(dir, "shop")
	goCmd("build", "-o", bin, ".")
	dbtest.Run(t, func(t *testing.T, dsn string) {
		cmd := exec.Command(bin, "-db", dsn)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("shop: %v\n%s%s", err, out, stderr.String())
		}
		want := []string{
			`rolled back: order 1, task ORDERC-.*; rows added to any table: 0`,
			`committed: order 2, task ORDERC-.* SUCCESS, result "confirmed: a chair"`,
			`executions: order 1: 0, order 2: 1`,
			`subscriber: order 2's task PENDING -> EXECUTING -> SUCCESS; order 1's task: 0 events`,
			`orders saved: 1`,
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != len(want) {
			t.Fatalf("shop printed:\n%s", out)
		}
		for i, w := range want {
			if !regexp.MustCompile("^" + w + "$").MatchString(lines[i]) {
				t.Errorf("line %d: %q, want %q", i+1, lines[i], w)
			}
		}
	})
}

// TestTheREADMEProgramRuns builds the README's library program ("Use it as
// a library") as a module of its own, as its reader would, runs it, and
// checks what it prints.
func TestTheREADMEProgramRuns(t *testing.T) {
	t.Parallel()
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section, ok := strings.CutPrefix(string(readme)[strings.Index(string(readme), "\n## Use it as a library\n")+1:], "## Use it as a library\n")
	if !ok {
		t.Fatal(`README.md has no "## Use it as a library" section`)
	}
	m := regexp.MustCompile("(?s)```go\n(.*?)\n```").FindStringSubmatch(section)
	if m == nil {
		t.Fatal("the README's library section has no go block")
	}
	dir := t.TempDir()
	gomod := "module example.com/hello\n\ngo 1.26\n\nrequire github.com/taskgraph/taskgraph v0.0.0\n\nreplace github.com/taskgraph/taskgraph => " + repo + "\n"
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": []byte(m[1] + "\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"mod", "tidy"}, {"run", "."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "run" && !strings.Contains(string(out), "SUCCESS hello, Ada <nil>") {
			t.Fatalf("the README's program printed:\n%s", out)
		}
	}
}
