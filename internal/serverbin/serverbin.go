// Package serverbin builds the taskgraph binary for tests that run it as a
// process of its own (signals, kill -9, start-up lines).
package serverbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once sync.Once
	path string
	err  error
)

// Build builds the server once per test process and returns its path.
func Build(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		dir, mkErr := os.MkdirTemp("", "taskgraph-bin-")
		if mkErr != nil {
			err = mkErr
			return
		}
		path = filepath.Join(dir, "taskgraph")
		if out, buildErr := exec.Command("go", "build", "-o", path, "taskgraph").CombinedOutput(); buildErr != nil {
			err = fmt.Errorf("%v: %s", buildErr, out)
		}
	})
	if err != nil {
		t.Fatalf("build the server: %v", err)
	}
	return path
}
