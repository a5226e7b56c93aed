package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinputversion"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/ent/taskreview"
	"github.com/taskgraph/taskgraph/internal/events"
)

// ReviewRequest is the review an execution's outcome asks for: the task and
// its instance go to REVIEW_PENDING instead of the outcome's status, with
// this kept as the review's evidence (already masked).
type ReviewRequest struct {
	// Trigger is NON_RETRYABLE, NEEDS_REVIEW or PARTIAL_SUCCESS.
	Trigger  string
	Reason   string
	Evidence json.RawMessage
	FourEyes bool
	Deadline *time.Time
	// OnDeadline is REJECT or ALERT (with a deadline).
	OnDeadline string
}

// The decisions on a review (task_reviews.decision).
const (
	DecisionApproved  = taskreview.DecisionAPPROVED
	DecisionEdited    = taskreview.DecisionEDITED
	DecisionAccepted  = taskreview.DecisionACCEPTED
	DecisionRejected  = taskreview.DecisionREJECTED
	DecisionExpired   = taskreview.DecisionEXPIRED
	DecisionCancelled = taskreview.DecisionCANCELLED
)

// InputEdit is a new input for a task (edit and retry, replay with
// input), masked as a created task's is, with the unmasked input sealed
// when masking changed it.
type InputEdit struct {
	Input        json.RawMessage
	Sealed       []byte
	Author       string
	AuthorSource string
	Reason       string
}

// Decision is a person's (or the deadline's) decision on a task in
// REVIEW_PENDING.
type Decision struct {
	TaskID   int
	Decision taskreview.Decision
	By       string
	BySource string
	Reason   string
	// Edit is the edited input of DecisionEdited.
	Edit *InputEdit
	// Check, when set, is asked before anything moves, with the task and
	// its open review as read in the transaction (four-eyes): its error
	// refuses the decision.
	Check func(tk *ent.Task, rv *ent.TaskReview) error
}

func init() {
	for _, to := range []lifecycle.Status{lifecycle.RetryPending, lifecycle.Success, lifecycle.Failed, lifecycle.Cancelled} {
		if !lifecycle.CanMove(lifecycle.ReviewPending, to) {
			panic("lifecycle: a review decision needs REVIEW_PENDING -> " + string(to))
		}
	}
	if !lifecycle.CanMove(lifecycle.Executing, lifecycle.ReviewPending) {
		panic("lifecycle: a finish needs EXECUTING -> REVIEW_PENDING")
	}
}

// decisionTarget is the state a decision moves the task to, and its
// instance.
func decisionTarget(d taskreview.Decision) (task, instance lifecycle.Status) {
	switch d {
	case DecisionApproved, DecisionEdited:
		return lifecycle.RetryPending, lifecycle.Failed
	case DecisionAccepted:
		return lifecycle.Success, lifecycle.Success
	}
	return lifecycle.Failed, lifecycle.Failed
}

// OpenReview returns the review task id waits on (REVIEW_PENDING), as the
// viewer of ctx sees it, in tx.
func (tx *Tx) OpenReview(ctx context.Context, id int) (*ent.TaskReview, error) {
	return openReview(ctx, tx.t.Client(), id)
}

func openReview(ctx context.Context, c *ent.Client, id int) (*ent.TaskReview, error) {
	r, err := c.TaskReview.Query().
		Where(taskreview.TaskID(id), taskreview.DecidedAtIsNil()).
		Order(ent.Desc(taskreview.FieldID)).
		First(ctx)
	if ent.IsNotFound(err) {
		return nil, nil
	}
	return r, err
}

// Reviews returns the reviews of task id, newest first.
func (s *Store) Reviews(ctx context.Context, id int) ([]*ent.TaskReview, error) {
	return s.client.TaskReview.Query().Where(taskreview.TaskID(id)).Order(ent.Desc(taskreview.FieldID)).All(ctx)
}

// InputVersions returns the input versions of task id, oldest first: the
// rows its edits kept, or none when it was never edited (its input is its
// only version).
func (s *Store) InputVersions(ctx context.Context, id int) ([]*ent.TaskInputVersion, error) {
	return s.client.TaskInputVersion.Query().Where(taskinputversion.TaskID(id)).Order(ent.Asc(taskinputversion.FieldVersion)).All(ctx)
}

