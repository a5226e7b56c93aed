// Package apptest runs a whole taskgraph process inside a test: the app
// on a given database, served by an httptest server, with a GraphQL client.
package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"taskgraph/app"
)

// Server is a running process.
type Server struct {
	App *app.App
	URL string // http://127.0.0.1:port
	srv *httptest.Server
}

// Start builds and starts an app with every role on dsn (mods may change
// the configuration). Fast intervals are applied unless opts sets them.
// Everything stops when t ends.
func Start(t testing.TB, dsn string, opts app.Options, mods ...func(*app.Config)) *Server {
	t.Helper()
	cfg := app.Config{
		Addr:             "127.0.0.1:0",
		DB:               dsn,
		DataDir:          t.TempDir(),
		Workers:          8,
		Roles:            []app.Role{app.RoleAPI, app.RoleWorker, app.RoleWatchdog},
		ShutdownGrace:    2 * time.Second,
		HeartbeatTimeout: 30 * time.Second,
		Playground:       true,
	}
	for _, m := range mods {
		m(&cfg)
	}
	if opts.Pool.PollInterval == 0 {
		opts.Pool.PollInterval = 50 * time.Millisecond
	}
	if opts.Pool.FlushInterval == 0 {
		opts.Pool.FlushInterval = 5 * time.Millisecond
	}
	if opts.Watchdog.Interval == 0 {
		opts.Watchdog.Interval = 50 * time.Millisecond
	}
	ctx := context.Background()
	a, err := app.New(ctx, cfg, opts)
	if err != nil {
		t.Fatalf("apptest: %v", err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatalf("apptest: %v", err)
	}
	srv := httptest.NewUnstartedServer(a.Handler)
	srv.Start()
	s := &Server{App: a, URL: srv.URL, srv: srv}
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil {
			t.Errorf("apptest: shutdown: %v", err)
		}
	})
	return s
}

// WS is the websocket URL of /query.
func (s *Server) WS() string { return "ws" + strings.TrimPrefix(s.URL, "http") + "/query" }

// Response is a GraphQL response.
type Response struct {
	Data   json.RawMessage `json:"data"`
	Errors []Error         `json:"errors"`
}

// Error is a GraphQL error.
type Error struct {
	Message    string         `json:"message"`
	Path       []any          `json:"path"`
	Extensions map[string]any `json:"extensions"`
}

// Code is the error's extensions.code.
func (e Error) Code() string { s, _ := e.Extensions["code"].(string); return s }

// Do posts a query and returns the raw response (any HTTP status).
func (s *Server) Do(t testing.TB, query string, vars map[string]any) Response {
	t.Helper()
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		t.Fatal(err)
	}
	return s.DoRaw(t, "application/json", body)
}

// DoRaw posts a body as is.
func (s *Server) DoRaw(t testing.TB, contentType string, body []byte) Response {
	t.Helper()
	resp, err := http.Post(s.URL+"/query", contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatalf("apptest: post: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var r Response
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("apptest: response %d is not JSON: %s", resp.StatusCode, raw)
	}
	return r
}

// Query posts a query that must succeed and decodes its data into out.
func (s *Server) Query(t testing.TB, query string, vars map[string]any, out any) {
	t.Helper()
	r := s.Do(t, query, vars)
	if len(r.Errors) > 0 {
		t.Fatalf("apptest: query failed: %+v", r.Errors)
	}
	if out != nil {
		if err := json.Unmarshal(r.Data, out); err != nil {
			t.Fatalf("apptest: decode %s: %v", r.Data, err)
		}
	}
}
