package graph_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/graph"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

func dialRaw(t *testing.T, s *apptest.Server, h http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	conn, resp, err := d.Dial(s.WS(), h)
	if resp != nil {
		resp.Body.Close()
	}
	if conn != nil {
		t.Cleanup(func() { conn.Close() })
	}
	return conn, resp, err
}

// closeCode reads until the server closes the connection and returns the
// close code (1006 when it just went away).
func closeCode(t *testing.T, conn *websocket.Conn) int {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
	for {
		_, _, err := conn.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code
		}
		var ne interface{ Timeout() bool }
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the server did not close the connection: %v", err)
		}
		return websocket.CloseAbnormalClosure
	}
}

func TestWebsocketHardening(t *testing.T) {
	t.Parallel()
	// Connection handling does not depend on the database: SQLite is enough.
	// The timeouts are short for a test, yet long enough that a peer
	// starved of CPU for a moment (two busy cores, -race) still meets
	// them: at 100 ms pings (a peer dropped after 200 ms of silence) and a
	// 300 ms init timeout, sockets of well-behaved peers were dropped.
	s := apptest.Start(t, dbtest.SQLite(t), app.Options{Websocket: graph.WebsocketConfig{
		InitTimeout:           time.Second,
		PingInterval:          time.Second,
		MaxSubscriptions:      3,
		MaxConnectionsPerUser: 4,
		PayloadReadLimit:      4096,
	}}, func(c *app.Config) { c.Access.AllowedOrigins = []string{"https://console.example.com"} })

	t.Run("AForeignOriginIsRefused", func(t *testing.T) {
		t.Parallel()
		_, resp, err := dialRaw(t, s, http.Header{"Origin": {"https://evil.example"}})
		require.Error(t, err)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		// The same check guards plain requests (CSRF).
		r := s.Request(t, http.Header{"Content-Type": {"application/json"}, "Origin": {"https://evil.example"}}, []byte(`{"query":"{ taskTypes { name } }"}`))
		require.Equal(t, http.StatusForbidden, r.Status)
	})
	t.Run("SameOriginAllowedOriginsAndNoOriginAreAccepted", func(t *testing.T) {
		t.Parallel()
		host := strings.TrimPrefix(s.URL, "http://")
		for _, h := range []http.Header{nil, {"Origin": {"http://" + host}}, {"Origin": {"https://console.example.com"}}} {
			conn, _, err := dialRaw(t, s, h)
			require.NoError(t, err, "%v", h)
			conn.Close()
		}
	})
	t.Run("NoConnectionInitWithinTheTimeoutClosesTheSocket", func(t *testing.T) {
		t.Parallel()
		conn, _, err := dialRaw(t, s, nil)
		require.NoError(t, err)
		require.Equal(t, websocket.CloseProtocolError, closeCode(t, conn))
	})
	t.Run("APeerThatNeverAnswersPingsIsDropped", func(t *testing.T) {
		t.Parallel()
		conn, _, err := dialRaw(t, s, nil)
		require.NoError(t, err)
		var pings atomic.Int32
		conn.SetPingHandler(func(string) error { pings.Add(1); return nil }) // and no pong
		require.NoError(t, conn.WriteJSON(wsMsg{Type: "connection_init"}))
		code := closeCode(t, conn)
		require.Contains(t, []int{websocket.CloseAbnormalClosure, websocket.CloseNormalClosure}, code)
		require.Positive(t, pings.Load())
	})
	t.Run("APeerThatAnswersPingsStays", func(t *testing.T) {
		t.Parallel()
		c := dialGTWS(t, s)
		defer c.Conn.Close()
		var pings atomic.Int32
		c.Conn.SetPingHandler(func(data string) error {
			pings.Add(1)
			return c.Conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
		})
		// Read (which answers pings) until four intervals have passed:
		// the peer outlived the two-interval limit twice over.
		for i := 0; pings.Load() < 4; i++ {
			c.Subscribe("q"+itoa(i), `{ taskTypes { name } }`, nil)
			require.Equal(t, "next", c.Next().Type)
			require.Equal(t, "complete", c.Next().Type)
		}
	})
	t.Run("TheNPlusFirstSubscriptionIsRefused", func(t *testing.T) {
		t.Parallel()
		c := dialGTWS(t, s)
		defer c.Conn.Close()
		for _, id := range []string{"1", "2", "3"} {
			c.Subscribe(id, `subscription { taskUpdated(where: {type: "nothing"}) { id } }`, nil)
		}
		c.Subscribe("4", `subscription { taskUpdated { id } }`, nil)
		m := c.Next()
		require.Equal(t, "error", m.Type)
		require.Equal(t, "4", m.ID)
		var errs []struct {
			Message    string
			Extensions map[string]any
		}
		require.NoError(t, json.Unmarshal(m.Payload, &errs))
		require.Equal(t, "LIMIT_EXCEEDED", errs[0].Extensions["code"])
		// Ending one makes room.
		c.Send(wsMsg{Type: "complete", ID: "2"})
		require.Equal(t, wsMsg{Type: "complete", ID: "2"}, c.Next())
		c.Subscribe("5", `{ taskTypes { name } }`, nil)
		m = c.Next()
		require.Equal(t, "next", m.Type, "%s", m.Payload)
		require.Equal(t, "5", m.ID)
	})
	t.Run("ADuplicateSubscriptionIDIsRejectedWith4409", func(t *testing.T) {
		t.Parallel()
		c := dialGTWS(t, s)
		defer c.Conn.Close()
		c.Subscribe("same", `subscription { taskUpdated(where: {type: "nothing"}) { id } }`, nil)
		c.Subscribe("same", `subscription { taskUpdated(where: {type: "nothing"}) { id } }`, nil)
		require.Equal(t, 4409, closeCode(t, c.Conn))
	})
	t.Run("AnOversizedMessageClosesTheConnection", func(t *testing.T) {
		t.Parallel()
		c := dialGTWS(t, s)
		defer c.Conn.Close()
		c.Subscribe("big", `{ taskTypes { name } }`+strings.Repeat(" ", 8000), nil)
		require.Equal(t, websocket.CloseMessageTooBig, closeCode(t, c.Conn))
	})
}

// TestWebsocketConnectionsPerUser has a server of its own: it counts all
// of the user's connections.
func TestWebsocketConnectionsPerUser(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, dbtest.SQLite(t), app.Options{Websocket: graph.WebsocketConfig{MaxConnectionsPerUser: 2}})
	a, b := dialGTWS(t, s), dialGTWS(t, s)
	defer b.Conn.Close()
	conn, _, err := dialRaw(t, s, nil)
	require.NoError(t, err)
	require.NoError(t, conn.WriteJSON(wsMsg{Type: "connection_init"}))
	require.Equal(t, 4429, closeCode(t, conn))
	// Closing one makes room.
	require.NoError(t, a.Conn.Close())
	deadline := time.Now().Add(10 * time.Second)
	for s.App.GraphQL.OpenConnections(auth.Local.Identity()) > 1 {
		require.True(t, time.Now().Before(deadline), "the closed connection was not released")
		time.Sleep(5 * time.Millisecond)
	}
	c := dialGTWS(t, s)
	c.Conn.Close()
}
