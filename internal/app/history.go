package app

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/history"
	"github.com/taskgraph/taskgraph/internal/service"
	"github.com/taskgraph/taskgraph/internal/store"
)

// HistoryConfig tunes the task history's loops (docs/history.md). Zero
// fields keep their defaults.
type HistoryConfig struct {
	// FlushInterval is how often every node writes the history its store
	// counted (store.FlushHistory): what a kill -9 may lose. Default 5 s.
	FlushInterval time.Duration
	// RollUpInterval is how often the leading watchdog samples the waiting
	// depth, rolls minutes into hours and hours into days, and purges the
	// rows past their retention. Default a minute.
	RollUpInterval time.Duration
	// Retention says how long rows of each resolution are kept. Default
	// history.DefaultRetention.
	Retention history.Retention
}

// Defaults of HistoryConfig.
const (
	HistoryFlushDefault  = 5 * time.Second
	HistoryRollUpDefault = time.Minute
)

// HistoryRollUp is the watchdog role's pass over the task history.
type HistoryRollUp struct {
	*service.Loop[HistoryResult]
	store *store.Store
	rt    history.Retention
	mu    sync.Mutex // one pass at a time (the loop's, a test's)
	// last is the time of the previous pass that succeeded (zero: none
	// yet); a pass rolls up from two hours before it.
	last time.Time
}

// HistoryResult says what one roll-up pass did.
type HistoryResult struct {
	Sampled int   // rows of waiting depth written
	Purged  int64 // rows past their retention deleted
}

// NewHistoryRollUp returns the roll-up of st's history with retention rt
// (zero: history.DefaultRetention), without its loop: its passes are the
// caller's to run (newHistory runs them on the leading watchdog).
func NewHistoryRollUp(st *store.Store, rt history.Retention) *HistoryRollUp {
	if rt == (history.Retention{}) {
		rt = history.DefaultRetention
	}
	return &HistoryRollUp{store: st, rt: rt}
}

// Pass samples the waiting depth in the current minute, recomputes the
// hours (from their minutes) and days (from their hours) that changed
// since two hours before the previous pass, and purges rows past their
// retention. The first pass recomputes every hour whose minutes are all
// still kept. Hours and days are replaced, not added to: a pass run twice,
// or by two nodes, writes the same rows.
func (h *HistoryRollUp) Pass(ctx context.Context) (HistoryResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var res HistoryResult
	ctx = auth.NewSystemContext(ctx)
	now := h.store.Now()
	var err error
	if res.Sampled, err = h.store.SampleWaiting(ctx, now); err != nil {
		return res, err
	}
	// The first hour whose minutes are all kept: an hour rolled up from
	// part of its minutes would lose the others.
	floor := history.Hour.Truncate(h.rt.Cutoff(history.Minute, now)).Add(time.Hour)
	from := floor
	if !h.last.IsZero() {
		// Late flushes (a node's interval, a slow transaction) land in
		// the minutes just before the previous pass.
		from = later(floor, h.last.Add(-2*time.Hour))
	}
	if err := h.store.RollUpHistory(ctx, history.Hour, from, now); err != nil {
		return res, err
	}
	if err := h.store.RollUpHistory(ctx, history.Day, from, now); err != nil {
		return res, err
	}
	if res.Purged, err = h.store.PurgeHistory(ctx, h.rt, now); err != nil {
		return res, err
	}
	h.last = now
	return res, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// newHistory assembles the task history's loops: every node flushes what
// its store counted; the leading watchdog rolls up and purges.
func (a *App) newHistory(context.Context, *cleanup) error {
	hc := a.opts.History
	st := a.Store
	flush, err := service.New(service.Config[int]{
		Name: "history-flush", Interval: cmp.Or(hc.FlushInterval, HistoryFlushDefault),
		Delay: cmp.Or(hc.FlushInterval, HistoryFlushDefault), Quiet: a.quiet("history"), Logger: a.Log,
	}, func(ctx context.Context) (int, error) { return st.FlushHistory(auth.NewSystemContext(ctx)) })
	if err != nil {
		return err
	}
	a.services = append(a.services, flush)
	if !a.Config.Has(RoleWatchdog) {
		return nil
	}
	var leading func(context.Context) (bool, error)
	if a.Leader != nil {
		leading = a.Leader.Lead
	}
	a.HistoryRollUp = NewHistoryRollUp(st, hc.Retention)
	a.HistoryRollUp.Loop, err = service.New(service.Config[HistoryResult]{
		Name: "history-rollup", Interval: cmp.Or(hc.RollUpInterval, HistoryRollUpDefault),
		Leader: leading, Quiet: a.quiet("history"), Logger: a.Log,
	}, a.HistoryRollUp.Pass)
	if err != nil {
		return err
	}
	a.services = append(a.services, a.HistoryRollUp)
	return nil
}
