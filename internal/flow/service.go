package flow

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/flowcontrol"
	"github.com/taskgraph/taskgraph/ent/flowstart"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/store"
)

// Limits of the settings.
const (
	MaxRatePeriodSeconds = 24 * 3600
	// stateTTL is how long Service keeps a type's state for WaitReason:
	// a page of fifty waiting tasks of one type costs one read.
	stateTTL = time.Second
)

// Control is a task type's flow settings and where it stands.
type Control struct {
	Type string
	// MaxRunning caps the type's EXECUTING instances across all nodes.
	MaxRunning *int
	// RateLimit allows at most this many starts in any window of
	// RatePeriodSeconds.
	RateLimit         *int
	RatePeriodSeconds int
	// Paused is whether the type is paused now (a pause whose time has
	// passed is over); PausedUntil ends it by itself.
	Paused      bool
	PausedUntil *time.Time
	// Running and Waiting count its instances now; StartedInWindow its
	// starts stamped in the current rate window (the window of the
	// period ending now).
	Running, Waiting, StartedInWindow int
	// NextStartAt is when the rate limit lets the next instance start,
	// while it holds the type back.
	NextStartAt *time.Time
	UpdatedBy   string
	UpdatedAt   *time.Time
}

// Limits are the settings Set writes; nil removes a limit.
type Limits struct {
	MaxRunning        *int
	RateLimit         *int
	RatePeriodSeconds *int
}

// Service reads and changes flow settings on behalf of the viewer of its
// context: every viewer reads them, operators and admins change them, and
// every change is audited.
type Service struct {
	store  *store.Store
	engine *engine.Engine

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	at time.Time
	c  Control
}

// NewService returns a Service.
func NewService(e *engine.Engine) *Service {
	return &Service{store: e.Store(), engine: e, cache: map[string]cached{}}
}

