package engine

// Bulk actions over a filter: cancel or retry every task a
// filter matches, however many, as a task of the internal type BulkType
// that walks the matching tasks page by page.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/predicate"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// BulkType is the task type of a bulk action over a filter. It is
// internal: only SubmitBulk creates one, owned by the user who asked.
const BulkType = "bulk.action"

// BulkPageDefault is how many tasks a bulk action reads and acts on per
// transaction (WithBulkPageSize changes it).
const BulkPageDefault = 500

// WithBulkPageSize sets the page of bulk actions over a filter.
func WithBulkPageSize(n int) Option { return func(e *Engine) { e.bulkPage = n } }

// WhereDecoder turns a filter as the API received it (a TaskWhereInput
// argument, as JSON) back into the input it decodes to, custom fields
// (search...) included. The API provides it (graph.TaskWhereDecoder).
type WhereDecoder func(ctx context.Context, raw json.RawMessage) (*ent.TaskWhereInput, error)

// SetTaskWhere sets the decoder bulk actions read their filters with.
func (e *Engine) SetTaskWhere(d WhereDecoder) { e.taskWhere = d }

// BulkInput is the input of a bulk.action task.
type BulkInput struct {
	// Action is CANCEL or RETRY.
	Action string `json:"action" jsonschema:"enum=CANCEL,enum=RETRY"`
	// Where is the filter as the API received it.
	Where json.RawMessage `json:"where"`
	// Reason is a cancel's reason.
	Reason string `json:"reason,omitempty" jsonschema:"maxLength=500"`
	// Ceiling is the largest id that matched at submission: tasks created
	// later are never swept in.
	Ceiling int `json:"ceiling" jsonschema:"minimum=1"`
	// Matched is how many tasks matched at submission (the number the
	// user confirmed).
	Matched int `json:"matched" jsonschema:"minimum=0"`
}

// CountChangedError refuses a bulk action whose confirmed count is not the
// number of tasks the filter matches now: the user confirmed another set.
type CountChangedError struct {
	Confirmed int
	Matched   int
}

func (e *CountChangedError) Error() string {
	return fmt.Sprintf("the filter matches %d tasks now, not the %d confirmed: preview again and confirm the new count", e.Matched, e.Confirmed)
}

// Is makes errors.Is(err, store.ErrConflict) true.
func (e *CountChangedError) Is(target error) bool { return target == store.ErrConflict }

// BulkStatusCount is how many matching tasks are in one state, and whether
// the action accepts that state.
type BulkStatusCount struct {
	Status   lifecycle.Status
	Count    int
	Accepted bool
}

// BulkPreview is what a bulk action would meet: the tasks the filter
// matches for the viewer, and how many of them the action would accept or
// refuse by their state now.
type BulkPreview struct {
	Matched  int
	Accepted int
	Refused  int
	ByStatus []BulkStatusCount
}

// accepts says whether action may be applied to a task in state s (what
// the store's cancel and retry accept).
func accepts(action lifecycle.Action, s lifecycle.Status) bool {
	if action == lifecycle.ActionRetry {
		return s == lifecycle.Failed
	}
	return lifecycle.CanMove(s, lifecycle.Cancelled)
}

func checkAction(action lifecycle.Action) error {
	if action != lifecycle.ActionCancel && action != lifecycle.ActionRetry {
		return &ValidationError{Problems: []Problem{{Field: "action", Message: fmt.Sprintf("%q is neither CANCEL nor RETRY", action)}}}
	}
	return nil
}

