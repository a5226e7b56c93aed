// Package builtin holds the task types every taskgraph server registers:
// webhook (message push) and noop (benchmarks and smoke tests).
package builtin

import (
	"taskgraph/worker"
)

// Register adds the built-in task types to r.
func Register(r *worker.Registry, w *Webhook) {
	worker.Register(r, "noop", Noop,
		worker.WithDescription("Does nothing (optionally for a while). For smoke tests and benchmarks."),
		worker.WithRetryPolicy("none"))
	worker.Register(r, "webhook", w.Handle,
		worker.WithDescription("POSTs a JSON body to a URL. 2xx succeeds; 5xx, 408, timeouts and connection errors are retried; 429 waits longer; other 4xx fail at once."),
		worker.WithRetryPolicy(worker.DefaultPolicyName))
}
