// Package wsgorilla runs gqlgen's websocket transport (graphql-transport-ws
// and the legacy graphql-ws) on gorilla/websocket, and enforces what the
// protocol itself should: a subscription id used twice on a connection is
// refused (graphql-transport-ws closes with 4409), a connection runs at
// most MaxOperations operations at once, and a peer that stops answering
// ping frames is dropped.
package wsgorilla

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
)

// Implementation accepts websocket connections with Upgrader. Set
// Upgrader.CheckOrigin: gorilla's default refuses cross-origin requests.
type Implementation struct {
	Upgrader websocket.Upgrader
	// PingInterval is how often a ping frame is sent; a peer that has not
	// answered with a pong for two intervals is dropped (browsers and
	// websocket libraries answer pings by themselves). 0: no pings.
	PingInterval time.Duration
	// MaxOperations bounds the operations (subscriptions, and queries
	// sent over the socket) running at once on one connection; one more
	// is answered with an error message for its id. 0: no limit.
	MaxOperations int
	// Conns, when set, tracks the open connections, so that a server
	// shutting down can close them properly (Conns.GoAway).
	Conns *Conns
}

// Conns are the open connections of an Implementation.
type Conns struct {
	mu      sync.Mutex
	open    map[*conn]struct{}
	closing bool
	reason  string
}

// NewConns returns an empty set.
func NewConns() *Conns { return &Conns{open: map[*conn]struct{}{}} }

// add registers c; false when the server is going away (c is then closed
// with 1001 at once).
func (cs *Conns) add(c *conn) (ok bool, reason string) {
	if cs == nil {
		return true, ""
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closing {
		return false, cs.reason
	}
	cs.open[c] = struct{}{}
	return true, ""
}

func (cs *Conns) remove(c *conn) {
	if cs == nil {
		return
	}
	cs.mu.Lock()
	delete(cs.open, c)
	cs.mu.Unlock()
}

// Len is how many connections are open.
func (cs *Conns) Len() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.open)
}

// GoAway closes every connection with 1001 (going away) and reason, at
// once: clients such as graphql-ws reconnect (to another node, or to this
// one once it is back) and subscribe again to what they were watching.
// Connections accepted later are closed the same way.
func (cs *Conns) GoAway(reason string) {
	cs.mu.Lock()
	cs.closing, cs.reason = true, reason
	open := make([]*conn, 0, len(cs.open))
	for c := range cs.open {
		open = append(open, c)
	}
	cs.mu.Unlock()
	for _, c := range open {
		c.goAway(reason)
	}
}

// Accept upgrades the request, offering gqlgen's subprotocols.
func (i Implementation) Accept(w http.ResponseWriter, r *http.Request, opts transport.WebsocketAcceptOptions) (transport.WebsocketConn, error) {
	up := i.Upgrader
	up.Subprotocols = slices.Clone(up.Subprotocols)
	for _, p := range opts.Subprotocols {
		if !slices.Contains(up.Subprotocols, p) {
			up.Subprotocols = append(up.Subprotocols, p)
		}
	}
	c, err := up.Upgrade(w, r, opts.ResponseHeader)
	if err != nil {
		return nil, err
	}
	cn := &conn{c: c, maxOps: i.MaxOperations, ops: map[string]bool{}, done: make(chan struct{}), conns: i.Conns}
	if ok, reason := i.Conns.add(cn); !ok {
		cn.goAway(reason)
		return cn, nil // gqlgen's first read fails on the closed socket
	}
	if cl := CloserFrom(r.Context()); cl != nil {
		cl.set(cn)
	}
	if i.PingInterval > 0 {
		cn.lastPong.Store(time.Now().UnixNano())
		c.SetPongHandler(func(string) error {
			cn.lastPong.Store(time.Now().UnixNano())
			return nil
		})
		go cn.ping(i.PingInterval)
	}
	return cn, nil
}

type conn struct {
	c  *websocket.Conn
	mu sync.Mutex // gorilla allows one concurrent writer

	maxOps int
	opsMu  sync.Mutex
	ops    map[string]bool // ids of operations running

	lastPong  atomic.Int64
	done      chan struct{}
	closeOnce sync.Once
	conns     *Conns
}

var (
	_ transport.WebsocketConn          = (*conn)(nil)
	_ transport.WebsocketReadLimiter   = (*conn)(nil)
	_ transport.WebsocketReadDeadliner = (*conn)(nil)
)

// writeWait bounds a write to a peer that stopped reading.
const writeWait = 10 * time.Second

// CloseSubscriberExists is graphql-transport-ws's close code for a
// subscribe message reusing the id of a running operation.
const CloseSubscriberExists = 4409

func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.done)
		c.conns.remove(c)
	})
	return c.c.Close()
}

// CloseGoingAway is the close code of a server shutting down.
const CloseGoingAway = websocket.CloseGoingAway

// goAway closes the connection with 1001 (going away).
func (c *conn) goAway(reason string) {
	c.mu.Lock()
	_ = c.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(CloseGoingAway, reason), time.Now().Add(time.Second))
	c.mu.Unlock()
	_ = c.Close()
}

// ping sends ping frames and drops the connection when pongs stop coming.
func (c *conn) ping(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case now := <-t.C:
			if now.Sub(time.Unix(0, c.lastPong.Load())) > 2*every {
				// gqlgen's read loop fails on the closed socket and ends
				// the connection's operations.
				_ = c.Close()
				return
			}
			_ = c.c.WriteControl(websocket.PingMessage, nil, now.Add(writeWait))
		}
	}
}

