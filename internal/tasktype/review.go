package tasktype

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/store"
)

// ReviewPolicy is what a type (or a task, by its own opt-in) asks of a
// person when an execution ends with a business failure: instead of
// FAILED (or SUCCESS), the task waits in REVIEW_PENDING for a decision
// (approve and retry, edit and retry, accept, reject). A handler's
// NeedsReview error asks for a review whatever the policy says, unless
// the task opted out.
type ReviewPolicy struct {
	// OnNonRetryable sends NON_RETRYABLE failures to review.
	OnNonRetryable bool `json:"onNonRetryable,omitempty"`
	// ConfirmPartial sends a PARTIAL_SUCCESS (the handler's verdict,
	// SetResultStatus) to review before it counts as a success.
	ConfirmPartial bool `json:"confirmPartial,omitempty"`
	// FourEyes refuses the decision of the task's submitter (FORBIDDEN).
	FourEyes bool `json:"fourEyes,omitempty"`
	// Deadline, when set, is how long a review may wait; then OnDeadline
	// happens, once.
	Deadline time.Duration `json:"deadline,omitempty"`
	// OnDeadline is what a passed deadline does: DeadlineReject (the
	// default) rejects the task, DeadlineAlert leaves it waiting and lets
	// a REVIEW_OVERDUE alert rule see it.
	OnDeadline DeadlineAction `json:"onDeadline,omitempty"`
}

// DeadlineAction is what a passed review deadline does.
type DeadlineAction string

// Deadline actions.
const (
	DeadlineReject DeadlineAction = "REJECT"
	DeadlineAlert  DeadlineAction = "ALERT"
)

// Check says what is wrong with p, if anything.
func (p ReviewPolicy) Check() error {
	switch p.OnDeadline {
	case "", DeadlineReject, DeadlineAlert:
	default:
		return fmt.Errorf("review policy: onDeadline must be REJECT or ALERT, not %q", p.OnDeadline)
	}
	if p.Deadline < 0 {
		return errors.New("review policy: the deadline must not be negative")
	}
	return nil
}

// WithReview gives a type a review policy.
func WithReview(p ReviewPolicy) Option { return func(t *Type) { t.Review = &p } }

// needsReview is a handler's explicit "a person must decide".
type needsReview struct {
	err      error
	evidence any
}

func (e *needsReview) Error() string { return e.err.Error() }
func (e *needsReview) Unwrap() error { return e.err }

// NeedsReview marks err as a business failure a person must decide on:
// the task goes to REVIEW_PENDING (whatever its type's policy, unless the
// task opted out: then it is NON_RETRYABLE) with evidence, any value
// encoded as JSON and masked, kept for the reviewer. It is never retried
// automatically.
func NeedsReview(err error, evidence any) error {
	return &needsReview{err: err, evidence: evidence}
}

// Review is a review an execution's outcome asks for: why, and what the
// reviewer needs (store.Outcome.Review carries it, masked).
type Review struct {
	Trigger    string // NON_RETRYABLE, NEEDS_REVIEW, PARTIAL_SUCCESS
	Reason     string
	Evidence   json.RawMessage
	FourEyes   bool
	Deadline   *time.Time
	OnDeadline DeadlineAction
}

// Review triggers.
const (
	TriggerNonRetryable   = "NON_RETRYABLE"
	TriggerNeedsReview    = "NEEDS_REVIEW"
	TriggerPartialSuccess = "PARTIAL_SUCCESS"
)

