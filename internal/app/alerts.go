package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/taskgraph/taskgraph/internal/alert"
	"github.com/taskgraph/taskgraph/internal/leader"
)

// newAlertServices builds the alert evaluator of a node with the api or
// the watchdog role (elected apart from the watchdog, so that it can tell
// when no watchdog leads), and on PostgreSQL the listener that brings
// other nodes' incident changes to this node's subscribers.
func (a *App) newAlertServices(ctx context.Context, undo *cleanup) error {
	st, cfg := a.Store, a.Config
	if !cfg.Has(RoleAPI) && !cfg.Has(RoleWatchdog) {
		return nil
	}
	ec := alert.EvaluatorConfig{
		Interval:         cfg.AlertInterval,
		HeartbeatTimeout: cfg.HeartbeatTimeout,
		Types: func() []string {
			var out []string
			for _, n := range a.Registry.Names() {
				if !strings.HasPrefix(n, "alert.") {
					out = append(out, n)
				}
			}
			return out
		},
		OnNotice: a.Metrics.AlertNotice,
		Quiet:    a.quiet("alert-evaluator"),
		Logger:   a.Log,
	}
	if a.Leader != nil {
		a.AlertLeader = leader.New(st.DB(), leader.AlertsRole)
		ec.Leader = a.AlertLeader.Lead
		ec.WatchdogLeader = a.Leader.Held
	} else {
		// One process on SQLite: a watchdog leads if it runs one.
		hasWatchdog := cfg.Has(RoleWatchdog)
		ec.WatchdogLeader = func(context.Context) (bool, error) { return hasWatchdog, nil }
	}
	var err error
	if a.Evaluator, err = alert.NewEvaluator(ec, a.Alerts, a.Broker); err != nil {
		return err
	}
	a.Alerts.SetRulesChanged(a.Evaluator.Wake)
	a.services = append(a.services, a.Evaluator)
	if a.Leader != nil && cfg.Has(RoleAPI) {
		if a.AlertListener, err = alert.Listen(ctx, cfg.DSN(), st.DB(), st.Client(), a.Alerts.Hub(), a.Node, a.Log); err != nil {
			return fmt.Errorf("listen for other nodes' incidents: %w", err)
		}
		undo.push(a.AlertListener.Close)
	}
	return nil
}
