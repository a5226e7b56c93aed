package app

import (
	"context"

	"github.com/taskgraph/taskgraph/internal/nodes"
)

// newNodes builds the node's registry: its row in cluster_nodes, refreshed
// every --node-refresh, GONE after --node-lease without a refresh.
func (a *App) newNodes(context.Context, *cleanup) error {
	cfg := a.Config
	roles := make([]string, len(cfg.Roles))
	for i, r := range cfg.Roles {
		roles[i] = string(r)
	}
	nc := nodes.Config{
		Store:         a.Store,
		Node:          a.Node,
		Roles:         roles,
		Files:         a.Artifacts.Location(),
		Refresh:       cfg.NodeRefresh,
		Lease:         cfg.NodeLease,
		SkewThreshold: cfg.ClockSkew,
		Leading:       a.leadsWatchdog,
		Logger:        a.Log,
	}
	if a.Pool != nil {
		nc.Pool = a.Pool
	}
	r, err := nodes.New(nc)
	if err != nil {
		return err
	}
	a.Nodes = r
	return nil
}

// leadsWatchdog says whether this node's watchdog leads: on SQLite (one
// node) whenever it runs one.
func (a *App) leadsWatchdog() bool {
	if a.Watchdog == nil {
		return false
	}
	return a.Leader == nil || a.Leader.Leading()
}

// nodesAPI is what the API reads and drains nodes and external workers
// with.
func (a *App) nodesAPI() *nodes.Service {
	s := nodes.NewService(a.Store, a.Audit, a.Engine.Admit, a.Nodes.Config().Refresh)
	s.Workers = a.workers()
	return s
}

// workers is the node's record of the external workers it serves: their
// rows refreshed at the node's pace (at most once per --node-refresh per
// worker), held for nodes.WorkerLeaseDefault.
func (a *App) workers() *nodes.Workers {
	if a.extWorkers == nil {
		a.extWorkers = nodes.NewWorkers(a.Store, a.Node, a.Nodes.Config().Refresh, 0, a.Log)
	}
	return a.extWorkers
}

// startNodes registers the node and keeps its row fresh.
func (a *App) startNodes(ctx context.Context) error { return a.Nodes.Start(ctx) }

// stopNodes ends the refreshes and marks the node STOPPED (after its pool
// stopped: its row says it runs nothing).
func (a *App) stopNodes(ctx context.Context) {
	a.Nodes.Stop()
	if err := a.Nodes.MarkStopped(context.WithoutCancel(ctx)); err != nil {
		a.Log.Warn("could not mark this node stopped; it shows GONE after its lease", "err", err)
	}
}
