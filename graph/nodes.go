package graph

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/taskgraph/taskgraph/internal/nodes"
)

var errNoNodes = errors.New("the node registry is not available on this server")

func (r *Resolver) clusterNodes(ctx context.Context) ([]*nodes.View, error) {
	if r.Nodes == nil {
		return nil, errNoNodes
	}
	list, err := r.Nodes.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*nodes.View, len(list))
	for i := range list {
		out[i] = &list[i]
	}
	return out, nil
}

func (r *Resolver) clusterSummary(ctx context.Context) (*nodes.Summary, error) {
	if r.Nodes == nil {
		return nil, errNoNodes
	}
	s, err := r.Nodes.Summarize(ctx)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// nodesFingerprint is what a nodes subscription compares to decide
// whether anything changed.
func nodesFingerprint(list []*nodes.View) string {
	type row struct {
		N       any
		State   nodes.State
		Running []nodes.Execution
	}
	rows := make([]row, len(list))
	for i, v := range list {
		c := v.ClusterNode
		rows[i] = row{N: []any{c.Name, c.Host, c.Pid, c.Version, c.Roles, c.StartedAt, c.LastSeenAt, c.ExpiresAt, c.StoppedAt, c.Busy, c.Total, c.Leading, c.Files, c.Draining, c.ClockOffsetMs, c.ClockSkewed}, State: v.State, Running: v.Running}
	}
	b, _ := json.Marshal(rows)
	return string(b)
}

// pollStream streams read's answer: now, and again every interval while it
// changes (same compares two answers' fingerprints). The first read's error
// is the subscription's (FORBIDDEN...); later ones (an outage) are tried
// again at the next interval. It ends with the client, or with the server
// going away.
func pollStream[T any](ctx context.Context, r *subscriptionResolver, every time.Duration, read func(context.Context) (T, error), fingerprint func(T) string) (<-chan T, error) {
	first, err := read(ctx)
	if err != nil {
		return nil, err
	}
	if !r.streams.start() {
		return nil, errShuttingDown
	}
	out := make(chan T, 1)
	out <- first
	last := fingerprint(first)
	go func() {
		defer r.streams.done()
		defer close(out)
		closing := r.streams.closed()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-closing:
				endStream(ctx, errShuttingDown)
				return
			case <-tick.C:
			}
			v, err := read(ctx)
			if err != nil {
				if ctx.Err() == nil {
					r.Log.Debug("nodes subscription: read failed; trying again", "err", err)
				}
				continue
			}
			if fp := fingerprint(v); fp != last {
				last = fp
				select {
				case out <- v:
				case <-ctx.Done():
					return
				case <-closing:
					endStream(ctx, errShuttingDown)
					return
				}
			}
		}
	}()
	return out, nil
}

func (r *subscriptionResolver) clusterNodesChanged(ctx context.Context) (<-chan []*nodes.View, error) {
	if r.Nodes == nil {
		return nil, errNoNodes
	}
	return pollStream(ctx, r, r.Nodes.Refresh, r.clusterNodes, nodesFingerprint)
}

func (r *subscriptionResolver) clusterSummaryChanged(ctx context.Context) (<-chan *nodes.Summary, error) {
	if r.Nodes == nil {
		return nil, errNoNodes
	}
	return pollStream(ctx, r, r.Nodes.Refresh, r.clusterSummary, func(s *nodes.Summary) string {
		b, _ := json.Marshal(s)
		return string(b)
	})
}
