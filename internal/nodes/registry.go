// Package nodes is the live registry of the processes sharing a database:
// each node writes its own row (cluster_nodes) at start and refreshes it
// every Refresh — who it is, what it runs, how busy its workers are,
// whether it leads the watchdog, where its files live — and the row's
// lease (expires_at) says for how long that is news. A node whose lease
// ran out is GONE (killed, cut off from the database); one shut down
// cleanly marks itself STOPPED. The node leading the watchdog deletes rows
// gone or stopped for longer than Forget.
//
// An admin drains a node (Service.Drain): the flag is set in its row, and
// the node, at its next refresh, stops claiming work (running executions
// go on) until it is undrained.
package nodes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/clusternode"
	"github.com/taskgraph/taskgraph/ent/externalworker"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/service"
	"github.com/taskgraph/taskgraph/internal/store"
)

// Defaults of Config, defined once.
const (
	// RefreshDefault is how often a node refreshes its row.
	RefreshDefault = 5 * time.Second
	// LeaseRefreshes is the default lease in refreshes: a node that missed
	// this many refreshes in a row is gone.
	LeaseRefreshes = 3
	// ForgetDefault is how long a gone or stopped node's row is kept.
	ForgetDefault = 24 * time.Hour
)

// State is where a node stands, as its row says now.
type State string

// States of a node.
const (
	Live     State = "LIVE"     // refreshing its row
	Draining State = "DRAINING" // live, and told not to claim work
	Gone     State = "GONE"     // its lease ran out: killed, hung, or cut off
	Stopped  State = "STOPPED"  // shut down cleanly
)

// StateOf says where node n stands at now.
func StateOf(n *ent.ClusterNode, now time.Time) State {
	switch {
	case n.StoppedAt != nil:
		return Stopped
	case now.After(n.ExpiresAt):
		return Gone
	case n.Draining:
		return Draining
	}
	return Live
}

// Pool is what the registry reads of the node's worker pool and tells it
// (worker.Pool).
type Pool interface {
	// Load returns the handlers running and how many may run at once.
	Load() (busy, total int)
	// PauseClaiming stops or resumes claiming work.
	PauseClaiming(pause bool)
}

// Config of a node's Registry.
type Config struct {
	Store *store.Store
	// Node is this node's name (its worker id).
	Node  string
	Roles []string
	// Files is where the node's files live, without credentials.
	Files string
	// Version is the build the node runs (default: BuildVersion()).
	Version string
	// Refresh is how often the row is refreshed (default RefreshDefault);
	// Lease how long a refresh holds (default LeaseRefreshes × Refresh;
	// it must be longer than Refresh); Forget how long a gone or stopped
	// node's row is kept (default ForgetDefault).
	Refresh, Lease, Forget time.Duration
	// Pool is the node's worker pool (nil without the worker role).
	Pool Pool
	// Leading says whether this node leads the watchdog (nil: it does
	// not); the leading node deletes rows gone for longer than Forget.
	Leading func() bool
	Logger  *slog.Logger
	// SkewThreshold is the offset between this node's wall clock and the
	// database's past which the node says so (a warning in the log, /readyz
	// detail, the Nodes page). Default: SkewThresholdDefault.
	SkewThreshold time.Duration
}

// SkewThresholdDefault is Config.SkewThreshold's default.
const SkewThresholdDefault = 5 * time.Second

// Pass is what one refresh did.
type Pass struct {
	// Draining is whether the node is drained (its pool claims nothing).
	Draining bool
	// Forgotten counts the rows of long-gone nodes (and external workers)
	// deleted.
	Forgotten int
}

// Registry keeps a node's row fresh.
type Registry struct {
	cfg     Config
	host    string
	pid     int
	started time.Time
	log     *slog.Logger
	loop    *service.Loop[Pass]

	mu       sync.Mutex
	draining bool // as last applied to the pool
	offset   time.Duration
	skewed   bool // offset past the threshold, as last logged
}

