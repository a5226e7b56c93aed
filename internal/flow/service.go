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
	// PausedBy is who paused it, while paused.
	PausedBy  string
	UpdatedBy string
	UpdatedAt *time.Time
	// Shares are the tenants' controls of the type the viewer may see:
	// every tenant's for a platform administrator, the viewer's own
	// tenant's for anyone else.
	Shares []TenantControl
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
//
// Who changes what: a type's own (cluster-wide) control is changed by
// platform administrators only, or by the admins of the empty tenant of a
// deployment without tenants (one that names no platform administrator,
// Tenanted false); an internal type's (alert.deliver, bulk.action...), by
// platform administrators only. A tenant's admin changes their tenant's
// share of a type (SetTenant, PauseTenant, ResumeTenant); a platform
// administrator, any tenant's. A platform administrator's pause is lifted
// by a platform administrator only.
type Service struct {
	store    *store.Store
	engine   *engine.Engine
	tenanted bool
	released func(context.Context)

	mu     sync.Mutex
	cache  map[string]cached
	shares map[shareKey]cachedShare
	quotas map[string]cachedQuotaWait
}

type cached struct {
	at time.Time
	c  Control
}

type cachedShare struct {
	at time.Time
	c  *TenantControl
}

type cachedQuotaWait struct {
	at time.Time
	w  *Wait
}

// Option configures a Service.
type Option func(*Service)

// Tenanted says whether the deployment has tenants (it names platform
// administrators): then only those change a type's own control.
func Tenanted(yes bool) Option { return func(s *Service) { s.tenanted = yes } }

// OnRelease sets what a change of a control that may release waiting
// tasks calls after it commits (a type or tenant resumed, a cap or rate
// set): the deployment wakes its worker pools with it, so that released
// work starts at once instead of at the next poll.
func OnRelease(f func(context.Context)) Option { return func(s *Service) { s.released = f } }

// release calls the OnRelease hook.
func (s *Service) release(ctx context.Context) {
	if s.released != nil {
		s.released(ctx)
	}
}

