// Package tgtype holds the plain values that taskgraph's library hands to
// its users: a task, one execution of it, their states and error kinds. It
// imports nothing of taskgraph's, so that a program may pass these values
// around (to its own handlers, reports or API) without depending on the
// library itself.
package tgtype

import (
	"encoding/json"
	"time"
)

// Status is the state of a task and of each of its executions.
type Status string

// The states. A task moves only along the lifecycle's table (PENDING ->
// EXECUTING -> SUCCESS, FAILED, CANCELLED or RETRY_PENDING, RETRY_PENDING
// -> EXECUTING again; FAILED -> RETRY_PENDING by a manual retry;
// WAITING_DEPENDENCY -> PENDING once its parents ended, or CANCELLED;
// EXECUTING -> REVIEW_PENDING when its review policy hands a business
// failure to a person, who decides: RETRY_PENDING, SUCCESS or FAILED); its
// status is that of its latest execution.
const (
	// Pending: waiting for its first execution.
	Pending Status = "PENDING"
	// Executing: a worker runs it.
	Executing Status = "EXECUTING"
	// Success: done (final).
	Success Status = "SUCCESS"
	// Failed: failed with no automatic retry left; a manual retry may
	// run it again.
	Failed Status = "FAILED"
	// RetryPending: a new execution waits for its backoff.
	RetryPending Status = "RETRY_PENDING"
	// Cancelled: cancelled (final).
	Cancelled Status = "CANCELLED"
	// WaitingDependency: a step of a workflow whose parents have not all
	// ended yet; it is not run before they have.
	WaitingDependency Status = "WAITING_DEPENDENCY"
	// ReviewPending: its execution ended with a business failure that
	// its review policy hands to a person (tg.NeedsReview, tg.WithReview);
	// it waits for a decision: approve or edit and retry, accept, reject.
	ReviewPending Status = "REVIEW_PENDING"
)

// Final reports whether s is a state no execution leaves by itself:
// SUCCESS, FAILED or CANCELLED.
func (s Status) Final() bool { return s == Success || s == Failed || s == Cancelled }

// ErrorKind says why an execution did not succeed, and so what follows.
type ErrorKind string

// The error kinds.
const (
	// Retryable: a passing failure; the retry policy runs it again.
	Retryable ErrorKind = "RETRYABLE"
	// NonRetryable: bad input, no permission; straight to FAILED.
	NonRetryable ErrorKind = "NON_RETRYABLE"
	// Resource: a pool or a disk was full; retried later, a bounded
	// number of times.
	Resource ErrorKind = "RESOURCE"
	// Timeout: its timeout passed, or its worker stopped sending
	// heartbeats.
	Timeout ErrorKind = "TIMEOUT"
	// Cancelled: it was cancelled while it ran.
	KindCancelled ErrorKind = "CANCELLED"
	// Interrupted: a shutdown released it; the attempt is not used up.
	Interrupted ErrorKind = "INTERRUPTED"
	// Stalled: its progress stood still while its heartbeats went on.
	Stalled ErrorKind = "STALLED"
)

// ResultStatus is a handler's verdict on the work itself, beside the
// execution's status: an import with some bad rows succeeds as an
// execution and is PARTIAL_SUCCESS as work.
type ResultStatus string

// The result statuses ("" for a task whose handler reported none).
const (
	ResultSuccess        ResultStatus = "SUCCESS"
	ResultPartialSuccess ResultStatus = "PARTIAL_SUCCESS"
	ResultFailed         ResultStatus = "FAILED"
)

// Task is a task as it was when it was read: what was asked (its type and
// input), where it is (its status and progress), and how it ended.
type Task struct {
	ID int
	// Code is the task's readable unique code (NOOP-20261129-7K3Q9D2M).
	Code  string
	Type  string
	Title string
	// BizID is the caller's business key (an order number, a file name).
	BizID string
	// IdempotencyKey is the key the task was created with, as shown
	// (masked); "" without one.
	IdempotencyKey string
	Status         Status
	// ResultStatus is the handler's verdict on the work, if it gave one.
	ResultStatus ResultStatus
	// Priority orders waiting tasks: smaller runs first.
	Priority int
	// Input is the task's input as stored: sensitive values masked.
	Input json.RawMessage
	// Result is the result of its latest finished execution (masked), or
	// nil.
	Result json.RawMessage
	// LastError is the error of its latest failed execution (masked).
	LastError string
	// ProgressDone out of ProgressTotal units of work.
	ProgressDone, ProgressTotal int64
	// MaxAttempts is how many attempts its retry policy makes.
	MaxAttempts int
	RetryPolicy string
	Timeout     time.Duration
	// CancelRequested: a cancel was asked while it ran.
	CancelRequested bool
	// Owner is the user who created it, Tenant the owner's tenant.
	Owner, Tenant string
	// RunAt: it does not run before this time.
	RunAt      time.Time
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt time.Time // zero until it ends
	// Deadline is the time it must finish (SUCCESS) by: its own, its
	// type's or its schedule's; zero without one.
	Deadline time.Time
	// DeadlineState is where it stands against its deadline; "" without
	// one.
	DeadlineState DeadlineState
	// Instances are its executions, the latest first, when they were read
	// with it (nil otherwise).
	Instances []Instance
}

// DeadlineState is where a task stands against its deadline: a flag
// beside its Status, never a state of it.
type DeadlineState string

// The deadline states.
const (
	// DeadlineOnTime: open, and not yet within the margin of its deadline.
	DeadlineOnTime DeadlineState = "ON_TIME"
	// DeadlineAtRisk: open (waiting or running) within the margin of its
	// deadline (15 minutes unless the server says otherwise).
	DeadlineAtRisk DeadlineState = "AT_RISK"
	// DeadlineMissed: not finished SUCCESS by its deadline.
	DeadlineMissed DeadlineState = "MISSED"
	// DeadlineMet: finished SUCCESS by its deadline.
	DeadlineMet DeadlineState = "MET"
)

// Instance is one execution of a task. A retry is a new instance; the
// one that failed keeps its status and error.
type Instance struct {
	ID int
	// No is its number among the task's executions: 1, 2, 3...
	No int
	// Attempt is which attempt of the retry policy it is (a manual retry
	// starts again at 1).
	Attempt   int
	Status    Status
	ErrorKind ErrorKind // "" unless it failed
	LastError string    // masked
	// WorkerID names the worker (a node, or an external worker) that ran
	// it.
	WorkerID   string
	StartedAt  time.Time // zero until it starts
	FinishedAt time.Time // zero until it ends
}
