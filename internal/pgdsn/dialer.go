package pgdsn

import (
	"context"
	"net"
	"sync"
	"time"
)

// Dialer makes the connections of a pq.Listener (pq.NewDialListener) and
// can end them all (Abort). pq's Listener holds its lock while it connects,
// and neither its Listen nor its Close returns before a connection attempt
// does: to a server that accepts and never answers, that is never. Abort
// closes the connections under way, and every one made afterwards, so that
// the attempt fails and Close can return.
type Dialer struct {
	d       net.Dialer
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	aborted bool
}

// Dial implements pq.Dialer.
func (d *Dialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialTimeout implements pq.Dialer.
func (d *Dialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

// DialContext implements pq.DialerContext.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if d.isAborted() {
		return nil, net.ErrClosed
	}
	c, err := d.d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.aborted {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	if d.conns == nil {
		d.conns = map[net.Conn]struct{}{}
	}
	tc := &trackedConn{Conn: c, d: d}
	d.conns[tc] = struct{}{}
	return tc, nil
}

func (d *Dialer) isAborted() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.aborted
}

// Abort closes every connection made and refuses new ones.
func (d *Dialer) Abort() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.aborted = true
	for c := range d.conns {
		_ = c.(*trackedConn).Conn.Close()
	}
	d.conns = nil
}

type trackedConn struct {
	net.Conn
	d    *Dialer
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.d.mu.Lock()
		delete(c.d.conns, c)
		c.d.mu.Unlock()
	})
	return c.Conn.Close()
}
