// Package lifecycle is the task state machine: the eight states shared by a task
// and by each of its executions (instances), the one table of legal
// transitions, the error classes of a failed execution, and the typed error
// every writer returns when a move is not allowed.
//
// Nothing here touches the database. The store package is the only writer of
// status columns and asks this package, through Check, before every
// conditional UPDATE it issues; the UPDATE's WHERE clause then makes the check
// hold under concurrency.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// Status is the state of a task or of one of its instances.
type Status string

// The eight states. See ARCHITECTURE.md, "The lifecycle", and the diagram in
// docs/work.md.
const (
	// WaitingDependency is a task of a workflow (or created with dependsOn)
	// whose parents have not all ended as its edges ask: its instance exists
	// but is not claimable (not in WaitingStatuses, so not in the claim's
	// index). It is entered only at creation, and left in the transaction
	// that ends its last parent.
	WaitingDependency Status = "WAITING_DEPENDENCY"
	Pending           Status = "PENDING"
	Executing         Status = "EXECUTING"
	Success           Status = "SUCCESS"
	Failed            Status = "FAILED"
	RetryPending      Status = "RETRY_PENDING"
	Cancelled         Status = "CANCELLED"
	// ReviewPending is a task whose execution ended with a business
	// failure its review policy hands to a person (a NON_RETRYABLE error,
	// a handler's explicit "needs review", a PARTIAL_SUCCESS its type
	// says must be confirmed) instead of FAILED or SUCCESS, with the
	// evidence kept (task_reviews). Task and instance are both in it; it
	// is neither live nor claimable. Only a decision leaves it.
	ReviewPending Status = "REVIEW_PENDING"
)

// AllStatuses lists every state in lifecycle order, but WAITING_DEPENDENCY
// and REVIEW_PENDING, which came later, last: a state's index in this list
// is how the relay's notifications name it, so existing states keep theirs.
var AllStatuses = []Status{Pending, Executing, Success, Failed, RetryPending, Cancelled, WaitingDependency, ReviewPending}

// LiveStatuses are the states in which an instance is waiting or running. At
// most one instance of a task may be live (a partial unique index enforces it).
var LiveStatuses = []Status{Pending, RetryPending, Executing}

// WaitingStatuses are the states a worker may claim from.
var WaitingStatuses = []Status{Pending, RetryPending}

// transitions is the one transition table. A key's value lists the states it
// may move to. Terminal states have no entry.
//
// WAITING_DEPENDENCY (entered only at creation, by a task with parents):
//   - -> PENDING when every parent has ended as its edge asks: SUCCESS for
//     the policies CANCEL_DEPENDENTS and WAIT, any terminal state for
//     RUN_ANYWAY. The store makes it in the transaction that ends the last
//     such parent: a counter of the parents still awaited (tasks.waiting_on)
//     is decremented by one conditional UPDATE over all the children of the
//     parents ending, and the row whose counter reaches zero is released by
//     that same statement's transaction, once (the row lock orders two
//     parents ending at the same instant).
//   - -> CANCELLED when it is cancelled, or when a parent whose edge says
//     CANCEL_DEPENDENTS ends FAILED or CANCELLED (with everything below it).
//
// REVIEW_PENDING (a person decides):
//   - entered from EXECUTING only, by the finish of an execution whose
//     outcome carries a review (store.Outcome.Review): the task's review
//     policy (its type's, or the task's own opt-in) turned a NON_RETRYABLE
//     failure, a handler's "needs review" or a PARTIAL_SUCCESS to confirm
//     into a review. Task and instance enter it together, in the finish's
//     transaction, with the review's evidence (task_reviews). A task whose
//     cancel was requested ends CANCELLED instead (and its instance FAILED).
//     While in it, the task is not written (its updated_at is when it
//     entered), it is not live (no instance may be claimed) and its
//     dependents keep waiting: nothing releases or cancels them.
//   - left only by a decision (store.Tx.DecideReview), each a conditional
//     UPDATE of the task from REVIEW_PENDING at its version (two reviewers
//     at once: one moves it, the other finds it moved and gets a
//     TransitionError), recorded on the review with who, when and why:
//     -> RETRY_PENDING: approve (a new instance, same input) or edit and
//     retry (a new instance with the edited input, a new input version);
//     the reviewed instance ends FAILED, as a failed attempt does.
//     -> SUCCESS: accept (the partial result as it is); the instance too.
//     -> FAILED: reject, or the deadline's REJECT; the instance too.
//     -> CANCELLED: cancelled by hand; the instance ends FAILED.
//     The three endings release or cancel the dependents as a finish does.
//     The table lets an instance move the same way; an instance never goes
//     to RETRY_PENDING from it (a retry makes a new instance).
var transitions = map[Status][]Status{
	WaitingDependency: {Pending, Cancelled},
	Pending:           {Executing, Cancelled},
	Executing:         {Success, Failed, Cancelled, RetryPending, ReviewPending},
	Failed:            {RetryPending},
	RetryPending:      {Executing, Cancelled},
	ReviewPending:     {RetryPending, Success, Failed, Cancelled},
}

