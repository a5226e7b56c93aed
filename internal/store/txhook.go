package store

import (
	"context"
	"errors"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/internal/events"
)

// TxHook joins a write of the caller's to whatever write transaction the
// store runs for a context that carries it (WithTxHook): the engine attaches
// the audit record of an action to the transaction that performs the
// action, so that both commit or neither does, without the store's methods
// knowing about audit.
type TxHook struct {
	// BeforeCommit runs in every write transaction of the context, after
	// the store's own statements and just before COMMIT, with what the
	// transaction is about to commit. An error rolls the transaction back,
	// and the store's method fails with it. It may run more than once (a
	// transaction retried after a serialization failure, a method that
	// writes twice): each run belongs to its own transaction.
	BeforeCommit func(ctx context.Context, tx *ent.Tx, c Committing) error
	// Committed, when set, is called after a COMMIT of a transaction in
	// which BeforeCommit ran succeeded.
	Committed func()
}

// Committing is what a transaction is about to commit.
type Committing struct {
	// Changes are the task changes it will publish.
	Changes []events.TaskChange
	// Each holds the per-id outcomes of a bulk action (CancelTasks,
	// RetryTasks).
	Each []Each
}

type txHookKey struct{}

// WithTxHook returns ctx carrying h; the store's writes under it run h.
func WithTxHook(ctx context.Context, h *TxHook) context.Context {
	return context.WithValue(ctx, txHookKey{}, h)
}

func txHookFrom(ctx context.Context) *TxHook {
	h, _ := ctx.Value(txHookKey{}).(*TxHook)
	if h == nil || h.BeforeCommit == nil {
		return nil
	}
	return h
}

func (h *TxHook) committed() {
	if h != nil && h.Committed != nil {
		h.Committed()
	}
}

// CommitUncertain reports whether err is a failed COMMIT: the transaction
// may have committed all the same (the connection died waiting for the
// answer), and then its changes were not published here. A node that
// learns of one re-reads what changed (relay.Listener.Missed).
func CommitUncertain(err error) bool {
	var ce *commitError
	return errors.As(err, &ce)
}