// New validates cfg and returns a registry that does nothing until Start.
func New(cfg Config) (*Registry, error) {
	if cfg.Store == nil || cfg.Node == "" {
		return nil, errors.New("nodes: a registry needs a store and the node's name")
	}
	cfg.Refresh = cmp.Or(cfg.Refresh, RefreshDefault)
	cfg.Lease = cmp.Or(cfg.Lease, LeaseRefreshes*cfg.Refresh)
	cfg.Forget = cmp.Or(cfg.Forget, ForgetDefault)
	cfg.SkewThreshold = cmp.Or(cfg.SkewThreshold, SkewThresholdDefault)
	cfg.Version = cmp.Or(cfg.Version, BuildVersion())
	if cfg.Refresh < 0 || cfg.Lease <= cfg.Refresh {
		return nil, fmt.Errorf("nodes: the lease (%s) must be longer than the refresh interval (%s)", cfg.Lease, cfg.Refresh)
	}
	if cfg.Forget < cfg.Lease {
		return nil, fmt.Errorf("nodes: rows must be kept (%s) at least as long as the lease (%s)", cfg.Forget, cfg.Lease)
	}
	host, _ := os.Hostname()
	r := &Registry{
		cfg:     cfg,
		host:    host,
		pid:     os.Getpid(),
		started: cfg.Store.Now(),
		log:     cmp.Or(cfg.Logger, slog.Default()),
	}
	loop, err := service.New(service.Config[Pass]{Name: "nodes", Interval: cfg.Refresh, Logger: r.log}, r.Pass)
	if err != nil {
		return nil, err
	}
	r.loop = loop
	return r, nil
}

// Config returns the registry's configuration, defaults applied.
func (r *Registry) Config() Config { return r.cfg }

// Start refreshes the row now and every Refresh until Stop.
func (r *Registry) Start(ctx context.Context) error { return r.loop.Start(ctx) }

// Stop ends the refreshes (the row stays, and goes GONE after its lease,
// unless MarkStopped follows).
func (r *Registry) Stop() { r.loop.Stop() }

// Wake refreshes the row now.
func (r *Registry) Wake() { r.loop.Wake() }

// Draining reports whether the node was drained at its last refresh.
func (r *Registry) Draining() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.draining
}

// Pass is one refresh: it writes the node's row (creating it if need be),
// applies the row's drain flag to the pool, and, on the leading node,
// deletes the rows of nodes gone for longer than Forget.
func (r *Registry) Pass(ctx context.Context) (Pass, error) {
	ctx = auth.NewSystemContext(ctx)
	st := r.cfg.Store
	// The cluster's clock is the database's: measure this node's offset
	// to it again (store.SyncClock), before stamping the row with it.
	if sample, err := st.SyncClock(ctx); err != nil {
		r.log.Warn("could not read the database's clock; keeping the last offset", "err", err)
	} else {
		r.observe(sample.Offset)
	}
	now := st.Now()
	offset, skewed := r.Skew()
	var busy, total int
	if r.cfg.Pool != nil {
		busy, total = r.cfg.Pool.Load()
	}
	leading := r.cfg.Leading != nil && r.cfg.Leading()
	var draining bool
	err := st.Tx(ctx, func(tx *ent.Tx) error {
		n, err := tx.ClusterNode.Update().Where(clusternode.Name(r.cfg.Node)).
			SetHost(r.host).SetPid(r.pid).SetVersion(r.cfg.Version).SetRoles(r.cfg.Roles).
			SetStartedAt(r.started).SetLastSeenAt(now).SetExpiresAt(now.Add(r.cfg.Lease)).ClearStoppedAt().
			SetBusy(busy).SetTotal(total).SetLeading(leading).SetFiles(r.cfg.Files).
			SetClockOffsetMs(offset.Milliseconds()).SetClockSkewed(skewed).
			Save(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return tx.ClusterNode.Create().SetName(r.cfg.Node).
				SetHost(r.host).SetPid(r.pid).SetVersion(r.cfg.Version).SetRoles(r.cfg.Roles).
				SetStartedAt(r.started).SetLastSeenAt(now).SetExpiresAt(now.Add(r.cfg.Lease)).
				SetBusy(busy).SetTotal(total).SetLeading(leading).SetFiles(r.cfg.Files).
				SetClockOffsetMs(offset.Milliseconds()).SetClockSkewed(skewed).
				Exec(ctx)
		}
		row, err := tx.ClusterNode.Query().Where(clusternode.Name(r.cfg.Node)).Only(ctx)
		if err != nil {
			return err
		}
		draining = row.Draining
		return nil
	})
	if err != nil {
		return Pass{}, fmt.Errorf("refresh node %s: %w", r.cfg.Node, err)
	}
	res := Pass{Draining: draining}
	r.apply(draining)
	if leading {
		res.Forgotten, err = r.forget(ctx, now)
	}
	return res, err
}

