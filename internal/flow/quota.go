package flow

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	entschedule "github.com/taskgraph/taskgraph/ent/schedule"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/ent/tenantflowstart"
	"github.com/taskgraph/taskgraph/ent/tenantquota"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/store"
)

// A tenant's quota (tenant_quotas): what one tenant may hold at once
// across all its task types. The store refuses a create beyond its cap on
// waiting instances (store.TenantQuotaError), package schedule a schedule
// beyond its cap on enabled schedules or below its interval floor; here it
// is read and set. Platform administrators set it (or, in a deployment
// without tenants, the admins of the empty tenant); any viewer reads their
// own tenant's, a platform administrator every tenant's.

// MaxQuotaIntervalSeconds is the highest interval floor a quota sets (the
// longest interval a schedule may have).
const MaxQuotaIntervalSeconds = 366 * 24 * 3600

// TenantQuota is a tenant's quota and what the tenant holds now.
type TenantQuota struct {
	Tenant string
	// MaxWaiting caps the tenant's waiting instances (PENDING,
	// RETRY_PENDING) of every type; MaxSchedules its enabled (not paused)
	// schedules; MinScheduleIntervalSeconds how often a schedule of its
	// fires. Nil: no such limit of the tenant's (the interval floor then
	// is the deployment's).
	MaxWaiting, MaxSchedules, MinScheduleIntervalSeconds *int
	// MaxRunning caps the tenant's running instances (EXECUTING) of every
	// type: the claim takes no more of its tasks until some end. Nil: no
	// such limit.
	MaxRunning *int
	// Weight is the tenant's weight in the claim's fair share of a task
	// type several tenants wait for (1..store.MaxWeight; 1 by default).
	Weight int
	// RateLimit limits the tenant's starts of every type to this many in
	// any window of RatePeriodSeconds: the claim takes no more of its
	// tasks until the window moves on. Nil: no such limit.
	RateLimit         *int
	RatePeriodSeconds int
	// StartedInWindow is how many of the tenant's starts the rate counts
	// in its window now, and NextStartAt when the next may start when the
	// rate holds the tenant back now (nil otherwise); both only with a
	// RateLimit.
	StartedInWindow int
	NextStartAt     *time.Time
	// Running, Waiting and Schedules count what the tenant holds now.
	Running, Waiting, Schedules int
	UpdatedBy                   *string
	UpdatedAt                   *time.Time
}

// QuotaLimits are the limits SetTenantQuota writes; nil removes one (a
// nil Weight is the default weight, 1; a nil RatePeriodSeconds is one
// second).
type QuotaLimits struct {
	MaxRunning, MaxWaiting, MaxSchedules, MinScheduleIntervalSeconds *int
	Weight                                                           *int
	RateLimit, RatePeriodSeconds                                     *int
}

// TenantQuota returns a tenant's quota (the viewer's own tenant's when
// tenant is nil) with its usage; a tenant without a row has no limits.
// Naming another tenant is for platform administrators (FORBIDDEN).
func (s *Service) TenantQuota(ctx context.Context, tenant *string) (*TenantQuota, error) {
	v, err := s.engine.Admit(ctx, 1)
	if err != nil {
		return nil, err
	}
	t := v.Tenant
	if tenant != nil {
		t = *tenant
	}
	if t != v.Tenant && !platform(v) {
		return nil, &auth.ForbiddenError{Role: v.Role, Action: fmt.Sprintf("read tenant %q's quota (platform administrators only)", t)}
	}
	return s.quotaOf(ctx, t)
}

