package main

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// generatedLine is the line Go's convention puts in a generated file.
var generatedLine = regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`)

// isGenerated reports whether a Go file says it is generated (in the
// lines before its package clause).
func isGenerated(file string) (bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return false, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for s.Scan() {
		l := s.Text()
		if generatedLine.MatchString(l) {
			return true, nil
		}
		if strings.HasPrefix(l, "package ") {
			break
		}
	}
	return false, s.Err()
}

// packageDirs walks the module from its root and returns its package
// directories (those holding a .go file), as slash paths from the root
// ("." for the root), each with whether every one of its Go files is
// generated. It leaves out what is not the module's: testdata, hidden
// directories and those starting with _, node_modules, and directories
// with a go.mod of their own (another module).
func packageDirs(rootDir string) (map[string]bool, error) {
	dirs := map[string]bool{}
	err := filepath.WalkDir(rootDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(rootDir, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if rel != "." {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		gen, err := isGenerated(p)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		all, seen := dirs[dir]
		dirs[dir] = gen && (all || !seen)
		return nil
	})
	return dirs, err
}

// layoutRow is a row of the Layout table: the package directory its first
// cell names (in backquotes) and the line it is on.
type layoutRow struct {
	dir  string
	line int
}

// layoutRows reads the table under the "## Layout" heading of a page.
func layoutRows(page string) ([]layoutRow, error) {
	lines := strings.Split(page, "\n")
	start := -1
	for i, l := range lines {
		if l == "## Layout" {
			start = i
		}
	}
	if start < 0 {
		return nil, fmt.Errorf(`no "## Layout" section`)
	}
	cell := regexp.MustCompile("^\\| *`([^`]+)`")
	var rows []layoutRow
	for i := start + 1; i < len(lines) && !strings.HasPrefix(lines[i], "## "); i++ {
		if m := cell.FindStringSubmatch(lines[i]); m != nil {
			rows = append(rows, layoutRow{strings.TrimSuffix(m[1], "/"), i + 1})
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("the Layout section has no row naming a directory (| `dir` | what it is |)")
	}
	return rows, nil
}

// layoutProblems compares the rows of the Layout table (of page) with the
// module's package directories: every directory needs a row, except one
// whose Go files are all generated, which the row of a directory above it
// (not the root's) covers (ent's generated subpackages are ent's); and
// every row must name a package directory, once.
func layoutProblems(page string, rows []layoutRow, dirs map[string]bool) []string {
	var out []string
	have := map[string]int{}
	for _, r := range rows {
		if first, ok := have[r.dir]; ok {
			out = append(out, fmt.Sprintf("%s:%d: a second row for %s (the first is on line %d): one row a directory", page, r.line, r.dir, first))
			continue
		}
		have[r.dir] = r.line
		if _, ok := dirs[r.dir]; !ok {
			out = append(out, fmt.Sprintf("%s:%d: the Layout table has a row for %s, which is not a package directory of the module (no .go file there, or it does not exist): rename the row if it moved, remove it if it is gone", page, r.line, r.dir))
		}
	}
	var names []string
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	for _, d := range names {
		if _, ok := have[d]; ok {
			continue
		}
		if dirs[d] {
			covered := false
			for up := filepath.ToSlash(filepath.Dir(d)); up != "." && !covered; up = filepath.ToSlash(filepath.Dir(up)) {
				_, covered = have[up]
			}
			if covered {
				continue
			}
		}
		out = append(out, fmt.Sprintf("%s: the Layout table has no row for the package directory %s; add one to the table under \"## Layout\", one line saying what it is:\n\t| `%s` | ... |", page, d, d))
	}
	return out
}

// TestLayout holds the Layout table of ARCHITECTURE.md to the module's
// package directories: a new package gets its row, a removed or moved one
// loses or changes it.
func TestLayout(t *testing.T) {
	t.Parallel()
	const page = "ARCHITECTURE.md"
	rows, err := layoutRows(readPage(t, page))
	if err != nil {
		t.Fatalf("%s: %v", page, err)
	}
	dirs, err := packageDirs(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 || !strings.Contains(fmt.Sprint(dirs), "internal/store:") {
		t.Fatalf("the walk found too few package directories: %v", dirs)
	}
	for _, p := range layoutProblems(page, rows, dirs) {
		t.Error(p)
	}
}

func TestLayoutChecks(t *testing.T) {
	t.Parallel()
	rows, err := layoutRows("# A\n\n## Layout\n\n| package | what |\n|---|---|\n| `.` (`server.go`) | main |\n| `ent/` | ent |\n| `gone` | x |\n| `ent` | again |\n\n## Next\n\n| `other` | not this table |\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(rows); got != "[{. 7} {ent 8} {gone 9} {ent 10}]" {
		t.Errorf("layoutRows: %s", got)
	}
	dirs := map[string]bool{".": false, "ent": false, "ent/task": true, "ent/schema": false, "worker": false, "gen/only": true}
	got := layoutProblems("A.md", rows, dirs)
	want := []string{"A.md:9: the Layout table has a row for gone", "A.md:10: a second row for ent", "no row for the package directory ent/schema", "no row for the package directory gen/only", "no row for the package directory worker"}
	if len(got) != len(want) {
		t.Fatalf("layoutProblems: %q", got)
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("problem %d: %q, want one containing %q", i, got[i], want[i])
		}
	}
	if _, err := layoutRows("# A\n\n## Other\n"); err == nil {
		t.Error("a page without a Layout section passes")
	}

	tree := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":                  "module x\n",
		"main.go":                 "package main\n",
		"ent/task/task.go":        "// Code generated by ent, DO NOT EDIT.\n\npackage task\n",
		"ent/mixed/a.go":          "// Code generated by ent, DO NOT EDIT.\n\npackage mixed\n",
		"ent/mixed/b.go":          "package mixed\n",
		"docs/docs_test.go":       "package main\n",
		"x/testdata/t.go":         "package t\n",
		"web/node_modules/m/m.go": "package m\n",
		"examples/go.mod":         "module y\n",
		"examples/e.go":           "package main\n",
		".hidden/h.go":            "package h\n",
		"notes/readme.md":         "no Go here\n",
	} {
		p := filepath.Join(tree, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found, err := packageDirs(tree)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(found); got != "map[.:false docs:false ent/mixed:false ent/task:true]" {
		t.Errorf("packageDirs: %s", got)
	}
}
