// Package history is the arithmetic of the task history's compact time
// series: the buckets of time (a minute, an hour, a day), the counts kept
// per bucket, task type and tenant, and a small fixed log-scale histogram
// of wait and run times per row, from which p50/p95/p99 of any range are
// computed by adding the rows' histograms.
//
// Rows of a finer resolution roll up into coarser ones by addition (RollUp),
// so a chart over any range reads a bounded number of rows and never the
// tasks themselves. A percentile read from a histogram is the upper bound
// of the bucket that holds it: the true value v of a reported p satisfies
// p/2 <= v < p (bucket 0: v < 1 ms; the last bucket is open: there p is a
// lower bound, v >= p). See Histogram.Quantile.
package history

import (
	"math"
	"math/bits"
	"sort"
	"time"
)

// Resolution is the width of a row's bucket of time.
type Resolution string

// The resolutions, finest first.
const (
	Minute Resolution = "MINUTE"
	Hour   Resolution = "HOUR"
	Day    Resolution = "DAY"
)

// Step is the width of one bucket.
func (r Resolution) Step() time.Duration {
	switch r {
	case Hour:
		return time.Hour
	case Day:
		return 24 * time.Hour
	default:
		return time.Minute
	}
}

// Truncate returns the start of the bucket (UTC) that holds t.
func (r Resolution) Truncate(t time.Time) time.Time {
	return t.UTC().Truncate(r.Step())
}

// Valid reports whether r is one of the resolutions.
func (r Resolution) Valid() bool { return r == Minute || r == Hour || r == Day }

// AutoResolution picks the resolution of a chart over [from, to): minutes
// up to 6 hours, hours up to 14 days, days beyond, so that a chart has at
// most a few hundred points.
func AutoResolution(from, to time.Time) Resolution {
	switch d := to.Sub(from); {
	case d <= 6*time.Hour:
		return Minute
	case d <= 14*24*time.Hour:
		return Hour
	default:
		return Day
	}
}

// Retention says how long rows of each resolution are kept.
type Retention struct {
	Minutes, Hours, Days time.Duration
}

// DefaultRetention keeps minutes 48 hours, hours 60 days, days 2 years.
var DefaultRetention = Retention{Minutes: 48 * time.Hour, Hours: 60 * 24 * time.Hour, Days: 2 * 365 * 24 * time.Hour}

// Cutoff returns the bucket start before which rows of resolution r are
// deleted at now.
func (rt Retention) Cutoff(r Resolution, now time.Time) time.Time {
	keep := rt.Minutes
	switch r {
	case Hour:
		keep = rt.Hours
	case Day:
		keep = rt.Days
	}
	return r.Truncate(now.Add(-keep))
}

// Buckets is the number of a histogram's buckets.
const Buckets = 24

// Histogram counts durations in log-scale buckets of milliseconds: bucket
// 0 holds durations under 1 ms, bucket i (1 <= i < Buckets-1) those in
// [2^(i-1), 2^i) ms, the last bucket everything from 2^(Buckets-2) ms
// (about 70 minutes) on.
type Histogram [Buckets]int64

// BucketOf returns the bucket of duration d.
func BucketOf(d time.Duration) int {
	ms := d.Milliseconds()
	if ms <= 0 {
		return 0
	}
	return min(bits.Len64(uint64(ms)), Buckets-1)
}

// UpperBound is the upper bound of bucket i (for the last, open bucket:
// its lower bound).
func UpperBound(i int) time.Duration {
	if i >= Buckets-1 {
		return time.Duration(1<<(Buckets-2)) * time.Millisecond
	}
	return time.Duration(1<<i) * time.Millisecond
}

// Observe counts d.
func (h *Histogram) Observe(d time.Duration) { h[BucketOf(d)]++ }

// Add adds o's counts to h.
func (h *Histogram) Add(o Histogram) {
	for i := range h {
		h[i] += o[i]
	}
}

// Count is the number of durations counted.
func (h Histogram) Count() int64 {
	var n int64
	for _, c := range h {
		n += c
	}
	return n
}

