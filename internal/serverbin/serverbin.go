// Package serverbin builds the taskgraph binary for tests that run it as a
// process of its own (signals, kill -9, start-up lines).
package serverbin

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
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

// WaitReady waits until the server at addr answers /readyz with 200, and
// fails t with why (its log, say) if it has not within timeout.
func WaitReady(t testing.TB, addr string, timeout time.Duration, why func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server at %s not ready after %s: %s", addr, timeout, why())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
