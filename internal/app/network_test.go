package app_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/importtest"
)

// TestRequestBodiesHaveADeadline: a body must arrive at a minimum rate
// after a grace period (a hostile review, finding 9).
func TestRequestBodiesHaveADeadline(t *testing.T) {
	t.Parallel()
	path, tok := apptest.Tokens(t, auth.Viewer{User: "root", Role: auth.RoleAdmin})
	s := apptest.Start(t, dbtest.SQLite(t), app.Options{BodyGrace: 3 * time.Second, MinBodyRate: 1024},
		func(c *app.Config) { c.Access.TokenFile = path })
	host := strings.TrimPrefix(s.URL, "http://")
	// send writes a request of length bytes, its body every interval in
	// pieces of chunk bytes, until the server answers; it returns the
	// status line and how many body bytes it had sent.
	send := func(t *testing.T, token string, length, chunk int, every time.Duration) (string, int) {
		conn, err := net.DialTimeout("tcp", host, 5*time.Second)
		require.NoError(t, err)
		defer conn.Close()
		authz := ""
		if token != "" {
			authz = "Authorization: Bearer " + token + "\r\n"
		}
		_, err = fmt.Fprintf(conn, "POST /query HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", host, authz, length)
		require.NoError(t, err)
		answered := make(chan string, 1)
		go func() {
			line, _ := bufio.NewReader(conn).ReadString('\n')
			answered <- line
		}()
		body := `{"query": "{ __typename }"` + strings.Repeat(" ", length-len(`{"query": "{ __typename }"}`)) + "}"
		sent := 0
		deadline := time.After(20 * time.Second)
		for {
			select {
			case line := <-answered:
				return line, sent
			case <-deadline:
				t.Fatalf("no answer after 20 s; %d of %d bytes sent", sent, length)
			case <-time.After(every):
				if sent < len(body) {
					n, err := conn.Write([]byte(body[sent:min(sent+chunk, len(body))]))
					sent += n
					if err != nil {
						return <-answered, sent
					}
				}
			}
		}
	}
	t.Run("AnAnonymousTrickleIsCutOff", func(t *testing.T) {
		t.Parallel()
		// One byte every 400 ms, far under 1 KiB/s. Refused for want of a
		// token, but net/http drains a body (up to 256 KiB) before it
		// answers: it held the connection for the 7 minutes the whole body
		// would take. Now it stops soon after the grace period.
		line, sent := send(t, "", 1000, 1, 400*time.Millisecond)
		require.Contains(t, line, "HTTP/1.1 4")
		require.Less(t, sent, 40)
	})
	t.Run("ABodyLeftUnreadIsNotTakenForTheNextRequest", func(t *testing.T) {
		t.Parallel()
		// The body's deadline must not hide from net/http that a handler
		// left most of a body unread: the connection then closes, rather
		// than parse what is left as the next request.
		conn, err := net.DialTimeout("tcp", host, 5*time.Second)
		require.NoError(t, err)
		defer conn.Close()
		require.NoError(t, conn.SetDeadline(time.Now().Add(20*time.Second)))
		body := `{"query": "{ __typename }", "variables": {"x": "` + strings.Repeat("a", 3<<20) + `"}}`
		go func() {
			_, _ = fmt.Fprintf(conn, "POST /query HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", host, tok["root"], len(body), body)
			_, _ = fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		}()
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
		if next, err := http.ReadResponse(br, nil); err == nil {
			require.Equal(t, http.StatusOK, next.StatusCode, "the rest of the body was read as a request")
		}
	})
	t.Run("AnUploadAtTheMinimumRateArrives", func(t *testing.T) {
		t.Parallel()
		// 64 KiB in pieces of 1 KiB every 50 ms: twenty times the minimum,
		// for longer than the grace period.
		line, sent := send(t, tok["root"], 64<<10, 1<<10, 50*time.Millisecond)
		require.Contains(t, line, "HTTP/1.1 200")
		require.Equal(t, 64<<10, sent)
	})
}

