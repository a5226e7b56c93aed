// Package retention purges finished tasks, with their instances and logs,
// once they are older than the configured age. It is off by default: history
// is the point of taskgraph, and deleting it is the operator's decision.
package retention

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"taskgraph/store"
)

// Config of a Janitor.
type Config struct {
	// Age after which a finished task is purged. Zero: never.
	Age time.Duration
	// Interval between passes. Default: IntervalDefault.
	Interval time.Duration
	// Batch is how many tasks one transaction deletes. Default: BatchDefault.
	Batch int
	// Leader, when set, is asked before each pass (one node purges).
	Leader func(ctx context.Context) (bool, error)
	Logger *slog.Logger
}

// Defaults of Config.
const (
	IntervalDefault = 10 * time.Minute
	BatchDefault    = 1000
)

// Janitor deletes expired history.
type Janitor struct {
	cfg   Config
	store *store.Store
	log   *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// New validates cfg.
func New(cfg Config, s *store.Store) (*Janitor, error) {
	if cfg.Age < 0 || cfg.Interval < 0 || cfg.Batch < 0 {
		return nil, errors.New("retention: negative configuration")
	}
	cfg.Interval = cmp.Or(cfg.Interval, IntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, BatchDefault)
	return &Janitor{cfg: cfg, store: s, log: cmp.Or(cfg.Logger, slog.Default()).With("component", "retention")}, nil
}

// RunOnce purges, batch by batch, everything that expired, and returns how
// many tasks it deleted.
func (j *Janitor) RunOnce(ctx context.Context) (int, error) {
	if j.cfg.Age == 0 {
		return 0, nil
	}
	if j.cfg.Leader != nil {
		if led, err := j.cfg.Leader(ctx); err != nil || !led {
			return 0, err
		}
	}
	cutoff := j.store.Now().Add(-j.cfg.Age)
	total := 0
	for {
		n, err := j.store.PurgeFinished(ctx, cutoff, j.cfg.Batch)
		total += n
		if err != nil {
			return total, err
		}
		if n < j.cfg.Batch {
			break
		}
	}
	if total > 0 {
		j.log.Info("purged finished tasks", "count", total, "finished_before", cutoff)
	}
	return total, nil
}

// Start runs passes until Stop. With Age zero it does nothing.
func (j *Janitor) Start(ctx context.Context) {
	if j.cfg.Age == 0 {
		return
	}
	ctx, j.cancel = context.WithCancel(context.WithoutCancel(ctx))
	j.done = make(chan struct{})
	go func() {
		defer close(j.done)
		tick := time.NewTicker(j.cfg.Interval)
		defer tick.Stop()
		for {
			if _, err := j.RunOnce(ctx); err != nil && ctx.Err() == nil {
				j.log.Error("retention pass failed", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// Stop ends the loop.
func (j *Janitor) Stop() {
	j.once.Do(func() {
		if j.cancel != nil {
			j.cancel()
			<-j.done
		}
	})
}
