package artifact

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	entartifact "github.com/taskgraph/taskgraph/ent/artifact"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/service"
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
	// Quiet, when set, keeps a failed pass out of the log when it returns
	// true (an outage the node's outage monitor counts and reports once).
	Quiet func(error) bool
	// Logger receives the janitor's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Defaults of JanitorConfig.
const (
	JanitorIntervalDefault = 10 * time.Minute
	JanitorBatchDefault    = 500
)

// Janitor removes expired artifacts, files and rows, in batches: a
// service.Loop makes a Pass every Interval on the leading node. The first
// pass runs at Start: with passes ten minutes apart, a node restarted more
// often than that would otherwise never clean up (an expired artifact is
// not served meanwhile: it only takes room).
type Janitor struct {
	*service.Loop[JanitorResult]

	cfg   JanitorConfig
	store *Store
	log   *slog.Logger
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
	j := &Janitor{cfg: cfg, store: s, log: cfg.Logger.With("component", "janitor")}
	var err error
	j.Loop, err = service.New(service.Config[JanitorResult]{
		Name: "janitor", Interval: cfg.Interval,
		Leader: cfg.Leader, Quiet: cfg.Quiet, Logger: cfg.Logger,
	}, j.Pass)
	if err != nil {
		return nil, err
	}
	return j, nil
}

// JanitorResult counts what one pass did.
type JanitorResult struct {
	Removed int
}

// Pass removes every artifact expired by now, a batch at a time, as the
// system (the janitor works for the whole node), whether or not this node
// leads (the Loop asks Leader first).
func (j *Janitor) Pass(ctx context.Context) (res JanitorResult, err error) {
	ctx = auth.NewSystemContext(ctx)
	defer func() {
		if res.Removed > 0 {
			j.log.Info("expired artifacts removed", "count", res.Removed)
		}
	}()
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
