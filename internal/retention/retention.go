// Package retention purges finished tasks, with their instances and logs,
// once they are older than the configured age. It is off by default: history
// is the point of taskgraph, and deleting it is the operator's decision.
package retention

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/service"
	"github.com/taskgraph/taskgraph/internal/store"
)

// Config of a Purger.
type Config struct {
	// Age after which a finished task is purged. Zero: never.
	Age time.Duration
	// Interval between passes. Default: IntervalDefault.
	Interval time.Duration
	// Batch is how many tasks one transaction deletes. Default: BatchDefault.
	Batch int
	// Leader, when set, is asked before each pass (one node purges).
	Leader func(ctx context.Context) (bool, error)
	// Quiet, when set, keeps a failed pass out of the log when it returns
	// true (an outage the node's outage monitor counts and reports once).
	Quiet  func(error) bool
	Logger *slog.Logger
}

// Defaults of Config.
const (
	IntervalDefault = 10 * time.Minute
	BatchDefault    = 1000
)

// Purger deletes expired history: a service.Loop makes a Pass every
// Interval on the leading node. The first pass runs at Start: with passes
// ten minutes apart, a node restarted more often than that would otherwise
// never purge.
type Purger struct {
	*service.Loop[Result]

	cfg   Config
	store *store.Store
	log   *slog.Logger
}

// New validates cfg.
func New(cfg Config, s *store.Store) (*Purger, error) {
	if s == nil {
		return nil, errors.New("retention: no store")
	}
	if cfg.Age < 0 || cfg.Interval < 0 || cfg.Batch < 0 {
		return nil, errors.New("retention: negative configuration")
	}
	cfg.Interval = cmp.Or(cfg.Interval, IntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, BatchDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	p := &Purger{cfg: cfg, store: s, log: cfg.Logger.With("component", "retention")}
	var err error
	p.Loop, err = service.New(service.Config[Result]{
		Name: "retention", Interval: cfg.Interval,
		Leader: cfg.Leader, Quiet: cfg.Quiet, Logger: cfg.Logger,
	}, p.Pass)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Result says what one pass did.
type Result struct {
	Purged int       // finished tasks deleted
	Before time.Time // the cutoff: tasks finished before it were purged
}

// Pass purges, batch by batch, everything that expired, as the system,
// whether or not this node leads (the Loop asks Leader first).
func (p *Purger) Pass(ctx context.Context) (Result, error) {
	var res Result
	if p.cfg.Age == 0 {
		return res, nil
	}
	ctx = auth.NewSystemContext(ctx)
	res.Before = p.store.Now().Add(-p.cfg.Age)
	for {
		n, err := p.store.PurgeFinished(ctx, res.Before, p.cfg.Batch)
		res.Purged += n
		if err != nil {
			return res, err
		}
		if n < p.cfg.Batch {
			break
		}
	}
	if res.Purged > 0 {
		p.log.Info("purged finished tasks", "count", res.Purged, "finished_before", res.Before)
	}
	return res, nil
}

// Start runs passes until Stop. With Age zero (retention off) it does
// nothing.
func (p *Purger) Start(ctx context.Context) error {
	if p.cfg.Age == 0 {
		return nil
	}
	return p.Loop.Start(ctx)
}
