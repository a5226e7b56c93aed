package graph

import (
	"context"
	"errors"

	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/alertchannel"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/graph/model"
	"github.com/taskgraph/taskgraph/internal/alert"
	"github.com/taskgraph/taskgraph/internal/auth"
)

var errNoAlerts = errors.New("alerts are not available on this server")

func channelInput(in model.AlertChannelInput) alert.ChannelInput {
	return alert.ChannelInput{Name: in.Name, Kind: in.Kind, URL: in.URL, Secret: in.Secret}
}

func ruleInput(in model.AlertRuleInput) alert.RuleInput {
	out := alert.RuleInput{Name: in.Name, Kind: in.Kind, Enabled: in.Enabled == nil || *in.Enabled,
		TaskType: deref(in.TaskType), Owner: deref(in.Owner), ChannelIDs: in.ChannelIds}
	if in.ErrorKind != nil {
		out.ErrorKind = string(*in.ErrorKind)
	}
	if in.Threshold != nil {
		out.Threshold = *in.Threshold
	}
	if in.WindowSeconds != nil {
		out.WindowSeconds = *in.WindowSeconds
	}
	if in.QuietSeconds != nil {
		out.QuietSeconds = *in.QuietSeconds
	}
	return out
}

// visibleTask reads a task an incident names, as the viewer sees it: nil
// when it is gone or not the viewer's to see.
func (r *Resolver) visibleTask(ctx context.Context, id *int) (*ent.Task, error) {
	if id == nil {
		return nil, nil
	}
	t, err := r.Client.Task.Get(ctx, *id)
	if ent.IsNotFound(err) {
		return nil, nil
	}
	return t, err
}

func (r *Resolver) alertChannels(ctx context.Context, ids []int) ([]*ent.AlertChannel, error) {
	if len(ids) == 0 {
		return []*ent.AlertChannel{}, nil
	}
	return r.Client.AlertChannel.Query().Where(alertchannel.IDIn(ids...)).Order(ent.Asc(alertchannel.FieldName)).All(ctx)
}

// stalledAt is the stall flag of a task's running execution, read through
// the one-live-instance index; only running tasks can be stalled.
func (r *Resolver) stalledAt(ctx context.Context, t *ent.Task) (*time.Time, error) {
	if t.Status != lifecycle.Executing {
		return nil, nil
	}
	in, err := r.Client.TaskInstance.Query().
		Where(taskinstance.TaskID(t.ID), taskinstance.StatusEQ(lifecycle.Executing)).
		Select(taskinstance.FieldStalledAt).
		Only(ctx)
	if ent.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return in.StalledAt, nil
}

func (r *Resolver) stallAfterSeconds(ctx context.Context, t *ent.Task) (*int, error) {
	if _, err := auth.Require(ctx); err != nil {
		return nil, err
	}
	// t was read through the viewer's access filter: it may see the
	// task, and so its setting.
	d, ok, err := r.Engine.Store().StallOverride(auth.NewSystemContext(ctx), t.ID)
	if err != nil || !ok {
		return nil, err
	}
	n := int(d / time.Second)
	return &n, nil
}

// alertIncidentChanged streams the changes of the viewer's tenant's
// incidents (the hub carries every tenant's; the filter is here, before
// anything reaches the subscriber).
func (r *subscriptionResolver) alertIncidentChanged(ctx context.Context) (<-chan *ent.AlertIncident, error) {
	v, err := auth.Require(ctx)
	if err != nil {
		return nil, err
	}
	if r.Alerts == nil {
		return nil, errNoAlerts
	}
	in, cancel := r.Alerts.Hub().Subscribe(subscriptionBuffer)
	out := make(chan *ent.AlertIncident, 1)
	go func() {
		defer close(out)
		defer cancel()
		for {
			select {
			case <-ctx.Done():
				return
			case inc, ok := <-in:
				if !ok {
					return // fell behind: the client subscribes again and re-reads
				}
				if !v.SeesEveryTenant() && inc.Tenant != v.Tenant {
					continue
				}
				select {
				case out <- inc:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
