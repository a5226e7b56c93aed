// Package leader elects one node among those sharing a PostgreSQL database
// to run a singleton (the watchdog, the retention janitor, the scheduler) with a
// session-level advisory lock. The lock lives as long as the session holding
// it: when the leader's process dies, PostgreSQL closes its connection and
// releases the lock, and another node takes it at its next attempt.
package leader

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync"
	"time"
)

// Lock is one elected role.
type Lock struct {
	db   *sql.DB
	role string

	mu   sync.Mutex
	key  int64
	conn *sql.Conn // held while leading
}

// New returns the lock electing role among the nodes that share db's
// database and schema. (Advisory locks are database-wide; the key is
// derived from the schema too, so that two deployments in one database do
// not elect one leader between them.)
func New(db *sql.DB, role string) *Lock { return &Lock{db: db, role: role} }

// WatchdogRole is the role of the watchdog (and the retention janitor).
const WatchdogRole = "watchdog"

// SchedulerRole is the role of the scheduler, which fires schedules.
const SchedulerRole = "scheduler"

const keyQuery = `SELECT ('x' || substr(md5(current_database() || '/' || current_schema() || '/' || $1), 1, 16))::bit(64)::bigint`

// Lead reports whether this node leads, taking the lock if it is free. It is
// cheap to call before every pass of the singleton's loop: while leading it
// only checks that its session is alive.
func (l *Lock) Lead(ctx context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := ctx.Err(); err != nil {
		// The caller gave up (a service stopping): nothing changes.
		return l.conn != nil, err
	}
	if l.conn != nil {
		if err := l.conn.PingContext(ctx); err == nil {
			return true, nil
		}
		// The session is gone, and the lock with it (or it is broken: end
		// it, so that the lock goes too).
		discard(l.conn)
		l.conn = nil
	}
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return false, fmt.Errorf("leader: %w", err)
	}
	if l.key == 0 {
		if err := conn.QueryRowContext(ctx, keyQuery, l.role).Scan(&l.key); err != nil {
			_ = conn.Close()
			return false, fmt.Errorf("leader: %w", err)
		}
	}
	// Not cancelled half-way by the caller: a lock taken by a statement
	// whose answer was lost would stay with a pooled session, held for
	// nobody.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statementTimeout)
	defer cancel()
	var got bool
	if err := conn.QueryRowContext(lctx, "SELECT pg_try_advisory_lock($1)", l.key).Scan(&got); err != nil {
		discard(conn)
		return false, fmt.Errorf("leader: %w", err)
	}
	if !got {
		_ = conn.Close()
		return false, nil
	}
	l.conn = conn
	return true, nil
}

// Leading reports whether this node held the lock at its last check.
func (l *Lock) Leading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn != nil
}

// Release gives the lock up (at shutdown, so another node takes over at
// once instead of when this process's connection closes).
func (l *Lock) Release(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statementTimeout)
	defer cancel()
	if _, err := l.conn.ExecContext(uctx, "SELECT pg_advisory_unlock($1)", l.key); err != nil {
		// Ending the session releases the lock as well.
		discard(l.conn)
	} else {
		_ = l.conn.Close()
	}
	l.conn = nil
}

// statementTimeout bounds the statements that take and give up the lock.
const statementTimeout = 10 * time.Second

// discard ends conn's session rather than returning it to the pool: a
// session that holds the lock, or may, must neither serve other queries
// nor keep the lock for nobody.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// Held reports whether any node holds the role's lock now (this one
// included): whether the singleton has a leader at all. It reads
// pg_locks, where a 64-bit advisory key shows as classid (its high 32
// bits) and objid (its low 32 bits) with objsubid 1.
func (l *Lock) Held(ctx context.Context) (bool, error) {
	l.mu.Lock()
	key := l.key
	l.mu.Unlock()
	if key == 0 {
		if err := l.db.QueryRowContext(ctx, keyQuery, l.role).Scan(&key); err != nil {
			return false, fmt.Errorf("leader: %w", err)
		}
	}
	var held bool
	err := l.db.QueryRowContext(ctx, `
SELECT EXISTS (SELECT 1 FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND classid::bigint = (($1::bigint >> 32) & 4294967295) AND objid::bigint = ($1::bigint & 4294967295))`, key).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("leader: %w", err)
	}
	return held, nil
}

// AlertsRole is the role of the alert evaluator. It is elected apart from
// the watchdog so that a node can notice that no watchdog leads.
const AlertsRole = "alerts"
