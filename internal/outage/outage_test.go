package outage

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	t.Run("NamesTheErrorsOfRealOutages", func(t *testing.T) {
		t.Parallel()
		// A database nobody listens on.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		db, err := sql.Open("postgres", "postgres://x@"+addr+"/x?sslmode=disable&connect_timeout=2")
		require.NoError(t, err)
		defer db.Close()
		refused := db.PingContext(context.Background())
		require.Error(t, refused)

		// A SQLite file that may not grow, and one locked by a writer.
		full := sqliteFull(t)
		busy := sqliteBusy(t)

		_, diskErr := os.Create(filepath.Join(t.TempDir(), string(make([]byte, 10)))) // not a disk error
		for _, tc := range []struct {
			name string
			err  error
			want Kind
		}{
			{"ConnectionRefused", refused, Unreachable},
			{"WrappedConnectionRefused", fmt.Errorf("claim: %w", refused), Unreachable},
			{"AdminShutdown", &pq.Error{Code: "57P01", Message: "terminating connection due to administrator command"}, Unreachable},
			{"StartingUp", &pq.Error{Code: "57P03", Message: "the database system is starting up"}, Unreachable},
			{"ConnectionException", &pq.Error{Code: "08006"}, Unreachable},
			{"PostgresDiskFull", &pq.Error{Code: "53100", Message: "could not extend file"}, DiskFull},
			{"Deadlock", &pq.Error{Code: "40P01"}, Busy},
			{"SQLiteFull", full, DiskFull},
			{"SQLiteBusy", busy, Busy},
			{"NoSpaceLeftOnDevice", &os.PathError{Op: "write", Path: "/data/x", Err: syscall.ENOSPC}, DiskFull},
			{"UniqueViolation", &pq.Error{Code: "23505"}, None},
			{"NotAnOutage", errors.New("task 7 cannot move from SUCCESS to CANCELLED"), None},
			{"ABadFileName", diskErr, None},
			{"Nil", nil, None},
		} {
			require.Equal(t, tc.want, Classify(tc.err), "%s: %v", tc.name, tc.err)
		}
	})
	t.Run("ACancelledRequestIsNotAnOutage", func(t *testing.T) {
		t.Parallel()
		require.Nil(t, As(fmt.Errorf("query: %w", context.Canceled)))
		e := As(fmt.Errorf("write: %w", &pq.Error{Code: "53100"}))
		require.NotNil(t, e)
		require.Equal(t, DiskFull, e.Kind)
		require.Same(t, e, As(fmt.Errorf("again: %w", e)), "an *Error is kept as it is")
		require.Equal(t, 60*time.Second, e.Kind.RetryAfter())
	})
}

// sqliteFull returns the error SQLite gives when its file may not grow: a
// database limited to a few pages (max_page_count) fails exactly as on a
// full disk (SQLITE_FULL, "database or disk is full").
func sqliteFull(t *testing.T) error {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "full.db"))
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	_, err = db.Exec(`CREATE TABLE t (v TEXT); PRAGMA max_page_count = 3`)
	require.NoError(t, err)
	for range 100 {
		if _, err = db.Exec(`INSERT INTO t VALUES (?)`, strings.Repeat("x", 4000)); err != nil {
			return err
		}
	}
	t.Fatal("the database never filled up")
	return nil
}

// sqliteBusy returns the error of a writer that found the file locked.
func sqliteBusy(t *testing.T) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "busy.db")
	a, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	require.NoError(t, err)
	defer a.Close()
	b, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	require.NoError(t, err)
	defer b.Close()
	_, err = a.Exec(`CREATE TABLE t (v INTEGER)`)
	require.NoError(t, err)
	tx, err := a.Begin()
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck // test cleanup
	_, err = tx.Exec(`INSERT INTO t VALUES (1)`)
	require.NoError(t, err)
	_, err = b.Exec(`INSERT INTO t VALUES (2)`)
	require.Error(t, err)
	return err
}

