package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/workflow"
)

// NewWorkflow is a workflow to create with its steps. The steps are
// NewTasks whose Parents name earlier steps (Parent.Step), in an order
// where every parent comes before its children (the engine sorts them);
// their WorkflowID is set here. The owner and the idempotency key are as
// NewTask's; InputHash covers the whole definition.
type NewWorkflow struct {
	Title           string
	Owner           string
	OwnerSource     string
	Tenant          string
	OwnerRole       string
	IdempotencyKey  *string
	IdempotencyHash *string
	InputHash       string
	OnParentFailure string
	Steps           []NewTask
	// ScheduleID and ScheduleSlot name the schedule slot the workflow is
	// created for (its idempotency key names the slot too, so that a slot
	// has one workflow however many nodes fire it). ScheduleVersion, when
	// set, makes the creation conditional on the schedule still being at
	// that version, and moves it on by one in the same transaction;
	// otherwise the result is ErrScheduleMoved (as NewTask's).
	ScheduleID      *int
	ScheduleSlot    *time.Time
	ScheduleVersion *int64
}

// CreateWorkflow creates a workflow and all its steps in tx, as one: with
// an idempotency key already used by its owner, the workflow created first
// is returned (created false) or, when its definition differs, a
// *ConflictError; a step the store refuses fails the whole call.
func (tx *Tx) CreateWorkflow(ctx context.Context, n NewWorkflow) (*ent.Workflow, bool, error) {
	ctx = lifecycle.Guarded(ctx)
	s, t := tx.s, tx.t
	if (n.IdempotencyKey == nil) != (n.IdempotencyHash == nil) {
		return nil, false, fmt.Errorf("create workflow: an idempotency key needs its hash")
	}
	existing := func() (*ent.Workflow, error) {
		if n.IdempotencyHash == nil {
			return nil, nil
		}
		wf, err := t.Workflow.Query().Where(workflow.IdempotencyHash(*n.IdempotencyHash)).Only(internal(ctx))
		switch {
		case ent.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("create workflow: look up idempotency key: %w", err)
		case wf.InputHash != n.InputHash:
			return nil, &ConflictError{Message: fmt.Sprintf("idempotency key %q was already used for workflow %s with a different definition", *n.IdempotencyKey, wf.Code)}
		}
		return wf.BindTo(s.client), nil
	}
	if wf, err := existing(); wf != nil || err != nil {
		return wf, false, err
	}
	if n.ScheduleVersion != nil && n.ScheduleID != nil {
		moved, err := s.exec(ctx, t, `UPDATE schedules SET version = version + 1 WHERE id = ? AND version = ?`, *n.ScheduleID, *n.ScheduleVersion)
		if err != nil {
			return nil, false, fmt.Errorf("move schedule %d on: %w", *n.ScheduleID, err)
		}
		if moved == 0 {
			return nil, false, ErrScheduleMoved
		}
	}
	var schedule, slot any
	if n.ScheduleID != nil {
		schedule = int64(*n.ScheduleID)
	}
	if n.ScheduleSlot != nil {
		slot = n.ScheduleSlot.UTC().Truncate(time.Microsecond)
	}
	policy := n.OnParentFailure
	if policy == "" {
		policy = CancelDependents
	}
	now := s.Now()
	var key, hash any
	if n.IdempotencyKey != nil {
		key, hash = *n.IdempotencyKey, *n.IdempotencyHash
	}
	// A workflow of the same key committed meanwhile is skipped by the
	// insert, not an error, and answered by the look-up.
	// One prepared statement that returns the row: no read-back (a
	// workflow of many small ones is created round trip by round trip).
	rows, err := s.query(ctx, t, insertWorkflowSQL,
		now, newCode("WF", now), n.Title, key, hash, n.InputHash, n.Owner, n.OwnerSource, n.Tenant, n.OwnerRole, policy, int64(len(n.Steps)), schedule, slot)
	if err != nil {
		return nil, false, fmt.Errorf("create workflow: %w", err)
	}
	inserted, err := ent.ScanWorkflowRows(s.client, rows)
	if err != nil {
		return nil, false, fmt.Errorf("create workflow: %w", err)
	}
	if len(inserted) == 0 {
		wf, err := existing()
		if wf == nil && err == nil {
			err = fmt.Errorf("create workflow: its code was drawn twice; try again")
		}
		return wf, false, err
	}
	wf := inserted[0]
	id := wf.ID
	steps := make([]NewTask, len(n.Steps))
	for i, st := range n.Steps {
		st.WorkflowID = &id
		// A step's own idempotency is its workflow's.
		st.IdempotencyKey, st.IdempotencyHash = nil, nil
		for j := range st.Parents {
			if st.Parents[j].Policy == "" {
				st.Parents[j].Policy = policy
			}
		}
		steps[i] = st
	}
	res, err := tx.CreateTasks(ctx, steps)
	if err != nil {
		return nil, false, err
	}
	for i, r := range res {
		if r.Err != nil {
			return nil, false, fmt.Errorf("step %d: %w", i, r.Err)
		}
	}
	return wf, true, nil
}

