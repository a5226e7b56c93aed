//go:build long

package ent_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedCodeIsFresh runs the generators' go:generate lines — ent
// (with ent/ent.graphql), gqlgen's code and the CLI's genqlient client —
// in a copy of the tree, and fails when anything differs from what is
// committed: whoever changes a schema must run `go generate ./...`.
func TestGeneratedCodeIsFresh(t *testing.T) {
	t.Parallel()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Dir(wd) // the repository: this test runs in ent/
	dst := t.TempDir()
	copyTree(t, src, dst)
	args := []string{"generate", "./ent/", "./graph/", "./internal/cli/"} // in this order
	cmd := exec.Command("go", args...)
	cmd.Dir = dst
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var stale []string
	for _, root := range []string{"ent", "graph", "internal/cli", "go.mod", "go.sum"} {
		stale = append(stale, diffTrees(t, filepath.Join(src, root), filepath.Join(dst, root))...)
	}
	if len(stale) > 0 {
		t.Fatalf("generated code is stale; run `go generate ./...` and commit:\n  %s", strings.Join(stale, "\n  "))
	}
}

// skipDir are not part of the Go build and may be large.
func skipDir(rel string) bool {
	switch rel {
	case ".git", "data", "artifacts", "web/node_modules":
		return true
	}
	return false
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			if skipDir(rel) {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// diffTrees lists files that differ, or exist on one side only.
func diffTrees(t *testing.T, a, b string) []string {
	t.Helper()
	files := map[string]bool{}
	for _, root := range []string{a, b} {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(root, path)
				files[rel] = true
			}
			return nil
		})
	}
	var out []string
	for rel := range files {
		x, errA := os.ReadFile(filepath.Join(a, rel))
		y, errB := os.ReadFile(filepath.Join(b, rel))
		if errA != nil || errB != nil || !bytes.Equal(x, y) {
			out = append(out, filepath.Join(a, rel))
		}
	}
	return out
}
