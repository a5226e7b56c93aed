package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/internal/events"
)

// Outcome is how one execution ended, as decided by its worker or by the
// watchdog.
type Outcome struct {
	Token Token
	// Status is the instance's new state: SUCCESS, FAILED or CANCELLED.
	Status lifecycle.Status
	// Kind classifies a FAILED or CANCELLED execution.
	Kind lifecycle.ErrorKind
	// Error is the execution's error, already masked.
	Error  string
	Result json.RawMessage
	// ResultStatus is the handler's own verdict on its work (SUCCESS,
	// PARTIAL_SUCCESS, FAILED), written to the task; empty writes NULL.
	ResultStatus string
	// RowsImported and RowsExported are the rows the execution wrote into
	// an import's target or an export's file, as its handler reported them
	// (tasktype.Job.CountRows), whatever its status: counted in the task
	// history with the execution's end, never written to the task.
	RowsImported, RowsExported int64
	// Retry, with Status FAILED, schedules another instance: the task goes
	// to RETRY_PENDING instead of FAILED. It is dropped when a cancel was
	// requested meanwhile (the task then ends CANCELLED).
	Retry *Retry
	// StaleBefore, when set, applies the outcome only if the instance's last
	// heartbeat is older: the watchdog's guard against declaring dead a
	// worker that has just shown a sign of life.
	StaleBefore time.Time
	// Log, when set, is written as a WARN line of the task's trace together
	// with the transition (e.g. why the watchdog acted).
	Log string
	// Task, when set, is the task as its execution was claimed. The finish
	// then reads back only the columns a transition can change and takes
	// the others (input, owner, ...: immutable) from it for the published
	// change, instead of decoding whole rows again.
	Task *ent.Task
	// Review, with Status REVIEW_PENDING, is the review the execution
	// asks for (lifecycle: EXECUTING -> REVIEW_PENDING): task and instance
	// wait there for a person, with this as the review's evidence. Kind
	// and Error are the failure's (a PARTIAL_SUCCESS to confirm has none).
	Review *ReviewRequest
}

// Retry is the next instance a failed execution leads to.
type Retry struct {
	RunAt   time.Time
	Attempt int
}

func init() {
	// Finish moves instances from EXECUTING to the outcome's status and
	// tasks from EXECUTING to that, to RETRY_PENDING or to CANCELLED.
	for _, to := range []lifecycle.Status{lifecycle.Success, lifecycle.Failed, lifecycle.Cancelled, lifecycle.RetryPending} {
		if !lifecycle.CanMove(lifecycle.Executing, to) {
			panic("lifecycle: finish needs EXECUTING -> " + string(to))
		}
	}
}

