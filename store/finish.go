package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"taskgraph/ent"
	"taskgraph/ent/task"
	"taskgraph/ent/taskinstance"
	"taskgraph/ent/tasklog"
	"taskgraph/events"
	"taskgraph/lifecycle"
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
	// Retry, with Status FAILED, schedules another instance: the task goes
	// to RETRY_PENDING instead of FAILED. It is dropped when a cancel was
	// requested meanwhile.
	Retry *Retry
	// StaleBefore, when set, applies the outcome only if the instance's last
	// heartbeat is older: the watchdog's guard against declaring dead a
	// worker that has just shown a sign of life.
	StaleBefore time.Time
	// Log, when set, is written as a WARN line of the task's trace together
	// with the transition (e.g. why the watchdog acted).
	Log string
}

// Retry is the next instance a failed execution leads to.
type Retry struct {
	RunAt   time.Time
	Attempt int
}

// Finish applies outcomes in one transaction and returns, per outcome, nil
// when it was applied or a *lifecycle.TransitionError when the execution had
// already been moved on (its token is stale): a zombie worker never
// overwrites a newer outcome. The error result is for the batch as a whole.
func (s *Store) Finish(ctx context.Context, outcomes []Outcome) ([]error, error) {
	if len(outcomes) == 0 {
		return nil, nil
	}
	var perOutcome []error
	err := s.write(ctx, func(t *txn) error {
		var err error
		perOutcome, err = s.finish(ctx, t, outcomes)
		return err
	})
	if err != nil {
		return nil, err
	}
	return perOutcome, nil
}

// finishPlan is an accepted outcome with the rows it changes.
type finishPlan struct {
	o        Outcome
	inst     *ent.TaskInstance
	task     *ent.Task
	taskTo   lifecycle.Status
	newRetry *Retry
}

func (s *Store) finish(ctx context.Context, t *txn, outcomes []Outcome) ([]error, error) {
	now := s.Now()
	errs := make([]error, len(outcomes))

	instIDs := make([]int, len(outcomes))
	for i, o := range outcomes {
		instIDs[i] = o.Token.InstanceID
	}
	iq := t.TaskInstance.Query().Where(taskinstance.IDIn(instIDs...))
	if s.d.postgres() {
		iq = iq.ForUpdate()
	}
	insts, err := iq.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("finish: lock instances: %w", err)
	}
	instByID := make(map[int]*ent.TaskInstance, len(insts))
	taskIDs := make([]int, 0, len(insts))
	for _, in := range insts {
		instByID[in.ID] = in
		taskIDs = append(taskIDs, in.TaskID)
	}
	tq := t.Task.Query().Where(task.IDIn(taskIDs...))
	if s.d.postgres() {
		tq = tq.ForUpdate()
	}
	tasks, err := tq.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("finish: lock tasks: %w", err)
	}
	taskByID := make(map[int]*ent.Task, len(tasks))
	for _, tk := range tasks {
		taskByID[tk.ID] = tk
	}

	var plans []*finishPlan
	taken := make(map[int]bool, len(outcomes))
	for i, o := range outcomes {
		in := instByID[o.Token.InstanceID]
		if in == nil {
			errs[i] = &NotFoundError{Entity: "task instance", ID: o.Token.InstanceID}
			continue
		}
		if err := lifecycle.Check("task instance", in.ID, in.Status, o.Status); err != nil || taken[in.ID] {
			errs[i] = &lifecycle.TransitionError{Entity: "task instance", ID: in.ID, From: in.Status, To: o.Status, Reason: "the execution was already moved on"}
			continue
		}
		if in.Version != o.Token.Version {
			errs[i] = &lifecycle.TransitionError{Entity: "task instance", ID: in.ID, From: in.Status, To: o.Status, Reason: "stale fencing token"}
			continue
		}
		if !o.StaleBefore.IsZero() && in.HeartbeatAt != nil && !in.HeartbeatAt.Before(o.StaleBefore) {
			errs[i] = &lifecycle.TransitionError{Entity: "task instance", ID: in.ID, From: in.Status, To: o.Status, Reason: "the worker sent a heartbeat meanwhile"}
			continue
		}
		tk := taskByID[in.TaskID]
		p := &finishPlan{o: o, inst: in, task: tk}
		switch {
		case o.Status == lifecycle.Success:
			p.taskTo = lifecycle.Success
		case tk.CancelRequested:
			p.taskTo = lifecycle.Cancelled
		case o.Status == lifecycle.Failed && o.Retry != nil:
			p.taskTo, p.newRetry = lifecycle.RetryPending, o.Retry
		default:
			p.taskTo = o.Status
		}
		if err := lifecycle.Check("task", tk.ID, tk.Status, p.taskTo); err != nil {
			errs[i] = err
			continue
		}
		taken[in.ID] = true
		plans = append(plans, p)
	}
	if len(plans) == 0 {
		return errs, nil
	}

	if err := s.updateFinishedInstances(ctx, t, plans, now); err != nil {
		return nil, err
	}
	if err := s.updateFinishedTasks(ctx, t, plans, now); err != nil {
		return nil, err
	}

	var retries []*ent.TaskInstanceCreate
	var logs []*ent.TaskLogCreate
	for _, p := range plans {
		if r := p.newRetry; r != nil {
			retries = append(retries, t.TaskInstance.Create().
				SetTaskID(p.task.ID).
				SetInstanceNo(p.inst.InstanceNo+1).
				SetAttempt(r.Attempt).
				SetStatus(lifecycle.RetryPending).
				SetTaskType(p.task.Type).
				SetPriority(p.task.Priority).
				SetRunAt(r.RunAt.UTC().Truncate(time.Microsecond)).
				SetCreatedAt(now))
		}
		if msg := p.o.Log; msg != "" {
			instID := p.inst.ID
			logs = append(logs, t.TaskLog.Create().
				SetTaskID(p.task.ID).
				SetInstanceID(instID).
				SetLevel(tasklog.LevelWARN).
				SetMessage(msg).
				SetCreatedAt(now))
		}
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
		t.logs = append(t.logs, created...)
	}

	for _, p := range plans {
		tk := p.task
		tk.Status = p.taskTo
		tk.Version++
		tk.UpdatedAt = now
		tk.Result = p.o.Result
		tk.LastError = p.o.Error
		tk.FinishedAt = nil
		if p.taskTo.Terminal() {
			tk.FinishedAt = &now
		}
		t.changed(events.Transitioned, tk)
	}
	return errs, nil
}