// List returns every registered type's control, and those of types
// with settings that are no longer registered, by name.
func (s *Service) List(ctx context.Context) ([]Control, error) {
	if _, err := auth.Require(ctx); err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, n := range s.engine.Registry().Names() {
		names[n] = true
	}
	rows, err := s.store.Client().FlowControl.Query().All(auth.NewSystemContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("read flow controls: %w", err)
	}
	byType := map[string]*ent.FlowControl{}
	for _, r := range rows {
		byType[r.TaskType] = r
		names[r.TaskType] = true
	}
	counts, err := s.counts(ctx, "")
	if err != nil {
		return nil, err
	}
	var out []Control
	for n := range names {
		c, err := s.control(ctx, n, byType[n], counts[n])
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, nil
}

// Get returns one type's control.
func (s *Service) Get(ctx context.Context, typ string) (Control, error) {
	if _, err := auth.Require(ctx); err != nil {
		return Control{}, err
	}
	return s.get(ctx, typ)
}

func (s *Service) get(ctx context.Context, typ string) (Control, error) {
	row, err := s.store.Client().FlowControl.Query().Where(flowcontrol.TaskType(typ)).Only(auth.NewSystemContext(ctx))
	if err != nil && !ent.IsNotFound(err) {
		return Control{}, fmt.Errorf("read flow control of %s: %w", typ, err)
	}
	counts, err := s.counts(ctx, typ)
	if err != nil {
		return Control{}, err
	}
	c, err := s.control(ctx, typ, row, counts[typ])
	if err != nil {
		return Control{}, err
	}
	s.mu.Lock()
	s.cache[typ] = cached{at: time.Now(), c: c}
	s.mu.Unlock()
	return c, nil
}

// liveCounts are a type's instances by live status.
type liveCounts struct{ running, waiting int }

// counts counts live instances per type (of one type, unless typ is
// empty), whoever owns them: the settings are the cluster's.
func (s *Service) counts(ctx context.Context, typ string) (map[string]liveCounts, error) {
	var rows []struct {
		Type   string           `json:"task_type"`
		Status lifecycle.Status `json:"status"`
		Count  int              `json:"count"`
	}
	q := s.store.Client().TaskInstance.Query().Where(taskinstance.StatusIn(lifecycle.LiveStatuses...))
	if typ != "" {
		q.Where(taskinstance.TaskType(typ))
	}
	if err := q.GroupBy(taskinstance.FieldTaskType, taskinstance.FieldStatus).
		Aggregate(ent.Count()).
		Scan(auth.NewSystemContext(ctx), &rows); err != nil {
		return nil, fmt.Errorf("count live instances: %w", err)
	}
	out := map[string]liveCounts{}
	for _, r := range rows {
		c := out[r.Type]
		if r.Status == lifecycle.Executing {
			c.running += r.Count
		} else {
			c.waiting += r.Count
		}
		out[r.Type] = c
	}
	return out, nil
}

func (s *Service) control(ctx context.Context, typ string, row *ent.FlowControl, n liveCounts) (Control, error) {
	now := s.store.Now()
	c := Control{Type: typ, RatePeriodSeconds: 1, Running: n.running, Waiting: n.waiting}
	if row == nil {
		return c, nil
	}
	c.MaxRunning, c.RateLimit, c.RatePeriodSeconds = row.MaxRunning, row.RateLimit, row.RatePeriodSeconds
	c.Paused = row.Paused && (row.PausedUntil == nil || row.PausedUntil.After(now))
	if c.Paused {
		c.PausedUntil = row.PausedUntil
	}
	c.UpdatedBy, c.UpdatedAt = row.UpdatedBy, &row.UpdatedAt
	if row.RateLimit != nil {
		period := time.Duration(max(row.RatePeriodSeconds, 1)) * time.Second
		rows, err := s.store.Client().FlowStart.Query().
			Where(flowstart.TaskType(typ), flowstart.StartedAtGT(horizon(now, period))).
			All(auth.NewSystemContext(ctx))
		if err != nil {
			return c, fmt.Errorf("read starts of %s: %w", typ, err)
		}
		starts := make([]startRow, len(rows))
		for i, r := range rows {
			starts[i] = startRow{claimed: r.StartedAt, stamp: r.StartedAt, count: r.Count}
			if r.AdmittedAt != nil {
				starts[i].stamp = *r.AdmittedAt
			}
		}
		w := newRateWindow(*row.RateLimit, period, now, starts)
		c.StartedInWindow = w.inWindow()
		if at := w.next(); at.After(now) {
			c.NextStartAt = &at
		}
	}
	return c, nil
}

// act runs one audited change for the viewer of ctx.
func (s *Service) act(ctx context.Context, entry audit.Entry, typ string, fn func(v auth.Viewer) error) (Control, error) {
	v, err := s.engine.Admit(ctx, 1)
	if err != nil {
		return Control{}, err
	}
	err = func() error {
		if err := v.AllowMutate("change flow control"); err != nil {
			return err
		}
		if _, ok := s.engine.Registry().Lookup(typ); !ok {
			return &engine.ValidationError{Problems: []engine.Problem{{Field: "type", Message: fmt.Sprintf("unknown task type %q", typ)}}}
		}
		return fn(v)
	}()
	if entry.Details == nil {
		entry.Details = map[string]any{}
	}
	entry.Details["type"] = typ
	entry.Err = err
	s.engine.Record(ctx, entry)
	if err != nil {
		return Control{}, err
	}
	return s.get(ctx, typ)
}

// upsert changes a type's row, creating it if need be.
func (s *Service) upsert(ctx context.Context, v auth.Viewer, typ string, change func(m *ent.FlowControlMutation)) error {
	ctx = auth.NewSystemContext(ctx)
	now := s.store.Now()
	write := func() error {
		return s.store.Tx(ctx, func(tx *ent.Tx) error {
			row, err := tx.FlowControl.Query().Where(flowcontrol.TaskType(typ)).Only(ctx)
			switch {
			case ent.IsNotFound(err):
				c := tx.FlowControl.Create().SetTaskType(typ).SetUpdatedBy(v.User).SetUpdatedAt(now)
				change(c.Mutation())
				return c.Exec(ctx)
			case err != nil:
				return err
			}
			u := tx.FlowControl.UpdateOne(row).SetUpdatedBy(v.User).SetUpdatedAt(now)
			change(u.Mutation())
			return u.Exec(ctx)
		})
	}
	err := write()
	if ent.IsConstraintError(err) {
		// Created by another request meanwhile: update it.
		err = write()
	}
	if err != nil {
		return fmt.Errorf("write flow control of %s: %w", typ, err)
	}
	return nil
}

// Set replaces a type's cap and rate limit (nil: none). It takes effect
// at the next claim, on every node.
func (s *Service) Set(ctx context.Context, typ string, l Limits) (Control, error) {
	details := map[string]any{}
	if l.MaxRunning != nil {
		details["maxRunning"] = *l.MaxRunning
	}
	if l.RateLimit != nil {
		details["rateLimit"] = *l.RateLimit
	}
	if l.RatePeriodSeconds != nil {
		details["ratePeriodSeconds"] = *l.RatePeriodSeconds
	}
	return s.act(ctx, audit.Entry{Action: audit.FlowControlSet, Details: details}, typ, func(v auth.Viewer) error {
		ve := &engine.ValidationError{}
		if l.MaxRunning != nil && *l.MaxRunning < 1 {
			ve.Problems = append(ve.Problems, engine.Problem{Field: "maxRunning", Message: "must be at least 1 (to stop a type, pause it)"})
		}
		if l.RateLimit != nil && *l.RateLimit < 1 {
			ve.Problems = append(ve.Problems, engine.Problem{Field: "rateLimit", Message: "must be at least 1 (to stop a type, pause it)"})
		}
		period := 1
		if l.RatePeriodSeconds != nil {
			period = *l.RatePeriodSeconds
			if period < 1 || period > MaxRatePeriodSeconds {
				ve.Problems = append(ve.Problems, engine.Problem{Field: "ratePeriodSeconds", Message: fmt.Sprintf("must be between 1 and %d", MaxRatePeriodSeconds)})
			}
		}
		if len(ve.Problems) > 0 {
			return ve
		}
		err := s.upsert(ctx, v, typ, func(m *ent.FlowControlMutation) {
			setOrClear(m.SetMaxRunning, m.ClearMaxRunning, l.MaxRunning)
			setOrClear(m.SetRateLimit, m.ClearRateLimit, l.RateLimit)
			m.SetRatePeriodSeconds(period)
		})
		if err != nil || l.RateLimit != nil {
			return err
		}
		// No rate limit: its window's record goes.
		return s.store.Tx(ctx, func(tx *ent.Tx) error {
			_, err := tx.FlowStart.Delete().Where(flowstart.TaskType(typ)).Exec(auth.NewSystemContext(ctx))
			return err
		})
	})
}

func setOrClear(set func(int), clear func(), v *int) {
	if v == nil {
		clear()
		return
	}
	set(*v)
}

// Pause stops every node claiming the type, until resumed or until
// until, when given. Running instances go on.
func (s *Service) Pause(ctx context.Context, typ string, until *time.Time) (Control, error) {
	details := map[string]any{}
	if until != nil {
		details["until"] = until.UTC().Format(time.RFC3339)
	}
	return s.act(ctx, audit.Entry{Action: audit.TypePause, Details: details}, typ, func(v auth.Viewer) error {
		if until != nil && !until.After(s.store.Now()) {
			return &engine.ValidationError{Problems: []engine.Problem{{Field: "until", Message: "must be in the future"}}}
		}
		return s.upsert(ctx, v, typ, func(m *ent.FlowControlMutation) {
			m.SetPaused(true)
			if until != nil {
				m.SetPausedUntil(until.UTC().Truncate(time.Microsecond))
			} else {
				m.ClearPausedUntil()
			}
		})
	})
}

// Resume ends a type's pause.
func (s *Service) Resume(ctx context.Context, typ string) (Control, error) {
	return s.act(ctx, audit.Entry{Action: audit.TypeResume}, typ, func(v auth.Viewer) error {
		return s.upsert(ctx, v, typ, func(m *ent.FlowControlMutation) {
			m.SetPaused(false)
			m.ClearPausedUntil()
		})
	})
}

// WaitKind says what holds a waiting task back.
type WaitKind string

// Reasons a task waits.
const (
	NotDue      WaitKind = "NOT_DUE"      // its run_at (a backoff, a later start) has not come
	Paused      WaitKind = "PAUSED"       // its type is paused
	AtCap       WaitKind = "AT_CAP"       // its type runs as many as its cap allows
	RateLimited WaitKind = "RATE_LIMITED" // its type started as many as its rate allows
)

// Wait is why a waiting task is held back.
type Wait struct {
	Kind    WaitKind
	Message string
	// Until is when the reason ends by itself, if it does.
	Until *time.Time
	// Limit and Current are the cap or rate and where the type stands.
	Limit, Current int
}

// WaitReason says why a waiting task is not running, or nil when nothing
// holds it back (it waits for a free worker) or it is not waiting.
func (s *Service) WaitReason(ctx context.Context, tk *ent.Task) (*Wait, error) {
	if tk.Status != lifecycle.Pending && tk.Status != lifecycle.RetryPending {
		return nil, nil
	}
	now := s.store.Now()
	runAt := tk.RunAt
	if tk.Status == lifecycle.RetryPending {
		in, err := s.store.Client().TaskInstance.Query().
			Where(taskinstance.TaskID(tk.ID), taskinstance.StatusEQ(lifecycle.RetryPending)).
			Only(auth.NewSystemContext(ctx))
		if err != nil && !ent.IsNotFound(err) {
			return nil, fmt.Errorf("read waiting instance of task %d: %w", tk.ID, err)
		}
		if in != nil {
			runAt = in.RunAt
		}
	}
	if runAt.After(now) {
		what := "starts at"
		if tk.Status == lifecycle.RetryPending {
			what = "retry backoff until"
		}
		return &Wait{Kind: NotDue, Message: fmt.Sprintf("%s %s", what, runAt.UTC().Format(time.RFC3339)), Until: &runAt}, nil
	}
	c, err := s.state(ctx, tk.Type)
	if err != nil {
		return nil, err
	}
	switch {
	case c.Paused && c.PausedUntil != nil:
		return &Wait{Kind: Paused, Message: fmt.Sprintf("%s is paused until %s", tk.Type, c.PausedUntil.UTC().Format(time.RFC3339)), Until: c.PausedUntil}, nil
	case c.Paused:
		return &Wait{Kind: Paused, Message: fmt.Sprintf("%s is paused", tk.Type)}, nil
	case c.MaxRunning != nil && c.Running >= *c.MaxRunning:
		return &Wait{Kind: AtCap, Message: fmt.Sprintf("waiting: %s at its cap %d/%d", tk.Type, c.Running, *c.MaxRunning), Limit: *c.MaxRunning, Current: c.Running}, nil
	case c.RateLimit != nil && c.NextStartAt != nil:
		msg := fmt.Sprintf("rate limited: %s started %d of %d per %ds", tk.Type, c.StartedInWindow, *c.RateLimit, c.RatePeriodSeconds)
		if c.NextStartAt != nil {
			msg += ", next start at " + c.NextStartAt.UTC().Format(time.RFC3339)
		}
		return &Wait{Kind: RateLimited, Message: msg, Until: c.NextStartAt, Limit: *c.RateLimit, Current: c.StartedInWindow}, nil
	}
	return nil, nil
}

// state is a type's control, read at most once per stateTTL.
func (s *Service) state(ctx context.Context, typ string) (Control, error) {
	s.mu.Lock()
	c, ok := s.cache[typ]
	s.mu.Unlock()
	if ok && time.Since(c.at) < stateTTL {
		return c.c, nil
	}
	return s.get(ctx, typ)
}
