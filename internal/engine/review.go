package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskreview"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/service"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// reviewAction is the audit action of a decision.
func reviewAction(d taskreview.Decision) auditlog.Action {
	switch d {
	case store.DecisionApproved:
		return audit.ReviewApprove
	case store.DecisionEdited:
		return audit.ReviewEdit
	case store.DecisionAccepted:
		return audit.ReviewAccept
	case store.DecisionExpired:
		return audit.ReviewExpire
	}
	return audit.ReviewReject
}

// Decide applies a person's decision on task id, waiting in REVIEW_PENDING:
// approve (a new instance, same input), edit (a new instance with input,
// validated by the type's schema, masked and sealed as a created task's),
// accept (SUCCESS as it is) or reject (FAILED). Viewers may not decide
// (FORBIDDEN); with the type's four-eyes, neither may the task's submitter,
// nor anyone outside its tenant. Recorded in the audit log with who and
// why, in the decision's transaction. A task no longer in REVIEW_PENDING
// (decided by someone else first) is a *lifecycle.TransitionError.
func (e *Engine) Decide(ctx context.Context, id int, decision taskreview.Decision, reason string, input json.RawMessage) (*ent.Task, error) {
	v, err := e.admit(ctx, 1)
	if err != nil {
		return nil, err
	}
	reason = e.masker.String(reason)
	entry := audit.Entry{Action: reviewAction(decision), TaskIDs: []int{id}, Details: reasonDetails(reason)}
	var edit *store.InputEdit
	if decision == store.DecisionEdited && v.CanMutate() {
		// The edit is checked (and its reason masked with what it
		// hides) before the transaction, against the task's type, which
		// never changes.
		if edit, err = e.editOf(ctx, v, id, input, reason); err != nil {
			entry.Err = err
			_ = e.audit.Record(ctx, entry)
			return nil, err
		}
		reason = edit.Reason
		entry.Details = e.editDetails(reasonDetails(reason), edit)
	}
	return e.act(ctx, entry, func(tx *store.Tx) (*ent.Task, error) {
		d, err := e.decision(v, id, decision, reason)
		if err != nil {
			return nil, err
		}
		d.Edit = edit
		tk, _, err := tx.DecideReview(ctx, d)
		return tk, err
	})
}

// editOf is the edit of task id's input, checked against its type.
func (e *Engine) editOf(ctx context.Context, v auth.Viewer, id int, input json.RawMessage, reason string) (*store.InputEdit, error) {
	tk, err := e.store.TaskByID(ctx, id)
	if err != nil {
		return nil, err
	}
	edit, err := e.inputEdit(v, tk, input, reason)
	if err != nil {
		return nil, err
	}
	return &edit, nil
}

// DecideMany applies one decision (approve or reject) to each id, each
// independently, in one transaction with one audit record.
func (e *Engine) DecideMany(ctx context.Context, ids []int, decision taskreview.Decision, reason string) ([]BulkResult, error) {
	if decision != store.DecisionApproved && decision != store.DecisionRejected {
		return nil, &ValidationError{Problems: []Problem{{Field: "decision", Message: "only approve and reject apply to many tasks at once"}}}
	}
	reason = e.masker.String(reason)
	return e.bulk(ctx, reviewAction(decision), ids, reasonDetails(reason), func(tx *store.Tx, v auth.Viewer) ([]BulkResult, error) {
		ds := make([]store.Decision, 0, len(ids))
		seen := map[int]bool{}
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			d, err := e.decision(v, id, decision, reason)
			if err != nil {
				return nil, err
			}
			ds = append(ds, d)
		}
		return tx.DecideReviews(ctx, ds)
	})
}

// decision checks a decision's request and builds it, four-eyes check
// included (made by the store on the task as read in its transaction).
func (e *Engine) decision(v auth.Viewer, id int, decision taskreview.Decision, reason string) (store.Decision, error) {
	if err := v.AllowMutate("decide reviews"); err != nil {
		return store.Decision{}, err
	}
	var ve ValidationError
	checkText(&ve, "reason", reason, MaxReasonLen)
	if (decision == store.DecisionRejected || decision == store.DecisionEdited) && reason == "" {
		ve.add("reason", "is required to %s", map[taskreview.Decision]string{store.DecisionRejected: "reject", store.DecisionEdited: "edit an input"}[decision])
	}
	if err := ve.err(); err != nil {
		return store.Decision{}, err
	}
	return store.Decision{TaskID: id, Decision: decision, By: v.User, BySource: v.Source, Reason: reason,
		Check: func(tk *ent.Task, rv *ent.TaskReview) error { return fourEyes(v, tk, rv) }}, nil
}