// Skew is this node's wall clock's offset to the database's clock (the
// database's minus this node's), as the last refresh measured it, and
// whether it is past Config.SkewThreshold.
func (r *Registry) Skew() (offset time.Duration, past bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.offset, r.skewed
}

// SkewPast reports whether offset is past threshold either way.
func SkewPast(offset, threshold time.Duration) bool { return offset > threshold || -offset > threshold }

// observe records an offset, and logs when it goes past the threshold or
// comes back.
func (r *Registry) observe(offset time.Duration) {
	past := SkewPast(offset, r.cfg.SkewThreshold)
	r.mu.Lock()
	was := r.skewed
	r.offset, r.skewed = offset, past
	r.mu.Unlock()
	switch {
	case past && !was:
		r.log.Warn("this node's wall clock is off: the cluster runs on the database's clock, which this node reads through the offset; fix the node's time sync (NTP)",
			"offset_to_database", offset.Round(time.Millisecond).String(), "threshold", r.cfg.SkewThreshold.String())
	case !past && was:
		r.log.Info("this node's wall clock agrees with the database's again", "offset_to_database", offset.Round(time.Millisecond).String())
	}
}

// apply tells the pool to stop or resume claiming when the flag changed.
func (r *Registry) apply(draining bool) {
	r.mu.Lock()
	changed := r.draining != draining
	r.draining = draining
	r.mu.Unlock()
	if !changed {
		return
	}
	if r.cfg.Pool != nil {
		r.cfg.Pool.PauseClaiming(draining)
	}
	if draining {
		r.log.Info("drained: claiming no more work; running executions go on")
	} else {
		r.log.Info("undrained: claiming work again")
	}
}

// forget deletes the rows of nodes gone or stopped before now - Forget.
func (r *Registry) forget(ctx context.Context, now time.Time) (int, error) {
	var n int
	err := r.cfg.Store.Tx(ctx, func(tx *ent.Tx) (err error) {
		n, err = tx.ClusterNode.Delete().Where(clusternode.ExpiresAtLT(now.Add(-r.cfg.Forget))).Exec(ctx)
		if err != nil {
			return err
		}
		// The external workers gone as long.
		w, err := tx.ExternalWorker.Delete().Where(externalworker.ExpiresAtLT(now.Add(-r.cfg.Forget))).Exec(ctx)
		n += w
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("forget long-gone nodes: %w", err)
	}
	return n, nil
}

// MarkStopped says the node shut down cleanly: its row turns STOPPED at
// once rather than GONE after its lease. Called after Stop, once the pool
// has stopped.
func (r *Registry) MarkStopped(ctx context.Context) error {
	ctx = auth.NewSystemContext(ctx)
	now := r.cfg.Store.Now()
	var busy int
	if r.cfg.Pool != nil {
		busy, _ = r.cfg.Pool.Load()
	}
	err := r.cfg.Store.Tx(ctx, func(tx *ent.Tx) error {
		return tx.ClusterNode.Update().Where(clusternode.Name(r.cfg.Node)).
			SetStoppedAt(now).SetLastSeenAt(now).SetExpiresAt(now).SetBusy(busy).SetLeading(false).
			Exec(ctx)
	})
	if err != nil {
		return fmt.Errorf("mark node %s stopped: %w", r.cfg.Node, err)
	}
	return nil
}

// BuildVersion is the build this binary is: its module version and, when
// built from a checkout, the VCS revision (with +dirty for uncommitted
// changes).
func BuildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	parts := []string{}
	if v != "" {
		parts = append(parts, v)
	}
	if rev != "" {
		parts = append(parts, rev+dirty)
	}
	parts = append(parts, bi.GoVersion)
	return strings.Join(parts, " ")
}
