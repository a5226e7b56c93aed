//go:build flowgate

package app

import (
	"taskgraph/flow"
	"taskgraph/store"
)

// withGate puts the flow gate in every claim: caps, rates and pauses hold
// across nodes because each claim asks the gate inside its transaction.
func withGate(cfg *store.Config, dialect string) { cfg.Gate = flow.NewGate(dialect) }