// DecideReview applies a decision to task d.TaskID, which must be in
// REVIEW_PENDING: its instance and the task move as lifecycle's table says
// (approve, edit: RETRY_PENDING with a new instance, the edit's input
// written as a new version; accept: SUCCESS; reject, expire: FAILED), the
// review records who, when and why, and the task's dependents are released
// or cancelled as after a finish. Each UPDATE is conditional on
// REVIEW_PENDING: of two decisions at the same instant one moves the task,
// the other gets a *lifecycle.TransitionError.
func (tx *Tx) DecideReview(ctx context.Context, d Decision) (*ent.Task, *ent.TaskReview, error) {
	return tx.s.decideIn(lifecycle.Guarded(ctx), tx.t, d)
}

func (s *Store) decideIn(ctx context.Context, t *txn, d Decision) (*ent.Task, *ent.TaskReview, error) {
	toTask, toInst := decisionTarget(d.Decision)
	tk, err := t.Task.Get(ctx, d.TaskID)
	if ent.IsNotFound(err) {
		return nil, nil, &NotFoundError{Entity: "task", ID: d.TaskID}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("review: read task: %w", err)
	}
	if tk.Status != lifecycle.ReviewPending {
		return nil, nil, &lifecycle.TransitionError{Entity: "task", ID: tk.ID, From: tk.Status, To: toTask, Reason: "only a task in REVIEW_PENDING can be decided"}
	}
	if err := lifecycle.Check("task", tk.ID, tk.Status, toTask); err != nil {
		return nil, nil, err
	}
	rv, err := openReview(ctx, t.Client(), tk.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("review: read review: %w", err)
	}
	if d.Check != nil {
		if err := d.Check(tk, rv); err != nil {
			return nil, nil, err
		}
	}
	now := s.Now()
	// Instance first, then task: the lock order every writer keeps. The
	// instance's move is where two decisions meet: the second finds it
	// moved and changes nothing.
	last, err := t.TaskInstance.Query().Where(taskinstance.TaskID(tk.ID)).Order(ent.Desc(taskinstance.FieldInstanceNo)).First(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("review: read instance: %w", err)
	}
	msg := fmt.Sprintf("review: %s by %s", d.Decision, d.By)
	if d.Reason != "" {
		msg += ": " + d.Reason
	}
	// A rejected (or expired) review whose execution left no error (a
	// PARTIAL_SUCCESS to confirm) says why it failed: the decision.
	instSet, instArgs := `status = ?, version = version + 1`, []any{string(toInst)}
	var why string
	if toTask == lifecycle.Failed {
		if last.LastError == "" {
			instSet += `, last_error = ?`
			instArgs = append(instArgs, msg)
		}
		if tk.LastError == "" {
			why = msg
		}
	}
	n, err := s.exec(ctx, t, `UPDATE task_instances SET `+instSet+` WHERE id = ? AND status = ?`,
		append(instArgs, last.ID, string(lifecycle.ReviewPending))...)
	if err != nil {
		return nil, nil, fmt.Errorf("review: update instance: %w", err)
	}
	if n == 0 {
		return nil, nil, s.movedMeanwhile(ctx, t, tk.ID, toTask)
	}
	if err := s.moveReviewed(ctx, t, tk, lifecycle.ReviewPending, toTask, d.Edit, why, now); err != nil {
		return nil, nil, err
	}
	if rv != nil {
		upd := t.TaskReview.UpdateOneID(rv.ID).
			Where(taskreview.DecidedAtIsNil()).
			SetDecision(d.Decision).
			SetDecidedBy(d.By).
			SetDecidedBySource(d.BySource).
			SetDecidedAt(now)
		if d.Reason != "" {
			upd.SetDecisionReason(d.Reason)
		}
		if d.Edit != nil {
			upd.SetInputVersion(tk.InputVersion)
		}
		if d.Decision == DecisionExpired {
			upd.SetOverdueAt(now)
		}
		if rv, err = upd.Save(ctx); err != nil {
			return nil, nil, fmt.Errorf("review: record decision: %w", err)
		}
	}
	if err := s.afterMove(ctx, t, tk, last, toTask, msg, now); err != nil {
		return nil, nil, err
	}
	return tk, rv, nil
}