// Finish applies outcomes in one transaction and returns, per outcome, nil
// when it was applied or a *lifecycle.TransitionError when the execution had
// already been moved on (its token is stale): a zombie worker never
// overwrites a newer outcome. The error result is for the batch as a whole.
func (s *Store) Finish(ctx context.Context, outcomes []Outcome) ([]error, error) {
	ctx = internal(ctx)
	if len(outcomes) == 0 {
		return nil, nil
	}
	var perOutcome []error
	err := s.write(ctx, func(t *txn) error {
		perOutcome = perOutcome[:0]
		for chunk := range slices.Chunk(outcomes, maxBatchRows) {
			errs, err := s.finish(ctx, t, chunk)
			if err != nil {
				return err
			}
			perOutcome = append(perOutcome, errs...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return perOutcome, nil
}

func (s *Store) finish(ctx context.Context, t *txn, outcomes []Outcome) ([]error, error) {
	now := s.Now()
	errs := make([]error, len(outcomes))
	var batch []int // indexes of outcomes sent to the database
	seen := make(map[int]bool, len(outcomes))
	for i, o := range outcomes {
		switch {
		case o.Status != lifecycle.Success && o.Status != lifecycle.Failed && o.Status != lifecycle.Cancelled && o.Status != lifecycle.ReviewPending:
			errs[i] = &lifecycle.TransitionError{Entity: "task instance", ID: o.Token.InstanceID, From: lifecycle.Executing, To: o.Status, Reason: "an execution ends SUCCESS, FAILED, CANCELLED or REVIEW_PENDING"}
		case (o.Status == lifecycle.ReviewPending) != (o.Review != nil):
			errs[i] = &lifecycle.TransitionError{Entity: "task instance", ID: o.Token.InstanceID, From: lifecycle.Executing, To: o.Status, Reason: "an execution goes to REVIEW_PENDING with its review, and only then"}
		case seen[o.Token.InstanceID]:
			errs[i] = &lifecycle.TransitionError{Entity: "task instance", ID: o.Token.InstanceID, From: lifecycle.Executing, To: o.Status, Reason: "two outcomes for one execution"}
		default:
			seen[o.Token.InstanceID] = true
			batch = append(batch, i)
		}
	}
	if len(batch) == 0 {
		return errs, nil
	}

	// 1. The instances: a conditional UPDATE per the fencing token (and
	// the watchdog's heartbeat guard), of executions whose task mirrors
	// them (EXECUTING). Rows not returned were moved on, or their pair is
	// inconsistent (explainRefusals says which); either way that outcome
	// alone is refused. The instance rows are locked first, then the task
	// rows: the lock order every writer keeps. No writer moves a task's
	// status without holding its live instance, so the task read here is
	// still EXECUTING when step 2 updates it.
	cols := [][]any{
		make([]any, 0, len(batch)), // id
		make([]any, 0, len(batch)), // version
		make([]any, 0, len(batch)), // status
		make([]any, 0, len(batch)), // error_kind
		make([]any, 0, len(batch)), // last_error
		make([]any, 0, len(batch)), // result
		make([]any, 0, len(batch)), // stale_before
		make([]any, 0, len(batch)), // from_status
	}
	for _, i := range batch {
		o := outcomes[i]
		var kind, lastErr, result, staleBefore any
		if o.Status != lifecycle.Success && o.Kind != "" {
			kind, lastErr = string(o.Kind), o.Error
		}
		if len(o.Result) > 0 {
			result = string(o.Result)
		}
		if !o.StaleBefore.IsZero() {
			staleBefore = o.StaleBefore.UTC()
		}
		for c, v := range []any{int64(o.Token.InstanceID), o.Token.Version, string(o.Status), kind, lastErr, result, staleBefore, string(lifecycle.Executing)} {
			cols[c] = append(cols[c], v)
		}
	}
	v, vArgs := s.d.valuesTable("v", finishInstanceCols, finishInstanceTypes, cols)
	keys, keyArgs := s.d.liveByKeys("task_instances.id", cols[0])
	rows, err := s.query(ctx, t, s.d.finishInstancesSQL(v, keys), append(append([]any{now}, vArgs...), keyArgs...)...)
	if err != nil {
		return nil, fmt.Errorf("finish: update instances: %w", err)
	}
	applied, err := scanFinished(rows)
	if err != nil {
		return nil, fmt.Errorf("finish: update instances: %w", err)
	}
	if len(applied) < len(batch) {
		if err := s.explainRefusals(ctx, t, outcomes, batch, applied, errs); err != nil {
			return nil, err
		}
	}
	if len(applied) == 0 {
		return errs, nil
	}

	// 2. Their tasks. A retryable failure of a task whose cancel was
	// requested ends the task CANCELLED instead of scheduling a retry.
	for c := range cols[:6] {
		cols[c] = cols[c][:0]
	}
	for _, i := range batch {
		o := outcomes[i]
		in := applied[o.Token.InstanceID]
		if in == nil {
			continue
		}
		to := o.Status
		if o.Status == lifecycle.Failed && o.Retry != nil {
			to = lifecycle.RetryPending
		}
		var lastErr, result, resultStatus any
		if o.Error != "" {
			lastErr = o.Error
		}
		if len(o.Result) > 0 {
			result = string(o.Result)
		}
		if o.ResultStatus != "" {
			resultStatus = o.ResultStatus
		}
		for c, v := range []any{int64(in.TaskID), string(to), lastErr, result, resultStatus, string(lifecycle.Executing)} {
			cols[c] = append(cols[c], v)
		}
	}
	n := len(cols[0])
	v, vArgs = s.d.valuesTable("v", finishTaskCols, finishTaskTypes, cols[:6])
	keys, keyArgs = s.d.liveByKeys("tasks.id", cols[0])
	snapshots := make(map[int]*ent.Task, n)
	for _, i := range batch {
		if in := applied[outcomes[i].Token.InstanceID]; in != nil && outcomes[i].Task != nil && outcomes[i].Task.ID == in.TaskID {
			snapshots[in.TaskID] = outcomes[i].Task
		}
	}
	rows, err = s.query(ctx, t, s.d.finishTasksSQL(v, keys), append(append([]any{now, now, now, now, now, now}, vArgs...), keyArgs...)...)
	if err != nil {
		return nil, fmt.Errorf("finish: update tasks: %w", err)
	}
	tasks, err := s.scanChanged(ctx, t, rows, snapshots)
	if err != nil {
		return nil, fmt.Errorf("finish: update tasks: %w", err)
	}
	if len(tasks) != n {
		// Step 1 only moved executions whose task was EXECUTING, and no
		// one can move such a task while its instance is held.
		return nil, fmt.Errorf("finish: %d executions ended but %d of their tasks were EXECUTING", n, len(tasks))
	}

	// 3. What follows: retry instances, and the lines explaining it.
	taskByID := make(map[int]*ent.Task, len(tasks))
	for _, tk := range tasks {
		taskByID[tk.ID] = tk
	}
	var retries []*ent.TaskInstanceCreate
	var logs []*ent.TaskLogCreate
	for _, i := range batch {
		o := outcomes[i]
		in := applied[o.Token.InstanceID]
		if in == nil {
			continue
		}
		tk := taskByID[in.TaskID]
		if tk.Status == lifecycle.RetryPending {
			retries = append(retries, t.TaskInstance.Create().
				SetTaskID(tk.ID).
				SetInstanceNo(in.InstanceNo+1).
				SetAttempt(o.Retry.Attempt).
				SetStatus(lifecycle.RetryPending).
				SetTaskType(tk.Type).
				SetPriority(tk.Priority).
				SetTenant(tk.Tenant).
				SetRunAt(o.Retry.RunAt.UTC().Truncate(time.Microsecond)).
				SetCreatedAt(now))
		}
		if o.Log != "" {
			logs = append(logs, t.TaskLog.Create().
				SetTaskID(tk.ID).
				SetInstanceID(in.ID).
				SetLevel(tasklog.LevelWARN).
				SetMessage(o.Log).
				SetCreatedAt(now))
		}
	}
	if err := s.insertReviews(ctx, t, outcomes, batch, applied, taskByID, now); err != nil {
		return nil, fmt.Errorf("finish: %w", err)
	}
	if len(retries) > 0 {
		if err := t.TaskInstance.CreateBulk(retries...).Exec(ctx); err != nil {
			return nil, fmt.Errorf("finish: schedule retries: %w", err)
		}
	}
	if len(logs) > 0 {
		created, err := t.TaskLog.CreateBulk(logs...).Save(ctx)
		if err != nil {
			return nil, fmt.Errorf("finish: write logs: %w", err)
		}
		t.logged(created...)
	}
	t.changed(events.Transitioned, tasks...)
	hist := t.history()
	for _, i := range batch {
		if in := applied[outcomes[i].Token.InstanceID]; in != nil {
			tk := taskByID[in.TaskID]
			outcome, retried := histOutcome(tk.Status)
			var run time.Duration
			if in.StartedAt != nil {
				run = now.Sub(*in.StartedAt)
			}
			hist.Finished(tk.Type, tk.Tenant, now, outcome, retried, run)
			hist.Rows(tk.Type, tk.Tenant, now, outcomes[i].RowsImported, outcomes[i].RowsExported)
		}
	}
	// 4. Their dependents: released, or cancelled, in this transaction.
	if err := s.afterEnded(ctx, t, tasks); err != nil {
		return nil, fmt.Errorf("finish: %w", err)
	}
	return errs, nil
}

// explainRefusals fills errs for the outcomes whose instance was not
// updated, saying what state it was found in.
func (s *Store) explainRefusals(ctx context.Context, t *txn, outcomes []Outcome, batch []int, applied map[int]*ent.TaskInstance, errs []error) error {
	var ids []int
	for _, i := range batch {
		if applied[outcomes[i].Token.InstanceID] == nil {
			ids = append(ids, outcomes[i].Token.InstanceID)
		}
	}
	found, err := t.TaskInstance.Query().Where(taskinstance.IDIn(ids...)).All(ctx)
	if err != nil {
		return fmt.Errorf("finish: read refused instances: %w", err)
	}
	byID := make(map[int]*ent.TaskInstance, len(found))
	for _, in := range found {
		byID[in.ID] = in
	}
	for _, i := range batch {
		o := outcomes[i]
		if applied[o.Token.InstanceID] != nil {
			continue
		}
		in := byID[o.Token.InstanceID]
		switch {
		case in == nil:
			errs[i] = &NotFoundError{Entity: "task instance", ID: o.Token.InstanceID}
		case in.Status != lifecycle.Executing:
			errs[i] = &lifecycle.TransitionError{Entity: "task instance", ID: in.ID, From: in.Status, To: o.Status, Reason: "the execution was already moved on"}
		case in.Version != o.Token.Version:
			errs[i] = &lifecycle.TransitionError{Entity: "task instance", ID: in.ID, From: in.Status, To: o.Status, Reason: "stale fencing token"}
		case !o.StaleBefore.IsZero() && in.HeartbeatAt != nil && !in.HeartbeatAt.Before(o.StaleBefore):
			errs[i] = &lifecycle.TransitionError{Entity: "task instance", ID: in.ID, From: in.Status, To: o.Status, Reason: "the worker sent a heartbeat meanwhile"}
		default:
			errs[i] = s.inconsistent(ctx, t, in)
		}
	}
	return nil
}

// The derived tables of the finish's two statements.
var (
	finishInstanceCols  = []string{"id", "version", "status", "error_kind", "last_error", "result", "stale_before", "from_status"}
	finishInstanceTypes = []colType{colInt, colInt, colText, colText, colText, colJSON, colTime, colText}
	finishTaskCols      = []string{"id", "status", "last_error", "result", "result_status", "from_status"}
	finishTaskTypes     = []colType{colInt, colText, colText, colJSON, colText, colText}
)

// finishInstancesSQL is the finish's first statement over the derived
// table v of outcomes: the executions end, fenced by their token (and the
// watchdog's heartbeat guard), where their task mirrors them. The status
// they move from (EXECUTING) is v's from_status and keys reads them by id
// (see liveByKeys: a plan that does not depend on the statistics).
func (d sqlDialect) finishInstancesSQL(v, keys string) string {
	return `UPDATE task_instances SET status = v.status, error_kind = v.error_kind, last_error = v.last_error, result = v.result,
	finished_at = ` + d.timeParam() + `, version = task_instances.version + 1
FROM ` + v + `, tasks
WHERE task_instances.id = v.id AND task_instances.version = v.version AND task_instances.status = v.from_status
	AND (v.stale_before IS NULL OR task_instances.heartbeat_at < v.stale_before)
	AND tasks.id = task_instances.task_id AND tasks.status = v.from_status` + keys + `
RETURNING task_instances.id, task_instances.task_id, task_instances.instance_no, task_instances.started_at`
}

// scanFinished reads the rows finishInstancesSQL returns, by instance id,
// and closes rows.
func scanFinished(rows *sql.Rows) (map[int]*ent.TaskInstance, error) {
	defer rows.Close()
	out := map[int]*ent.TaskInstance{}
	for rows.Next() {
		in := &ent.TaskInstance{}
		var started sql.NullTime
		if err := rows.Scan(&in.ID, &in.TaskID, &in.InstanceNo, &started); err != nil {
			return nil, err
		}
		in.StartedAt = nullTime(started)
		out[in.ID] = in
	}
	return out, rows.Err()
}

// finishTasksSQL is the finish's second statement over the derived table v
// of the tasks whose execution ended: a failure of a task whose cancel was
// requested ends it CANCELLED instead of scheduling a retry. As in
// finishInstancesSQL, the status they move from is v's from_status and
// keys reads them by id.
func (d sqlDialect) finishTasksSQL(v, keys string) string {
	final := `CASE WHEN v.status <> ` + lifecycle.QuotedList(lifecycle.Success) + ` AND tasks.cancel_requested THEN ` + lifecycle.QuotedList(lifecycle.Cancelled) + ` ELSE v.status END`
	return `UPDATE tasks SET status = ` + final + `, attention_status = ` + attentionCase(final) + `, last_error = v.last_error, result = v.result, result_status = v.result_status,
	finished_at = CASE WHEN ` + final + ` IN (` + sqlTerminal + `) THEN ` + d.timeParam() + ` ELSE NULL END,
	updated_at = ` + d.timeParam() + `, version = tasks.version + 1,
	` + deadlineOnSuccess(final, d.timeParam()) + `
FROM ` + v + `
WHERE tasks.id = v.id AND tasks.status = v.from_status` + keys + `
RETURNING ` + changingColumns("tasks")
}

// deadlineOnSuccess is the SET clause that records, when a task with a
// deadline still open ends SUCCESS (final), whether it met it (finished at
// or before it) or missed it (a late finish counts as missed, set here, no
// scan needed). now is the time's parameter, used four times.
func deadlineOnSuccess(final, now string) string {
	open := `tasks.deadline IS NOT NULL AND tasks.deadline_missed_at IS NULL AND tasks.deadline_met_at IS NULL AND ` + final + ` = ` + lifecycle.QuotedList(lifecycle.Success)
	return `deadline_met_at = CASE WHEN ` + open + ` AND tasks.deadline >= ` + now + ` THEN ` + now + ` ELSE tasks.deadline_met_at END,
	deadline_missed_at = CASE WHEN ` + open + ` AND tasks.deadline < ` + now + ` THEN ` + now + ` ELSE tasks.deadline_missed_at END`
}
