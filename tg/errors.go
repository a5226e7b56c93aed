package tg

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/ratelimit"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// Errors a handler returns say what should follow. An error without a
// mark is retryable: the task's retry policy runs it again, with backoff,
// up to its number of attempts.

// Retryable marks err as worth another attempt (a connection blip, a
// 5xx), as an unmarked error is.
func Retryable(err error) error { return tasktype.Retryable(err) }

// NonRetryable marks err as final (bad input, a refused number, no
// permission): the task goes straight to FAILED, with err as its error.
func NonRetryable(err error) error { return tasktype.NonRetryable(err) }

// Resource marks err as a shortage (a pool or a disk full, a rate limit)
// and asks for the next attempt to wait at least after (0: the policy's
// longer backoff for shortages), as an HTTP Retry-After says. The attempts
// stay bounded by the retry policy.
func Resource(err error, after time.Duration) error {
	err = tasktype.Resource(err)
	if after > 0 {
		err = tasktype.RetryAfter(err, after)
	}
	return err
}

// NeedsReview marks err as a business failure a person must decide on (a
// file whose rows fail validation beyond a threshold, a reconciliation
// that finds a difference): the task waits in REVIEW_PENDING, never
// retried by itself, with evidence — any value, encoded as JSON and masked
// like an input — kept for the reviewer, who approves it (runs it again),
// edits its input and runs it again, accepts it as it is or rejects it
// (FAILED). A task created with its review turned off ends FAILED
// (NON_RETRYABLE) instead. See WithReview for the policy of the rest.
func NeedsReview(err error, evidence any) error { return tasktype.NeedsReview(err, evidence) }

// ValidationError is a request the Client refused before it wrote
// anything: every problem found, by field.
type ValidationError struct {
	Problems []Problem
}

// Problem is one wrong field of a request.
type Problem struct {
	Field   string
	Message string
}

// Error says what is wrong.
func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.Field + ": " + p.Message
	}
	return "taskgraph: invalid request: " + strings.Join(parts, "; ")
}

// ConflictError is an idempotency key used before with another payload:
// TaskID is the task it made.
type ConflictError struct {
	TaskID  int
	Message string
}

// Error says what is wrong.
func (e *ConflictError) Error() string { return "taskgraph: " + e.Message }

// NotFoundError is a task that does not exist, or that the caller may not
// see (OnBehalfOf).
type NotFoundError struct {
	ID int
}

// Error says what is wrong.
func (e *NotFoundError) Error() string { return fmt.Sprintf("taskgraph: task %d not found", e.ID) }

// TransitionError is a move the task's state does not allow (cancelling
// a finished task, retrying one that did not fail): From is the state it
// was found in.
type TransitionError struct {
	ID       int
	From, To string
	Message  string
}

// Error says what is wrong.
func (e *TransitionError) Error() string { return "taskgraph: " + e.Message }

// ForbiddenError is a call its owner (OnBehalfOf) may not make.
type ForbiddenError struct{ Message string }

// Error says what is wrong.
func (e *ForbiddenError) Error() string { return "taskgraph: " + e.Message }

// RateLimitedError is a call beyond its owner's rate limit (the setting
// rate-limit): RetryAfter says when it would be admitted.
type RateLimitedError struct {
	RetryAfter time.Duration
	Message    string
}

// Error says what is wrong.
func (e *RateLimitedError) Error() string { return "taskgraph: " + e.Message }

// publicError turns the engine's errors into this package's; others are
// returned wrapped, as failures of the database or of the caller's
// transaction.
func publicError(err error) error {
	if err == nil {
		return nil
	}
	var ve *engine.ValidationError
	var ie *tasktype.InputError
	var ce *store.ConflictError
	var nf *store.NotFoundError
	var te *lifecycle.TransitionError
	var fe *auth.ForbiddenError
	var rl *ratelimit.Error
	switch {
	case errors.As(err, &ve):
		out := &ValidationError{}
		for _, p := range ve.Problems {
			out.Problems = append(out.Problems, Problem{Field: p.Field, Message: p.Message})
		}
		return out
	case errors.As(err, &ie):
		out := &ValidationError{}
		for _, p := range ie.Problems {
			out.Problems = append(out.Problems, Problem{Field: "input", Message: p})
		}
		return out
	case errors.As(err, &ce):
		return &ConflictError{TaskID: ce.TaskID, Message: ce.Message}
	case errors.As(err, &nf):
		return &NotFoundError{ID: nf.ID}
	case errors.As(err, &te):
		return &TransitionError{ID: te.ID, From: string(te.From), To: string(te.To), Message: te.Error()}
	case errors.As(err, &fe):
		return &ForbiddenError{Message: fe.Error()}
	case errors.As(err, &rl):
		return &RateLimitedError{RetryAfter: rl.RetryAfter, Message: rl.Error()}
	}
	return fmt.Errorf("taskgraph: %w", err)
}