// DecideReviews applies each decision as DecideReview does, all in one
// transaction, each id in a savepoint of its own (a refused one is that
// id's error and leaves the others alone).
func (tx *Tx) DecideReviews(ctx context.Context, ds []Decision) ([]Each, error) {
	ctx = lifecycle.Guarded(ctx)
	byID := make(map[int]Decision, len(ds))
	ids := make([]int, len(ds))
	for i, d := range ds {
		byID[d.TaskID], ids[i] = d, d.TaskID
	}
	return tx.s.eachIn(ctx, tx.t, ids, func(t *txn, id int) (*ent.Task, error) {
		tk, _, err := tx.s.decideIn(ctx, t, byID[id])
		return tk, err
	})
}

// movedMeanwhile is the error of a conditional move that found the task
// moved by someone else.
func (s *Store) movedMeanwhile(ctx context.Context, t *txn, id int, to lifecycle.Status) error {
	cur, err := t.Task.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("read task: %w", err)
	}
	return &lifecycle.TransitionError{Entity: "task", ID: id, From: cur.Status, To: to, Reason: "moved concurrently"}
}

// moveReviewed moves tk from `from` to `to` (a conditional UPDATE at its
// version) and, with edit, writes its new input, keeping the former as a
// version (the first edit keeps version 1 too); a non-empty lastError
// becomes its last_error. tk is updated in place.
func (s *Store) moveReviewed(ctx context.Context, t *txn, tk *ent.Task, from, to lifecycle.Status, edit *InputEdit, lastError string, now time.Time) error {
	var attention any
	if containsStatus(attentionStatuses, to) {
		attention = string(to)
	}
	var finished any
	if to.Terminal() {
		finished = now
	}
	set := `status = ?, attention_status = ?, finished_at = ?, updated_at = ?, version = version + 1`
	args := []any{string(to), attention, finished, now}
	if to == lifecycle.RetryPending {
		set += `, cancel_requested = ?, progress_done = 0`
		args = append(args, false)
	}
	if to == lifecycle.Success && deadlineOpen(tk) {
		if tk.Deadline.Before(now) {
			set += `, deadline_missed_at = ?`
			tk.DeadlineMissedAt = &now
		} else {
			set += `, deadline_met_at = ?`
			tk.DeadlineMetAt = &now
		}
		args = append(args, now)
	}
	if lastError != "" {
		set += `, last_error = ?`
		args = append(args, lastError)
	}
	if edit != nil {
		var sealed any
		if len(edit.Sealed) > 0 {
			sealed = edit.Sealed
		}
		set += `, input = ?, input_sealed = ?, input_version = input_version + 1`
		args = append(args, string(edit.Input), sealed)
	}
	n, err := s.exec(ctx, t, `UPDATE tasks SET `+set+` WHERE id = ? AND status = ? AND version = ?`,
		append(args, tk.ID, string(from), tk.Version)...)
	if err != nil {
		return fmt.Errorf("update task: %w", err)
	}
	if n == 0 {
		return s.movedMeanwhile(ctx, t, tk.ID, to)
	}
	if edit != nil {
		if err := s.keepVersions(ctx, t, tk, edit, now); err != nil {
			return err
		}
		tk.Input, tk.InputSealed = edit.Input, edit.Sealed
		tk.InputVersion++
	}
	tk.Status, tk.UpdatedAt = to, now
	if lastError != "" {
		tk.LastError = lastError
	}
	if attention != nil {
		st := to
		tk.AttentionStatus = &st
	} else {
		tk.AttentionStatus = nil
	}
	if to.Terminal() {
		tk.FinishedAt = &now
	} else {
		tk.FinishedAt = nil
	}
	if to == lifecycle.RetryPending {
		tk.CancelRequested, tk.ProgressDone = false, 0
	}
	tk.Version++
	return nil
}