// fourEyes refuses the decision of the task's own submitter, or of someone
// outside its tenant, when the review asks for four eyes.
func fourEyes(v auth.Viewer, tk *ent.Task, rv *ent.TaskReview) error {
	if rv == nil || !rv.FourEyes || v.Role == auth.RoleSystem {
		return nil
	}
	if v.Identity() == access.Owner(tk) {
		return &auth.ForbiddenError{Role: v.Role, Action: "decide on the review of a task they submitted (its type asks for four eyes)"}
	}
	if v.Tenant != tk.Tenant {
		return &auth.ForbiddenError{Role: v.Role, Action: "decide on the review of another tenant's task (its type asks for four eyes)"}
	}
	return nil
}

// ReplayWithInput retries a FAILED task, of any type, with an edited
// input: validated, masked and sealed as Decide's edit, recorded as
// REPLAY_WITH_INPUT. When the task's type asks for four eyes, the rule of
// the review decisions applies: its submitter may not replay it, nor may
// anyone outside its tenant (FORBIDDEN).
func (e *Engine) ReplayWithInput(ctx context.Context, id int, input json.RawMessage, reason string) (*ent.Task, error) {
	v, err := e.admit(ctx, 1)
	if err != nil {
		return nil, err
	}
	reason = e.masker.String(reason)
	entry := audit.Entry{Action: audit.ReplayWithInput, TaskIDs: []int{id}, Details: reasonDetails(reason)}
	check := func() (*store.InputEdit, error) {
		if err := v.AllowMutate("replay tasks"); err != nil {
			return nil, err
		}
		var ve ValidationError
		checkText(&ve, "reason", reason, MaxReasonLen)
		if reason == "" {
			ve.add("reason", "is required to edit an input")
		}
		if err := ve.err(); err != nil {
			return nil, err
		}
		return e.editOf(ctx, v, id, input, reason)
	}
	edit, err := check()
	if err != nil {
		entry.Err = err
		_ = e.audit.Record(ctx, entry)
		return nil, err
	}
	entry.Details = e.editDetails(reasonDetails(edit.Reason), edit)
	return e.act(ctx, entry, func(tx *store.Tx) (*ent.Task, error) {
		return tx.ReplayWithInput(ctx, id, *edit, func(tk *ent.Task) error {
			if !e.asksFourEyes(tk.Type) {
				return nil
			}
			return fourEyes(v, tk, &ent.TaskReview{FourEyes: true})
		})
	})
}

// asksFourEyes reports whether task type typeName's review policy asks
// for four eyes.
func (e *Engine) asksFourEyes(typeName string) bool {
	typ, ok := e.registry.Lookup(typeName)
	return ok && typ.Review != nil && typ.Review.FourEyes
}

// editDetails adds to an audit record's details which fields an edit
// changed (their paths, never their values).
func (e *Engine) editDetails(details map[string]any, edit *store.InputEdit) map[string]any {
	out := map[string]any{}
	for k, v := range details {
		out[k] = v
	}
	out["inputEdited"] = true
	return out
}

