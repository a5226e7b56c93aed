package store

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/internal/events"
)

func init() {
	// A workflow's retry moves its steps along these.
	for _, m := range [][2]lifecycle.Status{
		{lifecycle.Failed, lifecycle.RetryPending},
		{lifecycle.Failed, lifecycle.WaitingDependency},
		{lifecycle.Cancelled, lifecycle.WaitingDependency},
		{lifecycle.WaitingDependency, lifecycle.Pending},
	} {
		if !lifecycle.CanMove(m[0], m[1]) {
			panic("lifecycle: a workflow's retry needs " + string(m[0]) + " -> " + string(m[1]))
		}
	}
}

// RetryWorkflow re-runs, in tx, the FAILED and CANCELLED steps of workflow
// id and keeps the others (those that succeeded, and those still running
// or waiting). Each re-run step gets a new instance: it waits again
// (WAITING_DEPENDENCY) for those of its parents that this retry re-runs or
// that have not ended yet; one with none to wait for is claimable at once
// (a FAILED step RETRY_PENDING, as a manual retry makes it; a CANCELLED
// one released to PENDING). note is added to each step's log line. It
// returns the steps it moved, as written. A workflow the viewer may not
// see is a *NotFoundError; one with no step to re-run, a
// *lifecycle.TransitionError.
//
// On PostgreSQL the workflow's steps are locked until the commit: a parent
// that succeeds meanwhile waits, then counts the re-run steps down (it
// sees their new instances); one that succeeded before is not waited for.
func (tx *Tx) RetryWorkflow(ctx context.Context, id int, note string) ([]*ent.Task, error) {
	ctx = lifecycle.Guarded(ctx)
	s, t := tx.s, tx.t
	if _, err := t.Workflow.Get(ctx, id); err != nil {
		if ent.IsNotFound(err) {
			return nil, &NotFoundError{Entity: "workflow", ID: id}
		}
		return nil, fmt.Errorf("retry workflow: read it: %w", err)
	}
	lock := ""
	if s.d.postgres() {
		lock = " FOR UPDATE"
	}
	rows, err := t.QueryContext(ctx, s.d.rebind(`SELECT id, status FROM tasks WHERE workflow_id = ? ORDER BY id`+lock), id)
	if err != nil {
		return nil, fmt.Errorf("retry workflow: read steps: %w", err)
	}
	status := map[int64]lifecycle.Status{}
	var all []lifecycle.Status
	var rerun []int64
	for rows.Next() {
		var step int64
		var st string
		if err := rows.Scan(&step, &st); err != nil {
			rows.Close()
			return nil, fmt.Errorf("retry workflow: read steps: %w", err)
		}
		status[step] = lifecycle.Status(st)
		all = append(all, lifecycle.Status(st))
		if lifecycle.Rerunnable(lifecycle.Status(st)) {
			rerun = append(rerun, step)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("retry workflow: read steps: %w", err)
	}
	if len(rerun) == 0 {
		return nil, &lifecycle.TransitionError{Entity: "workflow", ID: id, From: WorkflowStatus(all), To: lifecycle.RetryPending,
			Reason: "no step failed or was cancelled: there is nothing to re-run"}
	}
	isRerun := make(map[int64]bool, len(rerun))
	for _, step := range rerun {
		isRerun[step] = true
	}

	// What each re-run step waits for: its parents re-run with it, and
	// those not ended yet (a parent outside the workflow is read too).
	in, args := s.d.inInts("d.child_id", rerun)
	edges, err := t.QueryContext(ctx, s.d.rebind(`SELECT d.child_id, d.parent_id, p.status FROM task_dependencies d JOIN tasks p ON p.id = d.parent_id WHERE `+in), args...)
	if err != nil {
		return nil, fmt.Errorf("retry workflow: read edges: %w", err)
	}
	waiting := make(map[int64]int64, len(rerun))
	for edges.Next() {
		var child, parent int64
		var st string
		if err := edges.Scan(&child, &parent, &st); err != nil {
			edges.Close()
			return nil, fmt.Errorf("retry workflow: read edges: %w", err)
		}
		if isRerun[parent] || !lifecycle.Status(st).Terminal() {
			waiting[child]++
		}
	}
	edges.Close()
	if err := edges.Err(); err != nil {
		return nil, fmt.Errorf("retry workflow: read edges: %w", err)
	}

	in, args = s.d.inInts("task_id", rerun)
	last, err := s.queryInts(ctx, t, 2, `SELECT task_id, MAX(instance_no) FROM task_instances WHERE `+in+` GROUP BY task_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("retry workflow: read instances: %w", err)
	}
	lastNo := make(map[int64]int, len(last))
	for _, r := range last {
		lastNo[r[0]] = int(r[1])
	}
	ids := make([]int, len(rerun))
	for i, step := range rerun {
		ids[i] = int(step)
	}
	steps, err := t.Task.Query().Where(task.IDIn(ids...)).All(internal(ctx))
	if err != nil {
		return nil, fmt.Errorf("retry workflow: read steps: %w", err)
	}

	// The children that run anyway and still wait (not re-run) await
	// the re-run parents again; then the new instances, then the tasks:
	// the lock order every writer keeps.
	if err := s.rewait(ctx, t, rerun); err != nil {
		return nil, fmt.Errorf("retry workflow: %w", err)
	}
	now := s.Now()
	var retrying, rewaiting, free []int64
	creates := make([]*ent.TaskInstanceCreate, 0, len(steps))
	for _, tk := range steps {
		step := int64(tk.ID)
		to := lifecycle.WaitingDependency
		switch {
		case status[step] == lifecycle.Failed && waiting[step] == 0:
			to = lifecycle.RetryPending
			retrying = append(retrying, step)
		case waiting[step] == 0:
			rewaiting = append(rewaiting, step)
			free = append(free, step)
		default:
			rewaiting = append(rewaiting, step)
		}
		if err := lifecycle.Check("task", tk.ID, status[step], to); err != nil {
			return nil, err
		}
		creates = append(creates, t.TaskInstance.Create().
			SetTaskID(tk.ID).
			SetInstanceNo(lastNo[step]+1).
			SetAttempt(1).
			SetStatus(to).
			SetWaitingOn(int(waiting[step])).
			SetTaskType(tk.Type).
			SetPriority(tk.Priority).
			SetTenant(tk.Tenant).
			SetRunAt(now).
			SetCreatedAt(now))
	}
	var made []*ent.TaskInstance
	for chunk := range slices.Chunk(creates, maxBatchRows/8) {
		got, err := t.TaskInstance.CreateBulk(chunk...).Save(ctx)
		if err != nil {
			return nil, fmt.Errorf("retry workflow: create instances: %w", err)
		}
		made = append(made, got...)
	}

	latest := make(map[int]*ent.Task, len(steps))
	update := func(ids []int64, from []lifecycle.Status, to lifecycle.Status) error {
		if len(ids) == 0 {
			return nil
		}
		attention := "NULL"
		if to == lifecycle.RetryPending {
			attention = lifecycle.QuotedList(to)
		}
		in, args := s.d.inInts("id", ids)
		rows, err := t.QueryContext(ctx, s.d.rebind(`
UPDATE tasks SET status = `+lifecycle.QuotedList(to)+`, attention_status = `+attention+`, cancel_requested = ?, cancel_reason = NULL,
	finished_at = NULL, progress_done = 0, updated_at = ?, version = version + 1
WHERE `+in+` AND status IN (`+lifecycle.QuotedList(from...)+`)
RETURNING `+changingColumns("tasks")), append([]any{false, now}, args...)...)
		if err != nil {
			return fmt.Errorf("retry workflow: update steps: %w", err)
		}
		tasks, err := s.scanChanged(ctx, t, rows, nil)
		if err != nil {
			return fmt.Errorf("retry workflow: update steps: %w", err)
		}
		if len(tasks) != len(ids) {
			return fmt.Errorf("retry workflow: %d steps to move to %s but %d were where they were read", len(ids), to, len(tasks))
		}
		t.changed(events.Transitioned, tasks...)
		for _, tk := range tasks {
			latest[tk.ID] = tk
		}
		return nil
	}
	if err := update(retrying, []lifecycle.Status{lifecycle.Failed}, lifecycle.RetryPending); err != nil {
		return nil, err
	}
	if err := update(rewaiting, []lifecycle.Status{lifecycle.Failed, lifecycle.Cancelled}, lifecycle.WaitingDependency); err != nil {
		return nil, err
	}
	if len(free) > 0 {
		// Nothing to wait for: released at once, instance then task.
		in, args := s.d.inInts("task_id", free)
		n, err := s.exec(ctx, t, `UPDATE task_instances SET status = `+sqlPending+`, version = version + 1
WHERE `+in+` AND status = `+sqlWaitingDependency+` AND waiting_on = 0`, args...)
		if err != nil {
			return nil, fmt.Errorf("retry workflow: release instances: %w", err)
		}
		if n != int64(len(free)) {
			return nil, fmt.Errorf("retry workflow: %d steps to release but %d instances", len(free), n)
		}
		if err := update(free, []lifecycle.Status{lifecycle.WaitingDependency}, lifecycle.Pending); err != nil {
			return nil, err
		}
	}

	suffix := ""
	if note != "" {
		suffix = ": " + note
	}
	logs := make([]*ent.TaskLogCreate, len(made))
	for i, inst := range made {
		logs[i] = t.TaskLog.Create().
			SetTaskID(inst.TaskID).
			SetInstanceID(inst.ID).
			SetLevel(tasklog.LevelINFO).
			SetMessage(fmt.Sprintf("workflow retry: instance #%d scheduled", inst.InstanceNo) + suffix).
			SetCreatedAt(now)
	}
	for chunk := range slices.Chunk(logs, maxBatchRows/8) {
		lines, err := t.TaskLog.CreateBulk(chunk...).Save(ctx)
		if err != nil {
			return nil, fmt.Errorf("retry workflow: write logs: %w", err)
		}
		for _, lg := range lines {
			t.logged(lg)
		}
	}
	moved := slices.SortedFunc(maps.Values(latest), func(a, b *ent.Task) int { return a.ID - b.ID })
	return moved, nil
}
