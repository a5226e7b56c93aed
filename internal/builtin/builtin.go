// Package builtin holds the task types every taskgraph server registers:
// webhook (message push) and noop (benchmarks and smoke tests).
package builtin

import "github.com/taskgraph/taskgraph/internal/tasktype"

// Register adds the built-in task types to r.
func Register(r *tasktype.Registry, w *Webhook) {
	tasktype.Register(r, "noop", Noop,
		tasktype.WithDescription("Does nothing (optionally for a while). For smoke tests and benchmarks."),
		tasktype.WithRetryPolicy("none"))
	tasktype.Register(r, "webhook", w.Handle,
		tasktype.WithDescription("POSTs a JSON body to a URL. 2xx succeeds; 5xx, 408, timeouts and connection errors are retried; 429 waits longer; other 4xx fail at once."),
		tasktype.WithRetryPolicy(tasktype.DefaultPolicyName))
}