// wherePreds is a filter's predicates; an empty filter matches every task.
func wherePreds(w *ent.TaskWhereInput) ([]predicate.Task, error) {
	if w == nil {
		return nil, nil
	}
	// The tasks list's hints (an index for a filter on a rare status), on a
	// copy: the counts and the bulk action read what the list would, as
	// fast (without them a count of FAILED tasks reads the whole table).
	hinted := *w
	hinted.Predicates = slices.Clip(w.Predicates)
	store.StatusHints(&hinted)
	w = &hinted
	p, err := w.P()
	if err == ent.ErrEmptyTaskWhereInput { //nolint:errorlint // the top level's own, not one nested (not: {} is no task, not every task)
		return nil, nil
	}
	if err != nil {
		return nil, &ValidationError{Problems: []Problem{{Field: "where", Message: "an empty filter ({}) inside not, and or or: leave it out (" + err.Error() + ")"}}}
	}
	return []predicate.Task{p}, nil
}

// PreviewBulk counts what a bulk action over where would meet, among the
// tasks the viewer of ctx may see (reads are filtered by package access).
func (e *Engine) PreviewBulk(ctx context.Context, action lifecycle.Action, where *ent.TaskWhereInput) (BulkPreview, error) {
	if _, err := auth.Require(ctx); err != nil {
		return BulkPreview{}, err
	}
	if err := checkAction(action); err != nil {
		return BulkPreview{}, err
	}
	preds, err := wherePreds(where)
	if err != nil {
		return BulkPreview{}, err
	}
	var rows []struct {
		Status lifecycle.Status `json:"status"`
		Count  int              `json:"count"`
	}
	if err := e.store.Client().Task.Query().Where(preds...).
		GroupBy(task.FieldStatus).Aggregate(ent.Count()).Scan(ctx, &rows); err != nil {
		return BulkPreview{}, fmt.Errorf("bulk preview: %w", err)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Status < rows[j].Status })
	var out BulkPreview
	for _, r := range rows {
		ok := accepts(action, r.Status)
		out.Matched += r.Count
		if ok {
			out.Accepted += r.Count
		} else {
			out.Refused += r.Count
		}
		out.ByStatus = append(out.ByStatus, BulkStatusCount{Status: r.Status, Count: r.Count, Accepted: ok})
	}
	return out, nil
}

// BulkRequest is a bulk action over a filter to submit.
type BulkRequest struct {
	Action lifecycle.Action
	// Where is the filter as decoded for this request; WhereJSON the same
	// filter as the API received it, which the task keeps (and decodes
	// with the engine's WhereDecoder when it runs).
	Where     *ent.TaskWhereInput
	WhereJSON json.RawMessage
	Reason    string
	// Confirm must be the number of tasks the filter matches now.
	Confirm        int
	IdempotencyKey *string
}