// insertWorkflowSQL inserts a workflow's row and returns it whole; a row
// whose idempotency key another transaction took (or whose code was
// drawn twice) is skipped, and nothing is returned.
var insertWorkflowSQL = `INSERT INTO workflows (created_at, code, title, idempotency_key, idempotency_hash, input_hash, owner, owner_source, tenant, owner_role, on_parent_failure, step_count, schedule_id, schedule_slot)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING ` + strings.Join(workflow.Columns, ", ")

// WorkflowSteps returns the steps of workflow id the viewer of ctx sees.
func (s *Store) WorkflowSteps(ctx context.Context, id int) ([]*ent.Task, error) {
	return s.client.Task.Query().Where(task.WorkflowID(id)).Order(ent.Asc(task.FieldID)).All(ctx)
}

// WorkflowStatus derives a workflow's status from its steps' statuses:
// FAILED or CANCELLED when a step is (and nothing runs or waits to), SUCCESS
// when all succeeded, EXECUTING when any runs or has run, else PENDING.
func WorkflowStatus(steps []lifecycle.Status) lifecycle.Status {
	var open, failed, cancelled, started, done int
	for _, st := range steps {
		switch st {
		case lifecycle.Success:
			done++
			started++
		case lifecycle.Failed:
			failed++
		case lifecycle.Cancelled:
			cancelled++
		case lifecycle.Executing, lifecycle.RetryPending:
			started++
			open++
		default:
			open++
		}
	}
	switch {
	case len(steps) > 0 && done == len(steps):
		return lifecycle.Success
	case open == 0 && failed > 0:
		return lifecycle.Failed
	case open == 0 && cancelled > 0:
		return lifecycle.Cancelled
	case started > 0 || failed > 0:
		return lifecycle.Executing
	}
	return lifecycle.Pending
}

// ParentResult is what a parent left its child: its step key (its code
// when it has none), its state and its result (as stored: masked as the
// worker stores results), or its error (the last error of a FAILED one,
// the reason of a CANCELLED one, masked), and its tenant (a parent a
// platform administrator named across tenants is another tenant's: the
// worker protocol leaves it out for a tenant's worker).
type ParentResult struct {
	Key    string
	ID     int
	Code   string
	Status lifecycle.Status
	Result json.RawMessage
	Error  string
	Tenant string
}

// ParentResults returns, per child among children, the results of its
// parents, in one read.
func (s *Store) ParentResults(ctx context.Context, children []int) (map[int][]ParentResult, error) {
	ctx = internal(ctx)
	if len(children) == 0 {
		return nil, nil
	}
	in, args := s.d.inInts("d.child_id", intsTo64(children))
	rows, err := s.db.QueryContext(ctx, s.d.rebind(`SELECT d.child_id, COALESCE(p.step_key, p.code), p.id, p.code, p.status, p.result,
	COALESCE(NULLIF(p.last_error, ''), p.cancel_reason, ''), p.tenant
FROM task_dependencies d JOIN tasks p ON p.id = d.parent_id WHERE `+in), args...)
	if err != nil {
		return nil, fmt.Errorf("read parent results: %w", err)
	}
	defer rows.Close()
	out := map[int][]ParentResult{}
	for rows.Next() {
		var child int
		var r ParentResult
		var status string
		var result []byte
		if err := rows.Scan(&child, &r.Key, &r.ID, &r.Code, &status, &result, &r.Error, &r.Tenant); err != nil {
			return nil, fmt.Errorf("read parent results: %w", err)
		}
		r.Status = lifecycle.Status(status)
		if r.Status == lifecycle.Success {
			r.Error = "" // an earlier attempt's
		}
		if len(result) > 0 {
			r.Result = json.RawMessage(result)
		}
		out[child] = append(out[child], r)
	}
	return out, rows.Err()
}
