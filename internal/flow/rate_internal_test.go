package flow

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

// sim is a rate-limited type's flow_starts as the gate keeps them.
type sim struct {
	limit  int
	period time.Duration
	rows   []startRow
}

// claim takes up to n starts at now as a claim does (Admit, then Claimed
// from the same rows), and returns their stamps and when the next may
// start.
func (s *sim) claim(now time.Time, n int) (stamps []time.Time, next time.Time) {
	var kept []startRow
	for _, r := range s.rows {
		if r.claimed.After(horizon(now, s.period)) {
			kept = append(kept, r)
		}
	}
	s.rows = kept
	w := newRateWindow(s.limit, s.period, now, s.rows)
	stamps = w.take(n)
	for _, st := range stamps {
		s.rows = append(s.rows, startRow{claimed: now, stamp: st, count: 1})
	}
	next = w.next()
	return stamps, next
}

// mostIn returns the most times in any window [t, t+period).
func mostIn(times []time.Time, period time.Duration) int {
	ts := append([]time.Time(nil), times...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	most := 0
	for i := range ts {
		j := i
		for j < len(ts) && ts[j].Sub(ts[i]) < period {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

func countBefore(times []time.Time, end time.Time) int {
	n := 0
	for _, t := range times {
		if t.Before(end) {
			n++
		}
	}
	return n
}

// TestRateSaturatedHasNoDrift: a saturated type whose claims each come
// late by up to one emission interval (P/N) starts N per P, for as long as
// it runs: the stamps hold "at most N in any window of P" exactly, the
// actual starts at most N+1, and 100 periods start 100 N, give or take
// one. Claims late by their reaction time without the backdated stamps
// would lose that time at every period (the test fails by a tenth).
func TestRateSaturatedHasNoDrift(t *testing.T) {
	for _, tc := range []struct {
		name  string
		batch func(r *rand.Rand) int // how many a claim asks for
	}{
		{"OneAtATime", func(*rand.Rand) int { return 1 }},
		{"Batches", func(r *rand.Rand) int { return 1 + r.IntN(8) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n, period = 5, time.Second
			s := &sim{limit: n, period: period}
			r := rand.New(rand.NewPCG(1, 2))
			var stamps, starts []time.Time
			now := t0
			for now.Before(t0.Add(120 * period)) {
				got, next := s.claim(now, tc.batch(r))
				for _, st := range got {
					require.False(t, st.After(now), "a stamp in the future")
					require.False(t, st.Before(now.Add(-period/n)), "a stamp more than P/N before its claim")
					stamps = append(stamps, st)
					starts = append(starts, now)
				}
				if len(got) > 0 {
					// Asked again at once for what is left of the batch.
					next = now
				}
				// The claim comes up to P/N late (a timer, a transaction).
				if next.After(now) {
					now = next
				}
				now = now.Add(time.Duration(r.Int64N(int64(period / n))))
			}
			require.Equal(t, n, mostIn(stamps, period), "stamps: at most N in any window of P")
			require.LessOrEqual(t, mostIn(starts, period), n+1, "starts: at most N+1 in any window of P")
			got := countBefore(starts, t0.Add(100*period))
			require.InDelta(t, 100*n, got, 1, "N per P over 100 periods")
		})
	}
}

func TestRateStamps(t *testing.T) {
	const period = time.Second // five a second: P/N is 200 ms
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	t.Run("AnIdleTypeIsStampedWithTheClaim", func(t *testing.T) {
		s := &sim{limit: 5, period: period}
		got, next := s.claim(t0, 5)
		require.Equal(t, []time.Time{t0, t0, t0, t0, t0}, got)
		require.Equal(t, t0.Add(period), next, "the window frees when the first leave it")
	})
	t.Run("ALateClaimIsStampedWhenItsSlotFreed", func(t *testing.T) {
		s := &sim{limit: 5, period: period}
		s.claim(t0, 5)
		late := t0.Add(period + ms(150))
		got, _ := s.claim(late, 1)
		require.Equal(t, []time.Time{t0.Add(period)}, got)
	})
	t.Run("OnlyTheFirstStartOfAClaimIsBackdated", func(t *testing.T) {
		s := &sim{limit: 5, period: period}
		s.claim(t0, 5)
		late := t0.Add(period + ms(150))
		got, _ := s.claim(late, 5)
		require.Equal(t, []time.Time{t0.Add(period), late, late, late, late}, got,
			"the others no earlier than the first one's claim")
		// The late group splits: one slot frees at 2 s, four at 2.15 s.
		got, next := s.claim(t0.Add(2*period+ms(10)), 5)
		require.Equal(t, []time.Time{t0.Add(2 * period)}, got)
		require.Equal(t, late.Add(period), next)
	})
	t.Run("AtMostOneEmissionIntervalBack", func(t *testing.T) {
		s := &sim{limit: 5, period: period}
		s.claim(t0, 5)
		now := t0.Add(period + ms(500))
		got, _ := s.claim(now, 1)
		require.Equal(t, []time.Time{now.Add(-ms(200))}, got)
		again, _ := s.claim(now, 1)
		require.Equal(t, []time.Time{now}, again, "never before the previous start")
	})
	t.Run("ASlotFreedAPeriodAgoMakesUpNothing", func(t *testing.T) {
		s := &sim{limit: 5, period: period}
		s.claim(t0, 5)
		now := t0.Add(2*period + ms(1))
		got, _ := s.claim(now, 2)
		require.Equal(t, []time.Time{now, now}, got, "the type was not held back by its rate")
	})
	t.Run("NoStampBeforeItsSlot", func(t *testing.T) {
		s := &sim{limit: 5, period: period}
		s.claim(t0, 3)
		s.claim(t0.Add(ms(600)), 2)
		now := t0.Add(period + ms(100))
		got, next := s.claim(now, 5)
		require.Equal(t, []time.Time{t0.Add(period), now, now}, got, "three slots freed at 1 s, the others free at 1.6 s")
		require.Equal(t, t0.Add(period+ms(600)), next)
	})
	t.Run("ClaimsOutOfOrderWaitForTheLatest", func(t *testing.T) {
		// Another node's claim, begun later, committed first.
		s := &sim{limit: 5, period: period}
		s.claim(t0.Add(ms(10)), 1)
		got, next := s.claim(t0, 1)
		require.Empty(t, got, "no start before the latest claim")
		require.Equal(t, t0.Add(ms(10)), next)
	})
	t.Run("ALoweredLimitWaitsForTheWindow", func(t *testing.T) {
		s := &sim{limit: 5, period: period}
		s.claim(t0, 5)
		s.limit = 2
		got, next := s.claim(t0.Add(ms(500)), 1)
		require.Empty(t, got)
		require.Equal(t, t0.Add(period), next)
	})
}
