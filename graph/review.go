package graph

import (
	"context"
	"time"

	"entgo.io/contrib/entgql"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/predicate"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/taskreview"
	"github.com/taskgraph/taskgraph/graph/model"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// reviewWhere is the review queue's filter as task predicates: the tasks
// in REVIEW_PENDING (by attention_status, indexed), of a type, a tenant
// (platform administrators), waiting at least so long (a task in review is
// not written until decided: its updated_at is when it entered), past
// their deadline.
func (r *Resolver) reviewWhere(ctx context.Context, w *model.ReviewQueueWhere) ([]predicate.Task, error) {
	ps := []predicate.Task{task.AttentionStatusEQ(lifecycle.ReviewPending), task.StatusEQ(lifecycle.ReviewPending)}
	if w == nil {
		return ps, nil
	}
	if w.Type != nil {
		ps = append(ps, task.Type(*w.Type))
	}
	if w.Tenant != nil {
		ps = append(ps, task.Tenant(*w.Tenant))
	}
	now := r.Engine.Store().Now()
	if w.OlderThanSeconds != nil {
		if *w.OlderThanSeconds < 0 {
			return nil, &engine.ValidationError{Problems: []engine.Problem{{Field: "where.olderThanSeconds", Message: "must not be negative"}}}
		}
		ps = append(ps, task.UpdatedAtLTE(now.Add(-time.Duration(*w.OlderThanSeconds)*time.Second)))
	}
	if w.Overdue != nil {
		overdue := func(s *entsql.Selector) {
			rv := entsql.Table(taskreview.Table)
			s.Where(entsql.In(s.C(task.FieldID), entsql.Select(rv.C(taskreview.FieldTaskID)).From(rv).
				Where(entsql.And(entsql.IsNull(rv.C(taskreview.FieldDecidedAt)), entsql.NotNull(rv.C(taskreview.FieldDeadline)), entsql.LTE(rv.C(taskreview.FieldDeadline), now)))))
		}
		if *w.Overdue {
			ps = append(ps, overdue)
		} else {
			ps = append(ps, task.Not(overdue))
		}
	}
	return ps, nil
}

func (r *Resolver) reviewQueue(ctx context.Context, w *model.ReviewQueueWhere, after *entgql.Cursor[int], first *int, before *entgql.Cursor[int], last *int) (*ent.TaskConnection, error) {
	first, last, err := pageSize(first, last)
	if err != nil {
		return nil, err
	}
	ps, err := r.reviewWhere(ctx, w)
	if err != nil {
		return nil, err
	}
	return r.Client.Task.Query().Where(ps...).
		Paginate(ctx, after, first, before, last,
			ent.WithTaskOrder([]*ent.TaskOrder{{Field: ent.TaskOrderFieldUpdatedAt, Direction: entgql.OrderDirectionAsc}}))
}

func (r *Resolver) reviewQueueStats(ctx context.Context, w *model.ReviewQueueWhere) (*model.ReviewQueueStats, error) {
	ps, err := r.reviewWhere(ctx, w)
	if err != nil {
		return nil, err
	}
	n, err := r.Client.Task.Query().Where(ps...).Count(ctx)
	if err != nil {
		return nil, err
	}
	out := &model.ReviewQueueStats{Size: n}
	if n == 0 {
		return out, nil
	}
	oldest, err := r.Client.Task.Query().Where(ps...).Order(ent.Asc(task.FieldUpdatedAt), ent.Asc(task.FieldID)).First(ctx)
	if err != nil && !ent.IsNotFound(err) {
		return nil, err
	}
	if oldest != nil {
		out.Oldest, out.OldestSince = oldest, &oldest.UpdatedAt
	}
	yes := true
	over := *(&model.ReviewQueueWhere{})
	if w != nil {
		over = *w
	}
	over.Overdue = &yes
	ops, err := r.reviewWhere(ctx, &over)
	if err != nil {
		return nil, err
	}
	if out.Overdue, err = r.Client.Task.Query().Where(ops...).Count(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

func reviewOverdue(rv *ent.TaskReview, now time.Time) bool {
	if rv.OverdueAt != nil {
		return true
	}
	return rv.DecidedAt == nil && rv.Deadline != nil && !rv.Deadline.After(now)
}

func (r *Resolver) inputVersions(ctx context.Context, tk *ent.Task) ([]*model.InputVersion, error) {
	vs, err := r.Engine.InputVersions(ctx, tk)
	if err != nil {
		return nil, err
	}
	out := make([]*model.InputVersion, len(vs))
	for i, v := range vs {
		diff := make([]*model.FieldChange, len(v.Diff))
		for j, c := range v.Diff {
			diff[j] = &model.FieldChange{Path: c.Path, Kind: model.FieldChangeKind(c.Kind), Before: c.Before, After: c.After, Masked: c.Masked}
		}
		out[i] = &model.InputVersion{Version: v.Version, Input: v.Input, Author: v.Author, Reason: v.Reason, CreatedAt: v.CreatedAt, FromInstanceNo: v.FromInstanceNo, Diff: diff}
	}
	return out, nil
}

// reviewPolicyModel is a type's review policy as the API shows it.
func reviewPolicyModel(p *tasktype.ReviewPolicy) *model.ReviewPolicy {
	if p == nil {
		return nil
	}
	out := &model.ReviewPolicy{OnNonRetryable: p.OnNonRetryable, ConfirmPartial: p.ConfirmPartial, FourEyes: p.FourEyes}
	if p.Deadline > 0 {
		s := int(p.Deadline / time.Second)
		on := model.ReviewDeadlineAction(p.OnDeadline)
		if on == "" {
			on = model.ReviewDeadlineActionReject
		}
		out.DeadlineSeconds, out.OnDeadline = &s, &on
	}
	return out
}

// offered narrows the actions the transition table allows to those the
// viewer of ctx may take: a viewer (read-only), a worker or nobody is
// offered none, since the engine would refuse each (FORBIDDEN). Four eyes
// is not narrowed here: the submitter is offered a decision and told why
// it is refused, which the console shows.
func offered(ctx context.Context, actions []lifecycle.Action) []lifecycle.Action {
	if v, ok := auth.FromContext(ctx); !ok || !v.CanMutate() {
		return []lifecycle.Action{}
	}
	if actions == nil {
		return []lifecycle.Action{}
	}
	return actions
}
