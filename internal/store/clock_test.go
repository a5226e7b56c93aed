package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// A node whose wall clock is off by minutes still tells the cluster's
// time: on PostgreSQL, Now is the database's clock, to within half the
// round trip of the query that measured the offset; on SQLite (one node)
// it is the local clock.
func TestNowIsTheDatabasesClock(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		for _, skew := range []time.Duration{2 * time.Minute, -2 * time.Minute} {
			wall := func() time.Time { return time.Now().Add(skew) }
			s, err := store.Open(sysCtx, store.Config{DSN: d.DSN(t), WallClock: wall})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			sample, err := s.SyncClock(sysCtx)
			require.NoError(t, err)
			if !s.Postgres() {
				require.Zero(t, s.ClockOffset(), "SQLite is one node: its clock is the local one")
				lo := wall().UTC().Truncate(time.Microsecond)
				now := s.Now()
				require.WithinRange(t, now, lo, wall())
				continue
			}
			require.Equal(t, sample.Offset, s.ClockOffset())
			var before, after time.Time
			require.NoError(t, s.DB().QueryRow(`SELECT clock_timestamp()`).Scan(&before))
			now := s.Now()
			require.NoError(t, s.DB().QueryRow(`SELECT clock_timestamp()`).Scan(&after))
			slack := sample.RoundTrip/2 + time.Microsecond
			require.WithinRange(t, now, before.Add(-slack), after.Add(slack), "skew %s, offset %s, round trip %s", skew, sample.Offset, sample.RoundTrip)
		}
	})
}

// A test's clock (Config.Clock) is authoritative: no offset is applied.
func TestAGivenClockIsNotCorrected(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		at := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
		s, err := store.Open(sysCtx, store.Config{DSN: d.DSN(t), Clock: func() time.Time { return at }})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		_, err = s.SyncClock(sysCtx)
		require.NoError(t, err)
		require.Equal(t, at, s.Now())
	})
}
