package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
// *ConflictError; a step the store refuses fails the whole call. It is
// CreateWorkflows of one workflow.
func (tx *Tx) CreateWorkflow(ctx context.Context, n NewWorkflow) (*ent.Workflow, bool, error) {
	res, _, err := tx.createWorkflows(ctx, []NewWorkflow{n})
	if err != nil {
		return nil, false, err
	}
	return res[0].Workflow, res[0].Created, nil
}

// CreatedWorkflow is the answer to one NewWorkflow of CreateWorkflows: the
// workflow, and whether this call created it (false: an earlier one with
// the same idempotency key did, or an earlier item of the same call).
type CreatedWorkflow struct {
	Workflow *ent.Workflow
	Created  bool
}

// CreateWorkflows creates workflows with all their steps in tx, each as
// CreateWorkflow does, and answers them in order, in a number of
// statements that does not grow with the number of workflows: one
// look-up of all the idempotency keys, one insert of the workflows' rows,
// and one CreateTasks of all their steps (each in chunks of the dialect's
// size), plus one statement a workflow that moves its schedule on. Two
// items of one call with the same idempotency key hash are one workflow
// (the later answered with created false). The call is all or nothing:
// an item whose key was used for another definition (by an earlier call
// or by an earlier item of this one) fails it with a *ConflictError; a
// step the store refuses fails it with the step's error, and a schedule
// no longer at an item's ScheduleVersion with ErrScheduleMoved. The error
// names the item by its index. A conflict found before the insert leaves
// nothing written; other errors may come after some rows were written in
// tx, which the caller must then roll back (Write does).
func (tx *Tx) CreateWorkflows(ctx context.Context, ns []NewWorkflow) ([]CreatedWorkflow, error) {
	res, i, err := tx.createWorkflows(ctx, ns)
	if err != nil {
		if i >= 0 {
			return nil, fmt.Errorf("workflow %d: %w", i, err)
		}
		return nil, err
	}
	return res, nil
}

// createWorkflows is CreateWorkflows; its error names the item it is
// about by its index (-1: the call as a whole), so that CreateWorkflow can
// return an item's error as it is.
func (tx *Tx) createWorkflows(ctx context.Context, ns []NewWorkflow) ([]CreatedWorkflow, int, error) {
	ctx = lifecycle.Guarded(ctx)
	s, t := tx.s, tx.t
	out := make([]CreatedWorkflow, len(ns))
	// Items to insert, and items answered by an earlier item of the call.
	var todo []int
	first := map[string]int{}
	var dups [][2]int // [item, the item it repeats]
	for i, n := range ns {
		if (n.IdempotencyKey == nil) != (n.IdempotencyHash == nil) {
			return nil, i, fmt.Errorf("create workflow: an idempotency key needs its hash")
		}
		if n.IdempotencyHash == nil {
			todo = append(todo, i)
			continue
		}
		if j, ok := first[*n.IdempotencyHash]; ok {
			if ns[j].InputHash != n.InputHash {
				return nil, i, &ConflictError{Message: fmt.Sprintf("idempotency key %q is used twice in one call with different definitions", *n.IdempotencyKey)}
			}
			dups = append(dups, [2]int{i, j})
			continue
		}
		first[*n.IdempotencyHash] = i
		todo = append(todo, i)
	}
	// A workflow of the same key committed meanwhile is skipped by the
	// insert, not an error, and answered by the look-up that follows; a
	// code drawn twice is inserted again with a new one.
	for attempt := 0; ; attempt++ {
		if i, err := tx.resolveWorkflowKeys(ctx, ns, todo, out); err != nil {
			return nil, i, err
		}
		var pending []int
		for _, i := range todo {
			if out[i].Workflow == nil {
				pending = append(pending, i)
			}
		}
		if len(pending) == 0 {
			break
		}
		if attempt == 3 {
			return nil, pending[0], fmt.Errorf("create workflow: not inserted after %d attempts", attempt)
		}
		if attempt == 0 {
			for _, i := range pending {
				n := ns[i]
				if n.ScheduleVersion == nil || n.ScheduleID == nil {
					continue
				}
				moved, err := s.exec(ctx, t, `UPDATE schedules SET version = version + 1 WHERE id = ? AND version = ?`, *n.ScheduleID, *n.ScheduleVersion)
				if err != nil {
					return nil, i, fmt.Errorf("move schedule %d on: %w", *n.ScheduleID, err)
				}
				if moved == 0 {
					return nil, i, ErrScheduleMoved
				}
			}
		}
		chunk := s.d.insertChunk(len(workflowInsertCols))
		for start := 0; start < len(pending); start += chunk {
			if err := tx.insertWorkflows(ctx, ns, pending[start:min(start+chunk, len(pending))], out); err != nil {
				return nil, -1, err
			}
		}
	}
	// The steps of all the workflows this call created, in one call: each
	// workflow's Parent.Step is moved by the index of its first step.
	var steps []NewTask
	var owner, stepNo []int // per step: its workflow's item, its index in it
	for i, n := range ns {
		if !out[i].Created {
			continue
		}
		id, base := out[i].Workflow.ID, len(steps)
		policy := n.OnParentFailure
		if policy == "" {
			policy = CancelDependents
		}
		for k, st := range n.Steps {
			st.WorkflowID = &id
			// A step's own idempotency is its workflow's.
			st.IdempotencyKey, st.IdempotencyHash = nil, nil
			st.Parents = slices.Clone(st.Parents)
			for j := range st.Parents {
				if st.Parents[j].Policy == "" {
					st.Parents[j].Policy = policy
				}
				if st.Parents[j].ID == 0 {
					st.Parents[j].Step += base
				}
			}
			steps = append(steps, st)
			owner, stepNo = append(owner, i), append(stepNo, k)
		}
	}
	if len(steps) > 0 {
		res, err := tx.CreateTasks(ctx, steps)
		if err != nil {
			return nil, -1, err
		}
		for r, c := range res {
			if c.Err != nil {
				return nil, owner[r], fmt.Errorf("step %d: %w", stepNo[r], c.Err)
			}
		}
	}
	for _, d := range dups {
		out[d[0]] = CreatedWorkflow{Workflow: out[d[1]].Workflow}
	}
	return out, -1, nil
}