// ReviewFor decides whether an execution of a task of type t (nil: not
// registered here) goes to review: err is the handler's error (nil for a
// success), kind its classification, resultStatus the handler's verdict,
// mode the task's own opt-in ("ON", "OFF" or ""), retrying whether the
// retry policy schedules another attempt. It returns nil when the outcome
// stands as it is. evidence is already JSON (nil: none); mask is applied
// to the reason and the evidence.
func ReviewFor(t *Type, mode string, err error, kind lifecycle.ErrorKind, resultStatus string, retrying bool, now time.Time, mask func(json.RawMessage) json.RawMessage, maskText func(string) string) *Review {
	if mode == "OFF" || retrying {
		return nil
	}
	var p ReviewPolicy
	if t != nil && t.Review != nil {
		p = *t.Review
	}
	if mode == "ON" {
		p.OnNonRetryable = true
	}
	r := &Review{FourEyes: p.FourEyes}
	var nr *needsReview
	switch {
	case err != nil && errors.As(err, &nr):
		r.Trigger, r.Reason = TriggerNeedsReview, err.Error()
		if nr.evidence != nil {
			if raw, jerr := json.Marshal(nr.evidence); jerr == nil {
				r.Evidence = raw
			}
		}
	case err != nil && kind == lifecycle.KindNonRetryable && p.OnNonRetryable:
		r.Trigger, r.Reason = TriggerNonRetryable, err.Error()
	case err == nil && resultStatus == TriggerPartialSuccess && p.ConfirmPartial:
		r.Trigger, r.Reason = TriggerPartialSuccess, "partial success: the type asks a person to confirm it"
	default:
		return nil
	}
	if p.Deadline > 0 {
		d := now.Add(p.Deadline).UTC()
		r.Deadline = &d
		r.OnDeadline = p.OnDeadline
		if r.OnDeadline == "" {
			r.OnDeadline = DeadlineReject
		}
	}
	if maskText != nil {
		r.Reason = maskText(r.Reason)
	}
	if mask != nil && len(r.Evidence) > 0 {
		r.Evidence = mask(r.Evidence)
	}
	return r
}

// IsNeedsReview reports whether err asks for a review (NeedsReview).
func IsNeedsReview(err error) bool {
	var nr *needsReview
	return errors.As(err, &nr)
}

// ReviewOutcome returns o sent to review (REVIEW_PENDING, with its review)
// when the task's review policy — its type's (typ, nil when not
// registered here), or its own opt-in — asks for one: a handler's
// NeedsReview, a NON_RETRYABLE failure, or a PARTIAL_SUCCESS to confirm;
// otherwise o as it is. err is the handler's error (an external worker's
// "needs review" outcome is made a NeedsReview error). A cancelled, timed
// out or retried execution is never reviewed. The in-process pool and the
// worker protocol both decide with it.
func ReviewOutcome(typ *Type, o store.Outcome, err error, m *mask.Masker, now time.Time) store.Outcome {
	var mode string
	if o.Task != nil && o.Task.ReviewMode != nil {
		mode = string(*o.Task.ReviewMode)
	}
	switch {
	case o.Status == lifecycle.Failed && o.Retry == nil && o.Kind == lifecycle.KindNonRetryable:
	case o.Status == lifecycle.Success && o.ResultStatus == TriggerPartialSuccess:
		err = nil
	default:
		return o
	}
	r := ReviewFor(typ, mode, err, o.Kind, o.ResultStatus, false, now, maskJSON(m), m.String)
	if r == nil {
		return o
	}
	o.Status = lifecycle.ReviewPending
	o.Review = &store.ReviewRequest{Trigger: r.Trigger, Reason: dbText(r.Reason), Evidence: r.Evidence, FourEyes: r.FourEyes, Deadline: r.Deadline, OnDeadline: string(r.OnDeadline)}
	first, _, _ := strings.Cut(o.Review.Reason, "\n")
	o.Log = fmt.Sprintf("waiting for review (%s): %s", r.Trigger, first)
	return o
}

// maskJSON masks a document with m; one that cannot be read is dropped.
func maskJSON(m *mask.Masker) func(json.RawMessage) json.RawMessage {
	return func(raw json.RawMessage) json.RawMessage {
		out, _, err := m.JSON(raw)
		if err != nil {
			return nil
		}
		return out
	}
}

// dbText is text the databases store: valid UTF-8 without NUL.
func dbText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