// keepVersions writes the input versions an edit of tk makes: version 1
// (the input it was created with) at its first edit, and the new one.
func (s *Store) keepVersions(ctx context.Context, t *txn, tk *ent.Task, edit *InputEdit, now time.Time) error {
	last, err := t.TaskInstance.Query().Where(taskinstance.TaskID(tk.ID)).Order(ent.Desc(taskinstance.FieldInstanceNo)).First(ctx)
	if err != nil {
		return fmt.Errorf("read last instance: %w", err)
	}
	var rows []*ent.TaskInputVersionCreate
	if tk.InputVersion == 1 {
		rows = append(rows, t.TaskInputVersion.Create().
			SetTaskID(tk.ID).SetVersion(1).SetInput(tk.Input).SetInputSealed(tk.InputSealed).
			SetFromInstanceNo(1).SetAuthor(tk.Owner).SetAuthorSource(tk.OwnerSource).
			SetCreatedAt(tk.CreatedAt))
	}
	rows = append(rows, t.TaskInputVersion.Create().
		SetTaskID(tk.ID).SetVersion(tk.InputVersion+1).SetInput(edit.Input).SetInputSealed(edit.Sealed).
		SetFromInstanceNo(last.InstanceNo+1).SetAuthor(edit.Author).SetAuthorSource(edit.AuthorSource).
		SetReason(edit.Reason).SetCreatedAt(now))
	if err := t.TaskInputVersion.CreateBulk(rows...).Exec(ctx); err != nil {
		return fmt.Errorf("keep input versions: %w", err)
	}
	return nil
}

// afterMove writes what follows a person's move of tk: the new instance of
// a retry, the line of its trace, the change to publish, and the
// dependents' release or cancellation after an ending.
func (s *Store) afterMove(ctx context.Context, t *txn, tk *ent.Task, last *ent.TaskInstance, to lifecycle.Status, msg string, now time.Time) error {
	instanceID := last.ID
	if to == lifecycle.RetryPending {
		inst, err := t.TaskInstance.Create().
			SetTaskID(tk.ID).
			SetInstanceNo(last.InstanceNo + 1).
			SetAttempt(1).
			SetStatus(lifecycle.RetryPending).
			SetTaskType(tk.Type).
			SetPriority(tk.Priority).
			SetTenant(tk.Tenant).
			SetRunAt(now).
			SetCreatedAt(now).
			Save(ctx)
		if err != nil {
			return fmt.Errorf("create instance: %w", err)
		}
		instanceID = inst.ID
		msg += fmt.Sprintf("; instance #%d scheduled", inst.InstanceNo)
	}
	lg, err := t.TaskLog.Create().
		SetTaskID(tk.ID).
		SetInstanceID(instanceID).
		SetLevel(tasklog.LevelINFO).
		SetMessage(msg).
		SetCreatedAt(now).
		Save(ctx)
	if err != nil {
		return fmt.Errorf("write log: %w", err)
	}
	t.logged(lg)
	t.changed(events.Transitioned, tk)
	if to.Terminal() {
		if err := s.afterEnded(ctx, t, []*ent.Task{tk}); err != nil {
			return err
		}
	}
	return nil
}

// ReplayWithInput retries a FAILED task, of any type, with an edited
// input: a new input version and a new instance (RETRY_PENDING), the
// failed instances kept. Any other state yields a
// *lifecycle.TransitionError; of concurrent replays one succeeds. check,
// when set, is asked about the task as read in the transaction before
// anything is written (the four-eyes rule); its error is returned.
func (tx *Tx) ReplayWithInput(ctx context.Context, id int, edit InputEdit, check func(*ent.Task) error) (*ent.Task, error) {
	ctx = lifecycle.Guarded(ctx)
	t, s := tx.t, tx.s
	tk, err := t.Task.Get(ctx, id)
	if ent.IsNotFound(err) {
		return nil, &NotFoundError{Entity: "task", ID: id}
	}
	if err != nil {
		return nil, fmt.Errorf("replay: read task: %w", err)
	}
	if tk.Status != lifecycle.Failed {
		return nil, &lifecycle.TransitionError{Entity: "task", ID: tk.ID, From: tk.Status, To: lifecycle.RetryPending, Reason: "only a FAILED task can be replayed"}
	}
	if check != nil {
		if err := check(tk); err != nil {
			return nil, err
		}
	}
	if err := lifecycle.Check("task", tk.ID, tk.Status, lifecycle.RetryPending); err != nil {
		return nil, err
	}
	now := s.Now()
	last, err := t.TaskInstance.Query().Where(taskinstance.TaskID(id)).Order(ent.Desc(taskinstance.FieldInstanceNo)).First(ctx)
	if err != nil {
		return nil, fmt.Errorf("replay: read last instance: %w", err)
	}
	if err := s.moveReviewed(ctx, t, tk, lifecycle.Failed, lifecycle.RetryPending, &edit, "", now); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	msg := "replay with input version " + fmt.Sprint(tk.InputVersion) + " by " + edit.Author
	if edit.Reason != "" {
		msg += ": " + edit.Reason
	}
	if err := s.afterMove(ctx, t, tk, last, lifecycle.RetryPending, msg, now); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return tk, nil
}

