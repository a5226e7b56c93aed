package store

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/telemetry"
)

// NewTask is a task to create. Input must already be masked; InputSealed
// carries the unmasked input, encrypted, when masking changed it. The owner
// is (OwnerSource, Tenant, Owner). IdempotencyKey is the key as shown
// (masked); IdempotencyHash, set whenever it is, identifies the raw key
// and the owner, and is what makes the key unique.
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
	// created for. CreateTask returns a task already created for the slot
	// (by any node: a unique index) instead, with created false.
	ScheduleID   *int
	ScheduleSlot *time.Time
	// ScheduleVersion, when set, makes the creation conditional on the
	// schedule being at this version, which it moves on by one in the same
	// transaction; otherwise the result is ErrScheduleMoved. A scheduler's
	// pass thus fires nothing once another node has moved the schedule on
	// (it read it stale).
	ScheduleVersion *int64

	// The rest of the owner's identity, and the idempotency key's hash.
	OwnerSource     string
	Tenant          string
	IdempotencyHash *string

	// TraceParent is the W3C traceparent its executions' spans continue.
	// Empty: CreateTasks takes the span of its context's, if any
	// (telemetry.TraceParent).
	TraceParent string

	// WorkflowID and StepKey name the workflow the task is a step of.
	WorkflowID *int
	StepKey    *string
	// Parents, when any, make the task wait (WAITING_DEPENDENCY) until
	// each has ended as its edge asks; parents that have already
	// succeeded are not waited for.
	Parents []Parent

	// ReviewMode is the task's own review opt-in: "ON", "OFF" or "" (its
	// type's policy).
	ReviewMode string

	// Deadline, when set, is the absolute time the task must finish by.
	Deadline *time.Time

	// waitingOn is how many parents the first instance waits for.
	waitingOn int
}

// Created is the answer to one NewTask of CreateTasks: the task, and whether
// this call created it (false: an earlier one with the same idempotency
// key did), or the item's own error (a *ConflictError).
type Created struct {
	Task    *ent.Task
	Created bool
	Err     error
}

// CreateTask inserts a PENDING task with its first instance, in a
// transaction of its own, as Tx.CreateTasks does one.
func (s *Store) CreateTask(ctx context.Context, n NewTask) (t *ent.Task, created bool, err error) {
	err = s.Write(ctx, func(tx *Tx) error {
		t, created, err = tx.CreateTask(ctx, n)
		return err
	})
	return t, created, err
}

// CreateTasks inserts PENDING tasks with their first instances, in a
// transaction of its own, as Tx.CreateTasks does.
func (s *Store) CreateTasks(ctx context.Context, ns []NewTask) (out []Created, err error) {
	err = s.Write(ctx, func(tx *Tx) error {
		out, err = tx.CreateTasks(ctx, ns)
		return err
	})
	return out, err
}

// CreateTask inserts one task as CreateTasks does, and returns its own
// error (a *ConflictError) as the error.
func (tx *Tx) CreateTask(ctx context.Context, n NewTask) (*ent.Task, bool, error) {
	res, err := tx.CreateTasks(ctx, []NewTask{n})
	if err != nil {
		return nil, false, err
	}
	return res[0].Task, res[0].Created, res[0].Err
}

