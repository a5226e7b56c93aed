package tasktype

import (
	"errors"
	"time"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/outage"
)

// classified is an error with the kind its handler gave it.
type classified struct {
	kind lifecycle.ErrorKind
	err  error
}

func (e *classified) Error() string { return e.err.Error() }
func (e *classified) Unwrap() error { return e.err }

// Retryable marks err as worth another attempt (a connection blip, a 5xx).
// Unmarked errors are retryable too; this states it.
func Retryable(err error) error { return &classified{lifecycle.KindRetryable, err} }

// NonRetryable marks err as final: bad input, a bad file, no permission. The
// task goes straight to FAILED.
func NonRetryable(err error) error { return &classified{lifecycle.KindNonRetryable, err} }

// Resource marks err as a shortage (pool full, disk full, rate limited): the
// retry waits longer, and is still bounded by max attempts.
func Resource(err error) error { return &classified{lifecycle.KindResource, err} }

// Classify returns the kind of a handler's error. Unmarked, a full disk and
// a locked or busy database are RESOURCE (the store has retried the lock
// already).
func Classify(err error) lifecycle.ErrorKind {
	var c *classified
	if errors.As(err, &c) {
		return c.kind
	}
	var nr *needsReview
	if errors.As(err, &nr) {
		// Never retried: a person decides (or, with no review, it fails).
		return lifecycle.KindNonRetryable
	}
	var inErr *InputError
	if errors.As(err, &inErr) {
		return lifecycle.KindNonRetryable
	}
	switch outage.Classify(err) {
	case outage.DiskFull, outage.Busy, outage.BlobStoreFull:
		// A shortage, not a blip: the retry waits longer.
		return lifecycle.KindResource
	}
	// Everything else (connection errors, timeouts of a dependency, errors
	// nobody classified) is worth another bounded attempt.
	return lifecycle.KindRetryable
}

// delayed is an error whose next attempt should wait a given time.
type delayed struct {
	err   error
	after time.Duration
}

func (e *delayed) Error() string { return e.err.Error() }
func (e *delayed) Unwrap() error { return e.err }

// RetryAfter marks err as asking for the next attempt to wait d, no less
// (an HTTP 429 or 503 with Retry-After, say). It keeps err's kind: wrap a
// classified error (RetryAfter(Resource(err), d)). The retry policy waits d
// instead of its own backoff, up to its longest delay (Policies.NextAfter).
func RetryAfter(err error, d time.Duration) error {
	return &delayed{err: err, after: max(d, 0)}
}

// RetryAfterOf returns the delay an error asked for with RetryAfter.
func RetryAfterOf(err error) (time.Duration, bool) {
	var d *delayed
	if errors.As(err, &d) {
		return d.after, true
	}
	return 0, false
}
