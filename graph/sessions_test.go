package graph_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/graph"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// tokenFile is a token file a test rewrites while the server runs.
type tokenFile struct {
	path  string
	lines map[string]string // by user
	tok   map[string]string // by user
}

func newTokenFile(t *testing.T, viewers ...auth.Viewer) *tokenFile {
	t.Helper()
	f := &tokenFile{path: t.TempDir() + "/tokens", lines: map[string]string{}, tok: map[string]string{}}
	for _, v := range viewers {
		tok := auth.NewToken()
		f.tok[v.User], f.lines[v.User] = tok, auth.TokenLine(tok, v)
	}
	f.write(t)
	return f
}

func (f *tokenFile) write(t *testing.T) {
	t.Helper()
	var b strings.Builder
	for _, l := range f.lines {
		b.WriteString(l + "\n")
	}
	// Written aside and renamed: a reader never sees half a file.
	require.NoError(t, os.WriteFile(f.path+".new", []byte(b.String()), 0o600))
	require.NoError(t, os.Rename(f.path+".new", f.path))
}

// sse posts an SSE request and returns the response (any status).
func sse(t *testing.T, s *apptest.Server, token, query string, h http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/query", strings.NewReader(`{"query":`+quote(query)+`}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	for k, vs := range h {
		req.Header[k] = vs
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func quote(s string) string {
	var b bytes.Buffer
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}

// readsUntilEnd reads an SSE stream until the server ends it (failing
// after a deadline) and returns what it read.
func readsUntilEnd(t *testing.T, resp *http.Response) string {
	t.Helper()
	done := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(resp.Body)
		done <- string(b)
	}()
	select {
	case s := <-done:
		return s
	case <-time.After(20 * time.Second):
		resp.Body.Close()
		t.Fatal("the stream did not end")
		return ""
	}
}

// firstEvent reads the stream until its first "next" event.
func firstEvent(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		if strings.HasPrefix(line, "data:") {
			return line
		}
	}
}

// wsCloseCode reads until the server closes the socket.
func wsCloseCode(t *testing.T, c *apptest.WS) (int, string) {
	t.Helper()
	require.NoError(t, c.Conn.SetReadDeadline(time.Now().Add(20*time.Second)))
	for {
		_, _, err := c.Conn.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code, ce.Text
		}
		t.Fatalf("the server did not close the socket with a code: %v", err)
	}
}