// CreateTasks inserts PENDING tasks with their first instances in tx, in
// statements of many rows, and answers each item on its own, in order. Items
// with an idempotency key are created once per key hash (the owner
// identity and the raw key): an existing task is returned (Created false),
// or a *ConflictError when its input hash differs; two items of one call
// with the same hash are one task. An item naming a schedule slot whose
// task exists (made by any node: a unique index) is answered with that
// task, Created false; with a ScheduleVersion the schedule no longer has,
// the call fails with ErrScheduleMoved.
// The error result is for the call as a whole (the database failed).
func (tx *Tx) CreateTasks(ctx context.Context, ns []NewTask) ([]Created, error) {
	ctx = lifecycle.Guarded(ctx)
	if tp := telemetry.TraceParent(ctx); tp != "" {
		// Each task remembers the trace that created it (a copy: the
		// caller's items are its own).
		ns = slices.Clone(ns)
		for i := range ns {
			if ns[i].TraceParent == "" {
				ns[i].TraceParent = tp
			}
		}
	}
	out := make([]Created, len(ns))
	ns, err := tx.s.countParents(ctx, tx.t, ns, out)
	if err != nil {
		return nil, err
	}
	if err := tx.s.checkWaitingCaps(ctx, tx.t, ns, out); err != nil {
		return nil, fmt.Errorf("create tasks: %w", err)
	}
	if err := tx.s.checkTenantQuotas(ctx, tx.t, ns, out); err != nil {
		return nil, fmt.Errorf("create tasks: %w", err)
	}
	chunk := tx.s.d.insertChunk(len(taskInsertCols))
	for start := 0; start < len(ns); start += chunk {
		end := min(start+chunk, len(ns))
		if err := tx.s.createChunk(ctx, tx.t, ns[start:end], out[start:end]); err != nil {
			if errors.Is(err, ErrScheduleMoved) {
				return nil, err
			}
			return nil, fmt.Errorf("create tasks: %w", err)
		}
	}
	if err := tx.s.insertEdges(ctx, tx.t, ns, out); err != nil {
		return nil, fmt.Errorf("create tasks: %w", err)
	}
	return out, nil
}

// moveSchedule moves n's schedule on by one version if it is at
// n.ScheduleVersion, in the transaction that creates n's task.
func (s *Store) moveSchedule(ctx context.Context, t *txn, n NewTask) error {
	if n.ScheduleVersion == nil || n.ScheduleID == nil {
		return nil
	}
	moved, err := s.exec(ctx, t, `UPDATE schedules SET version = version + 1 WHERE id = ? AND version = ?`, *n.ScheduleID, *n.ScheduleVersion)
	if err != nil {
		return fmt.Errorf("move schedule %d on: %w", *n.ScheduleID, err)
	}
	if moved == 0 {
		return ErrScheduleMoved
	}
	return nil
}

// createChunk answers the items of ns in out, in the transaction t. An
// item whose idempotency key or schedule slot another transaction took
// (committed meanwhile: the insert waits for it) is skipped by the insert
// and answered by the next look-up; a code may collide (40 random bits a
// type and day), and such an item is inserted again with a new code. The
// look-ups read in t, so that an item of an earlier call in t is found
// too; nothing here fails a statement, so that the caller's transaction
// (In) stays usable.
func (s *Store) createChunk(ctx context.Context, t *txn, ns []NewTask, out []Created) error {
	// Items to insert, and items answered by another item of the call.
	var todo []int
	first := map[string]int{}
	var dups [][2]int // [item, the item it repeats]
	for i, n := range ns {
		if (n.IdempotencyKey == nil) != (n.IdempotencyHash == nil) {
			return fmt.Errorf("item %d: an idempotency key needs its hash", i)
		}
		if out[i].Err != nil {
			continue // a parent of its refused it (countParents)
		}
		if n.IdempotencyHash == nil {
			todo = append(todo, i)
			continue
		}
		k := *n.IdempotencyHash
		if j, ok := first[k]; ok {
			dups = append(dups, [2]int{i, j})
			continue
		}
		first[k] = i
		todo = append(todo, i)
	}
	// Keys are looked up after the insert, which skips an item whose key
	// is taken, rather than before it: a call of new keys (the common
	// case) saves the look-up of them all. Schedule slots are looked up
	// first, as their schedule moves on only for a slot yet to be filled.
	lookFirst := slices.ContainsFunc(todo, func(i int) bool { return ns[i].ScheduleID != nil && ns[i].ScheduleSlot != nil })
	for attempt := 0; ; attempt++ {
		if attempt > 0 || lookFirst {
			if err := s.resolveKeys(ctx, t, ns, todo, out); err != nil {
				return err
			}
		}
		var pending []int
		for _, i := range todo {
			if out[i].Task == nil && out[i].Err == nil {
				pending = append(pending, i)
			}
		}
		if len(pending) == 0 {
			break
		}
		if attempt == 3 {
			return fmt.Errorf("%d tasks could not be inserted after %d attempts", len(pending), attempt)
		}
		if attempt == 0 {
			for _, i := range pending {
				if err := s.moveSchedule(ctx, t, ns[i]); err != nil {
					return err
				}
			}
		}
		if err := s.insertTasks(ctx, t, ns, pending, out); err != nil {
			return err
		}
	}
	for _, d := range dups {
		i, j := d[0], d[1]
		out[i] = Created{Task: out[j].Task, Err: out[j].Err}
		if out[j].Task != nil && out[j].Task.InputHash != ns[i].InputHash {
			out[i] = Created{Err: conflict(ns[i], out[j].Task)}
		}
	}
	return nil
}

