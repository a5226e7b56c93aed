package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// TestEmbedded runs the example as a user would (its flags, the server's
// way), on both databases: its own route creates a task of its own type,
// which runs and gives its typed result; the console and the API answer in
// the same mux; it stops when told to.
func TestEmbedded(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan string, 1)
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, "127.0.0.1:0", []string{"--db", dsn, "--data-dir", t.TempDir(), "--workers", "4"}, func(string) string { return "" }, ready)
		}()
		var addr string
		select {
		case addr = <-ready:
		case err := <-done:
			t.Fatalf("the example stopped: %v", err)
		case <-time.After(time.Minute):
			t.Fatal("the example did not start")
		}
		get := func(path string) (int, string) {
			t.Helper()
			res, err := http.Get("http://" + addr + path)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return res.StatusCode, strings.TrimSpace(string(b))
		}
		code, body := get("/greet?name=Ada")
		if code != http.StatusOK {
			t.Fatalf("/greet: %d %s", code, body)
		}
		id, _, _ := strings.Cut(body, " ")
		if code, body = get("/greet/" + id); code != http.StatusOK || body != "hello, Ada" {
			t.Fatalf("/greet/%s: %d %q", id, code, body)
		}
		if code, body = get("/greet?name="); code != http.StatusBadRequest || !strings.Contains(body, "minLength") {
			t.Fatalf("an empty name: %d %q", code, body)
		}
		if code, _ = get("/console/"); code != http.StatusOK {
			t.Fatalf("the console: %d", code)
		}
		if code, body = get("/readyz"); code != http.StatusOK {
			t.Fatalf("/readyz: %d %s", code, body)
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("stop: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("the example did not stop")
		}
	})
}
