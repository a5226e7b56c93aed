// Package outage tells a database or disk outage from every other error, and
// keeps count of one while it lasts. An outage — the database unreachable,
// the disk full, the database busy or locked — is nobody's fault in the
// request that met it and is over when the database is back: clients get
// UNAVAILABLE with a retry hint (HTTP 503), executions a RESOURCE or
// RETRYABLE error kind, and the log one line when it starts and one when it
// ends, with a count, instead of a line per failed request.
package outage

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/lib/pq"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Kind is what sort of outage an error is.
type Kind uint8

// Kinds of outage.
const (
	// None is an error that is not an outage.
	None Kind = iota
	// Unreachable: the database cannot be reached or is restarting.
	Unreachable
	// DiskFull: the database's or this node's disk is full.
	DiskFull
	// Busy: the database is locked or busy, or gave up on lock contention
	// (after the store's own retries).
	Busy
	// BlobStore: the blob store (a directory or S3) failed: unreachable,
	// an error status, credentials refused. The database may be fine.
	BlobStore
	// BlobStoreFull: the blob store's disk (or quota) is full.
	BlobStoreFull
)

// Component is an error that knows which part of the system failed: the
// blob store's errors say so, and are never taken for the database's.
// Classify asks it first.
type Component interface {
	error
	OutageKind() Kind
}

func (k Kind) String() string {
	switch k {
	case Unreachable:
		return "database unreachable"
	case DiskFull:
		return "disk full"
	case Busy:
		return "database busy"
	case BlobStore:
		return "blob store unavailable"
	case BlobStoreFull:
		return "blob store full"
	}
	return "none"
}

// RetryAfter is how long a client should wait before trying again.
func (k Kind) RetryAfter() time.Duration {
	switch k {
	case Unreachable:
		return 5 * time.Second
	case DiskFull:
		return 60 * time.Second
	case Busy:
		return time.Second
	case BlobStore:
		return 10 * time.Second
	case BlobStoreFull:
		return 60 * time.Second
	}
	return 0
}

// Message is what a client is told.
func (k Kind) Message() string {
	switch k {
	case Unreachable:
		return "the database is unavailable; retry shortly"
	case DiskFull:
		return "the server's disk is full; retry later"
	case Busy:
		return "the database is busy; retry shortly"
	case BlobStore:
		return "the blob store (where files are kept) is unavailable; retry shortly"
	case BlobStoreFull:
		return "the blob store (where files are kept) is full; retry later"
	}
	return ""
}

// Classify returns the kind of outage err is, or None.
func Classify(err error) Kind {
	if err == nil {
		return None
	}
	var c Component
	if errors.As(err, &c) {
		return c.OutageKind()
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return pqKind(string(pqErr.Code))
	}
	var sqErr *sqlite.Error
	if errors.As(err, &sqErr) {
		switch sqErr.Code() & 0xff {
		case sqlite3.SQLITE_FULL:
			return DiskFull
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return Busy
		case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN:
			if errors.Is(err, syscall.ENOSPC) || strings.Contains(sqErr.Error(), "disk is full") {
				return DiskFull
			}
			return Unreachable
		}
		return None
	}
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return DiskFull
	case errors.Is(err, driver.ErrBadConn),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.ErrUnexpectedEOF):
		return Unreachable
	}
	var netErr *net.OpError
	if errors.As(err, &netErr) {
		return Unreachable
	}
	// Drivers and ent do not always wrap what they report; these are
	// their words for the same conditions.
	msg := err.Error()
	switch {
	case strings.Contains(msg, "database or disk is full"), strings.Contains(msg, "SQLITE_FULL"),
		strings.Contains(msg, "no space left on device"):
		return DiskFull
	case strings.Contains(msg, "SQLITE_BUSY"), strings.Contains(msg, "database is locked"),
		strings.Contains(msg, "database table is locked"):
		return Busy
	case strings.Contains(msg, "driver: bad connection"),
		strings.Contains(msg, "connection refused"), strings.Contains(msg, "connection reset by peer"),
		strings.Contains(msg, "the database system is"), strings.Contains(msg, "terminating connection"),
		strings.Contains(msg, "server closed the connection"), strings.Contains(msg, "broken pipe"):
		return Unreachable
	}
	return None
}

// pqKind maps PostgreSQL's SQLSTATE codes.
func pqKind(code string) Kind {
	switch {
	case strings.HasPrefix(code, "08"), // connection exception
		code == "57P01", code == "57P02", code == "57P03", // admin/crash shutdown, cannot connect now
		code == "53300": // too many connections
		return Unreachable
	case code == "53100": // disk full
		return DiskFull
	case code == "40001", code == "40P01", code == "55P03", code == "53200": // serialization, deadlock, lock not available, out of memory
		return Busy
	}
	return None
}

// Error is an outage met by a request: what the client is told, typed.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Kind.Message() + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// As returns err as an *Error when it is an outage (already wrapped or
// classified now), and nil otherwise. A cancelled context is not an
// outage: the client went away.
func As(err error) *Error {
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if k := Classify(err); k != None {
		return &Error{Kind: k, Err: err}
	}
	return nil
}