// TenantQuotas returns the quotas the viewer may see: every tenant's that
// has one for a platform administrator, the viewer's own tenant's (with or
// without one) for anyone else.
func (s *Service) TenantQuotas(ctx context.Context) ([]*TenantQuota, error) {
	v, err := s.engine.Admit(ctx, 1)
	if err != nil {
		return nil, err
	}
	if !platform(v) {
		q, err := s.quotaOf(ctx, v.Tenant)
		if err != nil {
			return nil, err
		}
		return []*TenantQuota{q}, nil
	}
	rows, err := s.store.Client().TenantQuota.Query().Order(ent.Asc(tenantquota.FieldTenant)).All(auth.NewSystemContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("read tenant quotas: %w", err)
	}
	out := make([]*TenantQuota, 0, len(rows))
	for _, r := range rows {
		q, err := s.quota(ctx, r.Tenant, r)
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out, nil
}

// quotaOf reads tenant's quota row (none: no limits) and its usage.
func (s *Service) quotaOf(ctx context.Context, tenant string) (*TenantQuota, error) {
	row, err := s.store.Client().TenantQuota.Query().Where(tenantquota.Tenant(tenant)).Only(auth.NewSystemContext(ctx))
	if err != nil && !ent.IsNotFound(err) {
		return nil, fmt.Errorf("read quota of tenant %q: %w", tenant, err)
	}
	return s.quota(ctx, tenant, row)
}

// quota is a tenant's quota row (nil: none) and what the tenant holds.
func (s *Service) quota(ctx context.Context, tenant string, r *ent.TenantQuota) (*TenantQuota, error) {
	sys := auth.NewSystemContext(ctx)
	q := &TenantQuota{Tenant: tenant, Weight: 1, RatePeriodSeconds: 1}
	if r != nil {
		q.MaxWaiting, q.MaxSchedules, q.MinScheduleIntervalSeconds = r.MaxWaiting, r.MaxSchedules, r.MinScheduleIntervalSeconds
		q.Weight, q.MaxRunning = r.Weight, r.MaxRunning
		q.RateLimit, q.RatePeriodSeconds = r.RateLimit, r.RatePeriodSeconds
		q.UpdatedBy, q.UpdatedAt = &r.UpdatedBy, &r.UpdatedAt
	}
	if err := s.quotaRate(ctx, q); err != nil {
		return nil, err
	}
	var err error
	// Through the taskinstance_tenant_waiting index.
	q.Waiting, err = s.store.Client().TaskInstance.Query().
		Where(taskinstance.Tenant(tenant), taskinstance.StatusIn(lifecycle.WaitingStatuses...)).Count(sys)
	if err != nil {
		return nil, fmt.Errorf("count waiting tasks of tenant %q: %w", tenant, err)
	}
	// Through the taskinstance_tenant_running index.
	q.Running, err = s.store.Client().TaskInstance.Query().
		Where(taskinstance.Tenant(tenant), taskinstance.StatusEQ(lifecycle.Executing)).Count(sys)
	if err != nil {
		return nil, fmt.Errorf("count running tasks of tenant %q: %w", tenant, err)
	}
	q.Schedules, err = s.store.Client().Schedule.Query().Where(entschedule.Tenant(tenant), entschedule.Paused(false)).Count(sys)
	if err != nil {
		return nil, fmt.Errorf("count schedules of tenant %q: %w", tenant, err)
	}
	return q, nil
}

// quotaRate fills in how far q's rate (if any) is used now: the starts
// its window counts and when the next may start if the rate holds the
// tenant back now.
func (s *Service) quotaRate(ctx context.Context, q *TenantQuota) error {
	if q.RateLimit == nil {
		return nil
	}
	var err error
	q.StartedInWindow, q.NextStartAt, err = s.tenantWindow(ctx, anyTypeOfTenant, q.Tenant, *q.RateLimit, q.RatePeriodSeconds, s.store.Now())
	return err
}

// quotaWait says why a tenant's quota holds its waiting tasks back (its
// cap on running instances, then its rate), or nil; read at most once per
// stateTTL.
func (s *Service) quotaWait(ctx context.Context, tenant string, now time.Time) (*Wait, error) {
	s.mu.Lock()
	c, ok := s.quotas[tenant]
	s.mu.Unlock()
	if ok && time.Since(c.at) < stateTTL {
		return c.w, nil
	}
	sys := auth.NewSystemContext(ctx)
	row, err := s.store.Client().TenantQuota.Query().Where(tenantquota.Tenant(tenant)).Only(sys)
	if err != nil && !ent.IsNotFound(err) {
		return nil, fmt.Errorf("read quota of tenant %q: %w", tenant, err)
	}
	var w *Wait
	who := "tenant " + tenant
	if tenant == "" {
		who = `tenant ""`
	}
	if row != nil && row.MaxRunning != nil {
		// Through the taskinstance_tenant_running index.
		running, err := s.store.Client().TaskInstance.Query().
			Where(taskinstance.Tenant(tenant), taskinstance.StatusEQ(lifecycle.Executing)).Count(sys)
		if err != nil {
			return nil, fmt.Errorf("count running tasks of tenant %q: %w", tenant, err)
		}
		if running >= *row.MaxRunning {
			w = &Wait{Kind: AtCap, Message: fmt.Sprintf("waiting: %s at its quota's cap %d/%d running, of every type", who, running, *row.MaxRunning),
				Limit: *row.MaxRunning, Current: running, Tenant: &tenant}
		}
	}
	if w == nil && row != nil && row.RateLimit != nil {
		n, next, err := s.tenantWindow(ctx, anyTypeOfTenant, tenant, *row.RateLimit, row.RatePeriodSeconds, now)
		if err != nil {
			return nil, err
		}
		if next != nil {
			w = &Wait{Kind: RateLimited, Message: fmt.Sprintf("rate limited: %s started %d of %d per %ds (its quota, of every type), next start at %s",
				who, n, *row.RateLimit, row.RatePeriodSeconds, next.UTC().Format(time.RFC3339)), Until: next, Limit: *row.RateLimit, Current: n, Tenant: &tenant}
		}
	}
	s.mu.Lock()
	s.quotas[tenant] = cachedQuotaWait{at: time.Now(), w: w}
	s.mu.Unlock()
	return w, nil
}

// mayChangeQuota says whether v may set a tenant's quota: platform
// administrators only (a tenant's admin may not raise their own), or, in
// a deployment without tenants, the admins of its one (empty) tenant.
func (s *Service) mayChangeQuota(v auth.Viewer, tenant string) error {
	switch {
	case platform(v):
		return nil
	case v.Role == auth.RoleAdmin && v.Tenant == "" && tenant == "" && !s.tenanted:
		return nil
	}
	return &auth.ForbiddenError{Role: v.Role, Action: fmt.Sprintf("set tenant %q's quota (platform administrators only)", tenant)}
}

// SetTenantQuota replaces a tenant's quota (each limit nil: none), for
// platform administrators, audited (TENANT_QUOTA_SET). It takes effect at
// the next create and the next schedule change; what the tenant holds
// beyond a lowered limit stays (its waiting tasks run, its schedules fire).
func (s *Service) SetTenantQuota(ctx context.Context, tenant string, l QuotaLimits) (*TenantQuota, error) {
	v, err := s.engine.Admit(ctx, 1)
	if err != nil {
		return nil, err
	}
	details := map[string]any{"tenant": tenant}
	for k, p := range map[string]*int{"maxWaiting": l.MaxWaiting, "maxSchedules": l.MaxSchedules, "minScheduleIntervalSeconds": l.MinScheduleIntervalSeconds, "weight": l.Weight, "maxRunning": l.MaxRunning,
		"rateLimit": l.RateLimit, "ratePeriodSeconds": l.RatePeriodSeconds} {
		if p != nil {
			details[k] = *p
		}
	}
	err = func() error {
		if err := v.AllowMutate("set a tenant's quota"); err != nil {
			return err
		}
		if err := s.mayChangeQuota(v, tenant); err != nil {
			return err
		}
		ve := &engine.ValidationError{}
		if l.MaxWaiting != nil && *l.MaxWaiting < 0 {
			ve.Problems = append(ve.Problems, engine.Problem{Field: "maxWaiting", Message: "must be at least 0"})
		}
		if l.MaxRunning != nil && *l.MaxRunning < 0 {
			ve.Problems = append(ve.Problems, engine.Problem{Field: "maxRunning", Message: "must be at least 0"})
		}
		if l.MaxSchedules != nil && *l.MaxSchedules < 0 {
			ve.Problems = append(ve.Problems, engine.Problem{Field: "maxSchedules", Message: "must be at least 0"})
		}
		if p := l.MinScheduleIntervalSeconds; p != nil && (*p < 1 || *p > MaxQuotaIntervalSeconds) {
			ve.Problems = append(ve.Problems, engine.Problem{Field: "minScheduleIntervalSeconds", Message: fmt.Sprintf("must be between 1 and %d", MaxQuotaIntervalSeconds)})
		}
		if p := l.Weight; p != nil && (*p < 1 || *p > store.MaxWeight) {
			ve.Problems = append(ve.Problems, engine.Problem{Field: "weight", Message: fmt.Sprintf("must be between 1 and %d", store.MaxWeight)})
		}
		if l.RateLimit != nil && *l.RateLimit < 1 {
			ve.Problems = append(ve.Problems, engine.Problem{Field: "rateLimit", Message: "must be at least 1 (to hold a tenant's tasks, set maxRunning to 0)"})
		}
		if p := l.RatePeriodSeconds; p != nil && (*p < 1 || *p > MaxRatePeriodSeconds) {
			ve.Problems = append(ve.Problems, engine.Problem{Field: "ratePeriodSeconds", Message: fmt.Sprintf("must be between 1 and %d", MaxRatePeriodSeconds)})
		}
		if len(ve.Problems) > 0 {
			return ve
		}
		return s.upsertQuota(ctx, v, tenant, l)
	}()
	s.engine.Record(ctx, audit.Entry{Action: audit.TenantQuotaSet, Details: details, Err: err})
	if err != nil {
		return nil, err
	}
	return s.quotaOf(ctx, tenant)
}

// upsertQuota writes a tenant's quota row, creating it if need be.
func (s *Service) upsertQuota(ctx context.Context, v auth.Viewer, tenant string, l QuotaLimits) error {
	ctx = auth.NewSystemContext(ctx)
	now := s.store.Now()
	write := func() error {
		return s.store.Tx(ctx, func(tx *ent.Tx) error {
			row, err := tx.TenantQuota.Query().Where(tenantquota.Tenant(tenant)).Only(ctx)
			if err != nil && !ent.IsNotFound(err) {
				return err
			}
			var m *ent.TenantQuotaMutation
			var exec func(context.Context) error
			if row == nil {
				c := tx.TenantQuota.Create().SetTenant(tenant)
				m, exec = c.Mutation(), c.Exec
			} else {
				u := tx.TenantQuota.UpdateOne(row)
				m, exec = u.Mutation(), u.Exec
			}
			m.SetUpdatedBy(v.User)
			m.SetUpdatedAt(now)
			setOrClear(m.SetMaxRunning, m.ClearMaxRunning, l.MaxRunning)
			setOrClear(m.SetMaxWaiting, m.ClearMaxWaiting, l.MaxWaiting)
			setOrClear(m.SetMaxSchedules, m.ClearMaxSchedules, l.MaxSchedules)
			setOrClear(m.SetMinScheduleIntervalSeconds, m.ClearMinScheduleIntervalSeconds, l.MinScheduleIntervalSeconds)
			m.SetWeight(1)
			if l.Weight != nil {
				m.SetWeight(*l.Weight)
			}
			setOrClear(m.SetRateLimit, m.ClearRateLimit, l.RateLimit)
			m.SetRatePeriodSeconds(1)
			if l.RatePeriodSeconds != nil {
				m.SetRatePeriodSeconds(*l.RatePeriodSeconds)
			}
			if err := exec(ctx); err != nil {
				return err
			}
			if l.RateLimit != nil {
				return nil
			}
			// Without a rate, its starts are of no more use (a rate set
			// again later starts from an empty window).
			_, err = tx.TenantFlowStart.Delete().Where(tenantflowstart.TaskType(anyTypeOfTenant), tenantflowstart.Tenant(tenant)).Exec(ctx)
			return err
		})
	}
	err := write()
	if ent.IsConstraintError(err) {
		err = write() // created by another request meanwhile
	}
	s.mu.Lock()
	delete(s.quotas, tenant) // this node's wait reasons read the new quota
	s.mu.Unlock()
	if err != nil {
		var fe *auth.ForbiddenError
		if errors.As(err, &fe) {
			return err
		}
		return fmt.Errorf("write quota of tenant %q: %w", tenant, err)
	}
	return nil
}

// TenantRunning is how many of a tenant's instances run now.
type TenantRunning struct {
	Tenant  string
	Running int
}

// RunningByTenant returns how many instances run now (EXECUTING) per
// tenant, most first (then by tenant): every tenant's for a platform
// administrator, the viewer's own otherwise; a tenant with none running is
// left out. It reads the running instances only (taskinstance_tenant_running):
// what it costs grows with what runs, never with what waits or has ended.
func (s *Service) RunningByTenant(ctx context.Context) ([]TenantRunning, error) {
	v, err := s.engine.Admit(ctx, 1)
	if err != nil {
		return nil, err
	}
	q := s.store.Client().TaskInstance.Query().Where(taskinstance.StatusEQ(lifecycle.Executing))
	if !platform(v) {
		q = q.Where(taskinstance.Tenant(v.Tenant))
	}
	var rows []struct {
		Tenant string `json:"tenant"`
		Count  int    `json:"count"`
	}
	if err := q.GroupBy(taskinstance.FieldTenant).Aggregate(ent.Count()).Scan(auth.NewSystemContext(ctx), &rows); err != nil {
		return nil, fmt.Errorf("count running tasks by tenant: %w", err)
	}
	out := make([]TenantRunning, len(rows))
	for i, r := range rows {
		out[i] = TenantRunning{Tenant: r.Tenant, Running: r.Count}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Running != out[j].Running {
			return out[i].Running > out[j].Running
		}
		return out[i].Tenant < out[j].Tenant
	})
	return out, nil
}