// Values lets ent store Status as an enum column.
func (Status) Values() []string {
	out := make([]string, len(AllStatuses))
	for i, s := range AllStatuses {
		out[i] = string(s)
	}
	return out
}

// Valid reports whether s is one of the eight states.
func (s Status) Valid() bool { return slices.Contains(AllStatuses, s) }

// Terminal reports whether no transition leaves s automatically. FAILED is
// terminal for the engine (only a manual retry leaves it).
func (s Status) Terminal() bool {
	return s == Success || s == Failed || s == Cancelled
}

// Live reports whether s is one of LiveStatuses.
func (s Status) Live() bool { return slices.Contains(LiveStatuses, s) }

// CanMove reports whether the table allows from -> to.
func CanMove(from, to Status) bool { return slices.Contains(transitions[from], to) }

// Targets returns the states reachable from s in one step.
func Targets(s Status) []Status { return slices.Clone(transitions[s]) }

// Check returns nil when from -> to is legal and a *TransitionError otherwise.
func Check(entity string, id int, from, to Status) error {
	if CanMove(from, to) {
		return nil
	}
	return &TransitionError{Entity: entity, ID: id, From: from, To: to}
}

// MarshalGQL writes the status as a GraphQL enum value.
func (s Status) MarshalGQL(w io.Writer) { _, _ = io.WriteString(w, strconv.Quote(string(s))) }

// UnmarshalGQL reads a GraphQL enum value.
func (s *Status) UnmarshalGQL(v any) error {
	str, ok := v.(string)
	if !ok {
		return fmt.Errorf("status must be a string, got %T", v)
	}
	if !Status(str).Valid() {
		return fmt.Errorf("%q is not a valid status", str)
	}
	*s = Status(str)
	return nil
}

// ErrInvalidTransition is matched by errors.Is for every *TransitionError.
var ErrInvalidTransition = errors.New("invalid transition")

// TransitionError says that an entity could not move between two states,
// either because the table forbids it or because someone else moved it first
// (the conditional UPDATE changed no row). From is the state actually found.
type TransitionError struct {
	Entity string // "task" or "task instance"
	ID     int
	From   Status
	To     Status
	// Reason, when set, explains a refusal the table alone does not (for
	// example a stale fencing token).
	Reason string
}

