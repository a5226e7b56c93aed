// Package graph is the GraphQL API: gqlgen resolvers over the engine, the
// ent client (reads) and the events broker (subscriptions). Resolvers are
// thin; what a request means is decided in engine, store and lifecycle.
package graph

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/internal/alert"
	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/external"
	"github.com/taskgraph/taskgraph/internal/flow"
	"github.com/taskgraph/taskgraph/internal/importer"
	"github.com/taskgraph/taskgraph/internal/nodes"
	"github.com/taskgraph/taskgraph/internal/schedule"
)

// Resolver holds what resolvers use.
type Resolver struct {
	Engine *engine.Engine
	Client *ent.Client
	Broker *events.Broker
	Log    *slog.Logger
	// Importer, Artifacts and Links serve uploads and downloads; without
	// them importFile and artifactDownloadUrl are unavailable.
	Importer  *importer.Importer
	Artifacts *artifact.Store
	Links     *artifact.Links
	// ScheduleService serves the schedule mutations and previews; without it
	// they are unavailable.
	ScheduleService *schedule.Service
	// Flow serves flow control (caps, rates, pauses) and says why a
	// waiting task waits; without it those are unavailable.
	Flow *flow.Service
	// External declares and deletes external task types (nil: the
	// mutations are refused).
	External *external.Catalog

	// streams are the running subscriptions (set by NewServer; a
	// shutdown ends them).
	streams *streams
	// PublicURL is what download links start with (scheme, host and any
	// path prefix); "" makes them relative (/download/...).
	PublicURL string
	// Alerts serves alert rules, channels and incidents; without it those
	// fields are unavailable.
	Alerts *alert.Service
	// Nodes reads and drains the cluster's nodes; without it those
	// fields are unavailable.
	Nodes *nodes.Service
}

// Page sizes of connections.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

var errPageTooLarge = errors.New("page too large")

// pageSize applies the default page size and refuses pages over the limit:
// a connection never returns an unbounded list.
func pageSize(first, last *int) (*int, *int, error) {
	for _, n := range []*int{first, last} {
		if n != nil && (*n < 0 || *n > MaxPageSize) {
			return nil, nil, fmt.Errorf("%w: first and last must be between 0 and %d", errPageTooLarge, MaxPageSize)
		}
	}
	if first == nil && last == nil {
		n := DefaultPageSize
		first = &n
	}
	return first, last, nil
}
