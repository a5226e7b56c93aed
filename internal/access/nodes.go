package access

import (
	"context"

	"entgo.io/ent/dialect/sql"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/externalworker"
	"github.com/taskgraph/taskgraph/ent/intercept"
)

// installNodes lets admins (and platform administrators, and the process
// itself) read the cluster's nodes; other viewers read none (they are
// told counts, which the nodes package reads as the system).
func installNodes(c *ent.Client) {
	c.ClusterNode.Intercept(intercept.TraverseClusterNode(func(ctx context.Context, q *ent.ClusterNodeQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		if !v.IsAdmin() {
			q.Where(func(s *sql.Selector) { s.Where(sql.False()) })
		}
		return nil
	}))
}

// installWorkers lets admins read the external workers that claim with
// their tenant's credentials (platform administrators and the process
// itself, every tenant's); other viewers read none.
func installWorkers(c *ent.Client) {
	c.ExternalWorker.Intercept(intercept.TraverseExternalWorker(func(ctx context.Context, q *ent.ExternalWorkerQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		switch {
		case v.SeesEveryTenant():
		case v.IsAdmin():
			q.Where(externalworker.Tenant(v.Tenant))
		default:
			q.Where(func(s *sql.Selector) { s.Where(sql.False()) })
		}
		return nil
	}))
}
