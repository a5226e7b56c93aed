// Package wsgorilla runs gqlgen's websocket transport (graphql-transport-ws
// and the legacy graphql-ws) on gorilla/websocket.
package wsgorilla

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
)

// Implementation accepts websocket connections with Upgrader. Set
// Upgrader.CheckOrigin: gorilla's default refuses cross-origin requests.
type Implementation struct {
	Upgrader websocket.Upgrader
}

var _ transport.WebsocketImplementation = Implementation{}

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
	return &conn{c: c}, nil
}

type conn struct {
	c  *websocket.Conn
	mu sync.Mutex // gorilla allows one concurrent writer
}

var (
	_ transport.WebsocketConn          = (*conn)(nil)
	_ transport.WebsocketReadLimiter   = (*conn)(nil)
	_ transport.WebsocketReadDeadliner = (*conn)(nil)
)

// writeWait bounds a write to a peer that stopped reading.
const writeWait = 10 * time.Second

func (c *conn) Close() error { return c.c.Close() }

func (c *conn) NextReader() (int, io.Reader, error) {
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
	return mt, r, nil
}

func (c *conn) WriteJSON(v any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.c.SetWriteDeadline(time.Now().Add(writeWait))
	return c.c.WriteJSON(v)
}

func (c *conn) WriteClose(code int, message string) error {
	return c.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, message), time.Now().Add(time.Second))
}

func (c *conn) Subprotocol() string { return c.c.Subprotocol() }

func (c *conn) SetReadLimit(limit int64) { c.c.SetReadLimit(limit) }

func (c *conn) SetReadDeadline(t time.Time) error { return c.c.SetReadDeadline(t) }
