package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/internal/events"
)

// ErrInconsistent is matched by errors.Is for every *InconsistentError.
var ErrInconsistent = errors.New("task and instance disagree")

// InconsistentError is an execution whose task does not mirror it (for
// example an EXECUTING instance of a task that is SUCCESS). Such a pair is
// never moved by the claim or the finish; it fails that one outcome, is
// logged and counted, and the watchdog's repair (Store.Repair) mends it.
type InconsistentError struct {
	TaskID     int
	InstanceID int
	Task       lifecycle.Status
	Instance   lifecycle.Status
}

func (e *InconsistentError) Error() string {
	return fmt.Sprintf("task %d is %s but its instance %d is %s: left to the watchdog's repair", e.TaskID, e.Task, e.InstanceID, e.Instance)
}

// Is makes errors.Is(err, ErrInconsistent) true.
func (e *InconsistentError) Is(target error) bool { return target == ErrInconsistent }

// Inconsistencies counts the inconsistent pairs the claim and the finish
// have met since the store opened (a metric).
func (s *Store) Inconsistencies() int64 { return s.inconsistencies.Load() }

// inconsistent builds the error of an instance whose task does not mirror
// it, logs it and counts it.
func (s *Store) inconsistent(ctx context.Context, t *txn, in *ent.TaskInstance) error {
	tk, err := t.Task.Get(ctx, in.TaskID)
	var status lifecycle.Status
	if err == nil {
		status = tk.Status
	}
	e := &InconsistentError{TaskID: in.TaskID, InstanceID: in.ID, Task: status, Instance: in.Status}
	s.inconsistencies.Add(1)
	s.log.Warn("task and instance disagree", "task_id", in.TaskID, "instance_id", in.ID, "task_status", status, "instance_status", in.Status)
	return e
}

// RepairResult counts what one repair pass mended.
type RepairResult struct {
	// Examined is how many executions the pass looked at.
	Examined int
	// Mended is how many pairs it made agree again.
	Mended int
	// Next is where the next pass goes on reading waiting instances (the
	// pass reads them a window of ids at a time, so that its cost does not
	// grow with the backlog).
	Next int
}

// repairWindow is how many instance ids one repair pass reads through
// among waiting instances: at one pass a second, a million instances are
// read through in under two minutes, and no pass reads more than this.
const repairWindow = 10000

// Repair mends pairs whose task does not mirror its live instance, through
// the same guarded transitions as everything else:
//   - a running instance of a waiting task: the task moves to EXECUTING;
//   - a running instance of a finished task: the instance ends FAILED
//     (NON_RETRYABLE), its outcome, if its worker still sends one, refused;
//   - a waiting instance of a running task (with no running instance): the
//     task moves to RETRY_PENDING and waits again with a RETRY_PENDING
//     instance (a PENDING one is cancelled and followed by a new one);
//   - a waiting instance of a finished task: the instance is CANCELLED.
//
// Running instances are few and read whole; waiting ones are read a window
// of ids at a time from `from` (0 to start over). Such pairs come only from
// outside the store (a hand-edited row, a restored backup); the claim and
// the finish leave them alone and count them (Inconsistencies).
func (s *Store) Repair(ctx context.Context, from int) (RepairResult, error) {
	ctx = internal(ctx)
	res := RepairResult{Next: from}
	err := s.write(ctx, func(t *txn) error {
		res = RepairResult{Next: from}
		now := s.Now()
		// Running instances whose task is not EXECUTING.
		running, err := s.queryPairs(ctx, t, `
SELECT i.id, i.task_id, i.version, i.status, i.instance_no, i.attempt, t.status FROM task_instances i JOIN tasks t ON t.id = i.task_id
WHERE i.status = `+sqlExecuting+` AND t.status <> `+sqlExecuting+s.d.forUpdate("i"))
		if err != nil {
			return fmt.Errorf("repair: read running: %w", err)
		}
		// Waiting instances, one window of ids, whose task is not waiting.
		bounds, err := s.queryInts(ctx, t, 2, `SELECT COALESCE(MIN(id), 0), COALESCE(MAX(id), 0) FROM task_instances`)
		if err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		minID, maxID := bounds[0][0], bounds[0][1]
		lo := int64(from)
		if lo >= maxID || lo < minID {
			lo = minID - 1
		}
		hi := lo + repairWindow
		res.Next = int(hi)
		waiting, err := s.queryPairs(ctx, t, `
SELECT i.id, i.task_id, i.version, i.status, i.instance_no, i.attempt, t.status FROM task_instances i JOIN tasks t ON t.id = i.task_id
WHERE i.id > ? AND i.id <= ? AND i.status IN (`+sqlWaiting+`) AND t.status NOT IN (`+sqlWaiting+`)`+s.d.forUpdate("i"), lo, hi)
		if err != nil {
			return fmt.Errorf("repair: read waiting: %w", err)
		}
		res.Examined = len(running) + len(waiting)
		for _, p := range running {
			if p.task.Live() {
				n, err := s.moveTask(ctx, t, p.taskID, p.task, lifecycle.Executing, now)
				if err != nil {
					return err
				}
				res.Mended += n
				continue
			}
			n, err := s.endInstance(ctx, t, p, lifecycle.Executing, lifecycle.Failed, lifecycle.KindNonRetryable,
				fmt.Sprintf("repair: the task was already %s while this execution was running", p.task), now)
			if err != nil {
				return err
			}
			res.Mended += n
		}
		for _, p := range waiting {
			if p.task == lifecycle.Executing {
				n, err := s.requeue(ctx, t, p, now)
				if err != nil {
					return err
				}
				res.Mended += n
				continue
			}
			n, err := s.endInstance(ctx, t, p, "", lifecycle.Cancelled, lifecycle.KindCancelled,
				fmt.Sprintf("repair: the task was already %s; this instance would never run", p.task), now)
			if err != nil {
				return err
			}
			res.Mended += n
		}
		return nil
	})
	return res, err
}