// TestSessions: open connections hold credentials that are checked again
// (a hostile review, findings 3, 4 and the SSE caps of 9).
func TestSessions(t *testing.T) {
	t.Parallel()
	tf := newTokenFile(t,
		auth.Viewer{User: "root", Role: auth.RoleAdmin},
		auth.Viewer{User: "carol", Role: auth.RoleOperator},
		auth.Viewer{User: "dave", Role: auth.RoleOperator},
		auth.Viewer{User: "erin", Role: auth.RoleOperator},
		auth.Viewer{User: "frank", Role: auth.RoleOperator},
		auth.Viewer{User: "gina", Role: auth.RoleOperator},
		auth.Viewer{User: "hank", Role: auth.RoleOperator},
	)
	keyFile := t.TempDir() + "/jwt.key"
	require.NoError(t, os.WriteFile(keyFile, jwtSecret, 0o600))
	s := apptest.Start(t, dbtest.SQLite(t), app.Options{Websocket: graph.WebsocketConfig{MaxConnectionsPerUser: 2}}, func(c *app.Config) {
		c.Access.TokenFile = tf.path
		c.Access.JWTHS256KeyFile = keyFile
		c.Access.JWTIssuer = "https://idp.test"
		c.Access.JWTAudience = "taskgraph"
	})
	// Each sub-test rewrites the line of a user of its own.
	var mu = make(chan struct{}, 1)
	rewrite := func(t *testing.T, user string, v *auth.Viewer) {
		mu <- struct{}{}
		defer func() { <-mu }()
		if v == nil {
			delete(tf.lines, user)
		} else {
			tf.lines[user] = auth.TokenLine(tf.tok[user], *v)
		}
		tf.write(t)
	}

	t.Run("AnUpgradeHeaderDoesNotSkipAuthentication", func(t *testing.T) {
		t.Parallel()
		// The SSE transport answered this anonymously.
		resp := sse(t, s, "", `{ taskTypes { name } }`, http.Header{"Upgrade": {"x"}})
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		body, _ := io.ReadAll(resp.Body)
		require.NotContains(t, string(body), "noop")
		for name, h := range map[string]http.Header{
			"PostWithUpgradeWebsocket": {"Upgrade": {"websocket"}, "Connection": {"Upgrade"}, "Content-Type": {"application/json"}},
			"GetWithoutAKey":           {"Upgrade": {"websocket"}, "Connection": {"Upgrade"}, "Sec-WebSocket-Version": {"13"}},
			"NoConnectionUpgrade":      {"Upgrade": {"websocket"}, "Sec-WebSocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}, "Sec-WebSocket-Version": {"13"}},
			"H2C":                      {"Upgrade": {"h2c"}, "Connection": {"Upgrade, HTTP2-Settings"}, "Content-Type": {"application/json"}},
		} {
			method := http.MethodGet
			if h.Get("Content-Type") != "" {
				method = http.MethodPost
			}
			req, err := http.NewRequest(method, s.URL+"/query?query=%7B__typename%7D", strings.NewReader(`{"query":"{ taskTypes { name } }"}`))
			require.NoError(t, err)
			req.Header = h
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err, name)
			resp.Body.Close()
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, name)
		}
		// With credentials, a request with a stray Upgrade header is just a
		// request.
		r := s.Request(t, http.Header{"Upgrade": {"h2c"}, "Content-Type": {"application/json"}, "Authorization": {"Bearer " + tf.tok["root"]}},
			[]byte(`{"query":"{ taskTypes { name } }"}`))
		require.Empty(t, r.Errors)
		require.Contains(t, string(r.Data), "noop")
		// A genuine websocket still authenticates at connection_init.
		c := dialAs(t, s, tf.tok["root"])
		c.Subscribe("1", `{ __typename }`, nil)
		require.Equal(t, "next", c.Next().Type)
	})
	t.Run("ARevokedTokenClosesItsWebsocketAtOnce", func(t *testing.T) {
		t.Parallel()
		c := dialAs(t, s, tf.tok["carol"])
		c.Subscribe("1", `subscription { taskUpdated { id } }`, nil)
		s.WaitSubscribers(t, 1)
		rewrite(t, "carol", nil)
		code, reason := wsCloseCode(t, c)
		require.Equal(t, 4403, code)
		require.Contains(t, reason, "no longer valid")
		r := s.DoAs(t, tf.tok["carol"], `{ __typename }`, nil)
		require.Equal(t, http.StatusUnauthorized, r.Status)
	})
	t.Run("ARevokedTokenRunsNothingMoreOnItsSocket", func(t *testing.T) {
		t.Parallel()
		c := dialAs(t, s, tf.tok["dave"])
		c.Subscribe("1", `mutation { createTask(input: {type: "noop", title: "before"}) { id } }`, nil)
		require.Equal(t, "next", c.Next().Type)
		rewrite(t, "dave", nil)
		// Sent at once, before the file's change is polled: the operation
		// checks the credentials itself.
		c.Subscribe("2", `mutation { createTask(input: {type: "noop", title: "after"}) { id } }`, nil)
		var out struct{ Tasks struct{ TotalCount int } }
		s.QueryAs(t, tf.tok["root"], `{ tasks(where: {owner: "dave"}) { totalCount } }`, nil, &out)
		code, _ := wsCloseCode(t, c)
		require.Equal(t, 4403, code)
		s.QueryAs(t, tf.tok["root"], `{ tasks(where: {owner: "dave"}) { totalCount } }`, nil, &out)
		require.Equal(t, 1, out.Tasks.TotalCount, "the mutation after the revocation did not run")
	})
	t.Run("AChangedRoleClosesTheWebsocket", func(t *testing.T) {
		t.Parallel()
		c := dialAs(t, s, tf.tok["erin"])
		c.Subscribe("1", `subscription { taskUpdated { id } }`, nil)
		rewrite(t, "erin", &auth.Viewer{User: "erin", Role: auth.RoleViewer})
		code, reason := wsCloseCode(t, c)
		require.Equal(t, 4403, code)
		require.Contains(t, reason, "changed")
		// Reconnecting gives the new role.
		c = dialAs(t, s, tf.tok["erin"])
		c.Subscribe("2", `mutation { createTask(input: {type: "noop"}) { id } }`, nil)
		m := c.Next()
		require.Contains(t, string(m.Payload), "FORBIDDEN")
	})
	t.Run("ARevokedTokenEndsItsSSEStream", func(t *testing.T) {
		t.Parallel()
		resp := sse(t, s, tf.tok["frank"], `subscription { taskUpdated { id } }`, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		s.WaitSubscribers(t, 1)
		rewrite(t, "frank", nil)
		readsUntilEnd(t, resp)
	})
	t.Run("AnExpiredJWTEndsItsSSEStream", func(t *testing.T) {
		t.Parallel()
		tok := signJWT(t, jwt.MapClaims{"sub": "jwt-user", "role": "operator", "exp": time.Now().Add(2 * time.Second).Unix()})
		resp := sse(t, s, tok, `subscription { taskUpdated { id } }`, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		readsUntilEnd(t, resp)
	})
	t.Run("AnExpiredJWTClosesItsWebsocket", func(t *testing.T) {
		t.Parallel()
		// A user of its own: jwt-user's connections are the SSE test's.
		tok := signJWT(t, jwt.MapClaims{"sub": "jwt-ws-user", "role": "operator", "exp": time.Now().Add(2 * time.Second).Unix()})
		c := dialAs(t, s, tok)
		c.Subscribe("1", `subscription { taskUpdated { id } }`, nil)
		code, reason := wsCloseCode(t, c)
		require.Equal(t, 4403, code, "the socket is closed when its JWT expires (reason %q)", reason)
		require.Contains(t, reason, "expired")
	})
	t.Run("SSEStreamsCountAgainstTheUsersConnections", func(t *testing.T) {
		t.Parallel()
		// gina may hold 2 connections: a websocket and an SSE stream.
		c := dialAs(t, s, tf.tok["gina"])
		c.Subscribe("1", `subscription { taskUpdated { id } }`, nil)
		first := sse(t, s, tf.tok["gina"], `subscription { taskUpdated { id } }`, nil)
		require.Equal(t, http.StatusOK, first.StatusCode)
		third := sse(t, s, tf.tok["gina"], `subscription { taskUpdated { id } }`, nil)
		require.Equal(t, http.StatusTooManyRequests, third.StatusCode)
		body, _ := io.ReadAll(third.Body)
		require.Contains(t, string(body), "LIMIT_EXCEEDED")
		d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}}
		conn, resp, err := d.Dial(s.WS(), nil)
		require.NoError(t, err)
		resp.Body.Close()
		defer conn.Close()
		require.NoError(t, conn.WriteJSON(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + tf.tok["gina"]}}))
		_, _, err = conn.ReadMessage()
		require.True(t, websocket.IsCloseError(err, 4429), "a third connection, of either kind: %v", err)
		// Ending the stream frees its place.
		first.Body.Close()
		deadline := time.Now().Add(20 * time.Second)
		for s.App.GraphQL.OpenConnections(auth.Identity{Source: auth.SourceToken, User: "gina"}) > 1 {
			require.True(t, time.Now().Before(deadline), "the stream's place was not freed")
			time.Sleep(10 * time.Millisecond)
		}
		again := sse(t, s, tf.tok["gina"], `{ __typename }`, nil)
		require.Equal(t, http.StatusOK, again.StatusCode)
	})
	t.Run("MediaTypesAreComparedWithoutRegardToCase", func(t *testing.T) {
		t.Parallel()
		resp := sse(t, s, tf.tok["hank"], `subscription { taskUpdated { id } }`, http.Header{"Accept": {"Text/Event-Stream"}, "Content-Type": {"Application/JSON; charset=UTF-8"}})
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Content-Type"), "text/event-stream", "served as SSE")
	})
	t.Run("ABodyThatIsNotAGraphQLRequestIsNotEchoed", func(t *testing.T) {
		t.Parallel()
		for _, body := range []string{
			`{"query": 5, "note": "SECRET-zzz"}`,
			`{"query": "{ __typename }", "variables": "SECRET-zzz"}`,
			`{"query": "SECRET-zzz`,
			`[{"query": "SECRET-zzz"}]`,
			`SECRET-zzz`,
		} {
			for _, accept := range []string{"", "text/event-stream"} {
				h := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + tf.tok["hank"]}}
				if accept != "" {
					h.Set("Accept", accept)
				}
				req, err := http.NewRequest(http.MethodPost, s.URL+"/query", strings.NewReader(body))
				require.NoError(t, err)
				req.Header = h
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
				require.NotContains(t, string(raw), "SECRET", body)
				require.Contains(t, string(raw), "VALIDATION", body)
			}
		}
	})
}

