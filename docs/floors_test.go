package main

import (
	"fmt"
	"go/build"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/taskgraph/taskgraph"

// floorRow is a row of ARCHITECTURE.md's "Floors" table: a floor number and
// its packages (directories from the root; "ent/..." takes in ent's
// subpackages too).
var floorRow = regexp.MustCompile("^\\| *(\\d+) *\\| *([^|]*?) *\\|")

// floors reads ARCHITECTURE.md's Floors table: the floor of each package
// pattern.
func floors(t *testing.T) map[string]int {
	t.Helper()
	b, err := os.ReadFile("../ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n## Floors\n")
	if start < 0 {
		t.Fatal(`ARCHITECTURE.md has no "## Floors" section`)
	}
	section := text[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	out := map[string]int{}
	for _, line := range strings.Split(section, "\n") {
		m := floorRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		for _, p := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[2], -1) {
			if prev, dup := out[p[1]]; dup {
				t.Fatalf("ARCHITECTURE.md, Floors: %s is on floors %d and %d", p[1], prev, n)
			}
			out[p[1]] = n
		}
	}
	if len(out) == 0 {
		t.Fatal("ARCHITECTURE.md, Floors: no rows read")
	}
	return out
}

// floorOf is the floor of package dir, and the pattern that placed it.
func floorOf(fl map[string]int, dir string) (int, string, bool) {
	if n, ok := fl[dir]; ok {
		return n, dir, true
	}
	for p, n := range fl {
		if base, ok := strings.CutSuffix(p, "/..."); ok && (dir == base || strings.HasPrefix(dir, base+"/")) {
			return n, p, true
		}
	}
	return 0, "", false
}

// TestPackageBoundaries holds the import graph to ARCHITECTURE.md's floors:
// every package of the module stands on a floor, and imports only packages
// of lower floors (production code: tests may import anything), so the
// graph has no cycle and no import from a lower floor back up to a higher
// one — the engine and the handlers never reach the worker pool, nothing
// internal reaches the public library, and the public value types
// (tg/tgtype) import nothing of the module.
func TestPackageBoundaries(t *testing.T) {
	t.Parallel()
	fl := floors(t)
	dirs, err := packageDirs("..")
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	names := make([]string, 0, len(dirs))
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	for _, dir := range names {
		n, _, ok := floorOf(fl, dir)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s stands on no floor: add it to a row of ARCHITECTURE.md's Floors table, above every package it imports", dir))
			continue
		}
		pkg, err := build.ImportDir(filepath.Join("..", dir), 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				continue // test files only
			}
			t.Fatalf("%s: %v", dir, err)
		}
		for _, imp := range pkg.Imports {
			rel, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				if imp == module {
					rel = "."
				} else {
					continue
				}
			}
			m, pattern, ok := floorOf(fl, rel)
			if !ok {
				continue // reported as a package on no floor
			}
			_, own, _ := floorOf(fl, dir)
			if own == pattern && strings.HasSuffix(pattern, "/...") {
				continue // within one unit (ent and its generated packages)
			}
			if m >= n {
				problems = append(problems, fmt.Sprintf("%s (floor %d) imports %s (floor %d): a package imports only lower floors", dir, n, rel, m))
			}
		}
	}
	for p := range fl {
		base := strings.TrimSuffix(p, "/...")
		if _, ok := dirs[base]; !ok {
			problems = append(problems, fmt.Sprintf("ARCHITECTURE.md, Floors: %s is no package directory", p))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		t.Fatalf("the import graph and ARCHITECTURE.md's floors disagree:\n  %s", strings.Join(problems, "\n  "))
	}
}
