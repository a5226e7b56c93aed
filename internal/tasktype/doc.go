// Package tasktype holds what a task type is and how its executions are
// retried: the registry of types (a name, the schema of its typed input,
// defaults, the handler), the named retry policies, the Job a handler is
// given, and the marks a handler puts on its errors (Retryable,
// NonRetryable, Resource, RetryAfter) with their classification.
//
// It is what the engine (which validates and creates tasks) and the worker
// pool (which runs them) share; neither imports the other. A Job writes
// its progress and log lines through a JobWriter, which the worker pool
// implements.
package tasktype