// insertReviews writes the reviews of the executions a finish moved to
// REVIEW_PENDING, and ends as FAILED the instances of those whose task a
// requested cancel ended CANCELLED instead.
func (s *Store) insertReviews(ctx context.Context, t *txn, outcomes []Outcome, batch []int, applied map[int]*ent.TaskInstance, taskByID map[int]*ent.Task, now time.Time) error {
	var rows []*ent.TaskReviewCreate
	for _, i := range batch {
		o := outcomes[i]
		in := applied[o.Token.InstanceID]
		if in == nil || o.Review == nil {
			continue
		}
		tk := taskByID[in.TaskID]
		if tk.Status != lifecycle.ReviewPending {
			// A cancel was requested: the task ended CANCELLED.
			if _, err := s.exec(ctx, t, `UPDATE task_instances SET status = ?, version = version + 1 WHERE id = ? AND status = ?`,
				string(lifecycle.Failed), in.ID, string(lifecycle.ReviewPending)); err != nil {
				return fmt.Errorf("end the instance of a cancelled review: %w", err)
			}
			continue
		}
		r := o.Review
		c := t.TaskReview.Create().
			SetTaskID(tk.ID).
			SetInstanceID(in.ID).
			SetInstanceNo(in.InstanceNo).
			SetTrigger(taskreview.Trigger(r.Trigger)).
			SetReason(r.Reason).
			SetFourEyes(r.FourEyes).
			SetCreatedAt(now)
		if len(r.Evidence) > 0 {
			c.SetEvidence(r.Evidence)
		}
		if r.Deadline != nil {
			c.SetDeadline(r.Deadline.UTC().Truncate(time.Microsecond))
			c.SetOnDeadline(taskreview.OnDeadline(r.OnDeadline))
		}
		rows = append(rows, c)
	}
	if len(rows) == 0 {
		return nil
	}
	if err := t.TaskReview.CreateBulk(rows...).Exec(ctx); err != nil {
		return fmt.Errorf("write reviews: %w", err)
	}
	return nil
}

// closeReviews marks the open reviews of tasks cancelled by hand.
func (s *Store) closeReviews(ctx context.Context, t *txn, taskIDs []int64, now time.Time) error {
	in, args := s.d.inInts("task_id", taskIDs)
	_, err := s.exec(ctx, t, `UPDATE task_reviews SET decision = ?, decided_at = ? WHERE `+in+` AND decided_at IS NULL`,
		append([]any{string(DecisionCancelled), now}, args...)...)
	if err != nil {
		return fmt.Errorf("close reviews: %w", err)
	}
	return nil
}

// DueReview is an open review whose deadline has passed and whose
// deadline outcome has not run yet.
type DueReview struct {
	ID         int
	TaskID     int
	OnDeadline string
}

// DueReviews returns at most limit open reviews whose deadline is at or
// before now and whose outcome has not run (overdue_at empty), oldest
// deadline first. Read as the system.
func (s *Store) DueReviews(ctx context.Context, now time.Time, limit int) ([]DueReview, error) {
	rs, err := s.client.TaskReview.Query().
		Where(taskreview.DecidedAtIsNil(), taskreview.OverdueAtIsNil(), taskreview.DeadlineLTE(now)).
		Order(ent.Asc(taskreview.FieldDeadline), ent.Asc(taskreview.FieldID)).
		Limit(limit).
		All(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]DueReview, len(rs))
	for i, r := range rs {
		var on string
		if r.OnDeadline != nil {
			on = string(*r.OnDeadline)
		}
		out[i] = DueReview{ID: r.ID, TaskID: r.TaskID, OnDeadline: on}
	}
	return out, nil
}

// MarkOverdue records, once, that review id's deadline outcome ran; it
// reports false when it already had (or was decided meanwhile).
func (tx *Tx) MarkOverdue(ctx context.Context, id int) (bool, error) {
	n, err := tx.s.exec(ctx, tx.t, `UPDATE task_reviews SET overdue_at = ? WHERE id = ? AND overdue_at IS NULL AND decided_at IS NULL`, tx.s.Now(), id)
	return n == 1, err
}

func containsStatus(ss []lifecycle.Status, s lifecycle.Status) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
