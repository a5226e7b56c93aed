package graph

import (
	"context"
	"encoding/json"

	"github.com/taskgraph/taskgraph/internal/nodes"
)

func (r *Resolver) externalWorkers(ctx context.Context) ([]*nodes.WorkerView, error) {
	if r.Nodes == nil {
		return nil, errNoNodes
	}
	list, err := r.Nodes.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*nodes.WorkerView, len(list))
	for i := range list {
		out[i] = &list[i]
	}
	return out, nil
}

// workersFingerprint is what a workers subscription compares to decide
// whether anything changed.
func workersFingerprint(list []*nodes.WorkerView) string {
	type row struct {
		W       any
		State   nodes.State
		Running []nodes.Execution
	}
	rows := make([]row, len(list))
	for i, v := range list {
		w := v.ExternalWorker
		rows[i] = row{W: []any{w.ID, w.Name, w.Tenant, w.User, w.Language, w.Version, w.Types, w.Node, w.LastSeenAt, w.ExpiresAt, w.Draining}, State: v.State, Running: v.Running}
	}
	b, _ := json.Marshal(rows)
	return string(b)
}