// Quantile returns the q-quantile (0 < q <= 1) as the upper bound of the
// bucket holding the ceil(q*n)-th smallest duration, and false when the
// histogram is empty. The true quantile v satisfies Quantile/2 <= v <
// Quantile, except in bucket 0 (v < 1 ms) and the last bucket (v >=
// Quantile).
func (h Histogram) Quantile(q float64) (time.Duration, bool) {
	n := h.Count()
	if n == 0 {
		return 0, false
	}
	rank := max(int64(math.Ceil(q*float64(n))), 1)
	var seen int64
	for i, c := range h {
		seen += c
		if seen >= rank {
			return UpperBound(i), true
		}
	}
	return UpperBound(Buckets - 1), true
}

// Counts is what a row holds for its bucket, task type and tenant.
// Executions are counted in the bucket in which they ended.
type Counts struct {
	Created, Started, Succeeded, Failed, Cancelled, Retries int64
	// RowsImported and RowsExported are the rows the executions that
	// ended in the bucket wrote to an import's target or to an export's
	// file (Rows).
	RowsImported, RowsExported int64
	// BytesStored is the bytes of the artifacts written in the bucket
	// (Stored).
	BytesStored int64
	RunTimeMs   int64
	// Waiting is the largest waiting depth sampled in the bucket (for a
	// coarser row: the largest of its finer rows').
	Waiting int64
	Wait    Histogram
	Run     Histogram
}

// Add adds o to c (Waiting: the larger).
func (c *Counts) Add(o Counts) {
	c.Created += o.Created
	c.Started += o.Started
	c.Succeeded += o.Succeeded
	c.Failed += o.Failed
	c.Cancelled += o.Cancelled
	c.Retries += o.Retries
	c.RowsImported += o.RowsImported
	c.RowsExported += o.RowsExported
	c.BytesStored += o.BytesStored
	c.RunTimeMs += o.RunTimeMs
	c.Waiting = max(c.Waiting, o.Waiting)
	c.Wait.Add(o.Wait)
	c.Run.Add(o.Run)
}

// Key identifies a row.
type Key struct {
	Start      time.Time
	Resolution Resolution
	Type       string
	Tenant     string
}

// Execution is one ended execution, as the flush path records it.
type Execution struct {
	Type, Tenant string
	// Ended is when it ended (its bucket); Wait is from when it could
	// run to its start, Run from its start to its end.
	Ended     time.Time
	Wait, Run time.Duration
	// Outcome is SUCCESS, FAILED or CANCELLED; Retried says a retry
	// instance was scheduled (the execution failed).
	Outcome string
	Retried bool
}

// Batch gathers the rows of one write: executions of a batch grouped per
// (minute, type, tenant), so a batch of any size costs one upsert per
// group, never one write per task.
type Batch map[Key]*Counts

// Row returns the counts of k, created empty.
func (b Batch) Row(k Key) *Counts {
	c := b[k]
	if c == nil {
		c = &Counts{}
		b[k] = c
	}
	return c
}

// Created counts a task created at t.
func (b Batch) Created(typ, tenant string, at time.Time) {
	b.Row(Key{Start: Minute.Truncate(at), Resolution: Minute, Type: typ, Tenant: tenant}).Created++
}

// Ended counts an ended execution.
func (b Batch) Ended(e Execution) {
	c := b.Row(Key{Start: Minute.Truncate(e.Ended), Resolution: Minute, Type: e.Type, Tenant: e.Tenant})
	c.Started++
	switch e.Outcome {
	case "SUCCESS":
		c.Succeeded++
	case "FAILED":
		c.Failed++
	case "CANCELLED":
		c.Cancelled++
	}
	if e.Retried {
		c.Retries++
	}
	c.RunTimeMs += e.Run.Milliseconds()
	c.Wait.Observe(e.Wait)
	c.Run.Observe(e.Run)
}

// Started counts an execution started at at, after waiting wait (from
// when it could run: its run_at, or its creation if later).
func (b Batch) Started(typ, tenant string, at time.Time, wait time.Duration) {
	c := b.Row(Key{Start: Minute.Truncate(at), Resolution: Minute, Type: typ, Tenant: tenant})
	c.Started++
	c.Wait.Observe(max(wait, 0))
}

