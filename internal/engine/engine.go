// Package engine is what the API does with tasks: it validates a request
// against the task type's schema and the engine's limits, masks and seals
// the input, enforces idempotency, and calls the store's guarded transitions.
// Resolvers call it and nothing else that writes.
package engine

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/ratelimit"
	"github.com/taskgraph/taskgraph/internal/seal"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
	"github.com/taskgraph/taskgraph/internal/telemetry"
)

// Limits on what a request may ask.
const (
	MaxInputBytes     = 256 << 10
	MaxTitleLen       = 200
	MaxBizIDLen       = 128
	MaxKeyLen         = 128
	MaxReasonLen      = 500
	MinPriority       = 0
	MaxPriority       = 100
	DefaultPriority   = 5
	MaxTimeoutSeconds = 7 * 24 * 3600
	MaxRunAtAhead     = 366 * 24 * time.Hour
	// MaxDeadlineAhead bounds a deadline: a runAt a year ahead, and a
	// year after it.
	MaxDeadlineAhead = 2 * MaxRunAtAhead
	MaxBulk          = 1000
)

// Engine carries out task requests on behalf of the viewer of their
// context (package auth): it checks the viewer's role and rate limit,
// and records every create, cancel, retry and bulk action in the audit log.
// Which tasks a viewer may act on is what it may read (package access): a
// task it may not see is NOT_FOUND.
type Engine struct {
	store    *store.Store
	registry *tasktype.Registry
	policies *tasktype.Policies
	sealer   *seal.Sealer
	masker   *mask.Masker
	audit    *audit.Recorder
	limiter  *ratelimit.Limiter
	// bulkPage and taskWhere serve bulk actions over a filter (see
	// bulkfilter.go).
	bulkPage  int
	taskWhere WhereDecoder
	tracer    trace.Tracer
}

// Option configures an Engine.
type Option func(*Engine)

// WithAudit records actions with r.
func WithAudit(r *audit.Recorder) Option { return func(e *Engine) { e.audit = r } }

// WithRateLimit limits each user's mutations with l.
func WithRateLimit(l *ratelimit.Limiter) Option { return func(e *Engine) { e.limiter = l } }

// WithTracer traces creates with t (a span each, whose trace the tasks
// remember). Default, or nil: none.
func WithTracer(t trace.Tracer) Option { return func(e *Engine) { e.tracer = t } }

// New returns an Engine.
func New(s *store.Store, r *tasktype.Registry, ps *tasktype.Policies, sl *seal.Sealer, m *mask.Masker, opts ...Option) *Engine {
	e := &Engine{store: s, registry: r, policies: ps, sealer: sl, masker: m}
	for _, o := range opts {
		o(e)
	}
	return e
}

// ErrValidation is matched by errors.Is for every *ValidationError.
var ErrValidation = errors.New("validation failed")

// ValidationError lists what is wrong with a request. Nothing was changed.
type ValidationError struct {
	Problems []Problem
}

// Problem is one wrong field.
type Problem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.Field + ": " + p.Message
	}
	return "invalid request: " + strings.Join(parts, "; ")
}

// Is makes errors.Is(err, ErrValidation) true.
func (e *ValidationError) Is(target error) bool { return target == ErrValidation }

