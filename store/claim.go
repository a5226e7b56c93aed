package store

import (
	"context"
	"fmt"
	"slices"

	"taskgraph/ent"
	"taskgraph/ent/task"
	"taskgraph/ent/taskinstance"
	"taskgraph/events"
	"taskgraph/lifecycle"
)

// Token fences the writes of one execution: the instance it runs and the
// instance's version when it was claimed. Once the instance has moved on
// (completed, timed out, cancelled), writes carrying the token are refused.
type Token struct {
	InstanceID int
	Version    int64
}

// Claimed is an execution a worker now holds: the task as committed by the
// claim and the instance (whose ID and Version make the token).
type Claimed struct {
	Task     *ent.Task
	Instance *ent.TaskInstance
}

// Token returns the fencing token of the execution.
func (c Claimed) Token() Token {
	return Token{InstanceID: c.Instance.ID, Version: c.Instance.Version}
}

func init() {
	for _, from := range lifecycle.WaitingStatuses {
		if !lifecycle.CanMove(from, lifecycle.Executing) {
			panic("lifecycle: claim needs " + string(from) + " -> EXECUTING")
		}
	}
}

// Claim moves up to limit waiting instances whose run_at has passed, of the
// given task types, to EXECUTING for workerID, smallest priority first, and
// their tasks with them. On PostgreSQL the instances are picked with FOR
// UPDATE SKIP LOCKED, so concurrent claimers never block on or share a row.
func (s *Store) Claim(ctx context.Context, workerID string, types []string, limit int) ([]Claimed, error) {
	if limit <= 0 || len(types) == 0 {
		return nil, nil
	}
	var out []Claimed
	err := s.write(ctx, func(t *txn) error {
		now := s.Now()
		args := []any{workerID, now, now, now}
		for _, ty := range types {
			args = append(args, ty)
		}
		args = append(args, limit)
		rows, err := s.queryInts(ctx, t, 2, `
UPDATE task_instances SET status = 'EXECUTING', version = version + 1, worker_id = ?, started_at = ?, heartbeat_at = ?
WHERE status IN ('PENDING', 'RETRY_PENDING') AND id IN (
	SELECT id FROM task_instances
	WHERE status IN ('PENDING', 'RETRY_PENDING') AND run_at <= ? AND task_type IN (`+placeholders(len(types))+`)
	ORDER BY priority, run_at, id
	LIMIT ?`+s.d.skipLocked()+`)
RETURNING id, task_id`, args...)
		if err != nil {
			return fmt.Errorf("claim instances: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		instIDs := make([]int, len(rows))
		taskIDs := make([]int, len(rows))
		taskArgs := []any{now}
		for i, r := range rows {
			instIDs[i], taskIDs[i] = int(r[0]), int(r[1])
			taskArgs = append(taskArgs, r[1])
		}
		n, err := s.exec(ctx, t, `
UPDATE tasks SET status = 'EXECUTING', version = version + 1, updated_at = ?
WHERE status IN ('PENDING', 'RETRY_PENDING') AND id IN (`+placeholders(len(taskIDs))+`)`, taskArgs...)
		if err != nil {
			return fmt.Errorf("claim tasks: %w", err)
		}
		if int(n) != len(taskIDs) {
			// A task's status no longer mirrors its live instance. Refuse
			// the whole claim rather than run something half-claimed.
			return fmt.Errorf("claim: %d instances but %d waiting tasks: task and instance states disagree", len(taskIDs), n)
		}
		insts, err := t.TaskInstance.Query().Where(taskinstance.IDIn(instIDs...)).All(ctx)
		if err != nil {
			return fmt.Errorf("claim: read instances: %w", err)
		}
		tasks, err := t.Task.Query().Where(task.IDIn(taskIDs...)).All(ctx)
		if err != nil {
			return fmt.Errorf("claim: read tasks: %w", err)
		}
		byID := make(map[int]*ent.Task, len(tasks))
		for _, tk := range tasks {
			byID[tk.ID] = tk
		}
		// Hand out work in the order it was picked.
		slices.SortFunc(insts, func(a, b *ent.TaskInstance) int {
			return cmpClaimOrder(a, b)
		})
		out = make([]Claimed, len(insts))
		for i, in := range insts {
			out[i] = Claimed{Task: byID[in.TaskID], Instance: in}
		}
		t.changed(events.Transitioned, tasks...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func cmpClaimOrder(a, b *ent.TaskInstance) int {
	if a.Priority != b.Priority {
		return a.Priority - b.Priority
	}
	if c := a.RunAt.Compare(b.RunAt); c != 0 {
		return c
	}
	return a.ID - b.ID
}
