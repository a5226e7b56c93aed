package pgdsn

import (
	"context"
	"database/sql/driver"
	"fmt"

	"github.com/lib/pq"
)

// Connector is a database/sql connector for a PostgreSQL DSN of either
// form whose connection attempts end with their context. lib/pq honours
// the context while it dials but not while it waits for the server's
// answer to its startup: a server that accepts and never answers would
// hold Open (and the process's start, and a SIGTERM sent meanwhile) for
// ever. Each attempt's connections are closed when its context ends
// before the attempt does.
type Connector struct {
	dsn string
}

// NewConnector checks dsn and returns its connector (sql.OpenDB(c)).
func NewConnector(dsn string) (*Connector, error) {
	if _, err := pq.NewConnector(dsn); err != nil {
		return nil, err
	}
	return &Connector{dsn: dsn}, nil
}

// Connect implements driver.Connector.
func (c *Connector) Connect(ctx context.Context) (driver.Conn, error) {
	pc, err := pq.NewConnector(c.dsn)
	if err != nil {
		return nil, err
	}
	d := &Dialer{}
	pc.Dialer(d)
	stop := context.AfterFunc(ctx, d.Abort)
	conn, err := pc.Connect(ctx)
	if !stop() { // the context ended first: its connections were closed
		if err == nil {
			_ = conn.Close()
		}
		return nil, fmt.Errorf("connect to %s: %w", Where(c.dsn), context.Cause(ctx))
	}
	return conn, err
}

// Driver implements driver.Connector.
func (c *Connector) Driver() driver.Driver { return &pq.Driver{} }
