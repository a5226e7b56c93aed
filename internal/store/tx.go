package store

import (
	"context"

	"github.com/taskgraph/taskgraph/ent"
)

// Tx runs fn in a write transaction serialized with the store's own (on
// SQLite: one writing transaction at a time in the process, so that writers
// of other tables — artifacts, imported rows — are not starved by the
// store's stream of small transactions and fail with SQLITE_BUSY). fn may
// be run again after a serialization failure. fn must not change task or
// instance status: that is the store's alone.
func (s *Store) Tx(ctx context.Context, fn func(tx *ent.Tx) error) error {
	return s.write(ctx, func(t *txn) error { return fn(t.Tx) })
}
