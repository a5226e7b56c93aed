package store

import (
	"context"
	"fmt"
	"time"
)

// The database's clock is the cluster's clock. Every time one node writes
// and another reads — heartbeats and leases, deadlines, run_at, node
// liveness, schedule slots, retention and artifact expiry — is stamped and
// judged by Now, which on PostgreSQL is this node's wall clock plus its
// offset to the database server's clock, measured by SyncClock (at Open,
// and again at every refresh of the node registry). A node whose wall
// clock is minutes off then stamps and judges as every other node does.
// Durations a node measures alone (a handler's run, a backoff's sleep) stay
// on Go's monotonic clock: time.Now carries it, and adding the offset
// keeps it. SQLite is one node by design (one process holds the file):
// there is nobody to disagree with, and Now is the local clock.
//
// A Config.Clock (tests' fake clocks) is authoritative and not corrected;
// Config.WallClock is the wall clock that is (tests skew it).

// ClockSample is one measurement of this node's offset to the database's
// clock.
type ClockSample struct {
	// Offset is the database's clock minus this node's wall clock: add it
	// to the wall clock to read the database's.
	Offset time.Duration
	// RoundTrip is the query's round trip; the offset is exact to within
	// half of it.
	RoundTrip time.Duration
	// At is when it was measured (the database's time).
	At time.Time
}

// clockSamples is how many queries one SyncClock makes; the one of the
// shortest round trip is kept (the least disturbed by scheduling).
const clockSamples = 3

// SyncClock measures this node's offset to the database's clock (SELECT
// clock_timestamp(), the round trip halved) and uses it from now on. On
// SQLite, or with a Config.Clock, it measures nothing and returns a zero
// sample.
func (s *Store) SyncClock(ctx context.Context) (ClockSample, error) {
	if !s.d.postgres() || s.fixedClock {
		return ClockSample{At: s.Now()}, nil
	}
	var best ClockSample
	for i := range clockSamples {
		var db time.Time
		t0 := s.wall()
		if err := s.db.QueryRowContext(ctx, "SELECT clock_timestamp()").Scan(&db); err != nil {
			return ClockSample{}, fmt.Errorf("read the database's clock: %w", err)
		}
		t1 := s.wall()
		rtt := t1.Sub(t0)
		if i == 0 || rtt < best.RoundTrip {
			mid := t0.Add(rtt / 2)
			best = ClockSample{Offset: db.Sub(mid), RoundTrip: rtt, At: db.UTC()}
		}
	}
	s.offset.Store(int64(best.Offset))
	return best, nil
}

// ClockOffset is the offset SyncClock measured last (zero on SQLite).
func (s *Store) ClockOffset() time.Duration { return time.Duration(s.offset.Load()) }

// Now is the cluster's time (the database's clock, as this node reads it),
// in UTC, at the precision both databases keep.
func (s *Store) Now() time.Time {
	if s.fixedClock {
		return s.clock().UTC().Truncate(time.Microsecond)
	}
	return s.wall().Add(time.Duration(s.offset.Load())).UTC().Truncate(time.Microsecond)
}
