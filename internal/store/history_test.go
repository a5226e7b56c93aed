package store_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/fakeclock"
	"github.com/taskgraph/taskgraph/internal/history"
)

// TestHistoryOfTenThousandTasksOverThreeDays writes the history of 10,000
// tasks of 3 types over 3 days of a fake clock as the flush path would (one
// upsert per (minute, type, tenant) of each batch of 200), rolls minutes
// into hours and hours into days in the database, and reads back exact
// counts per range and percentiles within their bucket's error (a factor
// of two: p/2 <= exact < p).
func TestHistoryOfTenThousandTasksOverThreeDays(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, _ := setup(t, dsn)
		start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
		clock := fakeclock.New(start)
		rng := rand.New(rand.NewPCG(3, 4))
		types := []string{"email", "import", "report"}
		var runs []time.Duration
		var succeeded int64
		batch := history.Batch{}
		for i := range 10000 {
			typ := types[i%3]
			wait := time.Duration(math.Exp(rng.Float64()*math.Log(60000))*float64(time.Millisecond)) + time.Millisecond
			run := time.Duration(math.Exp(rng.Float64()*math.Log(600000))*float64(time.Millisecond)) + time.Millisecond
			outcome := []string{"SUCCESS", "FAILED", "CANCELLED"}[rng.IntN(3)]
			batch.Created(typ, "acme", clock.Now())
			// Every execution ends within the three days' last minute
			// or sooner, in the bucket of its creation for simplicity.
			batch.Ended(history.Execution{Type: typ, Tenant: "acme", Ended: clock.Now(), Wait: wait, Run: run, Outcome: outcome, Retried: outcome == "FAILED"})
			runs = append(runs, run)
			if outcome == "SUCCESS" {
				succeeded++
			}
			clock.Advance(3 * 24 * time.Hour / 10000)
			if (i+1)%200 == 0 {
				require.NoError(t, s.AddHistory(sysCtx, batch))
				batch = history.Batch{}
			}
		}
		now := start.Add(72 * time.Hour)
		require.NoError(t, s.RollUpHistory(sysCtx, history.Hour, start, now))
		require.NoError(t, s.RollUpHistory(sysCtx, history.Day, start, now))
		// A second roll-up replaces, never adds.
		require.NoError(t, s.RollUpHistory(sysCtx, history.Day, start, now))

		all := history.Filter{Tenant: "*"}
		var totals []history.Counts
		for _, r := range []history.Resolution{history.Minute, history.Hour, history.Day} {
			rows, err := s.ReadHistory(sysCtx, r, start, now)
			require.NoError(t, err)
			tot := history.Total(history.Series(rows, r, start, now, all))
			require.Equal(t, int64(10000), tot.Created, r)
			require.Equal(t, int64(10000), tot.Started, r)
			require.Equal(t, succeeded, tot.Succeeded, r)
			require.Equal(t, int64(10000), tot.Succeeded+tot.Failed+tot.Cancelled, r)
			require.Equal(t, tot.Failed, tot.Retries, r)
			totals = append(totals, tot)
		}
		require.Equal(t, totals[0], totals[1])
		require.Equal(t, totals[0], totals[2])
		slices.Sort(runs)
		for _, q := range []float64{0.5, 0.95, 0.99} {
			p, ok := totals[2].Run.Quantile(q)
			require.True(t, ok)
			exact := runs[int(math.Ceil(q*float64(len(runs))))-1].Milliseconds()
			require.True(t, p.Milliseconds()/2 <= exact && exact < p.Milliseconds(), "p%.0f %v, exact %d ms", q*100, p, exact)
		}
		// One type's second day, in hours: a third of that day's tasks.
		hours, err := s.ReadHistory(sysCtx, history.Hour, start.Add(24*time.Hour), start.Add(48*time.Hour))
		require.NoError(t, err)
		day2 := history.Total(history.Series(hours, history.Hour, start.Add(24*time.Hour), start.Add(48*time.Hour), history.Filter{Types: []string{"import"}, Tenant: "acme"}))
		require.InDelta(t, 10000/3/3, day2.Created, 2)

		// Retention: two days later the minutes are gone, hours and days kept.
		n, err := s.PurgeHistory(sysCtx, history.DefaultRetention, now.Add(48*time.Hour+time.Minute))
		require.NoError(t, err)
		require.Positive(t, n)
		minutes, err := s.ReadHistory(sysCtx, history.Minute, start, now)
		require.NoError(t, err)
		require.Empty(t, minutes)
		days, err := s.ReadHistory(sysCtx, history.Day, start, now)
		require.NoError(t, err)
		require.Equal(t, totals[2], history.Total(history.Series(days, history.Day, start, now, all)))
	})
}
