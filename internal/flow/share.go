package flow

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/ent/tenantflowcontrol"
	"github.com/taskgraph/taskgraph/ent/tenantflowstart"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
)

// A tenant's share of a type: its own pause, caps and rate, which hold its
// tasks back within what the type's own control leaves. The claim reads
// them with the type's (Gate.Admit); a type with a held tenant is claimed
// tenant by tenant (store's claim), so that a paused tenant's backlog is
// never read past.

// sharesOf returns the tenant controls of typ: every tenant's (tenant nil)
// or one tenant's, with their counts.
func (s *Service) sharesOf(ctx context.Context, typ string, tenant *string) ([]TenantControl, error) {
	sys := auth.NewSystemContext(ctx)
	q := s.store.Client().TenantFlowControl.Query().Where(tenantflowcontrol.TaskType(typ))
	if tenant != nil {
		q.Where(tenantflowcontrol.Tenant(*tenant))
	}
	rows, err := q.All(sys)
	if err != nil {
		return nil, fmt.Errorf("read tenant flow controls of %s: %w", typ, err)
	}
	out := make([]TenantControl, 0, len(rows))
	for _, r := range rows {
		c, err := s.share(ctx, r)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out, nil
}

// share is a tenant control row and where the tenant's instances stand.
func (s *Service) share(ctx context.Context, r *ent.TenantFlowControl) (TenantControl, error) {
	now := s.store.Now()
	c := TenantControl{Type: r.TaskType, Tenant: r.Tenant, MaxRunning: r.MaxRunning, MaxWaiting: r.MaxWaiting, RateLimit: r.RateLimit,
		RatePeriodSeconds: r.RatePeriodSeconds, UpdatedBy: r.UpdatedBy, UpdatedAt: &r.UpdatedAt}
	c.Paused = r.Paused && (r.PausedUntil == nil || r.PausedUntil.After(now))
	if c.Paused {
		c.PausedUntil, c.PausedBy, c.PausedByPlatform = r.PausedUntil, r.PausedBy, r.PausedByPlatform
	}
	counts, err := s.counts(ctx, r.TaskType, &r.Tenant)
	if err != nil {
		return c, err
	}
	c.Running, c.Waiting = counts[r.TaskType].running, counts[r.TaskType].waiting
	if r.RateLimit != nil {
		c.StartedInWindow, c.NextStartAt, err = s.tenantWindow(ctx, r.TaskType, r.Tenant, *r.RateLimit, r.RatePeriodSeconds, now)
		if err != nil {
			return c, err
		}
	}
	return c, nil
}

// tenantWindow reads a tenant's starts of typ (anyTypeOfTenant: of every
// type, its quota's) under a rate of limit per periodSeconds, and says how
// many the window counts at now and, if the rate holds the tenant back
// now, when the next may start.
func (s *Service) tenantWindow(ctx context.Context, typ, tenant string, limit, periodSeconds int, now time.Time) (int, *time.Time, error) {
	period := time.Duration(max(periodSeconds, 1)) * time.Second
	rows, err := s.store.Client().TenantFlowStart.Query().
		Where(tenantflowstart.TaskType(typ), tenantflowstart.Tenant(tenant), tenantflowstart.StartedAtGT(horizon(now, period))).
		All(auth.NewSystemContext(ctx))
	if err != nil {
		return 0, nil, fmt.Errorf("read starts of %q of tenant %q: %w", typ, tenant, err)
	}
	starts := make([]startRow, len(rows))
	for i, x := range rows {
		starts[i] = startRow{claimed: x.StartedAt, stamp: x.StartedAt, count: x.Count}
		if x.AdmittedAt != nil {
			starts[i].stamp = *x.AdmittedAt
		}
	}
	w := newRateWindow(limit, period, now, starts)
	if at := w.next(); at.After(now) {
		return w.inWindow(), &at, nil
	}
	return w.inWindow(), nil, nil
}

// actShare runs one audited change of tenant's share of typ for the
// viewer of ctx; tenant nil is the viewer's own tenant.
func (s *Service) actShare(ctx context.Context, entry audit.Entry, typ string, tenant *string, fn func(v auth.Viewer, tenant string) error) (TenantControl, error) {
	v, err := s.engine.Admit(ctx, 1)
	if err != nil {
		return TenantControl{}, err
	}
	t := v.Tenant
	if tenant != nil {
		t = *tenant
	}
	err = func() error {
		if err := v.AllowMutate("change flow control"); err != nil {
			return err
		}
		tt, ok := s.engine.Registry().Lookup(typ)
		if !ok {
			return &engine.ValidationError{Problems: []engine.Problem{{Field: "type", Message: fmt.Sprintf("unknown task type %q", typ)}}}
		}
		if err := mayChangeShare(v, typ, t, tt.Internal); err != nil {
			return err
		}
		return fn(v, t)
	}()
	if entry.Details == nil {
		entry.Details = map[string]any{}
	}
	entry.Details["type"] = typ
	entry.Details["tenant"] = t
	entry.Err = err
	s.engine.Record(ctx, entry)
	if err != nil {
		return TenantControl{}, err
	}
	s.mu.Lock()
	delete(s.shares, shareKey{typ, t})
	s.mu.Unlock()
	row, err := s.store.Client().TenantFlowControl.Query().Where(tenantflowcontrol.TaskType(typ), tenantflowcontrol.Tenant(t)).Only(auth.NewSystemContext(ctx))
	if err != nil {
		return TenantControl{}, fmt.Errorf("read tenant flow control of %s: %w", typ, err)
	}
	return s.share(ctx, row)
}

// upsertShare changes a tenant's row of a type, creating it if need be;
// check, when not nil, sees the row as it was (nil: none) first.
func (s *Service) upsertShare(ctx context.Context, v auth.Viewer, typ, tenant string, check func(*ent.TenantFlowControl) error, change func(m *ent.TenantFlowControlMutation)) error {
	ctx = auth.NewSystemContext(ctx)
	now := s.store.Now()
	write := func() error {
		return s.store.Tx(ctx, func(tx *ent.Tx) error {
			row, err := tx.TenantFlowControl.Query().Where(tenantflowcontrol.TaskType(typ), tenantflowcontrol.Tenant(tenant)).Only(ctx)
			if err != nil && !ent.IsNotFound(err) {
				return err
			}
			if check != nil {
				if err := check(row); err != nil {
					return err
				}
			}
			if row == nil {
				c := tx.TenantFlowControl.Create().SetTaskType(typ).SetTenant(tenant).SetUpdatedBy(v.User).SetUpdatedAt(now)
				change(c.Mutation())
				return c.Exec(ctx)
			}
			u := tx.TenantFlowControl.UpdateOne(row).SetUpdatedBy(v.User).SetUpdatedAt(now)
			change(u.Mutation())
			return u.Exec(ctx)
		})
	}
	err := write()
	if ent.IsConstraintError(err) {
		err = write() // created by another request meanwhile
	}
	if err != nil {
		var fe *auth.ForbiddenError
		if errors.As(err, &fe) {
			return err
		}
		return fmt.Errorf("write tenant flow control of %s: %w", typ, err)
	}
	s.release(ctx)
	return nil
}

// SetTenant replaces a tenant's caps and rate of a type (nil: none);
// tenant nil is the viewer's own. It takes effect at the next claim (the
// caps on running and the rate) and the next create (the cap on waiting).
func (s *Service) SetTenant(ctx context.Context, typ string, tenant *string, l TenantLimits) (TenantControl, error) {
	details := map[string]any{}
	for k, p := range map[string]*int{"maxRunning": l.MaxRunning, "maxWaiting": l.MaxWaiting, "rateLimit": l.RateLimit, "ratePeriodSeconds": l.RatePeriodSeconds} {
		if p != nil {
			details[k] = *p
		}
	}
	return s.actShare(ctx, audit.Entry{Action: audit.FlowControlSet, Details: details}, typ, tenant, func(v auth.Viewer, t string) error {
		ve := &engine.ValidationError{}
		if l.MaxRunning != nil && *l.MaxRunning < 1 {
			ve.Problems = append(ve.Problems, engine.Problem{Field: "maxRunning", Message: "must be at least 1 (to stop a tenant's share, pause it)"})
		}
		if l.MaxWaiting != nil && *l.MaxWaiting < 0 {
			ve.Problems = append(ve.Problems, engine.Problem{Field: "maxWaiting", Message: "must be at least 0"})
		}
		if l.RateLimit != nil && *l.RateLimit < 1 {
			ve.Problems = append(ve.Problems, engine.Problem{Field: "rateLimit", Message: "must be at least 1 (to stop a tenant's share, pause it)"})
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
		err := s.upsertShare(ctx, v, typ, t, nil, func(m *ent.TenantFlowControlMutation) {
			setOrClear(m.SetMaxRunning, m.ClearMaxRunning, l.MaxRunning)
			setOrClear(m.SetMaxWaiting, m.ClearMaxWaiting, l.MaxWaiting)
			setOrClear(m.SetRateLimit, m.ClearRateLimit, l.RateLimit)
			m.SetRatePeriodSeconds(period)
		})
		if err != nil || l.RateLimit != nil {
			return err
		}
		return s.store.Tx(ctx, func(tx *ent.Tx) error {
			_, err := tx.TenantFlowStart.Delete().Where(tenantflowstart.TaskType(typ), tenantflowstart.Tenant(t)).Exec(auth.NewSystemContext(ctx))
			return err
		})
	})
}

// PauseTenant stops every node claiming a tenant's tasks of a type (the
// viewer's own tenant's when tenant is nil), until resumed or until until.
func (s *Service) PauseTenant(ctx context.Context, typ string, tenant *string, until *time.Time) (TenantControl, error) {
	details := map[string]any{}
	if until != nil {
		details["until"] = until.UTC().Format(time.RFC3339)
	}
	return s.actShare(ctx, audit.Entry{Action: audit.TypePause, Details: details}, typ, tenant, func(v auth.Viewer, t string) error {
		if until != nil && !until.After(s.store.Now()) {
			return &engine.ValidationError{Problems: []engine.Problem{{Field: "until", Message: "must be in the future"}}}
		}
		check := func(row *ent.TenantFlowControl) error {
			if row != nil && row.Paused && row.PausedByPlatform && !platform(v) {
				return errPlatformPause(v, fmt.Sprintf("%s for tenant %q", typ, t))
			}
			return nil
		}
		return s.upsertShare(ctx, v, typ, t, check, func(m *ent.TenantFlowControlMutation) {
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

// ResumeTenant ends a tenant's pause of a type. A platform
// administrator's pause is lifted by a platform administrator only.
func (s *Service) ResumeTenant(ctx context.Context, typ string, tenant *string) (TenantControl, error) {
	return s.actShare(ctx, audit.Entry{Action: audit.TypeResume}, typ, tenant, func(v auth.Viewer, t string) error {
		check := func(row *ent.TenantFlowControl) error {
			if row != nil && row.Paused && row.PausedByPlatform && !platform(v) {
				return errPlatformPause(v, fmt.Sprintf("%s for tenant %q", typ, t))
			}
			return nil
		}
		return s.upsertShare(ctx, v, typ, t, check, func(m *ent.TenantFlowControlMutation) {
			m.SetPaused(false)
			m.ClearPausedUntil()
			m.SetPausedBy("")
			m.SetPausedByPlatform(false)
		})
	})
}

// shareState is a tenant's control of a type, read at most once per
// stateTTL (nil: the tenant has none).
func (s *Service) shareState(ctx context.Context, typ, tenant string) (*TenantControl, error) {
	k := shareKey{typ, tenant}
	s.mu.Lock()
	c, ok := s.shares[k]
	s.mu.Unlock()
	if ok && time.Since(c.at) < stateTTL {
		return c.c, nil
	}
	row, err := s.store.Client().TenantFlowControl.Query().Where(tenantflowcontrol.TaskType(typ), tenantflowcontrol.Tenant(tenant)).Only(auth.NewSystemContext(ctx))
	if err != nil && !ent.IsNotFound(err) {
		return nil, fmt.Errorf("read tenant flow control of %s: %w", typ, err)
	}
	var out *TenantControl
	if row != nil {
		sc, err := s.share(ctx, row)
		if err != nil {
			return nil, err
		}
		out = &sc
	}
	s.mu.Lock()
	s.shares[k] = cachedShare{at: time.Now(), c: out}
	s.mu.Unlock()
	return out, nil
}

// shareWait says why a tenant's share holds its waiting task back, or nil.
func shareWait(typ string, c *TenantControl) *Wait {
	if c == nil {
		return nil
	}
	tenant := c.Tenant
	who := fmt.Sprintf("tenant %q", c.Tenant)
	if c.Tenant != "" {
		who = "tenant " + c.Tenant
	}
	switch {
	case c.Paused:
		msg := fmt.Sprintf("%s is paused for %s by %s", typ, who, c.PausedBy)
		if c.PausedUntil != nil {
			msg += " until " + c.PausedUntil.UTC().Format(time.RFC3339)
		}
		return &Wait{Kind: Paused, Message: msg, Until: c.PausedUntil, Tenant: &tenant}
	case c.MaxRunning != nil && c.Running >= *c.MaxRunning:
		return &Wait{Kind: AtCap, Message: fmt.Sprintf("waiting: %s of %s at its cap %d/%d", typ, who, c.Running, *c.MaxRunning),
			Limit: *c.MaxRunning, Current: c.Running, Tenant: &tenant}
	case c.RateLimit != nil && c.NextStartAt != nil:
		msg := fmt.Sprintf("rate limited: %s of %s started %d of %d per %ds, next start at %s", typ, who, c.StartedInWindow, *c.RateLimit,
			c.RatePeriodSeconds, c.NextStartAt.UTC().Format(time.RFC3339))
		return &Wait{Kind: RateLimited, Message: msg, Until: c.NextStartAt, Limit: *c.RateLimit, Current: c.StartedInWindow, Tenant: &tenant}
	}
	return nil
}

// waitingOf counts, up to limit, a tenant's waiting instances of a type,
// through the (task_type, tenant, ...) claimable index.
func (s *Service) waitingOf(ctx context.Context, typ, tenant string, limit int) (int, error) {
	return s.store.Client().TaskInstance.Query().
		Where(taskinstance.TaskType(typ), taskinstance.Tenant(tenant), taskinstance.StatusIn(lifecycle.WaitingStatuses...)).
		Limit(limit).Count(auth.NewSystemContext(ctx))
}