// NewService returns a Service.
func NewService(e *engine.Engine, opts ...Option) *Service {
	s := &Service{store: e.Store(), engine: e, cache: map[string]cached{}, shares: map[shareKey]cachedShare{}, quotas: map[string]cachedQuotaWait{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// TenantControl is one tenant's share of a task type: its own pause, caps
// and rate, and where the tenant's instances of the type stand.
type TenantControl struct {
	Type, Tenant string
	// MaxRunning caps the tenant's EXECUTING instances of the type;
	// MaxWaiting its waiting ones (a create beyond it is refused).
	MaxRunning, MaxWaiting *int
	// RateLimit allows at most this many starts of the tenant's tasks of
	// the type in any window of RatePeriodSeconds.
	RateLimit         *int
	RatePeriodSeconds int
	// Paused is whether the tenant's share is paused now; PausedBy who
	// paused it, PausedByPlatform whether a platform administrator did
	// (then only one may resume it).
	Paused           bool
	PausedUntil      *time.Time
	PausedBy         string
	PausedByPlatform bool
	// Running and Waiting count the tenant's instances of the type now;
	// StartedInWindow its starts in the current window of its rate.
	Running, Waiting, StartedInWindow int
	NextStartAt                       *time.Time
	UpdatedBy                         string
	UpdatedAt                         *time.Time
}

// TenantLimits are the settings SetTenant writes; nil removes a limit.
type TenantLimits struct {
	MaxRunning, MaxWaiting, RateLimit *int
	RatePeriodSeconds                 *int
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
	v, _ := auth.FromContext(ctx)
	counts, err := s.counts(ctx, "", s.scope(v))
	if err != nil {
		return nil, err
	}
	var out []Control
	for n := range names {
		c, err := s.control(ctx, n, byType[n], counts[n])
		if err != nil {
			return nil, err
		}
		if c.Shares, err = s.sharesOf(ctx, n, s.scope(v)); err != nil {
			return nil, err
		}
		out = append(out, s.scoped(v, c))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, nil
}

// Get returns one type's control, its counts those of the viewer's tenant
// unless the viewer sees every tenant.
func (s *Service) Get(ctx context.Context, typ string) (Control, error) {
	v, err := auth.Require(ctx)
	if err != nil {
		return Control{}, err
	}
	return s.read(ctx, v, typ)
}

// read is typ's control as v may see it.
func (s *Service) read(ctx context.Context, v auth.Viewer, typ string) (Control, error) {
	c, err := s.get(ctx, typ)
	if err != nil {
		return c, err
	}
	if t := s.scope(v); t != nil {
		counts, err := s.counts(ctx, typ, t)
		if err != nil {
			return c, err
		}
		c.Running, c.Waiting = counts[typ].running, counts[typ].waiting
	}
	c.Shares, err = s.sharesOf(ctx, typ, s.scope(v))
	return s.scoped(v, c), err
}

// scope is the tenant whose counts v reads: nil for every tenant's (a
// platform administrator's, or anyone's in a deployment without tenants).
func (s *Service) scope(v auth.Viewer) *string {
	if v.SeesEveryTenant() || !s.tenanted {
		return nil
	}
	return &v.Tenant
}

// scoped hides from v what counts other tenants' work when v reads its own
// tenant's only: the starts in the type's rate window.
func (s *Service) scoped(v auth.Viewer, c Control) Control {
	if s.scope(v) != nil {
		c.StartedInWindow = 0
	}
	return c
}

// get is typ's control with the cluster's counts, as the waiting reasons
// read it (and cache it).
func (s *Service) get(ctx context.Context, typ string) (Control, error) {
	c, err := s.load(ctx, typ, nil)
	if err != nil {
		return c, err
	}
	s.mu.Lock()
	s.cache[typ] = cached{at: time.Now(), c: c}
	s.mu.Unlock()
	return c, nil
}

func (s *Service) load(ctx context.Context, typ string, tenant *string) (Control, error) {
	row, err := s.store.Client().FlowControl.Query().Where(flowcontrol.TaskType(typ)).Only(auth.NewSystemContext(ctx))
	if err != nil && !ent.IsNotFound(err) {
		return Control{}, fmt.Errorf("read flow control of %s: %w", typ, err)
	}
	counts, err := s.counts(ctx, typ, tenant)
	if err != nil {
		return Control{}, err
	}
	return s.control(ctx, typ, row, counts[typ])
}

// liveCounts are a type's instances by live status.
type liveCounts struct{ running, waiting int }

// counts counts live instances per type (of one type, unless typ is
// empty), of one tenant's or (tenant nil) of every tenant's.
func (s *Service) counts(ctx context.Context, typ string, tenant *string) (map[string]liveCounts, error) {
	var rows []struct {
		Type   string           `json:"task_type"`
		Status lifecycle.Status `json:"status"`
		Count  int              `json:"count"`
	}
	q := s.store.Client().TaskInstance.Query().Where(taskinstance.StatusIn(lifecycle.LiveStatuses...))
	if typ != "" {
		q.Where(taskinstance.TaskType(typ))
	}
	if tenant != nil {
		q.Where(taskinstance.Tenant(*tenant))
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
		c.PausedUntil, c.PausedBy = row.PausedUntil, row.PausedBy
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
		t, ok := s.engine.Registry().Lookup(typ)
		if !ok {
			return &engine.ValidationError{Problems: []engine.Problem{{Field: "type", Message: fmt.Sprintf("unknown task type %q", typ)}}}
		}
		if err := s.mayChangeType(v, typ, t.Internal); err != nil {
			return err
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
	if _, err := s.get(ctx, typ); err != nil { // the waiting reasons' cache
		return Control{}, err
	}
	return s.read(ctx, v, typ)
}

// platform reports whether v administers every tenant (a platform
// administrator, an open server's local viewer, the process itself).
func platform(v auth.Viewer) bool { return v.SeesEveryTenant() }

// mayChangeType says whether v may change typ's own control, which holds
// every tenant's tasks.
func (s *Service) mayChangeType(v auth.Viewer, typ string, internal bool) error {
	switch {
	case platform(v):
		return nil
	case internal:
		return &auth.ForbiddenError{Role: v.Role, Action: fmt.Sprintf("change the flow control of %s, a type the system runs for itself (platform administrators only)", typ)}
	case v.Role == auth.RoleAdmin && v.Tenant == "" && !s.tenanted:
		return nil
	}
	return &auth.ForbiddenError{Role: v.Role, Action: fmt.Sprintf("change the flow control of %s for every tenant (platform administrators only; a tenant's admin changes their tenant's share)", typ)}
}

// mayChangeShare says whether v may change tenant's share of typ.
func mayChangeShare(v auth.Viewer, typ, tenant string, internal bool) error {
	switch {
	case platform(v):
		return nil
	case internal:
		return &auth.ForbiddenError{Role: v.Role, Action: fmt.Sprintf("change the flow control of %s, a type the system runs for itself (platform administrators only)", typ)}
	case v.Role == auth.RoleAdmin && v.Tenant == tenant:
		return nil
	case v.Role == auth.RoleAdmin:
		return &auth.ForbiddenError{Role: v.Role, Action: fmt.Sprintf("change another tenant's share of %s", typ)}
	}
	return &auth.ForbiddenError{Role: v.Role, Action: fmt.Sprintf("change tenant %q's share of %s (its admins only)", tenant, typ)}
}

// errPlatformPause is a pause only a platform administrator may lift.
func errPlatformPause(v auth.Viewer, what string) error {
	return &auth.ForbiddenError{Role: v.Role, Action: "lift a platform administrator's pause of " + what}
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
	s.release(ctx)
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
			m.SetPausedBy(v.User)
			m.SetPausedByPlatform(platform(v))
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
		row, err := s.store.Client().FlowControl.Query().Where(flowcontrol.TaskType(typ)).Only(auth.NewSystemContext(ctx))
		if err != nil && !ent.IsNotFound(err) {
			return fmt.Errorf("read flow control of %s: %w", typ, err)
		}
		if row != nil && row.Paused && row.PausedByPlatform && !platform(v) {
			return errPlatformPause(v, typ)
		}
		return s.upsert(ctx, v, typ, func(m *ent.FlowControlMutation) {
			m.SetPaused(false)
			m.ClearPausedUntil()
			m.SetPausedBy("")
			m.SetPausedByPlatform(false)
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
	// Tenant is the tenant whose share's control holds the task; nil when
	// the type's own control does (it holds every tenant's).
	Tenant *string
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
	sh, err := s.shareState(ctx, tk.Type, tk.Tenant)
	if err != nil {
		return nil, err
	}
	by := ""
	if c.PausedBy != "" {
		by = " by " + c.PausedBy
	}
	switch {
	case c.Paused && c.PausedUntil != nil:
		return &Wait{Kind: Paused, Message: fmt.Sprintf("%s is paused for every tenant%s until %s", tk.Type, by, c.PausedUntil.UTC().Format(time.RFC3339)), Until: c.PausedUntil}, nil
	case c.Paused:
		return &Wait{Kind: Paused, Message: fmt.Sprintf("%s is paused for every tenant%s", tk.Type, by)}, nil
	case sh != nil && sh.Paused:
		return shareWait(tk.Type, sh), nil
	case c.MaxRunning != nil && c.Running >= *c.MaxRunning:
		return &Wait{Kind: AtCap, Message: fmt.Sprintf("waiting: %s at its cap %d/%d", tk.Type, c.Running, *c.MaxRunning), Limit: *c.MaxRunning, Current: c.Running}, nil
	case c.RateLimit != nil && c.NextStartAt != nil:
		msg := fmt.Sprintf("rate limited: %s started %d of %d per %ds", tk.Type, c.StartedInWindow, *c.RateLimit, c.RatePeriodSeconds)
		if c.NextStartAt != nil {
			msg += ", next start at " + c.NextStartAt.UTC().Format(time.RFC3339)
		}
		return &Wait{Kind: RateLimited, Message: msg, Until: c.NextStartAt, Limit: *c.RateLimit, Current: c.StartedInWindow}, nil
	}
	if w := shareWait(tk.Type, sh); w != nil {
		return w, nil
	}
	return s.quotaWait(ctx, tk.Tenant, now)
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
