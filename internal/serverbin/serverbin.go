// Package serverbin builds the taskgraph binary for tests that run it as a
// process of its own (signals, kill -9, start-up lines).
package serverbin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
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
		if out, buildErr := exec.Command("go", "build", "-o", path, "github.com/taskgraph/taskgraph").CombinedOutput(); buildErr != nil {
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

// FreeAddr returns a loopback address with a port free at the time of the
// call, for a server process to listen on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Query runs a GraphQL query with vars on the server at addr, as the
// bearer of token (none: ""), decodes its data into out, and fails t on
// any error.
func Query(t testing.TB, addr, token, query string, vars map[string]any, out any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data   json.RawMessage
		Errors []any
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || len(r.Errors) > 0 {
		t.Fatalf("query %q: %v %v", query, err, r.Errors)
	}
	if err := json.Unmarshal(r.Data, out); err != nil {
		t.Fatal(err)
	}
}

// Output is a process's stderr (or stdout) as a test reads it while the
// process writes it: exec copies into it from a goroutine of its own.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

// String is what was written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
