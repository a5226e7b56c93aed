package access

import (
	"context"

	"entgo.io/ent/dialect/sql"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/alertchannel"
	"github.com/taskgraph/taskgraph/ent/alertincident"
	"github.com/taskgraph/taskgraph/ent/alertrule"
	"github.com/taskgraph/taskgraph/ent/intercept"
)

// installAlerts scopes alert channels, rules and incidents to the viewer's
// tenant (the process itself and platform administrators read them all),
// and keeps per-task stall overrides to those two (a resolver reads a
// task's own for a viewer who may see the task). What a role may change is the alert
// package's business; this only narrows reads.
func installAlerts(c *ent.Client) {
	c.AlertChannel.Intercept(intercept.TraverseAlertChannel(func(ctx context.Context, q *ent.AlertChannelQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		if !v.SeesEveryTenant() {
			q.Where(alertchannel.Tenant(v.Tenant))
		}
		return nil
	}))
	c.AlertRule.Intercept(intercept.TraverseAlertRule(func(ctx context.Context, q *ent.AlertRuleQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		if !v.SeesEveryTenant() {
			q.Where(alertrule.Tenant(v.Tenant))
		}
		return nil
	}))
	c.AlertIncident.Intercept(intercept.TraverseAlertIncident(func(ctx context.Context, q *ent.AlertIncidentQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		if !v.SeesEveryTenant() {
			q.Where(alertincident.Tenant(v.Tenant))
		}
		return nil
	}))
	c.StallOverride.Intercept(intercept.TraverseStallOverride(func(ctx context.Context, q *ent.StallOverrideQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		if !v.SeesEveryTenant() {
			q.Where(func(s *sql.Selector) { s.Where(sql.False()) })
		}
		return nil
	}))
}
