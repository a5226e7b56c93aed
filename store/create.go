package store

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"taskgraph/ent"
	"taskgraph/ent/task"
	"taskgraph/events"
	"taskgraph/lifecycle"
)

// NewTask is a task to create. Input must already be masked; InputSealed
// carries the unmasked input, encrypted, when masking changed it.
type NewTask struct {
	Type           string
	Title          string
	BizID          string
	Owner          string
	OwnerRole      string
	IdempotencyKey *string
	Input          json.RawMessage
	InputSealed    []byte
	InputHash      string
	Priority       int
	TimeoutSeconds int
	RetryPolicy    string
	MaxAttempts    int
	RunAt          time.Time // zero: now
	// ScheduleID and ScheduleSlot name the schedule slot the task is
	// created for; a task for that slot already created (by any node) is
	// returned instead, as for an idempotency key.
	ScheduleID   *int
	ScheduleSlot *time.Time
}

// CreateTask inserts a PENDING task with its first instance. With an
// idempotency key, a task already created by the same owner with the same key
// is returned instead (created is false); if its input hash differs, the
// result is a *ConflictError.
func (s *Store) CreateTask(ctx context.Context, n NewTask) (_ *ent.Task, created bool, err error) {
	if t, err := s.byKey(ctx, n); t != nil || err != nil {
		return t, false, err
	}
	var out *ent.Task
	for range 3 {
		err = s.write(ctx, func(t *txn) error {
			tk, err := s.insertTasks(ctx, t, []NewTask{n})
			if err != nil {
				return err
			}
			out = tk[0]
			return nil
		})
		if err == nil {
			return out, true, nil
		}
		if !ent.IsConstraintError(err) {
			return nil, false, err
		}
		// Either the same key was used concurrently, or the random code
		// collided. The first is answered from the winner; the second is
		// simply tried again.
		if t, err := s.byKey(ctx, n); t != nil || err != nil {
			return t, false, err
		}
	}
	return nil, false, fmt.Errorf("create task: %w", err)
}

// byKey returns the task already created for n's schedule slot or
// idempotency key, if any.
func (s *Store) byKey(ctx context.Context, n NewTask) (*ent.Task, error) {
	if n.ScheduleID != nil && n.ScheduleSlot != nil {
		t, err := s.client.Task.Query().
			Where(task.ScheduleID(*n.ScheduleID), task.ScheduleSlot(n.ScheduleSlot.UTC().Truncate(time.Microsecond))).
			Only(ctx)
		if !ent.IsNotFound(err) {
			if err != nil {
				return nil, fmt.Errorf("look up schedule slot: %w", err)
			}
			return t, nil
		}
	}
	if n.IdempotencyKey != nil {
		return s.byIdempotencyKey(ctx, n)
	}
	return nil, nil
}

func (s *Store) byIdempotencyKey(ctx context.Context, n NewTask) (*ent.Task, error) {
	t, err := s.client.Task.Query().
		Where(task.Owner(n.Owner), task.IdempotencyKey(*n.IdempotencyKey)).
		Only(ctx)
	if ent.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up idempotency key: %w", err)
	}
	if t.InputHash != n.InputHash {
		return nil, &ConflictError{
			Message: fmt.Sprintf("idempotency key %q was already used for task %s with a different payload", *n.IdempotencyKey, t.Code),
			TaskID:  t.ID,
		}
	}
	return t, nil
}

// CreateTasks inserts many tasks at once, without idempotency keys. It is
// the bulk path used by the bench command and imports of task lists.
func (s *Store) CreateTasks(ctx context.Context, tasks []NewTask) error {
	const batch = 500
	for len(tasks) > 0 {
		n := min(batch, len(tasks))
		if err := s.write(ctx, func(t *txn) error {
			_, err := s.insertTasks(ctx, t, tasks[:n])
			return err
		}); err != nil {
			return fmt.Errorf("create tasks: %w", err)
		}
		tasks = tasks[n:]
	}
	return nil
}

func (s *Store) insertTasks(ctx context.Context, t *txn, ns []NewTask) ([]*ent.Task, error) {
	now := s.Now()
	creates := make([]*ent.TaskCreate, len(ns))
	for i, n := range ns {
		runAt := n.RunAt.UTC().Truncate(time.Microsecond)
		if n.RunAt.IsZero() {
			runAt = now
		}
		creates[i] = t.Task.Create().
			SetCode(newCode(n.Type, now)).
			SetType(n.Type).
			SetTitle(n.Title).
			SetBizID(n.BizID).
			SetOwner(n.Owner).
			SetOwnerRole(n.OwnerRole).
			SetNillableIdempotencyKey(n.IdempotencyKey).
			SetInput(n.Input).
			SetInputSealed(n.InputSealed).
			SetInputHash(n.InputHash).
			SetStatus(lifecycle.Pending).
			SetPriority(n.Priority).
			SetTimeoutSeconds(n.TimeoutSeconds).
			SetRetryPolicy(n.RetryPolicy).
			SetMaxAttempts(n.MaxAttempts).
			SetRunAt(runAt).
			SetNillableScheduleID(n.ScheduleID).
			SetNillableScheduleSlot(utcPtr(n.ScheduleSlot)).
			SetCreatedAt(now).
			SetUpdatedAt(now)
	}
	tasks, err := t.Task.CreateBulk(creates...).Save(ctx)
	if err != nil {
		return nil, fmt.Errorf("insert tasks: %w", err)
	}
	instances := make([]*ent.TaskInstanceCreate, len(tasks))
	for i, tk := range tasks {
		instances[i] = t.TaskInstance.Create().
			SetTaskID(tk.ID).
			SetInstanceNo(1).
			SetAttempt(1).
			SetStatus(lifecycle.Pending).
			SetTaskType(tk.Type).
			SetPriority(tk.Priority).
			SetRunAt(tk.RunAt).
			SetCreatedAt(now)
	}
	if err := t.TaskInstance.CreateBulk(instances...).Exec(ctx); err != nil {
		return nil, fmt.Errorf("insert first instances: %w", err)
	}
	t.changed(events.Created, tasks...)
	return tasks, nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC().Truncate(time.Microsecond)
	return &u
}

// crockford is Crockford's base32 alphabet: no I, L, O, U to misread.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// newCode returns a readable unique code such as WEBHOO-20261129-7K3Q9D2M:
// the type, the day, and 40 random bits.
func newCode(taskType string, now time.Time) string {
	prefix := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return -1
	}, taskType)
	if len(prefix) > 6 {
		prefix = prefix[:6]
	}
	if prefix == "" {
		prefix = "TASK"
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	suffix := make([]byte, 8)
	for i := range suffix {
		suffix[i] = crockford[b[i]&31]
	}
	return prefix + "-" + now.Format("20060102") + "-" + string(suffix)
}
