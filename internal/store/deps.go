package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/taskdependency"
	"github.com/taskgraph/taskgraph/internal/events"
)

// Failure policies of an edge (task_dependencies.on_parent_failure).
const (
	// CancelDependents: a parent that ends FAILED or CANCELLED cancels the
	// child, and what waits on it along such edges, in the same transaction.
	CancelDependents = "CANCEL_DEPENDENTS"
	// Wait: the child stays WAITING_DEPENDENCY; a retry of the parent that
	// succeeds releases it.
	Wait = "WAIT"
	// RunAnyway: the parent is awaited until it ends, whatever its end
	// (SUCCESS, FAILED, CANCELLED); the child's handler is told each
	// parent's outcome. A manual retry of a FAILED parent makes the
	// children still waiting await it again.
	RunAnyway = "RUN_ANYWAY"
)

// Parent is an edge of a task to create: the parent is an existing task
// (ID, when not zero) or the item of the same CreateTasks call at index
// Step, which must come before it. Policy is CancelDependents (empty),
// Wait or RunAnyway.
type Parent struct {
	ID     int
	Step   int
	Policy string
}

func init() {
	// The release and the cascade move WAITING_DEPENDENCY along the table.
	for _, to := range []lifecycle.Status{lifecycle.Pending, lifecycle.Cancelled} {
		if !lifecycle.CanMove(lifecycle.WaitingDependency, to) {
			panic("lifecycle: the workflows need WAITING_DEPENDENCY -> " + string(to))
		}
	}
}

var (
	sqlWaitingDependency = lifecycle.QuotedList(lifecycle.WaitingDependency)
	sqlPending           = lifecycle.QuotedList(lifecycle.Pending)
)

// afterEnded follows the tasks that ended in t: the children of those that
// succeeded are released when they were their last awaited parents, those
// of the ones that failed or were cancelled are cancelled along the edges
// that say so (and below them). Each is a constant number of statements,
// whatever the number of children.
func (s *Store) afterEnded(ctx context.Context, t *txn, ended []*ent.Task) error {
	var ok, bad []int64
	for _, tk := range ended {
		switch tk.Status {
		case lifecycle.Success:
			ok = append(ok, int64(tk.ID))
		case lifecycle.Failed, lifecycle.Cancelled:
			bad = append(bad, int64(tk.ID))
		}
	}
	if len(ok) > 0 {
		if err := s.release(ctx, t, ok); err != nil {
			return err
		}
	}
	if len(bad) > 0 {
		cascaded, err := s.cancelDependents(ctx, t, bad)
		if err != nil {
			return err
		}
		// What runs anyway counts down the parents that ended badly,
		// and those the cascade just cancelled.
		if err := s.countDown(ctx, t, append(bad, cascaded...), true); err != nil {
			return err
		}
	}
	return nil
}

// rewait makes the waiting children of parents (FAILED or CANCELLED ones
// that a retry runs again) await them again along RUN_ANYWAY edges, which
// counted them down when they ended: one UPDATE. It is run before the
// retry's new instances exist.
func (s *Store) rewait(ctx context.Context, t *txn, parents []int64) error {
	in, args := s.d.inInts("parent_id", parents)
	_, err := s.exec(ctx, t, `
UPDATE task_instances SET waiting_on = task_instances.waiting_on + d.n, version = task_instances.version + 1
FROM (SELECT child_id, COUNT(*) AS n FROM task_dependencies WHERE `+in+` AND on_parent_failure = '`+RunAnyway+`' GROUP BY child_id) d
WHERE task_instances.task_id = d.child_id AND task_instances.status = `+sqlWaitingDependency, args...)
	if err != nil {
		return fmt.Errorf("await retried parents again: %w", err)
	}
	return nil
}

// release counts down the waiting instances of the children of parents
// (which have just succeeded) by their edges from them, and moves to
// PENDING those that reach zero, with their tasks: one UPDATE for all the
// instances, one for all the released tasks (instances first, then tasks:
// the lock order every writer keeps). Two parents that succeed at the same
// instant in two transactions update the same instance row: the second
// waits for the first's commit and counts down from what it wrote
// (PostgreSQL re-evaluates the row), so exactly one of them reaches zero.
func (s *Store) release(ctx context.Context, t *txn, parents []int64) error {
	return s.countDown(ctx, t, parents, false)
}