func (e *ValidationError) add(field, format string, args ...any) {
	e.Problems = append(e.Problems, Problem{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (e *ValidationError) err() error {
	if len(e.Problems) == 0 {
		return nil
	}
	return e
}

// CreateRequest is a task to create. Nil fields take the type's or the
// policy's defaults.
type CreateRequest struct {
	Type           string
	Title          string
	BizID          string
	Input          json.RawMessage
	Priority       *int
	TimeoutSeconds *int
	RetryPolicy    *string
	MaxAttempts    *int
	IdempotencyKey *string
	RunAt          *time.Time
	// StallAfterSeconds replaces the type's stallAfter for this task (0:
	// no stall detection).
	StallAfterSeconds *int
	// DependsOn names existing tasks the new one waits for (at most
	// MaxParents): it starts WAITING_DEPENDENCY and is released when they
	// have all succeeded. OnParentFailure is what a parent that fails or is
	// cancelled does to it: CANCEL_DEPENDENTS (empty) or WAIT.
	DependsOn       []int
	OnParentFailure string
	// Review opts the task in (true: its NON_RETRYABLE failures wait for
	// review) or out (false: never reviewed) of its type's review policy;
	// nil: the type's.
	Review *bool
	// Deadline is the absolute time the task must finish by (nil: its
	// type's FinishWithin after it may first run, if the type sets one).
	// It must lie ahead, after RunAt, and within a year; the deadlines
	// loop flags an open task at risk within its margin of the deadline,
	// then missed, and the finish records met or missed.
	Deadline *time.Time

	// scheduled marks a schedule's fire (CreateScheduled), whose deadline
	// the schedule computed from its slot: a fire made late (a misfire
	// caught up) may be past it already, and is recorded missed rather
	// than refused.
	scheduled bool

	// internal lets the engine itself create a task of an internal type
	// on a user's behalf (a bulk action over a filter).
	internal bool
}

// Create validates and creates a task owned by the context's viewer (its
// identity: source, tenant and user), in a transaction of its own with its
// audit record (and its stall override). With an idempotency key already
// used by that identity, it returns the existing task (or a
// *store.ConflictError when the payload differs); the same key of another
// identity is another task.
func (e *Engine) Create(ctx context.Context, req CreateRequest) (*ent.Task, error) {
	return e.createOne(ctx, req, e.store.Write, false)
}

// CreateTx creates a task as Create does, in sqlTx, a transaction of the
// caller's on the store's database (store.Store.In): the task, its first
// instance, its stall override and its audit record exist only if the
// caller commits sqlTx, and only then can it run and is it published. A
// request refused before anything was written is recorded in sqlTx too:
// with a rollback, nothing is left of the call.
func (e *Engine) CreateTx(ctx context.Context, sqlTx *sql.Tx, req CreateRequest) (*ent.Task, error) {
	return e.createOne(ctx, req, e.in(sqlTx), true)
}

// writer runs fn in a write transaction: the store's own (Store.Write),
// or the caller's (in).
type writer func(ctx context.Context, fn func(tx *store.Tx) error) error

// in is the writer of the caller's transaction sqlTx.
func (e *Engine) in(sqlTx *sql.Tx) writer {
	return func(ctx context.Context, fn func(tx *store.Tx) error) error { return e.store.In(ctx, sqlTx, fn) }
}

// record writes the record of an action that did not commit one with its
// change: on its own, or, in a transaction of the caller's (foreign), in
// that transaction, since the action's own writes would wait for the
// caller's (SQLite's one writer) and a rollback must leave nothing.
func (e *Engine) record(ctx context.Context, write writer, foreign bool, entry audit.Entry) {
	if !foreign {
		_ = e.audit.Record(ctx, entry) // a failure is logged (or counted) by the recorder
		return
	}
	if err := write(ctx, func(tx *store.Tx) error { return e.audit.Insert(ctx, tx.Ent(), entry) }); err != nil {
		e.audit.Lost(ctx, entry, err)
	}
}

func (e *Engine) createOne(ctx context.Context, req CreateRequest, write writer, foreign bool) (*ent.Task, error) {
	if e.tracer == nil {
		return e.createTraced(ctx, req, write, foreign)
	}
	ctx, span := e.tracer.Start(ctx, telemetry.SpanCreate, trace.WithAttributes(telemetry.AttrTaskType.String(req.Type), telemetry.AttrCount.Int(1)))
	t, err := e.createTraced(ctx, req, write, foreign)
	if t != nil {
		span.SetAttributes(telemetry.AttrTaskID.Int(t.ID), telemetry.AttrTaskCode.String(t.Code))
	}
	telemetry.End(span, err)
	return t, err
}

func (e *Engine) createTraced(ctx context.Context, req CreateRequest, write writer, foreign bool) (*ent.Task, error) {
	v, err := e.admit(ctx, 1)
	if err != nil {
		return nil, err
	}
	details := map[string]any{"type": req.Type, "title": req.Title, "bizId": req.BizID}
	if req.IdempotencyKey != nil {
		details["idempotencyKey"] = *req.IdempotencyKey
	}
	entry := audit.Entry{Action: audit.Create, Details: details}
	var t *ent.Task
	var created bool
	err = func() error {
		if err := v.AllowMutate("create tasks"); err != nil {
			return err
		}
		n, err := e.prepare(v, req)
		if err != nil {
			return err
		}
		if sa := req.StallAfterSeconds; sa != nil && (*sa < 0 || *sa > MaxTimeoutSeconds) {
			return &ValidationError{Problems: []Problem{{Field: "stallAfterSeconds", Message: fmt.Sprintf("must be between 0 and %d", MaxTimeoutSeconds)}}}
		}
		// The task, its stall override and its record: one commit.
		return write(ctx, func(tx *store.Tx) error {
			var err error
			if t, created, err = tx.CreateTask(ctx, n); err != nil {
				return err
			}
			if created && req.StallAfterSeconds != nil {
				// Beside the task, not in it (the insert is the store's
				// hot path); the watchdog reads it when the task runs.
				if err := tx.SetStallOverride(ctx, t.ID, time.Duration(*req.StallAfterSeconds)*time.Second); err != nil {
					return err
				}
			}
			recorded := entry
			recorded.TaskIDs, recorded.Details = []int{t.ID}, withCode(details, t.Code, !created)
			return e.audit.Insert(ctx, tx.Ent(), recorded)
		})
	}()
	if err != nil {
		entry.Err = err
		e.record(ctx, write, foreign, entry)
		return nil, err
	}
	return t, nil
}

// withCode is a create's details with the task it made or found.
func withCode(details map[string]any, code string, existing bool) map[string]any {
	out := make(map[string]any, len(details)+2)
	for k, v := range details {
		out[k] = v
	}
	out["code"], out["existing"] = code, existing
	return out
}

// Validate checks a task request as Create would, on behalf of v, and
// returns the task it would create (input masked, the unmasked input
// sealed), creating nothing: a schedule stores it as the task it fires.
func (e *Engine) Validate(v auth.Viewer, req CreateRequest) (store.NewTask, error) {
	return e.prepare(v, req)
}

// CreateScheduled creates the task of one slot of a schedule, on behalf of
// the schedule's owner (the viewer of ctx), validated, masked and audited
// like Create. It is not rate limited: the schedule was, when it was made.
// A task already created for the slot (by this node or another) is
// returned with created false. With a version, the task is created only if
// the schedule is still at it, and moves it on (store.NewTask's
// ScheduleVersion); store.ErrScheduleMoved otherwise, unaudited: nothing
// was done, and the firing that read the schedule stale is dropped.
func (e *Engine) CreateScheduled(ctx context.Context, req CreateRequest, scheduleID int, slot time.Time, version *int64) (_ *ent.Task, created bool, err error) {
	v, err := auth.Require(ctx)
	if err != nil {
		return nil, false, err
	}
	details := map[string]any{"type": req.Type, "title": req.Title, "schedule": scheduleID, "slot": slot.UTC().Format(time.RFC3339Nano)}
	entry := audit.Entry{Action: audit.Create, Details: details}
	var t *ent.Task
	err = func() error {
		if err := v.AllowMutate("create tasks"); err != nil {
			return err
		}
		req.scheduled = true
		n, err := e.prepare(v, req)
		if err != nil {
			return err
		}
		n.ScheduleID, n.ScheduleSlot, n.ScheduleVersion = &scheduleID, &slot, version
		// As Create: the record commits with the task.
		return e.store.Write(ctx, func(tx *store.Tx) error {
			var err error
			if t, created, err = tx.CreateTask(ctx, n); err != nil {
				return err
			}
			recorded := entry
			recorded.TaskIDs, recorded.Details = []int{t.ID}, withCode(details, t.Code, !created)
			return e.audit.Insert(ctx, tx.Ent(), recorded)
		})
	}()
	if errors.Is(err, store.ErrScheduleMoved) {
		return nil, false, err
	}
	if err != nil {
		entry.Err = err
		_ = e.audit.Record(ctx, entry) // a failure is logged (or counted) by the recorder
		return nil, false, err
	}
	return t, created, nil
}

// Admit returns the viewer of ctx if it may act now, counting n actions
// against its rate limit (see admit): for the API's other mutations
// (schedules, flow control), which the engine does not carry out itself.
func (e *Engine) Admit(ctx context.Context, n int) (auth.Viewer, error) { return e.admit(ctx, n) }

// Record writes an audit record of an action the API carried out outside
// the engine (schedules, flow control).
func (e *Engine) Record(ctx context.Context, entry audit.Entry) { _ = e.audit.Record(ctx, entry) }

// Store returns the store the engine writes through.
func (e *Engine) Store() *store.Store { return e.store }

// admit returns the viewer of ctx if it may act now: an
// *auth.UnauthenticatedError without one, a *ratelimit.Error when it acted
// too often (n actions asked: a bulk action counts one per id). Neither is
// audited: there is no one to record, or recording would let a flood write.
func (e *Engine) admit(ctx context.Context, n int) (auth.Viewer, error) {
	v, err := auth.Require(ctx)
	if err != nil {
		return v, err
	}
	if v.Role == auth.RoleSystem {
		return v, nil
	}
	// One bucket per identity: a user of one tenant cannot spend another
	// tenant's user's budget by sharing its name.
	return v, e.limiter.Allow(v.Identity().Key(), n)
}

func (e *Engine) prepare(viewer auth.Viewer, req CreateRequest) (store.NewTask, error) {
	var v ValidationError
	typ, ok := e.registry.Lookup(req.Type)
	if ok && typ.Internal && viewer.Role != auth.RoleSystem && !req.internal {
		// The process's own (alert deliveries): for users it does not exist.
		ok = false
	}
	if !ok {
		v.add("type", "unknown task type %q (registered: %s)", req.Type, strings.Join(e.registry.PublicNames(), ", "))
		return store.NewTask{}, v.err()
	}
	checkText(&v, "title", req.Title, MaxTitleLen)
	checkText(&v, "bizId", req.BizID, MaxBizIDLen)
	if k := req.IdempotencyKey; k != nil {
		if *k == "" {
			v.add("idempotencyKey", "must not be empty when given")
		}
		checkText(&v, "idempotencyKey", *k, MaxKeyLen)
	}
	priority := DefaultPriority
	if req.Priority != nil {
		priority = *req.Priority
		if priority < MinPriority || priority > MaxPriority {
			v.add("priority", "must be between %d and %d (smaller runs first)", MinPriority, MaxPriority)
		}
	}
	timeout := int(typ.Timeout / time.Second)
	if req.TimeoutSeconds != nil {
		timeout = *req.TimeoutSeconds
		if timeout < 1 || timeout > MaxTimeoutSeconds {
			v.add("timeoutSeconds", "must be between 1 and %d", MaxTimeoutSeconds)
		}
	}
	policyName := typ.RetryPolicy
	if req.RetryPolicy != nil {
		policyName = *req.RetryPolicy
	}
	policy, ok := e.policies.Get(policyName)
	if !ok {
		var names []string
		for _, p := range e.policies.All() {
			names = append(names, p.Name)
		}
		v.add("retryPolicy", "unknown retry policy %q (defined: %s)", policyName, strings.Join(names, ", "))
	}
	maxAttempts := policy.MaxAttempts
	if req.MaxAttempts != nil {
		maxAttempts = *req.MaxAttempts
		if maxAttempts < 1 || maxAttempts > tasktype.MaxAttemptsLimit {
			v.add("maxAttempts", "must be between 1 and %d", tasktype.MaxAttemptsLimit)
		}
	}
	now := e.store.Now()
	var runAt time.Time
	if req.RunAt != nil {
		runAt = req.RunAt.UTC()
		if runAt.After(now.Add(MaxRunAtAhead)) {
			v.add("runAt", "must be within a year from now")
		}
		if runAt.Before(now) {
			runAt = now
		}
	}
	deadline := checkDeadline(&v, req, typ, now, runAt)
	input := req.Input
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage(`{}`)
	}
	// The input is decoded once, for its validation, its canonical form
	// and its masking; a document that does not decode is refused by
	// Validate, in its words.
	var doc any
	var docErr error
	if len(input) > MaxInputBytes {
		v.add("input", "is %d bytes; the limit is %d", len(input), MaxInputBytes)
	} else if doc, docErr = decodeWhole(input); docErr != nil {
		if err := typ.Validate(input); err != nil {
			e.inputProblems(&v, err)
		} else {
			// Blank: Validate takes it for {}.
			return store.NewTask{}, &ValidationError{Problems: []Problem{{Field: "input", Message: "input is not valid JSON: " + docErr.Error()}}}
		}
	} else if err := typ.ValidateDoc(input, doc); err != nil {
		e.inputProblems(&v, err)
	}
	parents := checkParents(&v, "", req.DependsOn, req.OnParentFailure)
	if err := v.err(); err != nil {
		return store.NewTask{}, err
	}

	canonical, err := json.Marshal(doc)
	if err != nil {
		return store.NewTask{}, &ValidationError{Problems: []Problem{{Field: "input", Message: err.Error()}}}
	}
	masked, changed, err := e.masker.JSONDecoded(doc, canonical)
	if err != nil {
		return store.NewTask{}, &ValidationError{Problems: []Problem{{Field: "input", Message: err.Error()}}}
	}
	var sealed []byte
	if changed {
		sealed = e.sealer.Seal(canonical)
	}
	var shownKey, keyHash *string
	if k := req.IdempotencyKey; k != nil {
		// The key is shown masked, like every text a caller sends; its
		// uniqueness is the raw key's, per owner identity, through a
		// keyed hash (unkeyed, a masked phone number in a key would be
		// four digits from its hash).
		shown := e.masker.String(*k)
		id := viewer.Identity()
		h := e.sealer.Hash([]byte("idempotency key"), []byte(id.Source), []byte(id.Tenant), []byte(id.User), []byte(*k))
		shownKey, keyHash = &shown, &h
	}
	inputHash := e.sealer.Hash([]byte(typ.Name), []byte(req.BizID), canonical)
	if len(req.DependsOn) > 0 {
		// Another set of parents is another payload.
		inputHash = e.sealer.Hash([]byte(inputHash), []byte(fmt.Sprint(slices.Sorted(slices.Values(req.DependsOn)))), []byte(req.OnParentFailure))
	}
	return store.NewTask{
		Parents:         parents,
		Type:            typ.Name,
		Title:           e.masker.String(req.Title),
		BizID:           e.masker.String(req.BizID),
		Owner:           viewer.User,
		OwnerSource:     viewer.Source,
		Tenant:          viewer.Tenant,
		OwnerRole:       string(viewer.Role),
		IdempotencyKey:  shownKey,
		IdempotencyHash: keyHash,
		Input:           masked,
		InputSealed:     sealed,
		InputHash:       inputHash,
		Priority:        priority,
		TimeoutSeconds:  timeout,
		RetryPolicy:     policyName,
		MaxAttempts:     maxAttempts,
		RunAt:           runAt,
		ReviewMode:      reviewMode(req.Review),
		Deadline:        deadline,
	}, nil
}

// checkDeadline returns the deadline of a task: the request's, checked,
// or its type's FinishWithin after the task may first run (runAt, or now).
func checkDeadline(v *ValidationError, req CreateRequest, typ *tasktype.Type, now, runAt time.Time) *time.Time {
	start := now
	if runAt.After(now) {
		start = runAt
	}
	if req.Deadline == nil {
		if typ.FinishWithin <= 0 {
			return nil
		}
		d := start.Add(typ.FinishWithin)
		return &d
	}
	d := req.Deadline.UTC()
	switch {
	case req.scheduled:
		// The schedule's own arithmetic (its slot plus its finishBy).
	case !d.After(now):
		v.add("deadline", "is %s, which has passed (now %s)", d.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case !d.After(start):
		v.add("deadline", "is %s, not after runAt %s", d.Format(time.RFC3339), start.UTC().Format(time.RFC3339))
	case d.After(now.Add(MaxDeadlineAhead)):
		v.add("deadline", "must be within %d days from now", int(MaxDeadlineAhead/(24*time.Hour)))
	}
	return &d
}

// reviewMode is a task's review opt-in as stored.
func reviewMode(r *bool) string {
	switch {
	case r == nil:
		return ""
	case *r:
		return "ON"
	}
	return "OFF"
}

func checkText(v *ValidationError, field, s string, limit int) {
	if !utf8.ValidString(s) {
		v.add(field, "is not valid UTF-8")
	} else if n := utf8.RuneCountInString(s); n > limit {
		v.add(field, "is %d characters; the limit is %d", n, limit)
	}
}

// inputProblems adds the problems of an input the type refused: they may
// quote the input, so they are masked like it.
func (e *Engine) inputProblems(v *ValidationError, err error) {
	var inErr *tasktype.InputError
	if errors.As(err, &inErr) {
		for _, p := range inErr.Problems {
			v.add("input", "%s", e.masker.String(p))
		}
	} else {
		v.add("input", "%s", e.masker.String(err.Error()))
	}
}

// decodeWhole decodes a whole JSON document as jsonschema.UnmarshalJSON
// does (numbers as json.Number, nothing after the value).
func decodeWhole(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("invalid character after top-level value")
	}
	return v, nil
}

// canonicalJSON re-encodes a document with sorted keys and no spaces, so
// that equal payloads hash equal however they were written.
func canonicalJSON(raw json.RawMessage) (json.RawMessage, error) {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("input is not valid JSON: %w", err)
	}
	return json.Marshal(v)
}

// Cancel cancels (or asks to cancel) a task.
func (e *Engine) Cancel(ctx context.Context, id int, reason string) (*ent.Task, error) {
	v, err := e.admit(ctx, 1)
	if err != nil {
		return nil, err
	}
	return e.act(ctx, audit.Entry{Action: audit.Cancel, TaskIDs: []int{id}, Details: reasonDetails(reason)}, func(tx *store.Tx) (*ent.Task, error) {
		if err := checkCancel(v, reason); err != nil {
			return nil, err
		}
		return tx.CancelTask(ctx, id, e.masker.String(reason))
	})
}

// act runs do in a transaction with the record of its action; an action
// that fails is recorded on its own.
func (e *Engine) act(ctx context.Context, entry audit.Entry, do func(tx *store.Tx) (*ent.Task, error)) (*ent.Task, error) {
	var t *ent.Task
	err := e.store.Write(ctx, func(tx *store.Tx) error {
		var err error
		if t, err = do(tx); err != nil {
			return err
		}
		return e.audit.Insert(ctx, tx.Ent(), entry)
	})
	if err != nil {
		entry.Err = err
		_ = e.audit.Record(ctx, entry)
		return nil, err
	}
	return t, nil
}

func reasonDetails(reason string) map[string]any {
	if reason == "" {
		return nil
	}
	return map[string]any{"reason": reason}
}

func checkCancel(v auth.Viewer, reason string) error {
	if err := v.AllowMutate("cancel tasks"); err != nil {
		return err
	}
	var ve ValidationError
	checkText(&ve, "reason", reason, MaxReasonLen)
	return ve.err()
}

// Task reads one task; an unknown id, or one the viewer may not see, is a
// *store.NotFoundError.
func (e *Engine) Task(ctx context.Context, id int) (*ent.Task, error) {
	return e.store.TaskByID(ctx, id)
}

// Retry retries a FAILED task.
func (e *Engine) Retry(ctx context.Context, id int) (*ent.Task, error) {
	v, err := e.admit(ctx, 1)
	if err != nil {
		return nil, err
	}
	return e.act(ctx, audit.Entry{Action: audit.Retry, TaskIDs: []int{id}}, func(tx *store.Tx) (*ent.Task, error) {
		if err := v.AllowMutate("retry tasks"); err != nil {
			return nil, err
		}
		return tx.RetryTask(ctx, id)
	})
}

// BulkResult is the outcome of one id of a bulk action.
type BulkResult = store.Each

// CancelMany cancels each task independently, in one transaction: an id
// that cannot be cancelled fails alone. The call is one audit record
// listing every id, with each id's outcome in its details, committed with
// the cancels.
func (e *Engine) CancelMany(ctx context.Context, ids []int, reason string) ([]BulkResult, error) {
	return e.bulk(ctx, audit.CancelMany, ids, reasonDetails(reason), func(tx *store.Tx, v auth.Viewer) ([]BulkResult, error) {
		if err := checkCancel(v, reason); err != nil {
			return nil, err
		}
		return tx.CancelTasks(ctx, ids, e.masker.String(reason))
	})
}

// RetryMany retries each task independently, audited as CancelMany is.
func (e *Engine) RetryMany(ctx context.Context, ids []int) ([]BulkResult, error) {
	return e.bulk(ctx, audit.RetryMany, ids, nil, func(tx *store.Tx, v auth.Viewer) ([]BulkResult, error) {
		if err := v.AllowMutate("retry tasks"); err != nil {
			return nil, err
		}
		return tx.RetryTasks(ctx, ids)
	})
}

func (e *Engine) bulk(ctx context.Context, action auditlog.Action, ids []int, details map[string]any, do func(*store.Tx, auth.Viewer) ([]BulkResult, error)) ([]BulkResult, error) {
	v, err := e.admit(ctx, len(ids))
	if err != nil {
		return nil, err
	}
	if details == nil {
		details = map[string]any{}
	}
	entry := audit.Entry{Action: action, TaskIDs: ids, Details: details}
	var out []BulkResult
	err = e.each(v, ids)
	if err == nil {
		// The per-id outcomes are known before the transaction commits:
		// the record is completed from them, and commits with them.
		err = e.store.Write(ctx, func(tx *store.Tx) error {
			var err error
			if out, err = do(tx, v); err != nil {
				return err
			}
			recorded := entry
			e.bulkEntry(&recorded, out, nil)
			return e.audit.Insert(ctx, tx.Ent(), recorded)
		})
	}
	if err != nil {
		e.bulkEntry(&entry, nil, err)
		_ = e.audit.Record(ctx, entry)
		return nil, err
	}
	return out, nil
}

// bulkEntry completes a bulk action's record from its per-id outcomes.
func (e *Engine) bulkEntry(entry *audit.Entry, out []BulkResult, err error) {
	details := make(map[string]any, len(entry.Details)+1)
	for k, v := range entry.Details {
		details[k] = v
	}
	results := make([]map[string]any, len(out))
	failed := 0
	for i, r := range out {
		results[i] = map[string]any{"id": r.ID, "ok": r.Err == nil}
		if r.Err != nil {
			failed++
			results[i]["error"] = e.audit.Code(r.Err)
		}
	}
	if len(out) > 0 {
		details["results"] = results
	}
	entry.Details, entry.Err, entry.Partial = details, err, false
	switch {
	case err != nil:
	case failed == len(out) && failed > 0:
		entry.Err = out[0].Err
	case failed > 0:
		entry.Partial = true
	}
}

// each checks a bulk action over ids before it runs.
func (e *Engine) each(v auth.Viewer, ids []int) error {
	if err := v.AllowMutate("act on tasks"); err != nil {
		return err
	}
	if len(ids) > MaxBulk {
		return &ValidationError{Problems: []Problem{{Field: "ids", Message: fmt.Sprintf("%d ids; the limit is %d", len(ids), MaxBulk)}}}
	}
	return nil
}

// Count is a number of tasks in one state or of one type.
type Count struct {
	Status lifecycle.Status
	Type   string
	Count  int
}

// Stats counts tasks by type and status.
func (e *Engine) Stats(ctx context.Context) ([]Count, error) {
	var rows []struct {
		Type   string           `json:"type"`
		Status lifecycle.Status `json:"status"`
		Count  int              `json:"count"`
	}
	if err := e.store.Client().Task.Query().
		GroupBy(task.FieldType, task.FieldStatus).
		Aggregate(ent.Count()).
		Scan(ctx, &rows); err != nil {
		return nil, fmt.Errorf("task stats: %w", err)
	}
	out := make([]Count, len(rows))
	for i, r := range rows {
		out[i] = Count{Type: r.Type, Status: r.Status, Count: r.Count}
	}
	return out, nil
}

// StatsWithin counts the tasks the viewer of ctx may see by type and
// status, as Stats does, when the count finishes within budget (1 ms to
// MaxCountBudget); past it, on PostgreSQL, the counts are estimated from a
// random sample of the tasks table's pages (see EstimateTasks).
func (e *Engine) StatsWithin(ctx context.Context, budget time.Duration) (store.GroupCounts, error) {
	if _, err := auth.Require(ctx); err != nil {
		return store.GroupCounts{}, err
	}
	if budget < time.Millisecond || budget > MaxCountBudget {
		return store.GroupCounts{}, &ValidationError{Problems: []Problem{{Field: "exactWithinMs", Message: fmt.Sprintf("must be 1 to %d (milliseconds)", MaxCountBudget.Milliseconds())}}}
	}
	return e.store.CountTasksBy(ctx, func(ctx context.Context) error {
		_, err := e.store.Client().Task.Query().IDs(ctx)
		return err
	}, budget, task.FieldType, task.FieldStatus)
}

// Registry returns the task types.
func (e *Engine) Registry() *tasktype.Registry { return e.registry }

// Policies returns the retry policies.
func (e *Engine) Policies() *tasktype.Policies { return e.policies }