func (c *conn) NextReader() (int, io.Reader, error) {
	for {
		mt, r, err := c.c.NextReader()
		if err != nil {
			if websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseNoStatusReceived, websocket.CloseGoingAway) {
				return mt, nil, transport.ErrWebsocketClosed
			}
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return mt, nil, transport.ErrWebsocketClosed
			}
			return mt, nil, err
		}
		// Messages are small (the read limit bounds them): read each
		// whole to see its type and id before gqlgen does.
		data, err := io.ReadAll(r)
		if err != nil {
			return mt, nil, err
		}
		pass, err := c.admit(data)
		if err != nil {
			return mt, nil, err
		}
		if pass {
			return mt, bytes.NewReader(data), nil
		}
	}
}

// envelope is what both subprotocols' messages have in common.
type envelope struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// admit tracks the ids of running operations. It reports false for a
// message it answered itself (an operation over the limit), and an error
// when it closed the connection (an id in use, on graphql-transport-ws).
func (c *conn) admit(data []byte) (bool, error) {
	var m envelope
	if json.Unmarshal(data, &m) != nil {
		return true, nil // gqlgen answers malformed messages
	}
	switch m.Type {
	case "subscribe", "start": // graphql-transport-ws, graphql-ws
		c.opsMu.Lock()
		running, n := c.ops[m.ID], len(c.ops)
		if !running && (c.maxOps <= 0 || n < c.maxOps) {
			c.ops[m.ID] = true
		}
		c.opsMu.Unlock()
		switch {
		case running && c.c.Subprotocol() == "graphql-transport-ws":
			_ = c.WriteClose(CloseSubscriberExists, "Subscriber for "+m.ID+" already exists")
			_ = c.Close()
			return false, transport.ErrWebsocketClosed
		case running:
			return false, c.refuse(m.ID, "an operation with id "+m.ID+" is already running", nil)
		case c.maxOps > 0 && n >= c.maxOps:
			return false, c.refuse(m.ID, fmt.Sprintf("too many operations on this connection; the limit is %d", c.maxOps),
				map[string]any{"code": "LIMIT_EXCEEDED", "limit": "subscriptions", "max": c.maxOps})
		}
	case "complete", "stop": // the client ends an operation
		c.ended(m.ID)
	}
	return true, nil
}

func (c *conn) ended(id string) {
	c.opsMu.Lock()
	delete(c.ops, id)
	c.opsMu.Unlock()
}

// refuse answers an operation with an error message, in the format both
// subprotocols use for errors of one operation.
func (c *conn) refuse(id, msg string, ext map[string]any) error {
	if ext == nil {
		ext = map[string]any{"code": "VALIDATION"}
	}
	payload, err := json.Marshal([]map[string]any{{"message": msg, "extensions": ext}})
	if err != nil {
		return err
	}
	return c.write(websocket.TextMessage, mustJSON(map[string]any{"type": "error", "id": id, "payload": json.RawMessage(payload)}))
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (c *conn) WriteJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	// An operation ends with complete, or with error and nothing after.
	if bytes.Contains(b, []byte(`"complete"`)) || bytes.Contains(b, []byte(`"error"`)) {
		var m envelope
		if json.Unmarshal(b, &m) == nil && (m.Type == "complete" || m.Type == "error") {
			c.ended(m.ID)
		}
	}
	return c.write(websocket.TextMessage, b)
}

func (c *conn) write(mt int, b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.c.SetWriteDeadline(time.Now().Add(writeWait))
	return c.c.WriteMessage(mt, b)
}

func (c *conn) WriteClose(code int, message string) error {
	return c.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, message), time.Now().Add(time.Second))
}

func (c *conn) Subprotocol() string { return c.c.Subprotocol() }

func (c *conn) SetReadLimit(limit int64) { c.c.SetReadLimit(limit) }

func (c *conn) SetReadDeadline(t time.Time) error { return c.c.SetReadDeadline(t) }

type closerKey struct{}

// Closer closes a connection with a code of the server's choosing after it
// was accepted: gqlgen closes a connection whose context ends with 1000
// ("terminated"), which tells a client nothing; a connection whose
// credentials were revoked is closed with 4403 and the reason.
type Closer struct {
	mu     sync.Mutex
	c      *conn
	code   int // a Close that came before the connection
	reason string
}

// WithCloser returns ctx carrying a Closer for the connection Accept makes
// of a request with that context.
func WithCloser(ctx context.Context) (context.Context, *Closer) {
	cl := &Closer{}
	return context.WithValue(ctx, closerKey{}, cl), cl
}

// CloserFrom returns the Closer of ctx, or nil.
func CloserFrom(ctx context.Context) *Closer {
	cl, _ := ctx.Value(closerKey{}).(*Closer)
	return cl
}

func (cl *Closer) set(c *conn) {
	cl.mu.Lock()
	cl.c = c
	code, reason := cl.code, cl.reason
	cl.mu.Unlock()
	if code != 0 {
		c.closeWith(code, reason)
	}
}

// Close sends a close frame with code and reason (cut to what a control
// frame holds) and closes the connection; gqlgen's read loop then ends
// its operations. Closing twice, or before the connection exists, is fine.
func (cl *Closer) Close(code int, reason string) {
	cl.mu.Lock()
	c := cl.c
	if c == nil {
		cl.code, cl.reason = code, reason
	}
	cl.mu.Unlock()
	if c != nil {
		c.closeWith(code, reason)
	}
}

func (c *conn) closeWith(code int, reason string) {
	const maxReason = 123 // a control frame's payload is 125 bytes, 2 of them the code
	if len(reason) > maxReason {
		cut := maxReason
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		reason = reason[:cut]
	}
	c.mu.Lock()
	_ = c.WriteClose(code, reason)
	c.mu.Unlock()
	_ = c.Close()
}
