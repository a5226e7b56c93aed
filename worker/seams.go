package worker

import (
	"context"
	"reflect"
	"time"

	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/store"
)

// The pool and its flusher reach the database through these interfaces,
// each what one part of them does with it; *store.Store satisfies them all.
// Tests give fakes of them to exercise the loops without a database.

// Claimer hands out waiting executions: the pool's fetch loop uses it.
type Claimer interface {
	// ClaimEach moves up to limit waiting instances of types, at most
	// caps[i] of types[i], to EXECUTING for workerID and returns them
	// with their tasks and fencing tokens.
	ClaimEach(ctx context.Context, workerID string, types []string, caps []int, limit int) ([]store.Claimed, error)
	// NextAdmission returns, and forgets, the earliest time flow control
	// admits again a type it refused (zero: none), so that the pool claims
	// then rather than at its next poll.
	NextAdmission() time.Time
	// HeldAtCap reports whether a recent claim found a type at its
	// cluster-wide cap: the pool then claims as soon as any execution
	// ends (on any node: the change feed relays other nodes' ends), the
	// slot it freed being the cap's, instead of at its next poll.
	HeldAtCap() bool
}

// Heartbeater reports running executions alive: the pool's heartbeat loop
// uses it and learns from the answer which executions must stop.
type Heartbeater interface {
	Pulse(ctx context.Context, pulses []store.Pulse) (store.Beat, error)
}

// Completer writes what executions produce, each write fenced by its
// token: the flusher uses it.
type Completer interface {
	// RecordWork writes running executions' log lines and progress, and
	// returns the tokens of executions that were moved on (their writes
	// were dropped).
	RecordWork(ctx context.Context, logs []store.LogLine, progress []store.Progress) ([]store.Token, error)
	// Finish writes outcomes and returns, for each, nil or why it was
	// refused; err is a failure of the whole batch.
	Finish(ctx context.Context, outcomes []store.Outcome) ([]error, error)
}

// Clock tells the time in which the store writes instances' timestamps
// (heartbeats, progress_at, a retry's run_at).
type Clock interface {
	Now() time.Time
}

// ChangeFeed delivers committed changes to the pool as they happen: new
// work to claim, cancels to pass on to running handlers. *events.Broker is
// one.
type ChangeFeed interface {
	// SubscribeInternal subscribes the process's own machinery to the
	// changes match selects; a subscriber buffer changes behind is dropped
	// (its subscription ends) and must catch up by other means.
	SubscribeInternal(match func(events.TaskChange) bool, buffer int) *events.Subscription[events.TaskChange]
}

var _ ChangeFeed = (*events.Broker)(nil)

// Store is all a Pool needs of the database.
type Store interface {
	Claimer
	Heartbeater
	Completer
	Clock
}

var _ Store = (*store.Store)(nil)

// ParentReader reads the results a claimed step's parents left it. A Store
// that is one (the store) hands them to the steps' handlers (Job.Parents).
type ParentReader interface {
	ParentResults(ctx context.Context, children []int) (map[int][]store.ParentResult, error)
}

var _ ParentReader = (*store.Store)(nil)

// isNil reports whether v is nil, or an interface holding a nil pointer
// (a nil *store.Store given as a Store, a nil *events.Broker as a
// ChangeFeed).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// testSignal lets a test wait for a point in a loop instead of sleeping.
// The zero value (production) signals nothing; a test makes it with
// newTestSignal before the loop starts and receives from it.
type testSignal chan struct{}

// testSignalBuffer is how many signals a test may leave unread: a loop
// never blocks on a test, and a signal that does not fit is a test bug.
const testSignalBuffer = 256

func newTestSignal() testSignal { return make(testSignal, testSignalBuffer) }

// signal records that the point was reached.
func (s testSignal) signal() {
	if s == nil {
		return
	}
	select {
	case s <- struct{}{}:
	default:
		panic("worker: test signal not read: more than its buffer were left unread")
	}
}