// resolveWorkflowKeys answers the items of todo not answered yet whose
// idempotency key was already used, from the workflows created with it,
// reading in tx; a key used for another definition is a *ConflictError
// for its item.
func (tx *Tx) resolveWorkflowKeys(ctx context.Context, ns []NewWorkflow, todo []int, out []CreatedWorkflow) (int, error) {
	var hashes []string
	for _, i := range todo {
		if out[i].Workflow == nil && ns[i].IdempotencyHash != nil {
			hashes = append(hashes, *ns[i].IdempotencyHash)
		}
	}
	found := map[string]*ent.Workflow{}
	// Within SQLite's parameters.
	for chunk := range slices.Chunk(hashes, tx.s.d.insertChunk(len(workflowInsertCols))) {
		wfs, err := tx.t.Workflow.Query().Where(workflow.IdempotencyHashIn(chunk...)).All(internal(ctx))
		if err != nil {
			return -1, fmt.Errorf("create workflow: look up idempotency keys: %w", err)
		}
		for _, wf := range wfs {
			found[*wf.IdempotencyHash] = wf.BindTo(tx.s.client)
		}
	}
	for _, i := range todo {
		n := ns[i]
		if out[i].Workflow != nil || n.IdempotencyHash == nil {
			continue
		}
		switch wf := found[*n.IdempotencyHash]; {
		case wf == nil:
		case wf.InputHash != n.InputHash:
			return i, &ConflictError{Message: fmt.Sprintf("idempotency key %q was already used for workflow %s with a different definition", *n.IdempotencyKey, wf.Code)}
		default:
			out[i] = CreatedWorkflow{Workflow: wf}
		}
	}
	return -1, nil
}

// workflowInsertCols are the columns of a workflow's row an insert sets
// (the others take their defaults), with their types.
var (
	workflowInsertCols  = []string{"created_at", "code", "title", "idempotency_key", "idempotency_hash", "input_hash", "owner", "owner_source", "tenant", "owner_role", "on_parent_failure", "step_count", "schedule_id", "schedule_slot"}
	workflowInsertTypes = []colType{colTime, colText, colText, colText, colText, colText, colText, colText, colText, colText, colText, colInt, colNullInt, colTime}
)

// insertWorkflows inserts the rows of the items idx of ns in one
// statement, and answers those it inserted (created true). An item whose
// row conflicts with one of another transaction (its idempotency key
// taken, its code drawn twice) is skipped, not an error, and left
// unanswered: the caller looks it up, or tries it again with another code.
func (tx *Tx) insertWorkflows(ctx context.Context, ns []NewWorkflow, idx []int, out []CreatedWorkflow) error {
	s := tx.s
	now := s.Now()
	cols := make([][]any, len(workflowInsertCols))
	for c := range cols {
		cols[c] = make([]any, len(idx))
	}
	byCode := make(map[string]int, len(idx))
	for r, i := range idx {
		n := &ns[i]
		var key, hash, schedule, slot any
		if n.IdempotencyKey != nil {
			key, hash = *n.IdempotencyKey, *n.IdempotencyHash
		}
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
		code := newCode("WF", now)
		for _, drawn := byCode[code]; drawn; _, drawn = byCode[code] {
			code = newCode("WF", now) // two rows of one statement
		}
		byCode[code] = i
		for c, v := range []any{now, code, n.Title, key, hash, n.InputHash, n.Owner, n.OwnerSource, n.Tenant, n.OwnerRole, policy, int64(len(n.Steps)), schedule, slot} {
			cols[c][r] = v
		}
	}
	v, args := s.d.valuesTable("v", workflowInsertCols, workflowInsertTypes, cols)
	rows, err := s.query(ctx, tx.t, insertWorkflowsSQL(v), args...)
	if err != nil {
		return fmt.Errorf("create workflows: %w", err)
	}
	inserted, err := ent.ScanWorkflowRows(s.client, rows)
	if err != nil {
		return fmt.Errorf("create workflows: %w", err)
	}
	for _, wf := range inserted {
		if i, ok := byCode[wf.Code]; ok {
			out[i] = CreatedWorkflow{Workflow: wf, Created: true}
		}
	}
	return nil
}

// insertWorkflowsSQL inserts the rows of the derived table v into
// workflows and returns them whole; a row whose idempotency key another
// transaction took (or whose code was drawn twice) is skipped, and not
// returned. On PostgreSQL its text is the same for any number of rows, so
// that one prepared statement serves every batch.
func insertWorkflowsSQL(v string) string {
	names := strings.Join(workflowInsertCols, ", ")
	return `INSERT INTO workflows (` + names + `)
SELECT ` + names + ` FROM ` + v + ` WHERE true
ON CONFLICT DO NOTHING RETURNING ` + strings.Join(workflow.Columns, ", ")
}

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