// resolveKeys answers the items of todo whose idempotency key was already
// used, from the tasks created with it, and those whose schedule slot has
// its task, reading in t.
func (s *Store) resolveKeys(ctx context.Context, t *txn, ns []NewTask, todo []int, out []Created) error {
	var hashes []string
	for _, i := range todo {
		n := ns[i]
		if out[i].Task != nil || out[i].Err != nil {
			continue
		}
		if n.IdempotencyHash != nil {
			hashes = append(hashes, *n.IdempotencyHash)
		}
		if n.ScheduleID != nil && n.ScheduleSlot != nil {
			tk, err := t.Task.Query().
				Where(task.ScheduleID(*n.ScheduleID), task.ScheduleSlot(n.ScheduleSlot.UTC().Truncate(time.Microsecond))).
				Only(internal(ctx))
			switch {
			case ent.IsNotFound(err):
			case err != nil:
				return fmt.Errorf("look up schedule slot: %w", err)
			default:
				out[i] = Created{Task: tk.BindTo(s.client)}
			}
		}
	}
	if len(hashes) == 0 {
		return nil
	}
	ts, err := t.Task.Query().Where(task.IdempotencyHashIn(hashes...)).All(internal(ctx))
	if err != nil {
		return fmt.Errorf("look up idempotency keys: %w", err)
	}
	found := make(map[string]*ent.Task, len(ts))
	for _, t := range ts {
		found[*t.IdempotencyHash] = t.BindTo(s.client)
	}
	for _, i := range todo {
		n := ns[i]
		if n.IdempotencyHash == nil || out[i].Task != nil {
			continue
		}
		t := found[*n.IdempotencyHash]
		switch {
		case t == nil:
		case t.InputHash != n.InputHash:
			out[i] = Created{Err: conflict(n, t)}
		default:
			out[i] = Created{Task: t}
		}
	}
	return nil
}

func conflict(n NewTask, t *ent.Task) error {
	return &ConflictError{
		Message: fmt.Sprintf("idempotency key %q was already used for task %s with a different payload", *n.IdempotencyKey, t.Code),
		TaskID:  t.ID,
	}
}

