package apptest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// WS is a graphql-transport-ws client of a Server.
type WS struct {
	t    testing.TB
	Conn *websocket.Conn
}

// WSMessage is a graphql-transport-ws message.
type WSMessage struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// DialWS connects and completes connection_init with initPayload (nil: {}).
func (s *Server) DialWS(t testing.TB, initPayload map[string]any) *WS {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	conn, resp, err := d.Dial(s.WS(), nil)
	if err != nil {
		t.Fatalf("apptest: dial: %v", err)
	}
	resp.Body.Close()
	if conn.Subprotocol() != "graphql-transport-ws" {
		t.Fatalf("apptest: subprotocol %q", conn.Subprotocol())
	}
	c := &WS{t: t, Conn: conn}
	t.Cleanup(func() { _ = conn.Close() })
	if initPayload == nil {
		initPayload = map[string]any{}
	}
	raw, _ := json.Marshal(initPayload)
	c.Send(WSMessage{Type: "connection_init", Payload: raw})
	if m := c.Next(); m.Type != "connection_ack" {
		t.Fatalf("apptest: want connection_ack, got %+v", m)
	}
	return c
}

// Send writes a message.
func (c *WS) Send(m WSMessage) {
	c.t.Helper()
	if err := c.Conn.WriteJSON(m); err != nil {
		c.t.Fatalf("apptest: ws write: %v", err)
	}
}

// Next returns the next message that is not a keep-alive, answering pings.
func (c *WS) Next() WSMessage {
	c.t.Helper()
	for {
		_ = c.Conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		var m WSMessage
		if err := c.Conn.ReadJSON(&m); err != nil {
			c.t.Fatalf("apptest: ws read: %v", err)
		}
		switch m.Type {
		case "ping":
			c.Send(WSMessage{Type: "pong"})
		case "pong", "ka":
		default:
			return m
		}
	}
}

// Subscribe starts an operation.
func (c *WS) Subscribe(id, query string, vars map[string]any) {
	c.t.Helper()
	payload, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		c.t.Fatal(err)
	}
	c.Send(WSMessage{Type: "subscribe", ID: id, Payload: payload})
}

// Task is what NextTask decodes.
type Task struct {
	ID              string `json:"id"`
	Status          string `json:"status"`
	Version         int    `json:"version"`
	CancelRequested bool   `json:"cancelRequested"`
}

// NextTask reads the next taskUpdated payload, failing on errors.
func (c *WS) NextTask() Task {
	c.t.Helper()
	m := c.Next()
	if m.Type != "next" {
		c.t.Fatalf("apptest: want next, got %s %s", m.Type, m.Payload)
	}
	var p struct {
		Data struct {
			TaskUpdated Task `json:"taskUpdated"`
		} `json:"data"`
		Errors []Error `json:"errors"`
	}
	if err := json.Unmarshal(m.Payload, &p); err != nil || len(p.Errors) > 0 {
		c.t.Fatalf("apptest: payload %s: %v", m.Payload, err)
	}
	return p.Data.TaskUpdated
}

// WaitSubscribers waits until the server has at least n client
// subscriptions to task changes: graphql-transport-ws does not acknowledge
// a subscribe, so a test that must not miss the first change waits here.
func (s *Server) WaitSubscribers(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for s.App.Broker.Stats().TaskSubscribers < n {
		if time.Now().After(deadline) {
			t.Fatalf("apptest: %d subscriptions registered, want %d", s.App.Broker.Stats().TaskSubscribers, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