// inputEdit validates an edited input of task tk as a create's is, and
// masks and seals it. A field the edit leaves as the console showed it,
// masked ("138****1234", "******"), keeps the value it hides: tk's input
// is the one the edit starts from, and where the edit's value is that
// input's masked value at the same place, and masking hid something
// there, the unmasked value (opened from tk's seal) is kept instead of
// the mask's text. Any other value, a new secret included, replaces it.
func (e *Engine) inputEdit(v auth.Viewer, tk *ent.Task, input json.RawMessage, reason string) (store.InputEdit, error) {
	typ, ok := e.registry.Lookup(tk.Type)
	if !ok {
		return store.InputEdit{}, &ValidationError{Problems: []Problem{{Field: "input", Message: fmt.Sprintf("task type %q is not registered here: its input cannot be checked", tk.Type)}}}
	}
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage(`{}`)
	}
	if len(input) > MaxInputBytes {
		return store.InputEdit{}, &ValidationError{Problems: []Problem{{Field: "input", Message: fmt.Sprintf("is %d bytes; the limit is %d", len(input), MaxInputBytes)}}}
	}
	canonical, err := e.unmaskEdit(tk, input)
	if err != nil {
		return store.InputEdit{}, &ValidationError{Problems: []Problem{{Field: "input", Message: err.Error()}}}
	}
	var ve ValidationError
	if err := typ.Validate(canonical); err != nil {
		var inErr *tasktype.InputError
		if errors.As(err, &inErr) {
			for _, p := range inErr.Problems {
				ve.add("input", "%s", e.masker.WithValuesOf(canonical).String(p))
			}
		} else {
			ve.add("input", "%s", e.masker.WithValuesOf(canonical).String(err.Error()))
		}
	}
	if err := ve.err(); err != nil {
		return store.InputEdit{}, err
	}
	masked, changed, err := e.masker.JSON(canonical)
	if err != nil {
		return store.InputEdit{}, &ValidationError{Problems: []Problem{{Field: "input", Message: err.Error()}}}
	}
	var sealed []byte
	if changed {
		sealed = e.sealer.Seal(canonical)
		// The reason may quote what the edit hides (a new password).
		reason = e.masker.WithValuesOf(canonical).String(reason)
	}
	return store.InputEdit{Input: masked, Sealed: sealed, Author: v.User, AuthorSource: v.Source, Reason: reason}, nil
}

// unmaskEdit is the edited input, canonical, with each value the edit
// left masked as tk's input showed it put back to the value it hides.
func (e *Engine) unmaskEdit(tk *ent.Task, input json.RawMessage) (json.RawMessage, error) {
	canonical, err := canonicalJSON(input)
	if err != nil {
		return nil, err
	}
	if len(tk.InputSealed) == 0 || len(tk.Input) == 0 {
		return canonical, nil // masking hid nothing of tk's input
	}
	shown, plain, err := e.decodeVersion(tk.Input, tk.InputSealed)
	if err != nil {
		return canonical, nil
	}
	edited, err := decodeJSON(canonical)
	if err != nil {
		return nil, err
	}
	return json.Marshal(keepMasked(edited, shown, plain))
}

// keepMasked walks the edited document b alongside the document it was
// edited from, as shown (masked) and unmasked: where b is what was shown
// and masking hid something there, the unmasked value is kept. Objects
// are walked key by key, arrays of one length index by index.
func keepMasked(b, shown, plain any) any {
	if reflect.DeepEqual(b, shown) && !reflect.DeepEqual(shown, plain) {
		return plain
	}
	switch x := b.(type) {
	case map[string]any:
		ms, ok1 := shown.(map[string]any)
		mp, ok2 := plain.(map[string]any)
		if !ok1 || !ok2 {
			return b
		}
		out := make(map[string]any, len(x))
		for k, v := range x {
			s, inS := ms[k]
			p, inP := mp[k]
			if inS && inP {
				out[k] = keepMasked(v, s, p)
			} else {
				out[k] = v
			}
		}
		return out
	case []any:
		as, ok1 := shown.([]any)
		ap, ok2 := plain.([]any)
		if !ok1 || !ok2 || len(as) != len(ap) || len(as) != len(x) {
			return b
		}
		out := make([]any, len(x))
		for i, v := range x {
			out[i] = keepMasked(v, as[i], ap[i])
		}
		return out
	}
	return b
}

// ExpireReview runs a passed deadline's outcome on one due review, once:
// REJECT decides it EXPIRED (FAILED, audited as the system); ALERT only
// marks it overdue, for the REVIEW_OVERDUE alert rules. It reports whether
// it did anything (false: decided or handled meanwhile). ctx must be the
// system's.
func (e *Engine) ExpireReview(ctx context.Context, due store.DueReview) (bool, error) {
	if due.OnDeadline != string(tasktype.DeadlineReject) {
		var marked bool
		err := e.store.Write(ctx, func(tx *store.Tx) error {
			var err error
			marked, err = tx.MarkOverdue(ctx, due.ID)
			return err
		})
		return marked, err
	}
	reason := "the review's deadline passed"
	entry := audit.Entry{Action: audit.ReviewExpire, TaskIDs: []int{due.TaskID}, Details: reasonDetails(reason)}
	var done bool
	err := e.store.Write(ctx, func(tx *store.Tx) error {
		marked, err := tx.MarkOverdue(ctx, due.ID)
		if err != nil || !marked {
			return err
		}
		if _, _, err := tx.DecideReview(ctx, store.Decision{TaskID: due.TaskID, Decision: store.DecisionExpired, By: auth.System.User, BySource: auth.System.Source, Reason: reason}); err != nil {
			return err
		}
		done = true
		return e.audit.Insert(ctx, tx.Ent(), entry)
	})
	if errors.Is(err, lifecycle.ErrInvalidTransition) {
		return false, nil // decided meanwhile
	}
	return done, err
}