// Finished counts an execution that ended at at after running run: its
// outcome (SUCCESS, FAILED, CANCELLED; any other counts its run time
// only), and a retry it led to (retried, with outcome FAILED).
func (b Batch) Finished(typ, tenant string, at time.Time, outcome string, retried bool, run time.Duration) {
	c := b.Row(Key{Start: Minute.Truncate(at), Resolution: Minute, Type: typ, Tenant: tenant})
	switch outcome {
	case "SUCCESS":
		c.Succeeded++
	case "FAILED":
		c.Failed++
	case "CANCELLED":
		c.Cancelled++
	}
	if retried {
		c.Retries++
	}
	run = max(run, 0)
	c.RunTimeMs += run.Milliseconds()
	c.Run.Observe(run)
}

// Rows counts the rows an execution that ended at at wrote: imported into
// an import's target, exported into an export's file.
func (b Batch) Rows(typ, tenant string, at time.Time, imported, exported int64) {
	if imported == 0 && exported == 0 {
		return
	}
	c := b.Row(Key{Start: Minute.Truncate(at), Resolution: Minute, Type: typ, Tenant: tenant})
	c.RowsImported += imported
	c.RowsExported += exported
}

// Stored counts the bytes of an artifact written at at for a task of type
// typ and tenant tenant.
func (b Batch) Stored(typ, tenant string, at time.Time, bytes int64) {
	b.Row(Key{Start: Minute.Truncate(at), Resolution: Minute, Type: typ, Tenant: tenant}).BytesStored += bytes
}

// CancelledWaiting counts a task cancelled at at before it ran: no
// execution started, none is timed.
func (b Batch) CancelledWaiting(typ, tenant string, at time.Time) {
	b.Row(Key{Start: Minute.Truncate(at), Resolution: Minute, Type: typ, Tenant: tenant}).Cancelled++
}

// Merge adds the rows of o into b.
func (b Batch) Merge(o Batch) {
	for k, c := range o {
		b.Row(k).Add(*c)
	}
}

// RollUp returns the rows of resolution to made by adding the rows of b
// (of a finer resolution) that fall in each of its buckets. A roll-up of a
// bucket replaces the coarser row: it is idempotent as long as the finer
// rows are still kept.
func RollUp(b Batch, to Resolution) Batch {
	out := Batch{}
	for k, c := range b {
		if k.Resolution.Step() >= to.Step() {
			continue
		}
		out.Row(Key{Start: to.Truncate(k.Start), Resolution: to, Type: k.Type, Tenant: k.Tenant}).Add(*c)
	}
	return out
}

// Point is one bucket of a series: the counts of the rows of the types and
// tenant asked for, added.
type Point struct {
	Start time.Time
	Counts
}

// Filter selects rows: of these types (none: all) and tenant ("*": all).
type Filter struct {
	Types  []string
	Tenant string
}

func (f Filter) match(k Key) bool {
	if f.Tenant != "*" && k.Tenant != f.Tenant {
		return false
	}
	if len(f.Types) == 0 {
		return true
	}
	for _, t := range f.Types {
		if t == k.Type {
			return true
		}
	}
	return false
}

// Series returns the points of resolution r over [from, to) from rows
// (rows of other resolutions, and outside the range, are ignored), in
// order of time, one point per bucket that has rows. A point's waiting
// depth is the sum of its rows' (types and tenants wait side by side).
func Series(rows Batch, r Resolution, from, to time.Time, f Filter) []Point {
	by := map[time.Time]*Point{}
	for k, c := range rows {
		if k.Resolution != r || k.Start.Before(r.Truncate(from)) || !k.Start.Before(to) || !f.match(k) {
			continue
		}
		p := by[k.Start]
		if p == nil {
			p = &Point{Start: k.Start}
			by[k.Start] = p
		}
		// Rows of one bucket are of other types or tenants: their
		// waiting depths add up.
		w := p.Waiting
		p.Add(*c)
		p.Waiting = w + c.Waiting
	}
	out := make([]Point, 0, len(by))
	for _, p := range by {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// Total adds points.
func Total(points []Point) Counts {
	var c Counts
	for _, p := range points {
		c.Add(p.Counts)
	}
	return c
}