// TestMetricsAreNotPublic: /metrics counts every user's tasks (a hostile
// review, finding 9).
func TestMetricsAreNotPublic(t *testing.T) {
	t.Parallel()
	path, tok := apptest.Tokens(t, auth.Viewer{User: "root", Role: auth.RoleAdmin}, auth.Viewer{User: "op", Role: auth.RoleOperator})
	get := func(t *testing.T, url, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	t.Run("OnTheAPIListenerByWhoAsks", func(t *testing.T) {
		t.Parallel()
		s := apptest.Start(t, dbtest.SQLite(t), app.Options{}, func(c *app.Config) {
			c.Access.TokenFile = path
			c.Access.PlatformAdmins = []auth.Identity{{Source: auth.SourceToken, User: "root"}}
		})
		code, _ := get(t, s.URL+"/metrics", "")
		require.Equal(t, http.StatusUnauthorized, code)
		// An operator reads the counts of its own tasks, not the node's.
		code, body := get(t, s.URL+"/metrics", tok["op"])
		require.Equal(t, http.StatusOK, code)
		require.NotContains(t, body, "taskgraph_claims_total")
		code, body = get(t, s.URL+"/metrics", tok["root"])
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, "taskgraph_claims_total")
		code, _ = get(t, s.URL+"/healthz", "")
		require.Equal(t, http.StatusOK, code, "health checks stay open")
	})
	t.Run("OnItsOwnListenerWithMetricsAddr", func(t *testing.T) {
		t.Parallel()
		s := apptest.Start(t, dbtest.SQLite(t), app.Options{}, func(c *app.Config) {
			c.Access.TokenFile = path
			c.Network.MetricsAddr = "127.0.0.1:0"
		})
		code, _ := get(t, s.URL+"/metrics", tok["root"])
		require.Equal(t, http.StatusNotFound, code, "not on the API listener")
		m := httptest.NewServer(s.App.MetricsHandler())
		defer m.Close()
		code, body := get(t, m.URL+"/metrics", "")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, "taskgraph_claims_total")
		code, _ = get(t, m.URL+"/readyz", "")
		require.Equal(t, http.StatusOK, code)
	})
	t.Run("AnOpenServerKeepsItOnLoopback", func(t *testing.T) {
		t.Parallel()
		_, err := app.ParseFlags([]string{"-metrics-addr", "0.0.0.0:9100"}, func(string) string { return "" }, io.Discard)
		require.ErrorContains(t, err, "-metrics-addr")
		c, err := app.ParseFlags([]string{"-metrics-addr", "0.0.0.0:9100", "-token-file", path}, func(string) string { return "" }, io.Discard)
		require.NoError(t, err)
		require.Equal(t, "0.0.0.0:9100", c.Network.MetricsAddr)
	})
}

// TestDownloadLinksUseThePublicURL: a link carries a signature, so it is
// never built from what the request says its Host is (a hostile review, finding 9).
func TestDownloadLinksUseThePublicURL(t *testing.T) {
	t.Parallel()
	path, tok := apptest.Tokens(t, auth.Viewer{User: "op", Role: auth.RoleOperator})
	s := apptest.Start(t, dbtest.SQLite(t), app.Options{}, func(c *app.Config) {
		c.Access.TokenFile = path
		c.Network.PublicURL = "https://tasks.example.com/tg"
	})
	r, status := importtest.UploadAs(t, s, tok["op"], "c.csv",
		importtest.CSV(importtest.ContactsHeader, importtest.Rows(3, func(i int) bool { return i == 1 }), false), "contacts", nil, "")
	require.Equal(t, http.StatusOK, status, "%+v", r.Errors)
	var up struct{ ImportFile struct{ ID string } }
	require.NoError(t, json.Unmarshal(r.Data, &up))
	var task struct {
		Task struct{ ResultStatus *string }
	}
	deadline := time.Now().Add(30 * time.Second)
	for task.Task.ResultStatus == nil {
		require.True(t, time.Now().Before(deadline), "import did not finish")
		s.QueryAs(t, tok["op"], `query($id: ID!) { task(id: $id) { resultStatus } }`, map[string]any{"id": up.ImportFile.ID}, &task)
	}
	body, _ := json.Marshal(map[string]any{"query": `mutation($id: ID!) { artifactDownloadUrl(taskId: $id) { url } }`, "variables": map[string]any{"id": up.ImportFile.ID}})
	req, err := http.NewRequest(http.MethodPost, s.URL+"/query", bytes.NewReader(body))
	require.NoError(t, err)
	req.Host = "evil.example"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok["op"])
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		Data struct{ ArtifactDownloadURL struct{ URL string } }
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.True(t, strings.HasPrefix(out.Data.ArtifactDownloadURL.URL, "https://tasks.example.com/tg/download/"), out.Data.ArtifactDownloadURL.URL)

	for addr, want := range map[string]string{"127.0.0.1:8080": "http://127.0.0.1:8080", "localhost:9000": "http://localhost:9000", "0.0.0.0:8080": "", "[::]:8080": ""} {
		c, err := app.ParseFlags([]string{"-addr", addr, "-token-file", path}, func(string) string { return "" }, io.Discard)
		require.NoError(t, err)
		require.Equal(t, want, c.PublicURL(), addr)
	}
	_, err = app.ParseFlags([]string{"-public-url", "tasks.example.com"}, func(string) string { return "" }, io.Discard)
	require.ErrorContains(t, err, "-public-url")
}
