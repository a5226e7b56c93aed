package store

import (
	"context"
	"fmt"
	"slices"

	"taskgraph/ent"
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
	ctx = internal(ctx)
	if limit <= 0 || len(types) == 0 {
		return nil, nil
	}
	limit = min(limit, maxBatchRows)
	var out []Claimed
	err := s.write(ctx, func(t *txn) error {
		now := s.Now()
		args := []any{workerID, now, now, now}
		for _, ty := range types {
			args = append(args, ty)
		}
		args = append(args, limit)
		rows, err := t.QueryContext(ctx, s.d.rebind(`
UPDATE task_instances SET status = 'EXECUTING', version = version + 1, worker_id = ?, started_at = ?, heartbeat_at = ?
WHERE status IN ('PENDING', 'RETRY_PENDING') AND id IN (
	SELECT id FROM task_instances
	WHERE status IN ('PENDING', 'RETRY_PENDING') AND run_at <= ? AND task_type IN (`+placeholders(len(types))+`)
	ORDER BY priority, run_at, id
	LIMIT ?`+s.d.skipLocked()+`)
RETURNING *`), args...)
		if err != nil {
			return fmt.Errorf("claim instances: %w", err)
		}
		insts, err := ent.ScanTaskInstanceRows(s.client, rows)
		if err != nil {
			return fmt.Errorf("claim instances: %w", err)
		}
		if len(insts) == 0 {
			return nil
		}
		taskArgs := []any{now}
		for _, in := range insts {
			taskArgs = append(taskArgs, in.TaskID)
		}
		rows, err = t.QueryContext(ctx, s.d.rebind(`
UPDATE tasks SET status = 'EXECUTING', version = version + 1, updated_at = ?
WHERE status IN ('PENDING', 'RETRY_PENDING') AND id IN (`+placeholders(len(insts))+`)
RETURNING *`), taskArgs...)
		if err != nil {
			return fmt.Errorf("claim tasks: %w", err)
		}
		tasks, err := ent.ScanTaskRows(s.client, rows)
		if err != nil {
			return fmt.Errorf("claim tasks: %w", err)
		}
		if len(tasks) != len(insts) {
			// A task's status no longer mirrors its live instance. Refuse
			// the whole claim rather than run something half-claimed.
			return fmt.Errorf("claim: %d instances but %d waiting tasks: task and instance states disagree", len(insts), len(tasks))
		}
		byID := make(map[int]*ent.Task, len(tasks))
		for _, tk := range tasks {
			byID[tk.ID] = tk
		}
		// Hand out work in the order it was picked.
		slices.SortFunc(insts, cmpClaimOrder)
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
