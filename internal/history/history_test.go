package history

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/fakeclock"
)

type simTask struct {
	typ, tenant    string
	created, ended time.Time
	wait, run      time.Duration
	outcome        string
	retried        bool
}

// simulate creates 10,000 tasks of 3 types and 2 tenants over 3 days of a
// fake clock, records them into minute rows as the flush path would (in
// batches of up to 100), and returns the rows and the raw tasks.
func simulate(t *testing.T) (Batch, []simTask, time.Time) {
	t.Helper()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := fakeclock.New(start)
	rng := rand.New(rand.NewPCG(1, 2))
	types := []string{"email", "import", "report"}
	const n = 10000
	span := 3 * 24 * time.Hour
	var tasks []simTask
	rows := Batch{}
	batch := Batch{}
	for i := range n {
		logDur := func(maxMs float64) time.Duration {
			return time.Duration(math.Exp(rng.Float64()*math.Log(maxMs))*float64(time.Millisecond)) + time.Millisecond
		}
		st := simTask{typ: types[i%3], tenant: []string{"acme", "globex"}[rng.IntN(2)], created: clock.Now(), wait: logDur(60000), run: logDur(600000)}
		switch r := rng.IntN(10); {
		case r < 7:
			st.outcome = "SUCCESS"
		case r < 9:
			st.outcome, st.retried = "FAILED", r == 7
		default:
			st.outcome = "CANCELLED"
		}
		st.ended = st.created.Add(st.wait + st.run)
		// Tasks that end after the three days are outside every range asked.
		tasks = append(tasks, st)
		clock.Advance(span / n)
		batch.Created(st.typ, st.tenant, st.created)
		batch.Ended(Execution{Type: st.typ, Tenant: st.tenant, Ended: st.ended, Wait: st.wait, Run: st.run, Outcome: st.outcome, Retried: st.retried})
		if len(batch) >= 100 || i == n-1 {
			rows.Merge(batch)
			batch = Batch{}
		}
	}
	return rows, tasks, start
}

type want struct {
	created, started, succeeded, failed, cancelled, retries, runMs int64
	waits, runs                                                    []time.Duration
}

func expected(tasks []simTask, from, to time.Time, f Filter) want {
	var w want
	in := func(at time.Time) bool { return !at.Before(from) && at.Before(to) }
	for _, st := range tasks {
		if !f.match(Key{Type: st.typ, Tenant: st.tenant}) {
			continue
		}
		if in(st.created) {
			w.created++
		}
		if !in(st.ended) {
			continue
		}
		w.started++
		switch st.outcome {
		case "SUCCESS":
			w.succeeded++
		case "FAILED":
			w.failed++
		default:
			w.cancelled++
		}
		if st.retried {
			w.retries++
		}
		w.runMs += st.run.Milliseconds()
		w.waits = append(w.waits, st.wait)
		w.runs = append(w.runs, st.run)
	}
	return w
}

// within checks a histogram's quantile against the exact one: the stated
// error is a factor of two (p/2 <= v < p, in whole milliseconds).
func within(t *testing.T, what string, h Histogram, exact []time.Duration, q float64) {
	t.Helper()
	got, ok := h.Quantile(q)
	if !ok {
		t.Fatalf("%s: p%.0f of an empty histogram", what, q*100)
	}
	s := slices.Clone(exact)
	slices.Sort(s)
	v := s[max(int(math.Ceil(q*float64(len(s))))-1, 0)].Milliseconds()
	up := got.Milliseconds()
	if !(up/2 <= v && v < up) {
		t.Errorf("%s: p%.0f = %v, exact %d ms: outside [p/2, p)", what, q*100, got, v)
	}
}