// countDown is release along every edge of parents, or (runAnyway) along
// their RUN_ANYWAY edges only: those of parents that failed or were
// cancelled.
func (s *Store) countDown(ctx context.Context, t *txn, parents []int64, runAnyway bool) error {
	in, args := s.d.inInts("parent_id", parents)
	if runAnyway {
		in += ` AND on_parent_failure = '` + RunAnyway + `'`
	}
	now := s.Now()
	left := `task_instances.waiting_on - d.n`
	moved, err := s.queryInts(ctx, t, 2, `
UPDATE task_instances SET waiting_on = `+left+`,
	status = CASE WHEN `+left+` <= 0 THEN `+sqlPending+` ELSE task_instances.status END,
	version = task_instances.version + 1
FROM (SELECT child_id, COUNT(*) AS n FROM task_dependencies WHERE `+in+` GROUP BY child_id) d
WHERE task_instances.task_id = d.child_id AND task_instances.status = `+sqlWaitingDependency+`
RETURNING task_instances.task_id, task_instances.waiting_on`, args...)
	if err != nil {
		return fmt.Errorf("release dependents: update instances: %w", err)
	}
	var released []int64
	for _, r := range moved {
		if r[1] <= 0 {
			released = append(released, r[0])
		}
	}
	if len(released) == 0 {
		return nil
	}
	in, args = s.d.inInts("id", released)
	rows, err := t.QueryContext(ctx, s.d.rebind(`
UPDATE tasks SET status = `+sqlPending+`, updated_at = ?, version = version + 1
WHERE `+in+` AND status = `+sqlWaitingDependency+`
RETURNING `+changingColumns("tasks")), append([]any{now}, args...)...)
	if err != nil {
		return fmt.Errorf("release dependents: update tasks: %w", err)
	}
	tasks, err := s.scanChanged(ctx, t, rows, nil)
	if err != nil {
		return fmt.Errorf("release dependents: update tasks: %w", err)
	}
	if len(tasks) != len(released) {
		return fmt.Errorf("release dependents: %d instances released but %d of their tasks were waiting", len(released), len(tasks))
	}
	t.changed(events.Transitioned, tasks...)
	return nil
}