// SubmitBulk creates the task that applies a cancel or a retry to every
// task where matches for the viewer of ctx — as that viewer, when it
// runs: its access and role rules apply to each task. Confirm must equal
// the number of tasks matching now (the preview's count), or nothing is
// done and the error is a *CountChangedError naming the new count. Tasks
// created after the submission are not swept in. The same idempotency key
// returns the task created first (before any count is checked: the first
// task may have changed the count already); with another action, filter or
// reason it is a *store.ConflictError. The submission is one audit record
// (BULK_CANCEL or BULK_RETRY); each page the task acts on is recorded as a
// CANCEL_MANY or RETRY_MANY naming the bulk task. It counts against the
// viewer's rate limit as a bulk action on ids of its size would (at most
// MaxBulk).
func (e *Engine) SubmitBulk(ctx context.Context, req BulkRequest) (*ent.Task, error) {
	v, err := auth.Require(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkAction(req.Action); err != nil {
		return nil, err
	}
	if err := v.AllowMutate(actionVerb(req.Action) + " tasks"); err != nil {
		return nil, err
	}
	if err := checkCancel(v, req.Reason); err != nil {
		return nil, err
	}
	if req.Action == lifecycle.ActionRetry && req.Reason != "" {
		return nil, &ValidationError{Problems: []Problem{{Field: "reason", Message: "only a cancel takes a reason"}}}
	}
	if req.Confirm < 0 {
		return nil, &ValidationError{Problems: []Problem{{Field: "confirm", Message: "must be the number of matching tasks"}}}
	}
	preds, err := wherePreds(req.Where)
	if err != nil {
		return nil, err
	}
	where, err := canonicalJSON(orEmpty(req.WhereJSON))
	if err != nil {
		return nil, &ValidationError{Problems: []Problem{{Field: "where", Message: err.Error()}}}
	}
	if _, err := e.admit(ctx, min(max(req.Confirm, 1), MaxBulk)); err != nil {
		return nil, err
	}
	action := audit.BulkCancel
	if req.Action == lifecycle.ActionRetry {
		action = audit.BulkRetry
	}
	details := map[string]any{"where": json.RawMessage(where), "confirmed": req.Confirm}
	if req.Reason != "" {
		details["reason"] = req.Reason
	}
	if req.IdempotencyKey != nil {
		details["idempotencyKey"] = *req.IdempotencyKey
	}
	entry := audit.Entry{Action: action, Details: details}
	var t *ent.Task
	n, existing, err := e.submitBulk(ctx, v, req, preds, where)
	switch {
	case err == nil && existing != nil:
		t = existing
		entry.TaskIDs, entry.Details = []int{t.ID}, withCode(details, t.Code, true)
		err = e.audit.Record(ctx, entry)
	case err == nil:
		// The bulk task and its record: one commit.
		err = e.store.Write(ctx, func(tx *store.Tx) error {
			var created bool
			var err error
			if t, created, err = tx.CreateTask(ctx, n); err != nil {
				return err
			}
			recorded := entry
			recorded.TaskIDs, recorded.Details = []int{t.ID}, withCode(details, t.Code, !created)
			return e.audit.Insert(ctx, tx.Ent(), recorded)
		})
		if err != nil {
			entry.Err = err
			_ = e.audit.Record(ctx, entry)
		}
	default:
		entry.Err = err
		_ = e.audit.Record(ctx, entry)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

func orEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage(`{}`)
	}
	return raw
}

func actionVerb(a lifecycle.Action) string {
	if a == lifecycle.ActionRetry {
		return "retry"
	}
	return "cancel"
}

// submitBulk checks a bulk action over a filter and returns the bulk task
// to create, or the task an earlier submission with its idempotency key
// created.
func (e *Engine) submitBulk(ctx context.Context, v auth.Viewer, req BulkRequest, preds []predicate.Task, where json.RawMessage) (store.NewTask, *ent.Task, error) {
	in := BulkInput{Action: string(req.Action), Where: where, Reason: req.Reason, Ceiling: 1}
	raw, err := json.Marshal(in)
	if err != nil {
		return store.NewTask{}, nil, err
	}
	cr := CreateRequest{Type: BulkType, Title: fmt.Sprintf("%s %d matching tasks", actionVerb(req.Action), req.Confirm),
		Input: raw, IdempotencyKey: req.IdempotencyKey, internal: true}
	n, err := e.prepare(v, cr)
	if err != nil {
		return store.NewTask{}, nil, err
	}
	// A resubmission is the same action, filter and reason: not the same
	// count or ceiling, which the first submission may have changed.
	inputHash := e.sealer.Hash([]byte(BulkType), []byte(req.Action), where, []byte(req.Reason))
	if n.IdempotencyHash != nil {
		first, err := e.store.Client().Task.Query().Where(task.IdempotencyHash(*n.IdempotencyHash)).
			Only(auth.NewSystemContext(ctx))
		switch {
		case ent.IsNotFound(err):
		case err != nil:
			return store.NewTask{}, nil, fmt.Errorf("look up idempotency key: %w", err)
		case first.InputHash != inputHash:
			return store.NewTask{}, nil, &store.ConflictError{TaskID: first.ID,
				Message: fmt.Sprintf("idempotency key %q was already used for task %s with a different action, filter or reason", *n.IdempotencyKey, first.Code)}
		default:
			return store.NewTask{}, first, nil
		}
	}
	// The ceiling is the largest matching id, the count that of the
	// matching tasks up to it: exactly the set the user is told about.
	q := e.store.Client().Task.Query().Where(preds...)
	var top []struct {
		Max sql.NullInt64 `json:"max"`
	}
	if err := q.Clone().Aggregate(ent.Max(task.FieldID)).Scan(ctx, &top); err != nil {
		return store.NewTask{}, nil, fmt.Errorf("bulk action: read matching tasks: %w", err)
	}
	ceiling := 0
	if len(top) == 1 && top[0].Max.Valid {
		ceiling = int(top[0].Max.Int64)
	}
	matched := 0
	if ceiling > 0 {
		if matched, err = q.Clone().Where(task.IDLTE(ceiling)).Count(ctx); err != nil {
			return store.NewTask{}, nil, fmt.Errorf("bulk action: count matching tasks: %w", err)
		}
	}
	if matched != req.Confirm {
		return store.NewTask{}, nil, &CountChangedError{Confirmed: req.Confirm, Matched: matched}
	}
	if matched == 0 {
		return store.NewTask{}, nil, &ValidationError{Problems: []Problem{{Field: "where", Message: "no task matches: there is nothing to do"}}}
	}
	in.Ceiling, in.Matched = ceiling, matched
	if raw, err = json.Marshal(in); err != nil {
		return store.NewTask{}, nil, err
	}
	cr.Input = raw
	if n, err = e.prepare(v, cr); err != nil {
		return store.NewTask{}, nil, err
	}
	n.InputHash = inputHash
	return n, nil, nil
}

// RegisterBulk adds the bulk.action task type to r.
func (e *Engine) RegisterBulk(r *tasktype.Registry) {
	tasktype.Register(r, BulkType, func(ctx context.Context, job *tasktype.Job, in BulkInput) error {
		res, err := e.RunBulk(ctx, BulkRun{
			TaskID: job.Task.ID, Code: job.Task.Code, Owner: job.Owner(), Token: job.Token(), Input: in,
			Progress: job.Progress,
		})
		if res != nil {
			_ = job.SetResult(res)
			job.SetResultStatus(res.status())
		}
		return err
	},
		tasktype.WithDescription("Cancels or retries every task a filter matched when it was submitted, page by page, as the user who submitted it (bulkTaskAction)."),
		tasktype.WithTimeout(6*time.Hour),
		// One per node: pages are large transactions.
		tasktype.WithConcurrency(1),
		tasktype.Internal())
}

// BulkRun is one execution of a bulk action.
type BulkRun struct {
	TaskID int
	Code   string
	// Owner is who submitted it: the tasks are acted on as Owner.
	Owner auth.Viewer
	// Token fences every page: a page commits only while the execution
	// holds it.
	Token    store.Token
	Input    BulkInput
	Progress func(done, total int64)
}

// BulkOutcome is what a bulk action did, over all its executions.
type BulkOutcome struct {
	Matched int `json:"matched"`
	// Processed counts the tasks met (Done + refused + NotFound + Failed).
	Processed int `json:"processed"`
	Done      int `json:"done"`
	// Refused counts the tasks whose state forbade the action, by state.
	Refused map[string]int `json:"refused"`
	// NotFound counts the tasks gone (purged) or no longer visible.
	NotFound int `json:"notFound"`
	// Failed counts the tasks the action failed on otherwise.
	Failed int `json:"failed"`
	// Cursor is the last id acted on; Pages how many pages committed.
	Cursor int `json:"cursor"`
	Pages  int `json:"pages"`
}

func (o *BulkOutcome) status() string {
	switch {
	case o.Processed > 0 && o.Done == 0:
		return "FAILED"
	case o.Done < o.Processed:
		return "PARTIAL_SUCCESS"
	}
	return "SUCCESS"
}

func (o *BulkOutcome) refusedTotal() int {
	n := 0
	for _, c := range o.Refused {
		n += c
	}
	return n
}

// fields is the outcome as a checkpoint line's fields.
func (o *BulkOutcome) fields() map[string]any {
	b, _ := json.Marshal(o)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

func outcomeOf(fields map[string]any) (BulkOutcome, error) {
	var o BulkOutcome
	b, err := json.Marshal(fields)
	if err == nil {
		err = json.Unmarshal(b, &o)
	}
	return o, err
}

// RunBulk carries out a bulk action: it reads the tasks the filter
// matches, up to the ceiling, in pages of ids in order (keyset: id after
// the last page's last, LIMIT page size; never more than a page in
// memory), and applies the action to each page in one transaction through
// the store's guarded transitions, as the owner. Each page commits with a
// checkpoint line in the bulk task's trace (the outcome so far and the
// last id), so that an execution started again — after a crash, a
// shutdown or a retry — resumes after the last committed page: every task
// is acted on once, and the counts add up across executions. A task whose
// state forbids the action is counted by state and left alone.
func (e *Engine) RunBulk(ctx context.Context, run BulkRun) (*BulkOutcome, error) {
	action := lifecycle.Action(run.Input.Action)
	if err := checkAction(action); err != nil {
		return nil, tasktype.NonRetryable(err)
	}
	if e.taskWhere == nil {
		return nil, tasktype.NonRetryable(errors.New("bulk action: no filter decoder configured"))
	}
	owner := run.Owner
	if err := owner.AllowMutate(actionVerb(action) + " tasks"); err != nil {
		return nil, tasktype.NonRetryable(err)
	}
	asOwner := auth.NewContext(ctx, owner)
	w, err := e.taskWhere(asOwner, run.Input.Where)
	if err != nil {
		return nil, tasktype.NonRetryable(fmt.Errorf("bulk action: filter: %w", err))
	}
	preds, err := wherePreds(w)
	if err != nil {
		return nil, tasktype.NonRetryable(err)
	}
	cp, err := e.store.LastCheckpoint(auth.NewSystemContext(ctx), run.TaskID)
	if err != nil {
		return nil, err
	}
	out := BulkOutcome{Matched: run.Input.Matched, Refused: map[string]int{}}
	if cp != nil {
		if out, err = outcomeOf(cp); err != nil {
			return nil, tasktype.NonRetryable(fmt.Errorf("bulk action: read checkpoint: %w", err))
		}
		if out.Refused == nil {
			out.Refused = map[string]int{}
		}
	}
	page := e.bulkPage
	if page <= 0 {
		page = BulkPageDefault
	}
	progress := func() {
		if run.Progress != nil {
			run.Progress(int64(out.Processed), int64(max(out.Matched, out.Processed)))
		}
	}
	progress()
	auditAction := audit.CancelMany
	if action == lifecycle.ActionRetry {
		auditAction = audit.RetryMany
	}
	for {
		if err := ctx.Err(); err != nil {
			return &out, context.Cause(ctx)
		}
		ids, err := e.store.Client().Task.Query().
			Where(preds...).
			Where(task.IDGT(out.Cursor), task.IDLTE(run.Input.Ceiling), task.IDNEQ(run.TaskID)).
			Order(ent.Asc(task.FieldID)).
			Limit(page).
			IDs(asOwner)
		if err != nil {
			return &out, fmt.Errorf("bulk action: read page after %d: %w", out.Cursor, err)
		}
		if len(ids) == 0 {
			return &out, nil
		}
		details := map[string]any{"bulkTask": run.Code}
		if run.Input.Reason != "" {
			details["reason"] = run.Input.Reason
		}
		entry := audit.Entry{Action: auditAction, TaskIDs: ids, Details: details}
		var next BulkOutcome
		page := store.Page{
			Token: run.Token, TaskID: run.TaskID, Action: action, IDs: ids, Reason: e.masker.String(run.Input.Reason),
			Checkpoint: func(each []store.Each) (string, map[string]any) {
				next = out.add(each, ids[len(ids)-1])
				return fmt.Sprintf("page %d: %d of %d tasks acted on, %d done, %d refused, %d not found, %d failed (last id %d)",
					next.Pages, next.Processed, next.Matched, next.Done, next.refusedTotal(), next.NotFound, next.Failed, next.Cursor), next.fields()
			},
		}
		// The page, its checkpoint and its record: one commit.
		err = e.store.Write(asOwner, func(tx *store.Tx) error {
			res, err := tx.ActPage(asOwner, page)
			if err != nil {
				return err
			}
			recorded := entry
			e.bulkEntry(&recorded, res, nil)
			return e.audit.Insert(asOwner, tx.Ent(), recorded)
		})
		if err != nil {
			e.bulkEntry(&entry, nil, err)
			_ = e.audit.Record(asOwner, entry)
		}
		if err != nil {
			if errors.Is(err, store.ErrStaleToken) {
				return &out, tasktype.NonRetryable(err)
			}
			if ctx.Err() != nil {
				return &out, context.Cause(ctx)
			}
			return &out, fmt.Errorf("bulk action: page after %d: %w", out.Cursor, err)
		}
		out = next
		progress()
	}
}

// add is o after a page whose last id is cursor.
func (o BulkOutcome) add(each []store.Each, cursor int) BulkOutcome {
	n := o
	n.Refused = make(map[string]int, len(o.Refused)+1)
	for k, v := range o.Refused {
		n.Refused[k] = v
	}
	for _, r := range each {
		n.Processed++
		var te *lifecycle.TransitionError
		switch {
		case r.Err == nil:
			n.Done++
		case errors.As(r.Err, &te):
			n.Refused[string(te.From)]++
		case errors.Is(r.Err, store.ErrNotFound):
			n.NotFound++
		default:
			n.Failed++
		}
	}
	n.Cursor, n.Pages = cursor, o.Pages+1
	return n
}

// CountTasks counts the tasks where matches among those the viewer of ctx
// may see.
func (e *Engine) CountTasks(ctx context.Context, where *ent.TaskWhereInput) (int, error) {
	if _, err := auth.Require(ctx); err != nil {
		return 0, err
	}
	preds, err := wherePreds(where)
	if err != nil {
		return 0, err
	}
	return e.store.Client().Task.Query().Where(preds...).Count(ctx)
}

// DefaultCountBudget is how long the API's counts (taskCount, taskStats)
// count before they estimate, unless told otherwise: with the estimate's
// own few tens of milliseconds, an answer within 300 ms.
const DefaultCountBudget = 150 * time.Millisecond

// MaxCountBudget is the longest EstimateTasks counts before it estimates.
const MaxCountBudget = time.Minute

// EstimateTasks counts the tasks where matches among those the viewer of
// ctx may see, as CountTasks does, when the count finishes within budget
// (1 ms to MaxCountBudget); past it, on PostgreSQL, it estimates the count
// from a random sample of the tasks table's pages, with a 95% interval
// (store.Count). On SQLite the count is always exact.
func (e *Engine) EstimateTasks(ctx context.Context, where *ent.TaskWhereInput, budget time.Duration) (store.Count, error) {
	if _, err := auth.Require(ctx); err != nil {
		return store.Count{}, err
	}
	if budget < time.Millisecond || budget > MaxCountBudget {
		return store.Count{}, &ValidationError{Problems: []Problem{{Field: "exactWithinMs", Message: fmt.Sprintf("must be 1 to %d (milliseconds)", MaxCountBudget.Milliseconds())}}}
	}
	preds, err := wherePreds(where)
	if err != nil {
		return store.Count{}, err
	}
	return e.store.CountTasks(ctx, func(ctx context.Context) error {
		_, err := e.store.Client().Task.Query().Where(preds...).IDs(ctx)
		return err
	}, budget)
}