// Deadlines is the review deadlines' background service: each pass runs
// the outcome of every review whose deadline has passed, once
// (ExpireReview), on the node that leads the watchdog role.
type Deadlines struct {
	*service.Loop[int]
	e      *Engine
	batch  int
	margin time.Duration
}

// DeadlinesConfig configures Deadlines.
type DeadlinesConfig struct {
	// Interval between passes. Default: DeadlinesInterval.
	Interval time.Duration
	// Delay before the first pass. Default: a second.
	Delay time.Duration
	// Leader, when set, lets only the leading node pass.
	Leader func(context.Context) (bool, error)
	Quiet  func(error) bool
	Logger *slog.Logger
	// Margin is how long before a task's deadline an open task is at
	// risk. Default: DeadlineMargin.
	Margin time.Duration
}

// DeadlineMargin is the default margin before a task's deadline.
const DeadlineMargin = 15 * time.Minute

// DeadlinesInterval is how often Deadlines passes by default.
const DeadlinesInterval = 10 * time.Second

// NewDeadlines returns the service over e.
func NewDeadlines(cfg DeadlinesConfig, e *Engine) (*Deadlines, error) {
	d := &Deadlines{e: e, batch: 100, margin: cmp.Or(cfg.Margin, DeadlineMargin)}
	loop, err := service.New(service.Config[int]{
		Name: "review-deadlines", Interval: cmp.Or(cfg.Interval, DeadlinesInterval), Delay: cmp.Or(cfg.Delay, time.Second),
		Leader: cfg.Leader, Quiet: cfg.Quiet, Logger: cfg.Logger,
	}, d.Pass)
	if err != nil {
		return nil, err
	}
	d.Loop = loop
	return d, nil
}

// Pass runs the outcome of every due review, as the system, then flags
// the tasks' deadlines (TaskDeadlines), and returns how many it did.
func (d *Deadlines) Pass(ctx context.Context) (int, error) {
	ctx = auth.NewSystemContext(ctx)
	n, err := d.reviews(ctx)
	if err != nil {
		return n, err
	}
	m, err := d.TaskDeadlines(ctx)
	return n + m, err
}

// TaskDeadlines flags each task still open against its deadline: AT_RISK
// once the database's clock is past deadline - margin, MISSED once it is
// past the deadline, each once (store.Tx.FlagDeadline is conditional, so
// two nodes passing at once flag it once). It returns how many flags it
// set. It reads only the tasks whose deadline falls within the margin
// (the partial index task_deadline_open).
func (d *Deadlines) TaskDeadlines(ctx context.Context) (int, error) {
	ctx = auth.NewSystemContext(ctx)
	now := d.e.store.Now()
	n, after := 0, 0
	for {
		open, err := d.e.store.OpenDeadlines(ctx, now.Add(d.margin), after, d.batch)
		if err != nil {
			return n, err
		}
		for _, o := range open {
			after = o.TaskID
			flags := []string{}
			if !o.AtRisk {
				flags = append(flags, store.DeadlineAtRisk)
			}
			if o.Deadline.Before(now) {
				flags = append(flags, store.DeadlineMissed)
			}
			for _, f := range flags {
				var did bool
				err := d.e.store.Write(ctx, func(tx *store.Tx) error {
					var err error
					did, err = tx.FlagDeadline(ctx, o.TaskID, f)
					return err
				})
				if err != nil {
					return n, err
				}
				if did {
					n++
				}
			}
		}
		if len(open) < d.batch {
			return n, nil
		}
	}
}

// reviews runs the outcome of every due review and returns how many it ran.
func (d *Deadlines) reviews(ctx context.Context) (int, error) {
	n := 0
	for {
		due, err := d.e.store.DueReviews(ctx, d.e.store.Now(), d.batch)
		if err != nil {
			return n, err
		}
		for _, r := range due {
			did, err := d.e.ExpireReview(ctx, r)
			if err != nil {
				return n, err
			}
			if did {
				n++
			}
		}
		if len(due) < d.batch {
			return n, nil
		}
	}
}
