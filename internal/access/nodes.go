package access

import (
	"context"

	"entgo.io/ent/dialect/sql"

	"github.com/taskgraph/taskgraph/ent"
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
