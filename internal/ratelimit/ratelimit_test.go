package ratelimit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/fakeclock"
	"github.com/taskgraph/taskgraph/internal/ratelimit"
)

func TestLimiter(t *testing.T) {
	t.Parallel()
	t.Run("ABurstThenTheRate", func(t *testing.T) {
		t.Parallel()
		clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		l, err := ratelimit.New(ratelimit.Config{PerSecond: 2, Burst: 3, Now: clock.Now})
		require.NoError(t, err)
		for range 3 {
			require.NoError(t, l.Allow("alice", 1))
		}
		err = l.Allow("alice", 1)
		var rl *ratelimit.Error
		require.ErrorAs(t, err, &rl)
		require.Equal(t, 500*time.Millisecond, rl.RetryAfter)
		require.Equal(t, 1, rl.RetryAfterSeconds())
		require.NoError(t, l.Allow("bob", 3), "each user has a bucket")
		clock.Advance(500 * time.Millisecond)
		require.NoError(t, l.Allow("alice", 1))
	})
	t.Run("ARefusedRequestTakesNothing", func(t *testing.T) {
		t.Parallel()
		clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		l, err := ratelimit.New(ratelimit.Config{PerSecond: 1, Burst: 2, Now: clock.Now})
		require.NoError(t, err)
		require.NoError(t, l.Allow("a", 2))
		for range 5 {
			require.Error(t, l.Allow("a", 1))
		}
		clock.Advance(time.Second)
		require.NoError(t, l.Allow("a", 1), "the refusals did not dig a deeper hole")
	})
	t.Run("ABulkCostsOneTokenPerID", func(t *testing.T) {
		t.Parallel()
		clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		l, err := ratelimit.New(ratelimit.Config{PerSecond: 10, Burst: 100, Now: clock.Now})
		require.NoError(t, err)
		require.NoError(t, l.Allow("a", 1000), "a full bucket admits a bulk larger than the burst")
		var rl *ratelimit.Error
		require.ErrorAs(t, l.Allow("a", 1), &rl)
		require.Equal(t, 90*time.Second+100*time.Millisecond, rl.RetryAfter, "900 ids owed, then one more token, at 10 a second")
		clock.Advance(90 * time.Second)
		require.Error(t, l.Allow("a", 1), "the debt is paid, the bucket is still empty")
		clock.Advance(100 * time.Millisecond)
		require.NoError(t, l.Allow("a", 1))
		require.NoError(t, l.Allow("b", 100), "each user owes for himself")
	})
	t.Run("ABulkLargerThanTheBurstNeedsAFullBucket", func(t *testing.T) {
		t.Parallel()
		clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		l, err := ratelimit.New(ratelimit.Config{PerSecond: 10, Burst: 100, Now: clock.Now})
		require.NoError(t, err)
		require.NoError(t, l.Allow("a", 1))
		require.Error(t, l.Allow("a", 500))
		clock.Advance(100 * time.Millisecond)
		require.NoError(t, l.Allow("a", 500), "the refusal took nothing")
	})
	t.Run("ForgottenUsersStartAfresh", func(t *testing.T) {
		t.Parallel()
		clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		l, err := ratelimit.New(ratelimit.Config{PerSecond: 1, Burst: 1, MaxUsers: 2, Now: clock.Now})
		require.NoError(t, err)
		require.NoError(t, l.Allow("a", 1))
		require.NoError(t, l.Allow("b", 1))
		require.NoError(t, l.Allow("c", 1)) // a is forgotten
		require.NoError(t, l.Allow("a", 1))
		require.Error(t, l.Allow("c", 1))
	})
	t.Run("ZeroMeansNoLimit", func(t *testing.T) {
		t.Parallel()
		l, err := ratelimit.New(ratelimit.Config{})
		require.NoError(t, err)
		require.Nil(t, l)
		require.NoError(t, l.Allow("a", 1_000_000))
		_, err = ratelimit.New(ratelimit.Config{PerSecond: -1})
		require.Error(t, err)
	})
}
