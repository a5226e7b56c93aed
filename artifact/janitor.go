package artifact

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"taskgraph/auth"
	"time"

	"taskgraph/ent"
	entartifact "taskgraph/ent/artifact"
)

// JanitorConfig configures a Janitor.
type JanitorConfig struct {
	// Interval between two passes. Default: JanitorIntervalDefault.
	Interval time.Duration
	// Batch is how many artifacts one statement removes. Default:
	// JanitorBatchDefault.
	Batch int
	// Leader, when set, is asked before each pass: with several nodes, one
	// janitor works at a time. Default: always.
	Leader func(ctx context.Context) (bool, error)
	// Logger receives the janitor's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Defaults of JanitorConfig.
const (
	JanitorIntervalDefault = 10 * time.Minute
	JanitorBatchDefault    = 500
)

// Janitor removes expired artifacts, files and rows, in batches.
type Janitor struct {
	cfg   JanitorConfig
	store *Store
	log   *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// NewJanitor validates cfg.
func NewJanitor(cfg JanitorConfig, s *Store) (*Janitor, error) {
	if s == nil {
		return nil, errors.New("janitor: no artifact store")
	}
	if cfg.Interval < 0 || cfg.Batch < 0 {
		return nil, errors.New("janitor: interval and batch must not be negative")
	}
	cfg.Interval = cmp.Or(cfg.Interval, JanitorIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, JanitorBatchDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Janitor{cfg: cfg, store: s, log: cfg.Logger.With("component", "janitor")}, nil
}

// JanitorResult counts what one pass did.
type JanitorResult struct {
	Removed int
}

// RunOnce removes every artifact expired by now, a batch at a time.
func (j *Janitor) RunOnce(ctx context.Context) (JanitorResult, error) {
	var res JanitorResult
	ctx = auth.NewSystemContext(ctx) // the janitor works for the whole node
	if j.cfg.Leader != nil {
		if led, err := j.cfg.Leader(ctx); err != nil || !led {
			return res, err
		}
	}
	now := j.store.Now()
	for ctx.Err() == nil {
		batch, err := j.store.client.Artifact.Query().
			Where(entartifact.ExpiresAtLT(now)).
			Order(ent.Asc(entartifact.FieldID)).
			Limit(j.cfg.Batch).
			All(ctx)
		if err != nil {
			return res, fmt.Errorf("janitor: list expired artifacts: %w", err)
		}
		if len(batch) == 0 {
			return res, nil
		}
		if err := j.store.delete(ctx, batch); err != nil {
			return res, fmt.Errorf("janitor: %w", err)
		}
		res.Removed += len(batch)
		if len(batch) < j.cfg.Batch {
			return res, nil
		}
	}
	return res, ctx.Err()
}

// Start runs passes every Interval until Stop.
func (j *Janitor) Start(ctx context.Context) {
	ctx, j.cancel = context.WithCancel(context.WithoutCancel(ctx))
	j.done = make(chan struct{})
	go func() {
		defer close(j.done)
		tick := time.NewTicker(j.cfg.Interval)
		defer tick.Stop()
		for {
			res, err := j.RunOnce(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				j.log.Error("janitor pass failed", "err", err)
			case res.Removed > 0:
				j.log.Info("expired artifacts removed", "count", res.Removed)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// Stop ends the loop and waits for the current pass.
func (j *Janitor) Stop() {
	j.once.Do(func() {
		if j.cancel != nil {
			j.cancel()
			<-j.done
		}
	})
}
