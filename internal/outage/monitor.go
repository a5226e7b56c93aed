package outage

import (
	"cmp"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"
)

// MonitorConfig configures a Monitor.
type MonitorConfig struct {
	// Logger receives one line when an outage starts, one every
	// SummaryEvery while it lasts, and one when it ends.
	Logger *slog.Logger
	// SummaryEvery is how often a lasting outage is logged again, with the
	// counts so far. Default: SummaryEveryDefault.
	SummaryEvery time.Duration
	// QuietEnd is how long without a failure ends an outage when no write
	// succeeded meanwhile (a node that only reads). Default: QuietEndDefault.
	QuietEnd time.Duration
	// Settle is how long after the last failure a successful write ends an
	// outage (and makes the node ready again): a nearly full disk lets
	// small writes through between failures, and that is not the end of
	// it. Default: SettleDefault.
	Settle time.Duration
	// UnreadyAfter is how many write failures in a row (with no success
	// between them) make the node unready. A disk-full failure makes it
	// unready at once. Default: UnreadyAfterDefault.
	UnreadyAfter int
	// UnreadyFor is how long the node stays unready after its last write
	// failure when nothing writes meanwhile. Default: UnreadyForDefault.
	UnreadyFor time.Duration
	// Now replaces time.Now (tests).
	Now func() time.Time
}

// Defaults of MonitorConfig.
const (
	SummaryEveryDefault = time.Minute
	QuietEndDefault     = 10 * time.Second
	SettleDefault       = 2 * time.Second
	UnreadyAfterDefault = 3
	UnreadyForDefault   = 30 * time.Second
)

// Monitor counts the failures of an outage and logs the outage once, with
// the counts, instead of every failure. It also says whether the node
// should be taken out of rotation (Ready). Safe for concurrent use.
type Monitor struct {
	cfg MonitorConfig
	log *slog.Logger

	mu       sync.Mutex
	active   bool
	kind     Kind
	since    time.Time
	last     time.Time // latest failure
	firstErr string
	counts   map[string]int
	logged   time.Time
	timer    *time.Timer // checks whether the outage is over
	outages  int

	writeFailures int       // since writes last succeeded for Settle
	lastWrite     time.Time // the latest write failure
	lastOK        time.Time // the latest successful write
	diskFull      bool
}

// NewMonitor returns a Monitor.
func NewMonitor(cfg MonitorConfig) *Monitor {
	cfg.SummaryEvery = cmp.Or(cfg.SummaryEvery, SummaryEveryDefault)
	cfg.QuietEnd = cmp.Or(cfg.QuietEnd, QuietEndDefault)
	cfg.Settle = cmp.Or(cfg.Settle, SettleDefault)
	cfg.UnreadyAfter = cmp.Or(cfg.UnreadyAfter, UnreadyAfterDefault)
	cfg.UnreadyFor = cmp.Or(cfg.UnreadyFor, UnreadyForDefault)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Monitor{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()).With("component", "outage"), counts: map[string]int{}}
}

// Failed records that source ("request", "write", "audit", "download"...)
// met err. It returns the outage as an *Error, or nil when err is not one
// (the caller then reports err as it would have). m may be nil.
func (m *Monitor) Failed(source string, err error) *Error {
	e := As(err)
	if e == nil || m == nil {
		return e
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Now()
	if !m.active {
		m.active, m.kind, m.since, m.firstErr, m.logged = true, e.Kind, now, e.Err.Error(), now
		m.counts = map[string]int{}
		m.outages++
		m.log.Error("outage: "+e.Kind.String()+"; failures are counted, not logged one by one, until it ends",
			"kind", e.Kind.String(), "source", source, "err", m.firstErr)
	} else if e.Kind == DiskFull || m.kind == None {
		// A full disk is the more useful thing to report.
		m.kind = e.Kind
	}
	m.counts[source]++
	m.last = now
	if now.Sub(m.logged) >= m.cfg.SummaryEvery {
		m.logged = now
		m.log.Warn("outage continues", "kind", m.kind.String(), "for", now.Sub(m.since).Round(time.Second).String(), "failures", m.countsLocked())
	}
	m.recheckLocked(m.cfg.QuietEnd)
	return e
}

// recheckLocked checks again in d whether the outage is over.
func (m *Monitor) recheckLocked(d time.Duration) {
	if m.timer != nil {
		m.timer.Stop()
	}
	m.timer = time.AfterFunc(d, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.checkLocked()
	})
}

// checkLocked ends the outage when writes have succeeded since Settle
// after the last failure, or when nothing failed for QuietEnd.
func (m *Monitor) checkLocked() {
	if !m.active {
		return
	}
	since := m.cfg.Now().Sub(m.last)
	switch {
	case m.lastOK.After(m.last) && since >= m.cfg.Settle:
		m.endLocked("writes succeed again")
	case since >= m.cfg.QuietEnd:
		m.endLocked("no failure for " + m.cfg.QuietEnd.String())
	}
}

func (m *Monitor) endLocked(why string) {
	if !m.active {
		return
	}
	m.active = false
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	m.log.Info("outage over", "kind", m.kind.String(), "lasted", m.last.Sub(m.since).Round(time.Millisecond).String(),
		"failures", m.countsLocked(), "ended_by", why, "first_err", m.firstErr)
}

// countsLocked formats the counts by source, sorted.
func (m *Monitor) countsLocked() string {
	keys := make([]string, 0, len(m.counts))
	for k := range m.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m.counts[k])
	}
	return strings.Join(parts, " ")
}

// Wrote records the outcome of a write transaction (the store reports
// each one): a success Settle after the last failure ends an outage and
// makes the node ready again; an outage counts towards unreadiness. Other errors (a constraint, a
// refused transition) say nothing about the database's health.
func (m *Monitor) Wrote(err error) {
	if m == nil {
		return
	}
	if err == nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		now := m.cfg.Now()
		m.lastOK = now
		if m.writeFailures > 0 && now.Sub(m.lastWrite) >= m.cfg.Settle {
			m.writeFailures, m.diskFull = 0, false
		}
		if m.active {
			if wait := m.cfg.Settle - now.Sub(m.last); wait > 0 {
				m.recheckLocked(wait)
			} else {
				m.checkLocked()
			}
		}
		return
	}
	e := m.Failed("write", err)
	if e == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writeFailures++
	m.lastWrite = m.cfg.Now()
	if e.Kind == DiskFull {
		m.diskFull = true
	}
}

// Ready returns why the node should not take traffic now, or nil: its disk
// is full, or its last writes failed (recently) with an outage.
func (m *Monitor) Ready() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	since := m.cfg.Now().Sub(m.lastWrite)
	if m.writeFailures == 0 || since > m.cfg.UnreadyFor || (m.lastOK.After(m.lastWrite) && since >= m.cfg.Settle) {
		return nil
	}
	switch {
	case m.diskFull:
		return fmt.Errorf("disk full: the last %d writes failed", m.writeFailures)
	case m.writeFailures >= m.cfg.UnreadyAfter:
		return fmt.Errorf("%s: the last %d writes failed", m.kind, m.writeFailures)
	}
	return nil
}

// Stats are a Monitor's counters.
type Stats struct {
	// Active is true during an outage; Kind is then its kind.
	Active bool
	Kind   Kind
	// Outages counts outages since the start; Failures counts the current
	// (or last) one's failures by source.
	Outages  int
	Failures map[string]int
}

// Stats returns the counters.
func (m *Monitor) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := make(map[string]int, len(m.counts))
	for k, v := range m.counts {
		f[k] = v
	}
	return Stats{Active: m.active, Kind: m.kind, Outages: m.outages, Failures: f}
}
