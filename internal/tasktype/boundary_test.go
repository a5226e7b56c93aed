package tasktype_test

import (
	"go/build"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPackageBoundaries checks the import graph: the engine, which creates
// tasks, and the handlers' packages share tasktype with the worker pool but
// never reach the pool itself, directly or through another package.
func TestPackageBoundaries(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	const module = "github.com/taskgraph/taskgraph"
	require.True(t, strings.HasPrefix(string(mod), "module "+module+"\n"), "run from the module")

	// deps returns every package of the module that pkg imports, directly
	// or not, with the chain that leads to it (production code only).
	deps := func(pkg string) map[string]string {
		seen := map[string]string{}
		var walk func(p, chain string)
		walk = func(p, chain string) {
			bp, err := build.ImportDir(filepath.Join(root, strings.TrimPrefix(p, module+"/")), 0)
			require.NoError(t, err, p)
			for _, imp := range bp.Imports {
				if !strings.HasPrefix(imp, module+"/") {
					continue
				}
				if _, ok := seen[imp]; ok {
					continue
				}
				seen[imp] = chain + " -> " + imp
				walk(imp, seen[imp])
			}
		}
		walk(pkg, pkg)
		return seen
	}

	for _, pkg := range []string{"engine", "tasktype", "builtin", "importer", "exporter", "alert", "artifact"} {
		d := deps(module + "/internal/" + pkg)
		require.Contains(t, d, "github.com/taskgraph/taskgraph/internal/store", "%s: the walk sees the module's packages", pkg)
		chain, ok := d["github.com/taskgraph/taskgraph/worker"]
		require.False(t, ok, "%s must not import worker: %s", pkg, chain)
	}
}