func (s *Store) updateFinishedInstances(ctx context.Context, t *txn, plans []*finishPlan, now time.Time) error {
	row := s.d.intParam() + ", " + s.d.intParam() + ", " + s.d.textParam() + ", " + s.d.textParam() + ", " + s.d.textParam() + ", " + s.d.jsonParam()
	args := make([]any, 0, len(plans)*6+1)
	for _, p := range plans {
		var kind, lastErr, result any
		if p.o.Status != lifecycle.Success {
			kind, lastErr = string(p.o.Kind), p.o.Error
		}
		if len(p.o.Result) > 0 {
			result = string(p.o.Result)
		}
		args = append(args, p.inst.ID, p.inst.Version, string(p.o.Status), kind, lastErr, result)
	}
	args = append(args, now)
	n, err := s.exec(ctx, t, `
WITH v(id, version, status, error_kind, last_error, result) AS (VALUES `+valuesRows(row, len(plans))+`)
UPDATE task_instances SET status = v.status, error_kind = v.error_kind, last_error = v.last_error, result = v.result,
	finished_at = `+s.d.timeParam()+`, version = task_instances.version + 1
FROM v
WHERE task_instances.id = v.id AND task_instances.version = v.version AND task_instances.status = 'EXECUTING'`, args...)
	if err != nil {
		return fmt.Errorf("finish: update instances: %w", err)
	}
	if int(n) != len(plans) {
		return fmt.Errorf("finish: %d of %d instances changed under their lock", n, len(plans))
	}
	return nil
}

func (s *Store) updateFinishedTasks(ctx context.Context, t *txn, plans []*finishPlan, now time.Time) error {
	row := s.d.intParam() + ", " + s.d.intParam() + ", " + s.d.textParam() + ", " + s.d.textParam() + ", " + s.d.jsonParam() + ", " + s.d.intParam()
	args := make([]any, 0, len(plans)*6+2)
	for _, p := range plans {
		var lastErr, result any
		if p.o.Error != "" {
			lastErr = p.o.Error
		}
		if len(p.o.Result) > 0 {
			result = string(p.o.Result)
		}
		finished := 0
		if p.taskTo.Terminal() {
			finished = 1
		}
		args = append(args, p.task.ID, p.task.Version, string(p.taskTo), lastErr, result, finished)
	}
	args = append(args, now, now)
	n, err := s.exec(ctx, t, `
WITH v(id, version, status, last_error, result, finished) AS (VALUES `+valuesRows(row, len(plans))+`)
UPDATE tasks SET status = v.status, last_error = v.last_error, result = v.result,
	finished_at = CASE WHEN v.finished = 1 THEN `+s.d.timeParam()+` ELSE NULL END,
	updated_at = `+s.d.timeParam()+`, version = tasks.version + 1
FROM v
WHERE tasks.id = v.id AND tasks.version = v.version AND tasks.status = 'EXECUTING'`, args...)
	if err != nil {
		return fmt.Errorf("finish: update tasks: %w", err)
	}
	if int(n) != len(plans) {
		return fmt.Errorf("finish: %d of %d tasks changed under their lock", n, len(plans))
	}
	return nil
}
