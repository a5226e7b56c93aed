package store

import (
	"context"
	"errors"
	"fmt"

	"taskgraph/ent"
	"taskgraph/lifecycle"
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