// fakeClock is a clock tests move.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// syncBuffer is a log destination safe for the monitor's timer goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestMonitor(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*Monitor, *fakeClock, *syncBuffer) {
		clock := &fakeClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
		var logs syncBuffer
		m := NewMonitor(MonitorConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: clock.Now, QuietEnd: time.Hour})
		return m, clock, &logs
	}
	down := &pq.Error{Code: "57P01", Message: "terminating connection due to administrator command"}

	t.Run("LogsAnOutageOnceWithACount", func(t *testing.T) {
		t.Parallel()
		m, clock, logs := setup(t)
		for range 5000 {
			require.NotNil(t, m.Failed("request", down))
			clock.Add(time.Millisecond)
		}
		require.Nil(t, m.Failed("request", errors.New("validation")), "not an outage: not counted")
		require.Equal(t, 1, strings.Count(logs.String(), "\n"), "one line for 5,000 failures: %s", logs)
		st := m.Stats()
		require.True(t, st.Active)
		require.Equal(t, map[string]int{"request": 5000}, st.Failures)

		m.Wrote(nil) // a write went through, but failures are too recent
		require.True(t, m.Stats().Active)
		clock.Add(SettleDefault)
		m.Wrote(nil) // the database is back
		require.False(t, m.Stats().Active)
		require.Equal(t, 2, strings.Count(logs.String(), "\n"))
		require.Contains(t, logs.String(), `outage over`)
		require.Contains(t, logs.String(), `ended_by="writes succeed again"`)
		require.Contains(t, logs.String(), `failures="request=5000"`)
	})
	t.Run("SummarisesALongOutageEveryMinute", func(t *testing.T) {
		t.Parallel()
		m, clock, logs := setup(t)
		for range 600 {
			m.Failed("request", down)
			clock.Add(time.Second)
		}
		require.Equal(t, 10, strings.Count(logs.String(), "\n"), "a start and a line a minute for ten minutes: %s", logs)
	})
	t.Run("RepeatedWriteFailuresMakeTheNodeUnready", func(t *testing.T) {
		t.Parallel()
		m, clock, _ := setup(t)
		require.NoError(t, m.Ready())
		m.Wrote(down)
		m.Wrote(down)
		require.NoError(t, m.Ready(), "two failures may be a blip")
		m.Wrote(down)
		require.ErrorContains(t, m.Ready(), "the last 3 writes failed")
		m.Wrote(&pq.Error{Code: "23505"}) // a constraint: says nothing either way
		require.Error(t, m.Ready())
		clock.Add(SettleDefault)
		m.Wrote(nil)
		require.NoError(t, m.Ready())
		m.Wrote(down)
		m.Wrote(down)
		m.Wrote(down)
		clock.Add(UnreadyForDefault + time.Second)
		require.NoError(t, m.Ready(), "nothing wrote since: ready again, to be tried")
	})
	t.Run("AFullDiskMakesTheNodeUnreadyAtOnce", func(t *testing.T) {
		t.Parallel()
		m, clock, _ := setup(t)
		m.Wrote(&pq.Error{Code: "53100"})
		require.ErrorContains(t, m.Ready(), "disk full")
		clock.Add(SettleDefault)
		m.Wrote(nil)
		require.NoError(t, m.Ready())
	})
	t.Run("ADiskThatLetsSmallWritesThroughIsStillFull", func(t *testing.T) {
		t.Parallel()
		m, clock, logs := setup(t)
		for range 100 {
			m.Wrote(&pq.Error{Code: "53100"})
			clock.Add(100 * time.Millisecond)
			m.Wrote(nil)
			require.ErrorContains(t, m.Ready(), "disk full")
			clock.Add(100 * time.Millisecond)
		}
		require.Equal(t, 1, strings.Count(logs.String(), "\n"), "one outage: %s", logs)
		clock.Add(SettleDefault)
		m.Wrote(nil)
		require.NoError(t, m.Ready())
		require.False(t, m.Stats().Active)
	})
	t.Run("AnOutageEndsAfterAQuietPeriod", func(t *testing.T) {
		t.Parallel()
		var logs syncBuffer
		m := NewMonitor(MonitorConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil)), QuietEnd: 10 * time.Millisecond})
		m.Failed("request", down)
		deadline := time.Now().Add(5 * time.Second)
		for m.Stats().Active {
			require.True(t, time.Now().Before(deadline), "the outage never ended")
			time.Sleep(5 * time.Millisecond)
		}
		require.Contains(t, logs.String(), "ended_by=\"no failure for 10ms\"")
	})
	t.Run("ANilMonitorStillClassifies", func(t *testing.T) {
		t.Parallel()
		var m *Monitor
		require.NotNil(t, m.Failed("request", down))
		m.Wrote(down)
		require.NoError(t, m.Ready())
	})
}

// blobFailure is an error of the blob store (as artifact.StoreError is).
type blobFailure struct{ err error }

func (e *blobFailure) Error() string    { return "blob store: " + e.err.Error() }
func (e *blobFailure) Unwrap() error    { return e.err }
func (e *blobFailure) OutageKind() Kind { return BlobStore }

// An error that names its component is that component's outage, even when
// it wraps a network error that alone would read as the database's.
func TestAComponentsErrorIsNotTheDatabases(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	require.Equal(t, Unreachable, Classify(refused))
	err := fmt.Errorf("upload: %w", &blobFailure{err: refused})
	require.Equal(t, BlobStore, Classify(err))
	e := As(err)
	require.NotNil(t, e)
	require.Contains(t, e.Kind.Message(), "blob store")
	require.NotContains(t, e.Kind.Message(), "database")
	require.Equal(t, "blob store unavailable", e.Kind.String())
	require.NotContains(t, BlobStoreFull.Message(), "database")
}
