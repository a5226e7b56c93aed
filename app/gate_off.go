//go:build !flowgate

package app

import "taskgraph/store"

// withGate is the flow gate's wiring while the claim has no seam for it
// (see gate.go): settings are stored and shown, not yet enforced.
func withGate(*store.Config, string) {}