// TestASearchSubscriptionQueriesNothingPerEvent: a filter with search is
// matched in memory (a hostile review, finding 9), over both transports.
func TestASearchSubscriptionQueriesNothingPerEvent(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, dbtest.SQLite(t), app.Options{})
	before := graph.WhereQueries()
	c := s.DialWS(t, nil)
	c.Subscribe("1", `subscription($w: TaskWhereInput) { taskUpdated(where: $w) { id title } }`,
		map[string]any{"w": map[string]any{"or": []any{map[string]any{"search": "NOTIFY"}, map[string]any{"type": "nothing"}}}})
	stream := sse(t, s, "", `subscription { taskUpdated(where: {search: "notify", statusIn: [PENDING]}) { id title } }`, nil)
	require.Equal(t, http.StatusOK, stream.StatusCode)
	s.WaitSubscribers(t, 2)
	for _, title := range []string{"other", "notify customer", "else"} {
		// Not run for an hour: each task is one PENDING change.
		s.Query(t, `mutation($t: String, $at: Time) { createTask(input: {type: "noop", title: $t, runAt: $at}) { id } }`,
			map[string]any{"t": title, "at": time.Now().Add(time.Hour).Format(time.RFC3339)}, nil)
	}
	m := c.Next()
	require.Equal(t, "next", m.Type)
	require.Contains(t, string(m.Payload), "notify customer", "the first match is the second task")
	line := firstEvent(t, bufio.NewReader(stream.Body))
	require.Contains(t, line, "notify customer")
	require.Equal(t, before, graph.WhereQueries(), "no query per event")
}
