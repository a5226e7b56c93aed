// Package engine is what the API does with tasks: it validates a request
// against the task type's schema and the engine's limits, masks and seals
// the input, enforces idempotency, and calls the store's guarded transitions.
// Resolvers call it and nothing else that writes.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"taskgraph/auth"
	"taskgraph/ent"
	"taskgraph/ent/task"
	"taskgraph/lifecycle"
	"taskgraph/mask"
	"taskgraph/seal"
	"taskgraph/store"
	"taskgraph/worker"
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
	MaxBulk           = 1000
)

// Engine carries out task requests.
type Engine struct {
	store    *store.Store
	registry *worker.Registry
	policies *worker.Policies
	sealer   *seal.Sealer
	masker   *mask.Masker
}

// New returns an Engine.
func New(s *store.Store, r *worker.Registry, ps *worker.Policies, sl *seal.Sealer, m *mask.Masker) *Engine {
	return &Engine{store: s, registry: r, policies: ps, sealer: sl, masker: m}
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
}

// Create validates and creates a task owned by the context's viewer. With an
// idempotency key already used by that viewer, it returns the existing task
// (or a *store.ConflictError when the payload differs).
func (e *Engine) Create(ctx context.Context, req CreateRequest) (*ent.Task, error) {
	n, err := e.prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	t, _, err := e.store.CreateTask(ctx, n)
	return t, err
}

func (e *Engine) prepare(ctx context.Context, req CreateRequest) (store.NewTask, error) {
	var v ValidationError
	typ, ok := e.registry.Lookup(req.Type)
	if !ok {
		v.add("type", "unknown task type %q (registered: %s)", req.Type, strings.Join(e.registry.Names(), ", "))
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
		if maxAttempts < 1 || maxAttempts > worker.MaxAttemptsLimit {
			v.add("maxAttempts", "must be between 1 and %d", worker.MaxAttemptsLimit)
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
	input := req.Input
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage(`{}`)
	}
	if len(input) > MaxInputBytes {
		v.add("input", "is %d bytes; the limit is %d", len(input), MaxInputBytes)
	} else if err := typ.Validate(input); err != nil {
		var inErr *worker.InputError
		if errors.As(err, &inErr) {
			for _, p := range inErr.Problems {
				v.add("input", "%s", p)
			}
		} else {
			v.add("input", "%v", err)
		}
	}
	if err := v.err(); err != nil {
		return store.NewTask{}, err
	}

	canonical, err := canonicalJSON(input)
	if err != nil {
		return store.NewTask{}, &ValidationError{Problems: []Problem{{Field: "input", Message: err.Error()}}}
	}
	masked, changed, err := e.masker.JSON(canonical)
	if err != nil {
		return store.NewTask{}, &ValidationError{Problems: []Problem{{Field: "input", Message: err.Error()}}}
	}
	var sealed []byte
	if changed {
		sealed = e.sealer.Seal(canonical)
	}
	viewer := ViewerOf(ctx)
	return store.NewTask{
		Type:           typ.Name,
		Title:          e.masker.String(req.Title),
		BizID:          e.masker.String(req.BizID),
		Owner:          viewer.User,
		IdempotencyKey: req.IdempotencyKey,
		Input:          masked,
		InputSealed:    sealed,
		InputHash:      e.sealer.Hash([]byte(typ.Name), []byte(req.BizID), canonical),
		Priority:       priority,
		TimeoutSeconds: timeout,
		RetryPolicy:    policyName,
		MaxAttempts:    maxAttempts,
		RunAt:          runAt,
	}, nil
}

func checkText(v *ValidationError, field, s string, limit int) {
	if !utf8.ValidString(s) {
		v.add(field, "is not valid UTF-8")
	} else if n := utf8.RuneCountInString(s); n > limit {
		v.add(field, "is %d characters; the limit is %d", n, limit)
	}
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

// ViewerOf returns the context's viewer, or auth.Local when the server runs
// without authentication.
func ViewerOf(ctx context.Context) auth.Viewer {
	if v, ok := auth.FromContext(ctx); ok {
		return v
	}
	return auth.Local
}

// Cancel cancels (or asks to cancel) a task.
func (e *Engine) Cancel(ctx context.Context, id int, reason string) (*ent.Task, error) {
	var v ValidationError
	checkText(&v, "reason", reason, MaxReasonLen)
	if err := v.err(); err != nil {
		return nil, err
	}
	return e.store.CancelTask(ctx, id, e.masker.String(reason))
}

// Task reads one task; an unknown id is a *store.NotFoundError.
func (e *Engine) Task(ctx context.Context, id int) (*ent.Task, error) {
	return e.store.TaskByID(ctx, id)
}

// Retry retries a FAILED task.
func (e *Engine) Retry(ctx context.Context, id int) (*ent.Task, error) {
	return e.store.RetryTask(ctx, id)
}

// BulkResult is the outcome of one id of a bulk action.
type BulkResult struct {
	ID   int
	Task *ent.Task
	Err  error
}

// CancelMany cancels each task independently.
func (e *Engine) CancelMany(ctx context.Context, ids []int, reason string) ([]BulkResult, error) {
	return e.each(ctx, ids, func(id int) (*ent.Task, error) { return e.Cancel(ctx, id, reason) })
}

// RetryMany retries each task independently.
func (e *Engine) RetryMany(ctx context.Context, ids []int) ([]BulkResult, error) {
	return e.each(ctx, ids, func(id int) (*ent.Task, error) { return e.Retry(ctx, id) })
}

func (e *Engine) each(ctx context.Context, ids []int, fn func(int) (*ent.Task, error)) ([]BulkResult, error) {
	if len(ids) > MaxBulk {
		return nil, &ValidationError{Problems: []Problem{{Field: "ids", Message: fmt.Sprintf("%d ids; the limit is %d", len(ids), MaxBulk)}}}
	}
	out := make([]BulkResult, len(ids))
	for i, id := range ids {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t, err := fn(id)
		out[i] = BulkResult{ID: id, Task: t, Err: err}
	}
	return out, nil
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

// Registry returns the task types.
func (e *Engine) Registry() *worker.Registry { return e.registry }

// Policies returns the retry policies.
func (e *Engine) Policies() *worker.Policies { return e.policies }
