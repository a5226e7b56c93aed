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
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/auth"
)

// Server is a running process.
type Server struct {
	App *app.App
	URL string // http://127.0.0.1:port
	srv *httptest.Server
}

// Start builds and starts an app with every role on dsn. Fast intervals
// are applied unless opts sets them; configure functions may change the
// configuration (authentication, limits...). Everything stops when t ends.
func Start(t testing.TB, dsn string, opts app.Options, configure ...func(*app.Config)) *Server {
	t.Helper()
	// The listener first: links are built from the server's public URL.
	srv := httptest.NewUnstartedServer(nil)
	cfg := app.Config{
		Addr:             "127.0.0.1:0",
		DB:               dsn,
		DataDir:          t.TempDir(),
		Workers:          8,
		Roles:            []app.Role{app.RoleAPI, app.RoleWorker, app.RoleWatchdog},
		ShutdownGrace:    2 * time.Second,
		HeartbeatTimeout: 30 * time.Second,
		Playground:       true,
		Network:          app.NetworkConfig{PublicURL: "http://" + srv.Listener.Addr().String()},
	}
	for _, fn := range configure {
		fn(&cfg)
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
		srv.Close()
		t.Fatalf("apptest: %v", err)
	}
	if err := a.Start(ctx); err != nil {
		srv.Close()
		t.Fatalf("apptest: %v", err)
	}
	srv.Config.Handler = a.Handler
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
	Status int             `json:"-"` // the HTTP status
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
	return s.DoAs(t, "", query, vars)
}

// DoAs posts a query with a bearer token ("" sends none).
func (s *Server) DoAs(t testing.TB, token, query string, vars map[string]any) Response {
	t.Helper()
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return s.Request(t, h, body)
}

// DoRaw posts a body as is.
func (s *Server) DoRaw(t testing.TB, contentType string, body []byte) Response {
	t.Helper()
	return s.Request(t, http.Header{"Content-Type": {contentType}}, body)
}

// Request posts body with headers h to /query.
func (s *Server) Request(t testing.TB, h http.Header, body []byte) Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/query", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("apptest: post: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var r Response
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("apptest: response %d is not JSON: %s", resp.StatusCode, raw)
	}
	r.Status = resp.StatusCode
	return r
}

// Query posts a query that must succeed and decodes its data into out.
func (s *Server) Query(t testing.TB, query string, vars map[string]any, out any) {
	t.Helper()
	s.QueryAs(t, "", query, vars, out)
}

// QueryAs is Query with a bearer token.
func (s *Server) QueryAs(t testing.TB, token, query string, vars map[string]any, out any) {
	t.Helper()
	r := s.DoAs(t, token, query, vars)
	if len(r.Errors) > 0 {
		t.Fatalf("apptest: query failed: %+v", r.Errors)
	}
	if out != nil {
		if err := json.Unmarshal(r.Data, out); err != nil {
			t.Fatalf("apptest: decode %s: %v", r.Data, err)
		}
	}
}

// Tokens writes a token file for viewers and returns its path and each
// user's token.
func Tokens(t testing.TB, viewers ...auth.Viewer) (path string, tokens map[string]string) {
	t.Helper()
	tokens = map[string]string{}
	var lines []string
	for _, v := range viewers {
		tok := auth.NewToken()
		tokens[v.User] = tok
		lines = append(lines, auth.TokenLine(tok, v))
	}
	path = filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("# test tokens\n"+strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, tokens
}

// Eventually calls cond every 10 ms until it reports done, and fails the
// test when it has not within timeout, with cond's last word on why.
func Eventually(t testing.TB, timeout time.Duration, cond func() (done bool, why string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, why := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("apptest: not done within %s: %s", timeout, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