// pair is an instance and the status of its task.
type pair struct {
	instanceID, taskID  int
	version             int64
	instance            lifecycle.Status
	instanceNo, attempt int
	task                lifecycle.Status
}

func (s *Store) queryPairs(ctx context.Context, t *txn, query string, args ...any) ([]pair, error) {
	rows, err := t.QueryContext(ctx, s.d.rebind(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []pair
	for rows.Next() {
		var p pair
		var inst, status string
		if err := rows.Scan(&p.instanceID, &p.taskID, &p.version, &inst, &p.instanceNo, &p.attempt, &status); err != nil {
			return nil, err
		}
		p.instance, p.task = lifecycle.Status(inst), lifecycle.Status(status)
		out = append(out, p)
	}
	return out, rows.Err()
}

// moveTask moves a task from one status to another along the table, with
// the conditional UPDATE every transition is.
func (s *Store) moveTask(ctx context.Context, t *txn, id int, from, to lifecycle.Status, now time.Time) (int, error) {
	if err := lifecycle.Check("task", id, from, to); err != nil {
		return 0, err
	}
	var attention any
	if slices.Contains(attentionStatuses, to) {
		attention = string(to)
	}
	rows, err := t.QueryContext(ctx, s.d.rebind(`
UPDATE tasks SET status = ?, attention_status = ?, finished_at = NULL, updated_at = ?, version = version + 1
WHERE id = ? AND status = ?
RETURNING *`), string(to), attention, now, id, string(from))
	if err != nil {
		return 0, fmt.Errorf("repair: move task %d: %w", id, err)
	}
	tasks, err := ent.ScanTaskRows(s.client, rows)
	if err != nil {
		return 0, fmt.Errorf("repair: move task %d: %w", id, err)
	}
	if len(tasks) == 0 {
		return 0, nil
	}
	s.log.Warn("repair: task moved to mirror its instance", "task_id", id, "from", from, "to", to)
	t.changed(events.Transitioned, tasks...)
	return 1, nil
}

// endInstance ends an instance (from its current status, or from the
// waiting ones when from is empty) with a trace line saying why.
func (s *Store) endInstance(ctx context.Context, t *txn, p pair, from, to lifecycle.Status, kind lifecycle.ErrorKind, msg string, now time.Time) (int, error) {
	froms := lifecycle.WaitingStatuses
	if from != "" {
		froms = []lifecycle.Status{from}
	}
	for _, f := range froms {
		if err := lifecycle.Check("task instance", p.instanceID, f, to); err != nil {
			return 0, err
		}
	}
	n, err := s.exec(ctx, t, `
UPDATE task_instances SET status = ?, error_kind = ?, last_error = ?, finished_at = ?, version = version + 1
WHERE id = ? AND version = ? AND status IN (`+lifecycle.QuotedList(froms...)+`)`, string(to), string(kind), msg, now, p.instanceID, p.version)
	if err != nil {
		return 0, fmt.Errorf("repair: end instance %d: %w", p.instanceID, err)
	}
	if n == 0 {
		return 0, nil
	}
	lg, err := t.TaskLog.Create().SetTaskID(p.taskID).SetInstanceID(p.instanceID).SetLevel(tasklog.LevelWARN).
		SetMessage(msg).SetCreatedAt(now).Save(ctx)
	if err != nil {
		return 0, fmt.Errorf("repair: write log: %w", err)
	}
	t.logged(lg)
	s.log.Warn("repair: instance ended to mirror its task", "task_id", p.taskID, "instance_id", p.instanceID, "to", to, "reason", msg)
	return 1, nil
}

// requeue makes a task that is EXECUTING without a running instance wait
// again, mirrored by a RETRY_PENDING instance.
func (s *Store) requeue(ctx context.Context, t *txn, p pair, now time.Time) (int, error) {
	if p.instance == lifecycle.Pending {
		// PENDING cannot become RETRY_PENDING: it ends, and a new
		// instance takes over (a retry never reuses an instance).
		n, err := s.endInstance(ctx, t, p, lifecycle.Pending, lifecycle.Cancelled, lifecycle.KindCancelled,
			"repair: the task was EXECUTING without a running instance; a new instance takes over", now)
		if err != nil || n == 0 {
			return n, err
		}
		if _, err := s.exec(ctx, t, `
INSERT INTO task_instances (task_id, instance_no, attempt, status, task_type, priority, tenant, run_at, version, created_at)
SELECT task_id, instance_no + 1, attempt, `+lifecycle.QuotedList(lifecycle.RetryPending)+`, task_type, priority, tenant, ?, 1, ? FROM task_instances WHERE id = ?`,
			now, now, p.instanceID); err != nil {
			return 0, fmt.Errorf("repair: new instance for task %d: %w", p.taskID, err)
		}
	}
	return s.moveTask(ctx, t, p.taskID, lifecycle.Executing, lifecycle.RetryPending, now)
}
