package graph

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/taskgraph/taskgraph/graph/model"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/history"
)

// MaxHistoryPoints bounds the points of one taskHistory answer.
const MaxHistoryPoints = 1500

// taskHistory answers the taskHistory query: the rows of the resolution
// asked for (or chosen from the range) over [from, to), of the viewer's
// tenant (a platform administrator's choice: one, or every tenant), added
// over the types unless one is named, one point per bucket.
func (r *Resolver) taskHistory(ctx context.Context, from, to time.Time, resolution *model.HistoryResolution, typ, tenant *string) ([]*model.HistoryPoint, error) {
	v, err := auth.Require(ctx)
	if err != nil {
		return nil, err
	}
	f := history.Filter{Tenant: v.Tenant}
	switch {
	case v.Role == auth.RoleWorker:
		return nil, &auth.ForbiddenError{Role: v.Role, Action: "read the task history"}
	case v.SeesEveryTenant():
		f.Tenant = "*"
		if tenant != nil {
			f.Tenant = *tenant
		}
	case tenant != nil && *tenant != v.Tenant:
		return nil, &auth.ForbiddenError{Role: v.Role, Action: "read another tenant's task history"}
	}
	if typ != nil {
		f.Types = []string{*typ}
	}
	from, to = from.UTC(), to.UTC()
	if !to.After(from) {
		return nil, &engine.ValidationError{Problems: []engine.Problem{{Field: "to", Message: "to must be after from"}}}
	}
	res := history.AutoResolution(from, to)
	if resolution != nil {
		res = history.Resolution(*resolution)
		if !res.Valid() {
			return nil, &engine.ValidationError{Problems: []engine.Problem{{Field: "resolution", Message: fmt.Sprintf("unknown resolution %q", *resolution)}}}
		}
	}
	start := res.Truncate(from)
	n := int64((to.Sub(start) + res.Step() - 1) / res.Step())
	if n > MaxHistoryPoints {
		return nil, &engine.ValidationError{Problems: []engine.Problem{{Field: "resolution", Message: fmt.Sprintf("%d buckets of a %s from %s to %s: at most %d; ask for a coarser resolution or a shorter range", n, res, from.Format(time.RFC3339), to.Format(time.RFC3339), MaxHistoryPoints)}}}
	}
	rows, err := r.Engine.Store().ReadHistory(ctx, res, from, to)
	if err != nil {
		return nil, err
	}
	byStart := map[time.Time]history.Point{}
	for _, p := range history.Series(rows, res, from, to, f) {
		byStart[p.Start] = p
	}
	out := make([]*model.HistoryPoint, 0, n)
	for at := start; at.Before(to); at = at.Add(res.Step()) {
		out = append(out, historyPoint(res, at, byStart[at].Counts))
	}
	return out, nil
}

func historyPoint(res history.Resolution, at time.Time, c history.Counts) *model.HistoryPoint {
	q := func(h history.Histogram, p float64) *int {
		d, ok := h.Quantile(p)
		if !ok {
			return nil
		}
		ms := int(d.Milliseconds())
		return &ms
	}
	return &model.HistoryPoint{
		Start: at, Resolution: model.HistoryResolution(res),
		Created: int(c.Created), Started: int(c.Started), Succeeded: int(c.Succeeded), Failed: int(c.Failed),
		Cancelled: int(c.Cancelled), Retries: int(c.Retries), Waiting: int(c.Waiting),
		WaitP50Ms: q(c.Wait, 0.50), WaitP95Ms: q(c.Wait, 0.95), WaitP99Ms: q(c.Wait, 0.99),
		RunP50Ms: q(c.Run, 0.50), RunP95Ms: q(c.Run, 0.95), RunP99Ms: q(c.Run, 0.99),
	}
}

// taskCost answers the taskCost query: the history's rows over [from, to)
// in the viewer's scope (as taskHistory's), added up per type or tenant,
// most run time first.
func (r *Resolver) taskCost(ctx context.Context, from, to time.Time, groupBy model.CostGroup, tenant *string) ([]*model.CostRow, error) {
	v, err := auth.Require(ctx)
	if err != nil {
		return nil, err
	}
	scope := v.Tenant
	switch {
	case v.Role == auth.RoleWorker:
		return nil, &auth.ForbiddenError{Role: v.Role, Action: "read the cost report"}
	case v.SeesEveryTenant():
		scope = "*"
		if tenant != nil {
			scope = *tenant
		}
	case tenant != nil && *tenant != v.Tenant:
		return nil, &auth.ForbiddenError{Role: v.Role, Action: "read another tenant's cost report"}
	}
	if !groupBy.IsValid() {
		return nil, &engine.ValidationError{Problems: []engine.Problem{{Field: "groupBy", Message: fmt.Sprintf("unknown grouping %q", groupBy)}}}
	}
	from, to = from.UTC(), to.UTC()
	if !to.After(from) {
		return nil, &engine.ValidationError{Problems: []engine.Problem{{Field: "to", Message: "to must be after from"}}}
	}
	res := history.AutoResolution(from, to)
	rows, err := r.Engine.Store().ReadHistory(ctx, res, from, to)
	if err != nil {
		return nil, err
	}
	by := map[string]*history.Counts{}
	for k, c := range rows {
		if k.Resolution != res || (scope != "*" && k.Tenant != scope) {
			continue
		}
		key := k.Type
		if groupBy == model.CostGroupTenant {
			key = k.Tenant
		}
		if by[key] == nil {
			by[key] = &history.Counts{}
		}
		by[key].Add(*c)
	}
	out := make([]*model.CostRow, 0, len(by))
	for key, c := range by {
		row := &model.CostRow{
			Key: key, Executions: int(c.Started), Succeeded: int(c.Succeeded), Failed: int(c.Failed),
			Cancelled: int(c.Cancelled), Retries: int(c.Retries), Created: int(c.Created), RunTimeMs: float64(c.RunTimeMs),
			RowsImported: float64(c.RowsImported), RowsExported: float64(c.RowsExported), BytesStored: float64(c.BytesStored),
		}
		if d, ok := c.Run.Quantile(0.95); ok {
			ms := int(d.Milliseconds())
			row.RunP95Ms = &ms
		}
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].RunTimeMs != out[j].RunTimeMs {
			return out[i].RunTimeMs > out[j].RunTimeMs
		}
		return out[i].Key < out[j].Key
	})
	return out, nil
}