// taskInsertCols are the columns an insert sets (the others take their
// defaults), with the value each takes from a NewTask.
var taskInsertCols = []struct {
	name string
	typ  colType
	val  func(n *NewTask, code string, runAt, now time.Time) any
}{
	{"code", colText, func(_ *NewTask, code string, _, _ time.Time) any { return code }},
	{"type", colText, func(n *NewTask, _ string, _, _ time.Time) any { return n.Type }},
	{"biz_id", colText, func(n *NewTask, _ string, _, _ time.Time) any { return n.BizID }},
	{"idempotency_key", colText, func(n *NewTask, _ string, _, _ time.Time) any {
		if n.IdempotencyKey == nil {
			return nil
		}
		return *n.IdempotencyKey
	}},
	{"title", colText, func(n *NewTask, _ string, _, _ time.Time) any { return n.Title }},
	{"status", colText, func(n *NewTask, _ string, _, _ time.Time) any { return string(firstStatus(n)) }},
	{"priority", colInt, func(n *NewTask, _ string, _, _ time.Time) any { return int64(n.Priority) }},
	{"owner", colText, func(n *NewTask, _ string, _, _ time.Time) any { return n.Owner }},
	{"owner_role", colText, func(n *NewTask, _ string, _, _ time.Time) any { return n.OwnerRole }},
	{"owner_source", colText, func(n *NewTask, _ string, _, _ time.Time) any { return n.OwnerSource }},
	{"tenant", colText, func(n *NewTask, _ string, _, _ time.Time) any { return n.Tenant }},
	{"idempotency_hash", colText, func(n *NewTask, _ string, _, _ time.Time) any {
		if n.IdempotencyHash == nil {
			return nil
		}
		return *n.IdempotencyHash
	}},
	{"input", colJSON, func(n *NewTask, _ string, _, _ time.Time) any {
		if len(n.Input) == 0 {
			return "{}"
		}
		return string(n.Input)
	}},
	{"input_sealed", colBytes, func(n *NewTask, _ string, _, _ time.Time) any {
		if len(n.InputSealed) == 0 {
			return nil
		}
		return n.InputSealed
	}},
	{"input_hash", colText, func(n *NewTask, _ string, _, _ time.Time) any { return n.InputHash }},
	{"timeout_seconds", colInt, func(n *NewTask, _ string, _, _ time.Time) any { return int64(n.TimeoutSeconds) }},
	{"retry_policy", colText, func(n *NewTask, _ string, _, _ time.Time) any { return n.RetryPolicy }},
	{"max_attempts", colInt, func(n *NewTask, _ string, _, _ time.Time) any { return int64(n.MaxAttempts) }},
	{"run_at", colTime, func(_ *NewTask, _ string, runAt, _ time.Time) any { return runAt }},
	{"updated_at", colTime, func(_ *NewTask, _ string, _, now time.Time) any { return now }},
	{"created_at", colTime, func(_ *NewTask, _ string, _, now time.Time) any { return now }},
	{"parent_count", colInt, func(n *NewTask, _ string, _, _ time.Time) any { return int64(len(n.Parents)) }},
	{"schedule_id", colNullInt, func(n *NewTask, _ string, _, _ time.Time) any {
		if n.ScheduleID == nil {
			return nil
		}
		return int64(*n.ScheduleID)
	}},
	{"schedule_slot", colTime, func(n *NewTask, _ string, _, _ time.Time) any {
		if n.ScheduleSlot == nil {
			return nil
		}
		return n.ScheduleSlot.UTC().Truncate(time.Microsecond)
	}},
	{"trace_parent", colText, func(n *NewTask, _ string, _, _ time.Time) any {
		if n.TraceParent == "" {
			return nil
		}
		return n.TraceParent
	}},
	{"workflow_id", colNullInt, func(n *NewTask, _ string, _, _ time.Time) any {
		if n.WorkflowID == nil {
			return nil
		}
		return int64(*n.WorkflowID)
	}},
	{"step_key", colText, func(n *NewTask, _ string, _, _ time.Time) any {
		if n.StepKey == nil {
			return nil
		}
		return *n.StepKey
	}},
	{"review_mode", colText, func(n *NewTask, _ string, _, _ time.Time) any {
		if n.ReviewMode == "" {
			return nil
		}
		return n.ReviewMode
	}},
	{"deadline", colTime, func(n *NewTask, _ string, _, _ time.Time) any {
		if n.Deadline == nil {
			return nil
		}
		return n.Deadline.UTC().Truncate(time.Microsecond)
	}},
}

// firstStatus is the state a new task starts in: waiting for its parents,
// or PENDING.
func firstStatus(n *NewTask) lifecycle.Status {
	if n.waitingOn > 0 {
		return lifecycle.WaitingDependency
	}
	return lifecycle.Pending
}

