// Package tg is taskgraph as a Go library: background work of your own —
// a reconciliation against your ledger, a push through your SMS gateway,
// an import into your orders table — run as tasks with state, history and
// recovery, inside your program, with the console and the API of the
// taskgraph server mounted in your own HTTP mux.
//
// A Client is one node. It stores tasks in SQLite (a file, the default)
// or PostgreSQL (several nodes on one database are one cluster), runs the
// handlers registered on it, and recovers what a dead node left:
//
//	c, err := tg.New(ctx, tg.Config{Database: "postgres://app@db/app"})
//	reconcile, err := tg.Register(c, "reconcile", func(ctx context.Context, job *tg.Job, in Ledger) (Report, error) {
//		job.Progress(0, 100)
//		...
//		return Report{Differences: n}, nil
//	})
//	err = c.Start(ctx)
//	defer c.Stop(context.Background())
//
// A handler takes a typed input, validated against the JSON Schema
// reflected from its type, and returns a typed result, stored as the
// task's result. Its errors say what follows: Retryable (the default),
// NonRetryable, Resource.
//
// A task is created in a transaction of its own (Create), or in the
// caller's (CreateTx), beside the business record it is about: it exists,
// runs and is published to subscribers only if that transaction commits.
//
//	err := c.Tx(ctx, func(tx *sql.Tx) error {
//		if _, err := tx.ExecContext(ctx, `INSERT INTO orders ...`); err != nil {
//			return err
//		}
//		_, err := reconcile.CreateTx(ctx, tx, Ledger{Day: today}, tg.IdempotencyKey("ledger-"+today))
//		return err
//	})
//
// Client.Tx takes turns with the node's own writes, as SQLite's one writer
// asks; on PostgreSQL a transaction begun on DB(), or on any connection to
// the database, serves as well.
//
// Every state change is checked against one transition table, every write
// of a running handler is fenced by its execution's token, sensitive
// values are masked before they are stored: see the repository's
// ARCHITECTURE.md. The values handed out (tasks, executions, states) are
// those of package tgtype.
package tg
