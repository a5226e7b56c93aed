package flow

import (
	"sort"
	"time"
)

// A rate limit admits at most N starts in any window of P, counted on
// admission stamps, not on the claims' own times.
//
// A start's stamp is the time its slot freed: when the N-th most recent
// stamp leaves the window (that stamp plus P). The claim that takes the
// slot comes a little later (its reaction time: a timer, a transaction);
// stamping the start with the claim's time would push that slot, in every
// later window, by as much, and a saturated type would lose its claims'
// reaction times at every period, for good. Stamped with the time its slot
// freed, the slot frees again one period after that, whenever the claim
// came. A stamp is
//
//   - never in the future (a start is admitted once its stamp is due),
//   - never before its slot freed, nor before the latest stamp,
//   - never before the previous start's claim (so only the first start of
//     a claim may be backdated; the others are stamped with the claim's
//     time),
//   - never more than one emission interval P/N before its claim (a claim
//     later than that makes up P/N of it), and
//   - its claim's time when its slot freed more than a period before the
//     claim, or never filled (the type was not held back by its rate:
//     there is nothing to make up).
//
// So the stamps keep "at most N in any window of P" exactly; a saturated
// type whose claims react within P/N starts N per P without drift (a
// group of slots freed together and claimed late splits: its first slot
// keeps its place, the others move by the reaction time, once, until each
// slot is claimed alone); and the actual starts keep to N+1 in any window
// of P: the (i+N+1)-th start is no earlier than its stamp, which is a
// period or more after the (i+1)-th stamp, which is no earlier than the
// i-th start.
//
// What this reads does not grow with the backlog: the type's flow_starts
// rows claimed in the last two periods (a slot an older claim frees freed
// more than a period ago, and its stamp makes up nothing).

// rateWindow is what a rate-limited type's recent starts say about the
// next ones.
type rateWindow struct {
	limit    int
	period   time.Duration
	interval time.Duration // period / limit: the most a stamp is backdated
	// stamps and claims are the recorded starts by stamp and by claim
	// time; added are the stamps given since, all claimed at now.
	stamps, claims tally
	added          []time.Time
	now            time.Time
}

// startRow is one row of flow_starts: count starts claimed at claimed and
// stamped at stamp.
type startRow struct {
	claimed, stamp time.Time
	count          int
}

// newRateWindow returns the window at now of a type limited to limit
// starts per period, from its rows claimed after now - 2 period.
func newRateWindow(limit int, period time.Duration, now time.Time, rows []startRow) *rateWindow {
	limit = max(limit, 1)
	w := &rateWindow{limit: limit, period: period, interval: period / time.Duration(limit), now: now}
	stamps := make([]entry, 0, len(rows))
	claims := make([]entry, 0, len(rows))
	for _, r := range rows {
		if r.count <= 0 {
			continue
		}
		stamps = append(stamps, entry{r.stamp, r.count})
		claims = append(claims, entry{r.claimed, r.count})
	}
	w.stamps, w.claims = newTally(stamps), newTally(claims)
	return w
}

// horizon is the claim time at and before which rows are of no more use.
func horizon(now time.Time, period time.Duration) time.Time {
	return now.Add(-2 * period)
}

// latestStamp returns the k-th most recent stamp (k >= 1), counting those
// given since, or false when there are fewer.
func (w *rateWindow) latestStamp(k int) (time.Time, bool) {
	if k <= len(w.added) {
		return w.added[len(w.added)-k], true
	}
	return w.stamps.latest(k - len(w.added))
}

// latestClaim returns the k-th most recent claim time, counting the starts
// given since (claimed at now).
func (w *rateWindow) latestClaim(k int) (time.Time, bool) {
	if k <= len(w.added) {
		return w.now, true
	}
	return w.claims.latest(k - len(w.added))
}

// next returns the stamp the next start would have, which is also when
// it may start: now, when that is now or earlier.
func (w *rateWindow) next() time.Time {
	now := w.now
	stamp := now
	if nth, ok := w.latestStamp(w.limit); ok {
		freed := nth.Add(w.period)
		switch {
		case freed.After(now.Add(-w.interval)):
			stamp = freed // the slot freed just now, or frees later
		case freed.After(now.Add(-w.period)):
			stamp = now.Add(-w.interval) // a late claim: make up P/N
		}
	}
	// In order, and never before the previous start's claim: then the
	// actual starts keep to N+1 in any window of P (the (i+N+1)-th starts
	// no earlier than its stamp, a period after the (i+1)-th's stamp,
	// which is no earlier than the i-th start).
	if last, ok := w.latestStamp(1); ok && last.After(stamp) {
		stamp = last
	}
	if last, ok := w.latestClaim(1); ok && last.After(stamp) {
		stamp = last
	}
	return stamp
}

// take gives up to n starts their stamps, as many as may start now, and
// returns them in order.
func (w *rateWindow) take(n int) []time.Time {
	var out []time.Time
	for len(out) < n {
		stamp := w.next()
		if stamp.After(w.now) {
			break
		}
		w.added = append(w.added, stamp)
		out = append(out, stamp)
	}
	return out
}

// inWindow counts the stamps in the window of P ending at now, those given
// since included.
func (w *rateWindow) inWindow() int {
	from := w.now.Add(-w.period)
	n := w.stamps.after(from)
	for _, s := range w.added {
		if s.After(from) {
			n++
		}
	}
	return n
}

// entry is count times at one instant.
type entry struct {
	at time.Time
	n  int
}

// tally is a multiset of times, in ascending order.
type tally struct {
	at     []time.Time
	suffix []int // suffix[i]: how many are at[i] or later
}

func newTally(es []entry) tally {
	sort.Slice(es, func(i, j int) bool { return es[i].at.Before(es[j].at) })
	t := tally{at: make([]time.Time, len(es)), suffix: make([]int, len(es))}
	total := 0
	for i := len(es) - 1; i >= 0; i-- {
		total += es[i].n
		t.at[i], t.suffix[i] = es[i].at, total
	}
	return t
}

// latest returns the k-th most recent time (k >= 1), or false when there
// are fewer than k.
func (t tally) latest(k int) (time.Time, bool) {
	// The last index whose suffix still holds k.
	i := sort.Search(len(t.at), func(i int) bool { return t.suffix[i] < k }) - 1
	if i < 0 {
		return time.Time{}, false
	}
	return t.at[i], true
}

// after counts the times after from.
func (t tally) after(from time.Time) int {
	i := sort.Search(len(t.at), func(i int) bool { return t.at[i].After(from) })
	if i == len(t.at) {
		return 0
	}
	return t.suffix[i]
}