// insertColumns are the names and types of taskInsertCols.
func insertColumns() ([]string, []colType) {
	names := make([]string, len(taskInsertCols))
	types := make([]colType, len(taskInsertCols))
	for c, col := range taskInsertCols {
		names[c], types[c] = col.name, col.typ
	}
	return names, types
}

// The derived table of the first instances' insert.
var (
	instanceInsertCols  = []string{"task_id", "task_type", "priority", "run_at", "status", "waiting_on", "tenant"}
	instanceInsertTypes = []colType{colInt, colText, colInt, colTime, colText, colInt, colText}
)

// insertTasks inserts the items idx of ns with their first instances, in two
// statements, and fills out for them. An item whose row conflicts with one
// of another transaction (its idempotency key or schedule slot taken, its
// code drawn twice) is left unanswered: the caller looks it up, or tries
// it again with another code.
func (s *Store) insertTasks(ctx context.Context, t *txn, ns []NewTask, idx []int, out []Created) error {
	now := s.Now()
	names, types := insertColumns()
	cols := make([][]any, len(taskInsertCols))
	for c := range taskInsertCols {
		cols[c] = make([]any, len(idx))
	}
	byCode := make(map[string]int, len(idx))
	for r, i := range idx {
		n := &ns[i]
		runAt := n.RunAt.UTC().Truncate(time.Microsecond)
		if n.RunAt.IsZero() {
			runAt = now
		}
		code := newCode(n.Type, now)
		byCode[code] = i
		for c, col := range taskInsertCols {
			cols[c][r] = col.val(n, code, runAt, now)
		}
	}
	v, args := s.d.valuesTable("v", names, types, cols)
	rows, err := s.query(ctx, t, insertTasksSQL(names, v), args...)
	if err != nil {
		return fmt.Errorf("insert tasks: %w", err)
	}
	tasks, err := ent.ScanTaskRows(s.client, rows)
	if err != nil {
		return fmt.Errorf("insert tasks: %w", err)
	}
	if len(tasks) == 0 {
		return nil
	}
	icols := make([][]any, len(instanceInsertCols))
	for c := range icols {
		icols[c] = make([]any, len(tasks))
	}
	for r, tk := range tasks {
		i := byCode[tk.Code]
		out[i] = Created{Task: tk, Created: true}
		icols[0][r], icols[1][r], icols[2][r], icols[3][r] = int64(tk.ID), tk.Type, int64(tk.Priority), tk.RunAt
		icols[4][r], icols[5][r], icols[6][r] = string(firstStatus(&ns[i])), int64(ns[i].waitingOn), tk.Tenant
	}
	v, args = s.d.valuesTable("v", instanceInsertCols, instanceInsertTypes, icols)
	if _, err := s.execute(ctx, t, s.d.insertInstancesSQL(v), append([]any{now}, args...)...); err != nil {
		return fmt.Errorf("insert first instances: %w", err)
	}
	t.changed(events.Created, tasks...)
	t.histCreated(tasks, now)
	return nil
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

// insertTasksSQL inserts the rows of the derived table v (of the columns
// names) into tasks. A row that conflicts with one of another transaction
// on any unique index (the idempotency hash, the schedule slot, the code)
// is skipped, not an error: the statement never fails a transaction that
// is not the store's own to run again.
func insertTasksSQL(names []string, v string) string {
	return `INSERT INTO tasks (` + strings.Join(names, ", ") + `)
SELECT ` + strings.Join(names, ", ") + ` FROM ` + v + ` WHERE true
ON CONFLICT DO NOTHING
RETURNING ` + taskColumns("tasks")
}

// insertInstancesSQL inserts the first instances of the tasks of the
// derived table v: PENDING, or WAITING_DEPENDENCY with the number of
// parents they wait for.
func (d sqlDialect) insertInstancesSQL(v string) string {
	return `INSERT INTO task_instances (task_id, instance_no, attempt, status, task_type, priority, tenant, run_at, waiting_on, version, created_at)
SELECT task_id, 1, 1, status, task_type, priority, tenant, run_at, waiting_on, 1, ` + d.timeParam() + ` FROM ` + v
}