// cancelDependents cancels the waiting descendants of parents (which have
// just failed or been cancelled) along CANCEL_DEPENDENTS edges, each with
// the reason "parent <code> failed" (or "cancelled") naming the parent it
// was reached from: one UPDATE for the instances, one for the tasks.
func (s *Store) cancelDependents(ctx context.Context, t *txn, parents []int64) ([]int64, error) {
	in, args := s.d.inInts("parent_id", parents)
	policy := `on_parent_failure = '` + CancelDependents + `'`
	reached := `WITH RECURSIVE doomed(id, root) AS (
	SELECT child_id, parent_id FROM task_dependencies WHERE ` + in + ` AND ` + policy + `
	UNION
	SELECT d.child_id, doomed.root FROM task_dependencies d JOIN doomed ON d.parent_id = doomed.id
	WHERE d.` + policy + `
), why(id, reason) AS (
	SELECT x.id, 'parent ' || p.code || ' ' || CASE WHEN p.status = ` + sqlCancelled + ` THEN 'was cancelled' ELSE 'failed' END
	FROM (SELECT id, MIN(root) AS root FROM doomed GROUP BY id) x JOIN tasks p ON p.id = x.root
)
`
	now := s.Now()
	rows, err := t.QueryContext(ctx, s.d.rebind(reached+`UPDATE task_instances SET status = `+sqlCancelled+`, error_kind = `+sqlKindCancelled+`,
	last_error = why.reason, finished_at = ?, version = task_instances.version + 1
FROM why
WHERE task_instances.task_id = why.id AND task_instances.status = `+sqlWaitingDependency+`
RETURNING task_instances.task_id`), append(args, now)...)
	if err != nil {
		return nil, fmt.Errorf("cancel dependents: update instances: %w", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("cancel dependents: update instances: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cancel dependents: update instances: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	inIDs, idArgs := s.d.inInts("tasks.id", ids)
	rows, err = t.QueryContext(ctx, s.d.rebind(`UPDATE tasks SET status = `+sqlCancelled+`, attention_status = `+sqlCancelled+`,
	cancel_reason = i.last_error, last_error = i.last_error, finished_at = ?, updated_at = ?, version = tasks.version + 1
FROM task_instances i
WHERE `+inIDs+` AND tasks.status = `+sqlWaitingDependency+` AND i.task_id = tasks.id AND i.status = `+sqlCancelled+`
	AND i.instance_no = (SELECT MAX(x.instance_no) FROM task_instances x WHERE x.task_id = tasks.id)
RETURNING `+changingColumns("tasks")), append([]any{now, now}, idArgs...)...)
	if err != nil {
		return nil, fmt.Errorf("cancel dependents: update tasks: %w", err)
	}
	tasks, err := s.scanChanged(ctx, t, rows, nil)
	if err != nil {
		return nil, fmt.Errorf("cancel dependents: update tasks: %w", err)
	}
	if len(tasks) != len(ids) {
		return nil, fmt.Errorf("cancel dependents: %d instances cancelled but %d of their tasks were waiting", len(ids), len(tasks))
	}
	t.changed(events.Transitioned, tasks...)
	t.histCancelled(tasks, now)
	return ids, nil
}

// countParents returns a copy of ns with the number of parents each item
// waits for. The existing parents are read through the access filter (one
// the caller may not see is not found) and, on PostgreSQL, locked until
// the commit: a parent that succeeds meanwhile waits for this transaction,
// then finds the new edge and counts the child down; one that succeeded
// before is not waited for. An item whose parent is not found, or has
// already failed or been cancelled under CANCEL_DEPENDENTS, is refused
// (one that ended in any way is not waited for under RUN_ANYWAY)
// (its out set), and nothing of it is created.
func (s *Store) countParents(ctx context.Context, t *txn, ns []NewTask, out []Created) ([]NewTask, error) {
	var ids []int
	for i, n := range ns {
		for _, p := range n.Parents {
			switch {
			case p.ID != 0:
				ids = append(ids, p.ID)
			case p.Step < 0 || p.Step >= i:
				return nil, fmt.Errorf("item %d: parent step %d does not come before it", i, p.Step)
			}
			if p.Policy != "" && p.Policy != CancelDependents && p.Policy != Wait && p.Policy != RunAnyway {
				return nil, fmt.Errorf("item %d: unknown failure policy %q", i, p.Policy)
			}
		}
	}
	if len(ids) == 0 && !slices.ContainsFunc(ns, func(n NewTask) bool { return len(n.Parents) > 0 }) {
		return ns, nil
	}
	ns = slices.Clone(ns)
	for i := range ns {
		// A parent named twice is one edge.
		ns[i].Parents = slices.CompactFunc(slices.SortedFunc(slices.Values(ns[i].Parents), func(a, b Parent) int {
			if a.ID != b.ID {
				return a.ID - b.ID
			}
			return a.Step - b.Step
		}), func(a, b Parent) bool { return a.ID == b.ID && a.Step == b.Step })
	}
	status := map[int]*ent.Task{}
	if len(ids) > 0 {
		q := t.Task.Query().Where(task.IDIn(ids...)).Order(ent.Asc(task.FieldID))
		if s.d.postgres() {
			q = q.ForUpdate()
		}
		found, err := q.All(ctx)
		if err != nil {
			return nil, fmt.Errorf("read parents: %w", err)
		}
		for _, p := range found {
			status[p.ID] = p
		}
	}
	for i := range ns {
		n := &ns[i]
		n.waitingOn = 0
		for _, p := range n.Parents {
			if p.ID == 0 {
				n.waitingOn++
				continue
			}
			pt := status[p.ID]
			switch {
			case pt == nil:
				out[i] = Created{Err: &NotFoundError{Entity: "parent task", ID: p.ID}}
			case pt.Status == lifecycle.Success:
			case pt.Status.Terminal() && p.Policy == RunAnyway:
			case (pt.Status == lifecycle.Failed || pt.Status == lifecycle.Cancelled) && p.Policy != Wait:
				out[i] = Created{Err: &ConflictError{Message: fmt.Sprintf("parent %s has already ended %s: a child that cancels with it cannot be added", pt.Code, pt.Status), TaskID: pt.ID}}
			default:
				n.waitingOn++
			}
		}
	}
	return ns, nil
}

// insertEdges writes the edges of the items this call created. A parent
// of the same call that was not created (refused, or an earlier task
// answered its idempotency key) fails the call: its children would wait
// for a task that is not theirs.
func (s *Store) insertEdges(ctx context.Context, t *txn, ns []NewTask, out []Created) error {
	cols := [][]any{nil, nil, nil} // parent_id, child_id, on_parent_failure
	for i, n := range ns {
		if len(n.Parents) == 0 || !out[i].Created {
			continue
		}
		for _, p := range n.Parents {
			parent := p.ID
			if parent == 0 {
				if !out[p.Step].Created {
					return fmt.Errorf("item %d: its parent, item %d, was not created", i, p.Step)
				}
				parent = out[p.Step].Task.ID
			}
			policy := p.Policy
			if policy == "" {
				policy = CancelDependents
			}
			if err := taskdependency.OnParentFailureValidator(taskdependency.OnParentFailure(policy)); err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
			cols[0] = append(cols[0], int64(parent))
			cols[1] = append(cols[1], int64(out[i].Task.ID))
			cols[2] = append(cols[2], policy)
		}
	}
	// Statements of many edges (insertChunk's: 5,000 on PostgreSQL, where
	// the statement is prepared; on SQLite within its parameters): a
	// fan-in of 10,000 parents is two round trips, a chain step's one
	// edge one.
	now := s.Now()
	chunk := s.d.insertChunk(len(edgeInsertCols))
	for start := 0; start < len(cols[0]); start += chunk {
		end := min(start+chunk, len(cols[0]))
		part := [][]any{cols[0][start:end], cols[1][start:end], cols[2][start:end]}
		v, args := s.d.valuesTable("v", edgeInsertCols, edgeInsertTypes, part)
		if _, err := s.execute(ctx, t, `INSERT INTO task_dependencies (parent_id, child_id, on_parent_failure, created_at)
SELECT parent_id, child_id, on_parent_failure, `+s.d.timeParam()+` FROM `+v, append([]any{now}, args...)...); err != nil {
			return fmt.Errorf("insert edges: %w", err)
		}
	}
	return nil
}

// The columns of insertEdges' derived table.
var (
	edgeInsertCols  = []string{"parent_id", "child_id", "on_parent_failure"}
	edgeInsertTypes = []colType{colInt, colInt, colText}
)