func TestTenThousandTasksOverThreeDaysGiveCountsAndPercentilesPerRange(t *testing.T) {
	minutes, tasks, start := simulate(t)
	hours := RollUp(minutes, Hour)
	days := RollUp(hours, Day)
	all := Batch{}
	all.Merge(minutes)
	all.Merge(hours)
	all.Merge(days)

	cases := []struct {
		name     string
		r        Resolution
		from, to time.Time
		f        Filter
	}{
		{"first hour, minutes", Minute, start, start.Add(time.Hour), Filter{Tenant: "*"}},
		{"a day's hour, one type", Minute, start.Add(30 * time.Hour), start.Add(31 * time.Hour), Filter{Types: []string{"import"}, Tenant: "*"}},
		{"second day, hours", Hour, start.Add(24 * time.Hour), start.Add(48 * time.Hour), Filter{Tenant: "*"}},
		{"second day, hours, one tenant", Hour, start.Add(24 * time.Hour), start.Add(48 * time.Hour), Filter{Tenant: "acme"}},
		{"three days, days", Day, start, start.Add(72 * time.Hour), Filter{Tenant: "*"}},
		{"three days, days, two types of one tenant", Day, start, start.Add(72 * time.Hour), Filter{Types: []string{"email", "report"}, Tenant: "globex"}},
		{"three days, hours", Hour, start, start.Add(72 * time.Hour), Filter{Tenant: "*"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Total(Series(all, c.r, c.from, c.to, c.f))
			w := expected(tasks, c.from, c.to, c.f)
			if w.started < 30 {
				t.Fatalf("the range holds only %d executions: the simulation is wrong", w.started)
			}
			for _, p := range [][3]any{
				{"created", got.Created, w.created}, {"started", got.Started, w.started},
				{"succeeded", got.Succeeded, w.succeeded}, {"failed", got.Failed, w.failed},
				{"cancelled", got.Cancelled, w.cancelled}, {"retries", got.Retries, w.retries},
				{"run time", got.RunTimeMs, w.runMs},
			} {
				if p[1] != p[2] {
					t.Errorf("%s: %v, want %v", p[0], p[1], p[2])
				}
			}
			if got.Wait.Count() != w.started || got.Run.Count() != w.started {
				t.Errorf("histograms count %d and %d, want %d", got.Wait.Count(), got.Run.Count(), w.started)
			}
			for _, q := range []float64{0.5, 0.95, 0.99} {
				within(t, "wait", got.Wait, w.waits, q)
				within(t, "run", got.Run, w.runs, q)
			}
		})
	}
	// Every task was created in the three days.
	if got := Total(Series(all, Day, start, start.Add(72*time.Hour), Filter{Tenant: "*"})).Created; got != 10000 {
		t.Errorf("created over three days: %d, want 10000", got)
	}
}

func TestRollUpIsIdempotentAndKeepsTheCounts(t *testing.T) {
	minutes, _, start := simulate(t)
	once := RollUp(minutes, Hour)
	twice := Batch{}
	twice.Merge(once) // the coarser row is replaced, never added to:
	again := RollUp(minutes, Hour)
	for k, c := range again {
		*twice.Row(k) = *c
	}
	for k, c := range once {
		if *twice[k] != *c {
			t.Fatalf("a second roll-up of %v changed the row", k)
		}
	}
	if a, b := Total(Series(minutes, Minute, start, start.Add(96*time.Hour), Filter{Tenant: "*"})), Total(Series(once, Hour, start, start.Add(96*time.Hour), Filter{Tenant: "*"})); a != b {
		t.Errorf("hours add up to %+v, minutes to %+v", b, a)
	}
}

func TestQuantileBounds(t *testing.T) {
	var h Histogram
	if _, ok := h.Quantile(0.5); ok {
		t.Error("an empty histogram has a quantile")
	}
	for _, c := range []struct {
		d    time.Duration
		want int
	}{{0, 0}, {999 * time.Microsecond, 0}, {time.Millisecond, 1}, {3 * time.Millisecond, 2}, {4 * time.Millisecond, 3}, {1000 * time.Hour, Buckets - 1}} {
		if got := BucketOf(c.d); got != c.want {
			t.Errorf("BucketOf(%v) = %d, want %d", c.d, got, c.want)
		}
	}
	h.Observe(5 * time.Millisecond)
	h.Observe(100 * time.Millisecond)
	if p, _ := h.Quantile(0.5); p != 8*time.Millisecond {
		t.Errorf("p50 = %v, want 8ms", p)
	}
	if p, _ := h.Quantile(0.99); p != 128*time.Millisecond {
		t.Errorf("p99 = %v, want 128ms", p)
	}
}

func TestAutoResolutionAndRetention(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 30, 0, 0, time.UTC)
	for _, c := range []struct {
		d    time.Duration
		want Resolution
	}{{time.Hour, Minute}, {24 * time.Hour, Hour}, {7 * 24 * time.Hour, Hour}, {30 * 24 * time.Hour, Day}} {
		if got := AutoResolution(now.Add(-c.d), now); got != c.want {
			t.Errorf("AutoResolution(%v) = %s, want %s", c.d, got, c.want)
		}
	}
	if got, want := DefaultRetention.Cutoff(Minute, now), now.Add(-48*time.Hour); !got.Equal(want) {
		t.Errorf("minutes' cutoff %v, want %v", got, want)
	}
	if got, want := DefaultRetention.Cutoff(Hour, now), time.Date(2026, 1, 9, 12, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("hours' cutoff %v, want %v", got, want)
	}
	if got := DefaultRetention.Cutoff(Day, now); !got.Equal(time.Date(2024, 3, 10, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("days' cutoff %v", got)
	}
}