func (e *TransitionError) Error() string {
	msg := fmt.Sprintf("%s %d cannot move from %s to %s", e.Entity, e.ID, e.From, e.To)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Is makes errors.Is(err, ErrInvalidTransition) true.
func (e *TransitionError) Is(target error) bool { return target == ErrInvalidTransition }

// ErrorKind classifies why an execution ended without success.
type ErrorKind string

// Error kinds; see ARCHITECTURE.md, "The lifecycle".
const (
	KindRetryable    ErrorKind = "RETRYABLE"
	KindNonRetryable ErrorKind = "NON_RETRYABLE"
	KindResource     ErrorKind = "RESOURCE"
	KindTimeout      ErrorKind = "TIMEOUT"
	KindCancelled    ErrorKind = "CANCELLED"
	KindInterrupted  ErrorKind = "INTERRUPTED"
	// KindStalled is an execution cancelled because its progress and
	// logs stopped moving for its type's stallAfter while its heartbeats
	// went on (a hung loop, a lock wait), when the type asks for that.
	KindStalled ErrorKind = "STALLED"
)

// AllErrorKinds lists every kind.
var AllErrorKinds = []ErrorKind{KindRetryable, KindNonRetryable, KindResource, KindTimeout, KindCancelled, KindInterrupted, KindStalled}

// Values lets ent store ErrorKind as an enum column.
func (ErrorKind) Values() []string {
	out := make([]string, len(AllErrorKinds))
	for i, k := range AllErrorKinds {
		out[i] = string(k)
	}
	return out
}

// Retryable reports whether the retry policy may schedule another attempt
// after an execution ended with this kind. A stalled execution is retried
// like a timed-out one: the hang may be the moment's (a lock wait), and the
// policy's attempts bound it.
func (k ErrorKind) Retryable() bool {
	switch k {
	case KindRetryable, KindResource, KindTimeout, KindInterrupted, KindStalled:
		return true
	}
	return false
}

// ConsumesAttempt reports whether an execution that ended with this kind
// counts against max attempts. An interruption (graceful shutdown) is not the
// task's fault and does not; a stall is the task's (its handler stopped
// moving) and does, so that a handler that always hangs ends FAILED.
func (k ErrorKind) ConsumesAttempt() bool { return k != KindInterrupted }

// MarshalGQL writes the kind as a GraphQL enum value.
func (k ErrorKind) MarshalGQL(w io.Writer) { _, _ = io.WriteString(w, strconv.Quote(string(k))) }

// UnmarshalGQL reads a GraphQL enum value.
func (k *ErrorKind) UnmarshalGQL(v any) error {
	str, ok := v.(string)
	if !ok {
		return fmt.Errorf("error kind must be a string, got %T", v)
	}
	if !slices.Contains(AllErrorKinds, ErrorKind(str)) {
		return fmt.Errorf("%q is not a valid error kind", str)
	}
	*k = ErrorKind(str)
	return nil
}

// Action is a user-facing operation on a task. The console shows a button per
// action in AvailableActions and no other.
type Action string

// Actions.
const (
	ActionCancel Action = "CANCEL"
	ActionRetry  Action = "RETRY"
	// ActionReplayWithInput retries a FAILED task with an edited input
	// (a new input version), of any type.
	ActionReplayWithInput Action = "REPLAY_WITH_INPUT"
	// The decisions on a task in REVIEW_PENDING.
	ActionApproveReview Action = "APPROVE_REVIEW"
	ActionEditAndRetry  Action = "EDIT_AND_RETRY"
	ActionAcceptReview  Action = "ACCEPT_REVIEW"
	ActionRejectReview  Action = "REJECT_REVIEW"
)

// AllActions lists every action.
var AllActions = []Action{ActionCancel, ActionRetry, ActionReplayWithInput, ActionApproveReview, ActionEditAndRetry, ActionAcceptReview, ActionRejectReview}

// AvailableActions projects the transition table onto user actions for a task
// in state s. A running task whose cancel was already requested offers no
// second cancel. A task in review offers its decisions (accept ends it
// SUCCESS with whatever result its execution left, partial or none).
func AvailableActions(s Status, cancelRequested bool) []Action {
	var out []Action
	if CanMove(s, Cancelled) && !(s == Executing && cancelRequested) {
		out = append(out, ActionCancel)
	}
	if s == Failed && CanMove(s, RetryPending) {
		out = append(out, ActionRetry, ActionReplayWithInput)
	}
	if s == ReviewPending {
		if CanMove(s, RetryPending) {
			out = append(out, ActionApproveReview, ActionEditAndRetry)
		}
		if CanMove(s, Success) {
			out = append(out, ActionAcceptReview)
		}
		if CanMove(s, Failed) {
			out = append(out, ActionRejectReview)
		}
	}
	return out
}

// MarshalGQL writes the action as a GraphQL enum value.
func (a Action) MarshalGQL(w io.Writer) { _, _ = io.WriteString(w, strconv.Quote(string(a))) }

// UnmarshalGQL reads a GraphQL enum value.
func (a *Action) UnmarshalGQL(v any) error {
	str, ok := v.(string)
	if !ok || !slices.Contains(AllActions, Action(str)) {
		return fmt.Errorf("%v is not a valid action", v)
	}
	*a = Action(str)
	return nil
}

// TerminalStatuses are the states that end an instance, and a task unless
// it is retried by hand (FAILED).
var TerminalStatuses = []Status{Success, Failed, Cancelled}

// QuotedList returns ss as a list of SQL string literals ("'PENDING',
// 'RETRY_PENDING'"), for the store's statements and the schema's partial
// indexes: status lists in SQL come from this package, never from literals
// typed elsewhere.
func QuotedList(ss ...Status) string {
	var b []byte
	for i, s := range ss {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '\'')
		b = append(b, s...)
		b = append(b, '\'')
	}
	return string(b)
}

type guardKey struct{}

// Guarded marks ctx as the store's own: the ent schema's hooks refuse any
// status change made through ent unless its context carries this mark, and
// even then only along the transition table. Only package store calls it.
func Guarded(ctx context.Context) context.Context {
	return context.WithValue(ctx, guardKey{}, true)
}

// IsGuarded reports whether ctx was marked by Guarded.
func IsGuarded(ctx context.Context) bool {
	v, _ := ctx.Value(guardKey{}).(bool)
	return v
}
