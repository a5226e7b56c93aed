package external

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/nodes"
	"github.com/taskgraph/taskgraph/internal/seal"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// Prefix is where the worker protocol is served.
const Prefix = "/worker/v1/"

// Limits of the protocol.
const (
	// MaxClaim is the most tasks one claim returns.
	MaxClaim = 100
	// MaxWait is the longest a claim waits for work.
	MaxWait = 30 * time.Second
	// MaxBatch is the most items of one heartbeat, log or progress call.
	MaxBatch = 1000
	// MaxBodyBytes bounds a request's body; MaxResultBytes a result.
	MaxBodyBytes   = 4 << 20
	MaxResultBytes = 1 << 20
	// MaxMessageBytes bounds a log line's or an error's message.
	MaxMessageBytes = 64 << 10
	// pollInterval is how often a waiting claim looks again when nothing
	// woke it (new work wakes it at once through the broker).
	pollInterval = 250 * time.Millisecond
)

// Error codes of the protocol, in {"error":{"code":...,"message":...}}.
const (
	CodeValidation      = "VALIDATION"      // malformed JSON, a missing or bad field (400)
	CodeUnauthenticated = "UNAUTHENTICATED" // no or unknown credentials (401)
	CodeForbidden       = "FORBIDDEN"       // a type the credentials do not run (403)
	CodeNotFound        = "NOT_FOUND"       // no such execution, an unknown type (404)
	CodeFenced          = "FENCED"          // the token's execution moved on: stop (409)
	CodeTooLarge        = "LIMIT_EXCEEDED"  // a body, result or batch over its limit (413)
	CodeUnavailable     = "UNAVAILABLE"     // the database failed; try again (503)
)

// Routes are the protocol's routes (method and path), as the OpenAPI
// description (docs/workers.openapi.json) lists them.
func Routes() []string {
	return []string{"POST " + Prefix + "claim", "POST " + Prefix + "heartbeat", "POST " + Prefix + "log", "POST " + Prefix + "progress", "POST " + Prefix + "complete", "POST " + Prefix + "complete-many"}
}

// Workers records who claims and says who is drained (nodes.Workers).
type Workers interface {
	Seen(ctx context.Context, w nodes.WorkerInfo) (draining bool, err error)
}

// Config of the protocol's handler.
type Config struct {
	Store    *store.Store
	Registry *tasktype.Registry
	Policies *tasktype.Policies
	Sealer   *seal.Sealer
	Masker   *mask.Masker
	// Broker, when set, wakes waiting claims on new work.
	Broker *events.Broker
	// HeartbeatInterval is what a claim tells workers to beat at (well
	// under the watchdog's heartbeat timeout).
	HeartbeatInterval time.Duration
	// Workers, when set, records each claiming worker and says whether
	// an admin drained it.
	Workers Workers
	// Auth authenticates each call (its refusals in the protocol's
	// error shape); nil: the viewer of the request's context.
	Auth   *auth.Authenticator
	Logger *slog.Logger
}

// Handler serves the worker protocol. Mount it behind the authentication
// middleware.
type Handler struct {
	cfg Config
	mux *http.ServeMux
}

// NewHandler returns the protocol's handler.
func NewHandler(cfg Config) *Handler {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.HeartbeatInterval = cmp.Or(cfg.HeartbeatInterval, 5*time.Second)
	h := &Handler{cfg: cfg, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST "+Prefix+"claim", h.claim)
	h.mux.HandleFunc("POST "+Prefix+"heartbeat", h.heartbeat)
	h.mux.HandleFunc("POST "+Prefix+"log", h.log)
	h.mux.HandleFunc("POST "+Prefix+"progress", h.progress)
	h.mux.HandleFunc("POST "+Prefix+"complete", h.complete)
	h.mux.HandleFunc("POST "+Prefix+"complete-many", h.completeMany)
	h.mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no route %s %s; see docs/workers.md", r.Method, r.URL.Path))
	})
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// ErrorBody is the body of every refusal.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what was refused and why.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, ErrorBody{Error: ErrorDetail{Code: code, Message: msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// viewer returns the caller, or writes the refusal.
func (h *Handler) viewer(w http.ResponseWriter, r *http.Request) (auth.Viewer, bool) {
	var v auth.Viewer
	var err error
	switch a := h.cfg.Auth; {
	case a == nil:
		v, err = auth.Require(r.Context())
	case a.Open():
		if !auth.LoopbackHost(r.Host) {
			writeError(w, http.StatusForbidden, CodeForbidden, "this server runs without authentication and only answers requests addressed to localhost")
			return v, false
		}
		v = auth.Local
	default:
		v, err = a.Authenticate(r.Header.Get("Authorization"))
	}
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="taskgraph"`)
		writeError(w, http.StatusUnauthorized, CodeUnauthenticated, err.Error())
		return v, false
	}
	if v.Role != auth.RoleWorker && v.Role != auth.RolePlatform && v.Role != auth.RoleSystem {
		writeError(w, http.StatusForbidden, CodeForbidden, fmt.Sprintf("role %s may not run tasks: the worker protocol takes a worker's credentials (worker:<type>,...)", v.Role))
		return v, false
	}
	return v, true
}

// decode reads the body into dst, or writes the refusal.
func decode(w http.ResponseWriter, r *http.Request, dst any) bool {
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("the body is over %d bytes", MaxBodyBytes))
			return false
		}
		writeError(w, http.StatusBadRequest, CodeValidation, "the body is not the JSON this call takes: "+err.Error())
		return false
	}
	return true
}

func (h *Handler) failed(w http.ResponseWriter, what string, err error) {
	h.cfg.Logger.Warn("worker protocol: "+what+" failed", "err", err)
	writeError(w, http.StatusServiceUnavailable, CodeUnavailable, what+" failed; try again")
}

// Token is a fencing token as the protocol carries it:
// "<instance id>.<version>".
func formatToken(t store.Token) string {
	return strconv.Itoa(t.InstanceID) + "." + strconv.FormatInt(t.Version, 10)
}

func parseToken(s string) (store.Token, error) {
	id, ver, ok := strings.Cut(s, ".")
	i, err1 := strconv.Atoi(id)
	v, err2 := strconv.ParseInt(ver, 10, 64)
	if !ok || err1 != nil || err2 != nil || i <= 0 || v < 0 {
		return store.Token{}, fmt.Errorf("token %q is not <instance id>.<version>", s)
	}
	return store.Token{InstanceID: i, Version: v}, nil
}

// ClaimRequest asks for work.
type ClaimRequest struct {
	WorkerID string   `json:"workerId"`
	Language string   `json:"language,omitempty"`
	Version  string   `json:"version,omitempty"`
	Types    []string `json:"types"`
	Max      int      `json:"max"`
	// WaitSeconds is how long to wait for work when there is none (0:
	// answer at once; at most MaxWait).
	WaitSeconds float64 `json:"waitSeconds,omitempty"`
}

// ClaimResponse is the work claimed.
type ClaimResponse struct {
	Tasks []ClaimedTask `json:"tasks"`
	// HeartbeatIntervalSeconds is how often to beat for each task.
	HeartbeatIntervalSeconds float64 `json:"heartbeatIntervalSeconds"`
	// Draining: an admin drained this worker. The claim took nothing;
	// finish what runs, complete it, and stop (claims take nothing until
	// it is undrained).
	Draining bool `json:"draining,omitempty"`
}

// ClaimedTask is one execution the worker now holds.
type ClaimedTask struct {
	Token      string `json:"token"`
	TaskID     int    `json:"taskId"`
	Code       string `json:"code"`
	Type       string `json:"type"`
	InstanceID int    `json:"instanceId"`
	Version    int64  `json:"version"`
	Attempt    int    `json:"attempt"`
	MaxAttempt int    `json:"maxAttempts"`
	// Deadline is when the execution's timeout ends it.
	Deadline       time.Time       `json:"deadline"`
	TimeoutSeconds int             `json:"timeoutSeconds"`
	Input          json.RawMessage `json:"input"`
	// CancelRequested: a cancel was asked already; stop and complete
	// CANCELLED.
	CancelRequested bool `json:"cancelRequested"`
	// Parents are the results of the tasks this one waited for, by their
	// step key (a parent outside a workflow: by its code), as stored
	// (masked); null for a parent that left none. Absent for a task
	// without parents. What an in-process handler gets as Job.Parents.
	Parents map[string]json.RawMessage `json:"parents,omitempty"`
	// ParentOutcomes are how those tasks ended, by the same keys: a step
	// that runs whatever its parents did (RUN_ANYWAY) reads a failed or
	// cancelled parent's error here. Absent for a task without parents.
	ParentOutcomes map[string]ParentOutcome `json:"parentOutcomes,omitempty"`
}

// ParentOutcome is how a parent of a claimed task ended (or stands): its
// state, and its result (SUCCESS) or its error (FAILED: its last error;
// CANCELLED: the reason), as stored: masked, as the parent's own are
// shown.
type ParentOutcome struct {
	TaskID int             `json:"taskId"`
	Code   string          `json:"code"`
	Status string          `json:"status"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

func (h *Handler) claim(w http.ResponseWriter, r *http.Request) {
	v, ok := h.viewer(w, r)
	if !ok {
		return
	}
	var req ClaimRequest
	if !decode(w, r, &req) {
		return
	}
	switch {
	case strings.TrimSpace(req.WorkerID) == "":
		writeError(w, http.StatusBadRequest, CodeValidation, "workerId is required")
		return
	case len(req.Types) == 0:
		writeError(w, http.StatusBadRequest, CodeValidation, "types names no task type")
		return
	case req.Max < 1 || req.Max > MaxClaim:
		writeError(w, http.StatusBadRequest, CodeValidation, fmt.Sprintf("max must be 1..%d", MaxClaim))
		return
	case req.WaitSeconds < 0 || req.WaitSeconds > MaxWait.Seconds():
		writeError(w, http.StatusBadRequest, CodeValidation, fmt.Sprintf("waitSeconds must be 0..%g", MaxWait.Seconds()))
		return
	}
	types := slices.Compact(slices.Sorted(slices.Values(req.Types)))
	for _, t := range types {
		if !v.RunsType(t) {
			writeError(w, http.StatusForbidden, CodeForbidden, fmt.Sprintf("these credentials do not run task type %q", t))
			return
		}
		typ, ok := h.cfg.Registry.Lookup(t)
		if !ok {
			writeError(w, http.StatusNotFound, CodeNotFound, fmt.Sprintf("unknown task type %q", t))
			return
		}
		if !typ.External {
			writeError(w, http.StatusForbidden, CodeForbidden, fmt.Sprintf("task type %q is built in: the process runs it", t))
			return
		}
	}
	if h.cfg.Workers != nil {
		draining, err := h.cfg.Workers.Seen(r.Context(), nodes.WorkerInfo{Name: req.WorkerID, Tenant: v.Tenant, User: v.User, Language: req.Language, Version: req.Version, Types: types})
		if err != nil {
			// The record is a view: a claim does not wait for it.
			h.cfg.Logger.Warn("worker protocol: recording the worker failed", "worker", req.WorkerID, "err", err)
		}
		if draining {
			writeJSON(w, http.StatusOK, ClaimResponse{Tasks: []ClaimedTask{}, HeartbeatIntervalSeconds: h.cfg.HeartbeatInterval.Seconds(), Draining: true})
			return
		}
	}
	ctx := auth.NewSystemContext(r.Context())
	deadline := time.Now().Add(time.Duration(req.WaitSeconds * float64(time.Second)))
	var wake <-chan events.TaskChange
	if h.cfg.Broker != nil && req.WaitSeconds > 0 {
		sub := h.cfg.Broker.SubscribeInternal(func(c events.TaskChange) bool {
			return (c.Kind == events.Created || c.Kind == events.Transitioned && c.Task.Status == lifecycle.RetryPending) && slices.Contains(types, c.Task.Type)
		}, 16)
		defer sub.Close()
		wake = sub.C
	}
	for {
		claimed, err := h.claimFor(ctx, v, nodes.WorkerIDPrefix+req.WorkerID, types, req.Max)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			h.failed(w, "claim", err)
			return
		}
		left := time.Until(deadline)
		if len(claimed) > 0 || left <= 0 {
			parents := h.parentResults(ctx, v, claimed)
			out := ClaimResponse{Tasks: make([]ClaimedTask, 0, len(claimed)), HeartbeatIntervalSeconds: h.cfg.HeartbeatInterval.Seconds()}
			for _, c := range claimed {
				out.Tasks = append(out.Tasks, h.claimedTask(c, parents[c.Task.ID]))
			}
			writeJSON(w, http.StatusOK, out)
			return
		}
		wait := min(left, pollInterval)
		if at := h.cfg.Store.NextAdmission(); !at.IsZero() {
			wait = max(min(wait, time.Until(at)), 0)
		}
		t := time.NewTimer(wait)
		select {
		case <-r.Context().Done():
			t.Stop()
			return // nothing was claimed: nothing to release
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// claimFor claims for v: a worker's credentials take the tasks of their
// own tenant only (the tenant of tokens that name none is a tenant too);
// the platform and the process itself take every tenant's.
func (h *Handler) claimFor(ctx context.Context, v auth.Viewer, worker string, types []string, n int) ([]store.Claimed, error) {
	if v.Role == auth.RoleWorker {
		return h.cfg.Store.ClaimOfTenant(ctx, worker, v.Tenant, types, n)
	}
	return h.cfg.Store.Claim(ctx, worker, types, n)
}

// parentResults reads, in one query, the parents' results of the claimed
// tasks that have parents (steps of workflows, tasks created with
// dependsOn), as the pool reads them for in-process handlers; the others
// cost nothing here. A worker whose credentials are a tenant's is given
// its own tenant's parents only: an edge across tenants is one only a
// platform administrator can make (a workflow's steps are all of its
// creator's tenant). The executions are claimed already: when the read
// fails they are handed over without their parents' results, as the
// pool runs them (a handler that needs one finds none, and fails).
func (h *Handler) parentResults(ctx context.Context, v auth.Viewer, claimed []store.Claimed) map[int][]store.ParentResult {
	var ids []int
	for _, c := range claimed {
		if c.Task.WorkflowID != nil || c.Task.ParentCount > 0 {
			ids = append(ids, c.Task.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	out, err := h.cfg.Store.ParentResults(ctx, ids)
	if err != nil {
		h.cfg.Logger.Warn("worker protocol: reading the results of the claimed tasks' parents failed", "err", err)
		return nil
	}
	if v.Role == auth.RoleWorker {
		for child, rs := range out {
			out[child] = slices.DeleteFunc(rs, func(r store.ParentResult) bool { return r.Tenant != v.Tenant })
		}
	}
	return out
}

// claimedTask is what a worker is given of a claimed execution: the
// unmasked input (opened as the pool opens it for in-process handlers),
// and its parents' results and outcomes when it has parents.
func (h *Handler) claimedTask(c store.Claimed, parents []store.ParentResult) ClaimedTask {
	tk, in := c.Task, c.Instance
	input := json.RawMessage(tk.Input)
	if len(tk.InputSealed) > 0 {
		if plain, err := h.cfg.Sealer.Open(tk.InputSealed); err == nil {
			input = plain
		} else {
			h.cfg.Logger.Error("worker protocol: the sealed input does not open; the worker gets the masked one", "task_id", tk.ID, "err", err)
		}
	}
	if len(input) == 0 {
		input = json.RawMessage(`{}`)
	}
	timeout := time.Duration(tk.TimeoutSeconds) * time.Second
	var deadline time.Time
	if in.StartedAt != nil {
		deadline = in.StartedAt.Add(timeout)
	}
	tok := c.Token()
	ct := ClaimedTask{
		Token: formatToken(tok), TaskID: tk.ID, Code: tk.Code, Type: tk.Type, InstanceID: tok.InstanceID, Version: tok.Version,
		Attempt: in.Attempt, MaxAttempt: tk.MaxAttempts, Deadline: deadline, TimeoutSeconds: tk.TimeoutSeconds,
		Input: input, CancelRequested: tk.CancelRequested,
	}
	if len(parents) > 0 {
		ct.Parents = make(map[string]json.RawMessage, len(parents))
		ct.ParentOutcomes = make(map[string]ParentOutcome, len(parents))
		for _, r := range parents {
			ct.Parents[r.Key] = r.Result
			ct.ParentOutcomes[r.Key] = ParentOutcome{TaskID: r.ID, Code: r.Code, Status: string(r.Status), Result: r.Result, Error: r.Error}
		}
	}
	return ct
}

// execution is a token's execution as read for a write: its task's type
// (scope), its input (masking), its retry settings.
type execution struct {
	tok  store.Token
	inst *ent.TaskInstance
}

// read reads the executions behind tokens (any state: the store's fenced
// writes decide what is refused) and checks the caller runs their types.
// Unknown instances are absent from the map.
func (h *Handler) read(ctx context.Context, v auth.Viewer, toks []store.Token) (map[int]*ent.TaskInstance, error) {
	ids := make([]int, 0, len(toks))
	for _, t := range toks {
		ids = append(ids, t.InstanceID)
	}
	insts, err := h.cfg.Store.Client().TaskInstance.Query().Where(taskinstance.IDIn(ids...)).WithTask().All(auth.NewSystemContext(ctx))
	if err != nil {
		return nil, err
	}
	out := make(map[int]*ent.TaskInstance, len(insts))
	for _, in := range insts {
		if !v.RunsType(in.Edges.Task.Type) {
			return nil, &auth.ForbiddenError{Role: v.Role, Action: fmt.Sprintf("run task type %q", in.Edges.Task.Type)}
		}
		if v.Role == auth.RoleWorker && in.Edges.Task.Tenant != v.Tenant {
			return nil, &auth.ForbiddenError{Role: v.Role, Action: fmt.Sprintf("run task %d: it is another tenant's", in.TaskID)}
		}
		out[in.ID] = in
	}
	return out, nil
}

// masker is the masker of an execution's writes: the values masked by
// their key in its input stay masked when the worker repeats them.
func (h *Handler) masker(tk *ent.Task) *mask.Masker {
	if len(tk.InputSealed) > 0 {
		if plain, err := h.cfg.Sealer.Open(tk.InputSealed); err == nil {
			return h.cfg.Masker.WithValuesOf(plain)
		}
	}
	return h.cfg.Masker
}

// ItemError is a batch item refused, by its token.
type ItemError struct {
	Token string      `json:"token"`
	Error ErrorDetail `json:"error"`
}

func fenced(tok string) ItemError {
	return ItemError{Token: tok, Error: ErrorDetail{Code: CodeFenced, Message: "the execution moved on (the watchdog, a cancel or another outcome took it): stop working on it"}}
}

// parseTokens parses a batch's tokens, or writes the refusal.
func parseTokens(w http.ResponseWriter, raw []string) ([]store.Token, bool) {
	if len(raw) == 0 {
		writeError(w, http.StatusBadRequest, CodeValidation, "no items")
		return nil, false
	}
	if len(raw) > MaxBatch {
		writeError(w, http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("at most %d items a call", MaxBatch))
		return nil, false
	}
	out := make([]store.Token, len(raw))
	for i, s := range raw {
		t, err := parseToken(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, CodeValidation, err.Error())
			return nil, false
		}
		out[i] = t
	}
	return out, true
}

// HeartbeatRequest reports executions alive.
type HeartbeatRequest struct {
	Tasks []HeartbeatItem `json:"tasks"`
}

// HeartbeatItem is one execution's beat.
type HeartbeatItem struct {
	Token string `json:"token"`
	// MovedAt is when it last made progress or logged, if it did since
	// the last beat (stall detection reads it).
	MovedAt *time.Time `json:"movedAt,omitempty"`
}

// HeartbeatResponse answers per execution.
type HeartbeatResponse struct {
	Tasks []BeatAnswer `json:"tasks"`
}

// BeatAnswer is one execution's answer: go on (ok), stop and complete
// CANCELLED (cancelRequested), or stop at once (error FENCED).
type BeatAnswer struct {
	Token           string       `json:"token"`
	OK              bool         `json:"ok"`
	CancelRequested bool         `json:"cancelRequested"`
	CancelReason    string       `json:"cancelReason,omitempty"`
	Stalled         bool         `json:"stalled"`
	Error           *ErrorDetail `json:"error,omitempty"`
}

func (h *Handler) heartbeat(w http.ResponseWriter, r *http.Request) {
	v, ok := h.viewer(w, r)
	if !ok {
		return
	}
	var req HeartbeatRequest
	if !decode(w, r, &req) {
		return
	}
	raw := make([]string, len(req.Tasks))
	for i, t := range req.Tasks {
		raw[i] = t.Token
	}
	toks, ok := parseTokens(w, raw)
	if !ok {
		return
	}
	if _, err := h.read(r.Context(), v, toks); err != nil {
		h.refuse(w, err)
		return
	}
	pulses := make([]store.Pulse, len(toks))
	for i, t := range toks {
		pulses[i] = store.Pulse{Token: t}
		if m := req.Tasks[i].MovedAt; m != nil {
			pulses[i].MovedAt = *m
		}
	}
	beat, err := h.cfg.Store.Pulse(auth.NewSystemContext(r.Context()), pulses)
	if err != nil {
		h.failed(w, "heartbeat", err)
		return
	}
	lost := map[store.Token]bool{}
	for _, t := range beat.Lost {
		lost[t] = true
	}
	cancels := map[store.Token]string{}
	for _, c := range beat.CancelRequested {
		cancels[c.Token] = c.Reason
	}
	stalled := map[store.Token]bool{}
	for _, t := range beat.Stalled {
		stalled[t] = true
	}
	out := HeartbeatResponse{Tasks: make([]BeatAnswer, len(toks))}
	for i, t := range toks {
		a := BeatAnswer{Token: raw[i], OK: !lost[t], Stalled: stalled[t]}
		if reason, ok := cancels[t]; ok {
			a.CancelRequested, a.CancelReason = true, reason
		}
		if lost[t] {
			e := fenced(raw[i]).Error
			a.Error = &e
		}
		out.Tasks[i] = a
	}
	writeJSON(w, http.StatusOK, out)
}

// refuse writes the refusal of a read's error.
func (h *Handler) refuse(w http.ResponseWriter, err error) {
	var fe *auth.ForbiddenError
	if errors.As(err, &fe) {
		writeError(w, http.StatusForbidden, CodeForbidden, err.Error())
		return
	}
	h.failed(w, "read executions", err)
}

// LogRequest appends lines to executions' traces.
type LogRequest struct {
	Lines []LogItem `json:"lines"`
}

// LogItem is one line.
type LogItem struct {
	Token   string         `json:"token"`
	Level   string         `json:"level,omitempty"` // DEBUG, INFO (default), WARN, ERROR
	Message string         `json:"message"`
	Fields  map[string]any `json:"fields,omitempty"`
	At      *time.Time     `json:"at,omitempty"`
}

// WriteResponse lists the items refused (FENCED: stop that execution);
// the others were written.
type WriteResponse struct {
	Refused []ItemError `json:"refused"`
}

func (h *Handler) log(w http.ResponseWriter, r *http.Request) {
	v, ok := h.viewer(w, r)
	if !ok {
		return
	}
	var req LogRequest
	if !decode(w, r, &req) {
		return
	}
	raw := make([]string, len(req.Lines))
	for i, l := range req.Lines {
		raw[i] = l.Token
		if len(l.Message) > MaxMessageBytes {
			writeError(w, http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("line %d: a message is at most %d bytes", i, MaxMessageBytes))
			return
		}
		if err := tasklog.LevelValidator(tasklog.Level(cmp.Or(l.Level, "INFO"))); err != nil {
			writeError(w, http.StatusBadRequest, CodeValidation, fmt.Sprintf("line %d: level %q is not DEBUG, INFO, WARN or ERROR", i, l.Level))
			return
		}
	}
	toks, ok := parseTokens(w, raw)
	if !ok {
		return
	}
	insts, err := h.read(r.Context(), v, toks)
	if err != nil {
		h.refuse(w, err)
		return
	}
	var lines []store.LogLine
	var refused []ItemError
	for i, l := range req.Lines {
		in, ok := insts[toks[i].InstanceID]
		if !ok {
			refused = append(refused, fenced(raw[i]))
			continue
		}
		m := h.masker(in.Edges.Task)
		ll := store.LogLine{Token: toks[i], TaskID: in.TaskID, Level: tasklog.Level(cmp.Or(l.Level, "INFO")), Message: dbText(m.String(l.Message))}
		if len(l.Fields) > 0 {
			ll.Fields = m.Fields(l.Fields)
		}
		if l.At != nil {
			ll.At = *l.At
		}
		lines = append(lines, ll)
	}
	rejected, err := h.cfg.Store.RecordWork(auth.NewSystemContext(r.Context()), lines, nil)
	if err != nil {
		h.failed(w, "log", err)
		return
	}
	writeJSON(w, http.StatusOK, WriteResponse{Refused: append(refused, h.refusals(toks, raw, rejected)...)})
}

func (h *Handler) refusals(toks []store.Token, raw []string, rejected []store.Token) []ItemError {
	out := []ItemError{}
	seen := map[store.Token]bool{}
	for _, t := range rejected {
		seen[t] = true
	}
	done := map[store.Token]bool{}
	for i, t := range toks {
		if seen[t] && !done[t] {
			done[t] = true
			out = append(out, fenced(raw[i]))
		}
	}
	return out
}

// ProgressRequest reports executions' progress.
type ProgressRequest struct {
	Tasks []ProgressItem `json:"tasks"`
}

// ProgressItem is one execution's progress: done out of total.
type ProgressItem struct {
	Token string `json:"token"`
	Done  int64  `json:"done"`
	Total int64  `json:"total"`
}

func (h *Handler) progress(w http.ResponseWriter, r *http.Request) {
	v, ok := h.viewer(w, r)
	if !ok {
		return
	}
	var req ProgressRequest
	if !decode(w, r, &req) {
		return
	}
	raw := make([]string, len(req.Tasks))
	for i, p := range req.Tasks {
		raw[i] = p.Token
		if p.Done < 0 || p.Total < 0 {
			writeError(w, http.StatusBadRequest, CodeValidation, fmt.Sprintf("item %d: done and total must not be negative", i))
			return
		}
	}
	toks, ok := parseTokens(w, raw)
	if !ok {
		return
	}
	insts, err := h.read(r.Context(), v, toks)
	if err != nil {
		h.refuse(w, err)
		return
	}
	var items []store.Progress
	refused := []ItemError{}
	for i, p := range req.Tasks {
		in, ok := insts[toks[i].InstanceID]
		if !ok {
			refused = append(refused, fenced(raw[i]))
			continue
		}
		items = append(items, store.Progress{Token: toks[i], TaskID: in.TaskID, Done: p.Done, Total: p.Total})
	}
	rejected, err := h.cfg.Store.RecordWork(auth.NewSystemContext(r.Context()), nil, items)
	if err != nil {
		h.failed(w, "progress", err)
		return
	}
	writeJSON(w, http.StatusOK, WriteResponse{Refused: append(refused, h.refusals(toks, raw, rejected)...)})
}

// statusReleased hands back an execution the worker did not start (it
// is stopping): RETRY_PENDING at once, the attempt not used up.
const statusReleased lifecycle.Status = "RELEASED"

// CompleteRequest ends an execution.
type CompleteRequest struct {
	Token string `json:"token"`
	// Status is SUCCESS, FAILED, CANCELLED (only after a cancel was
	// requested) or RELEASED (not started: handed back, the attempt not
	// used up).
	Status string          `json:"status"`
	Result json.RawMessage `json:"result,omitempty"`
	// Error, with FAILED: its kind and message.
	Error *CompleteError `json:"error,omitempty"`
}

// CompleteError is how an execution failed.
type CompleteError struct {
	// Kind is RETRYABLE (retried by the policy), NON_RETRYABLE (straight
	// to FAILED) or RESOURCE (a delayed retry; retryAfterSeconds may say
	// when).
	Kind              string  `json:"kind"`
	Message           string  `json:"message"`
	RetryAfterSeconds float64 `json:"retryAfterSeconds,omitempty"`
	// NeedsReview hands the failure to a person, as a handler's
	// tasktype.NeedsReview does: the task waits in REVIEW_PENDING
	// (whatever its type's policy; a task created with review: false
	// ends FAILED instead). Never retried: the kind is NON_RETRYABLE
	// (empty means it).
	NeedsReview bool `json:"needsReview,omitempty"`
	// Evidence, with NeedsReview: any JSON the reviewer is shown
	// (Task.review.evidence), masked as an input is.
	Evidence json.RawMessage `json:"evidence,omitempty"`
}

// CompleteResponse is the state the outcome moved the task to.
type CompleteResponse struct {
	Token      string `json:"token"`
	TaskStatus string `json:"taskStatus"`
}

func (h *Handler) complete(w http.ResponseWriter, r *http.Request) {
	v, ok := h.viewer(w, r)
	if !ok {
		return
	}
	var req CompleteRequest
	if !decode(w, r, &req) {
		return
	}
	res, refusal := h.completeAll(r.Context(), v, []CompleteRequest{req})
	if refusal != nil {
		writeError(w, refusal.status, refusal.Code, refusal.Message)
		return
	}
	if e := res[0].Error; e != nil {
		writeError(w, statusOf(e.Code), e.Code, e.Message)
		return
	}
	writeJSON(w, http.StatusOK, CompleteResponse{Token: req.Token, TaskStatus: res[0].TaskStatus})
}

// CompleteManyRequest ends several executions in one call (one
// transaction for all): what a busy worker sends instead of one complete
// per task.
type CompleteManyRequest struct {
	Outcomes []CompleteRequest `json:"outcomes"`
}

// CompleteManyResponse answers per outcome, in order: its task's new
// status, or its refusal (FENCED, VALIDATION, ...); the others were
// written.
type CompleteManyResponse struct {
	Results []CompleteResult `json:"results"`
}

// CompleteResult is one outcome's answer.
type CompleteResult struct {
	Token      string       `json:"token"`
	TaskStatus string       `json:"taskStatus,omitempty"`
	Error      *ErrorDetail `json:"error,omitempty"`
}

func (h *Handler) completeMany(w http.ResponseWriter, r *http.Request) {
	v, ok := h.viewer(w, r)
	if !ok {
		return
	}
	var req CompleteManyRequest
	if !decode(w, r, &req) {
		return
	}
	if len(req.Outcomes) == 0 {
		writeError(w, http.StatusBadRequest, CodeValidation, "no outcomes")
		return
	}
	if len(req.Outcomes) > MaxBatch {
		writeError(w, http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("at most %d outcomes a call", MaxBatch))
		return
	}
	res, refusal := h.completeAll(r.Context(), v, req.Outcomes)
	if refusal != nil {
		writeError(w, refusal.status, refusal.Code, refusal.Message)
		return
	}
	writeJSON(w, http.StatusOK, CompleteManyResponse{Results: res})
}

// refusal is a call refused as a whole.
type refusal struct {
	status int
	ErrorDetail
}

func statusOf(code string) int {
	switch code {
	case CodeValidation:
		return http.StatusBadRequest
	case CodeForbidden:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeFenced:
		return http.StatusConflict
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusServiceUnavailable
}

func itemError(code, msg string) *ErrorDetail { return &ErrorDetail{Code: code, Message: msg} }

// check validates one outcome as sent, before anything is read.
func check(req CompleteRequest) (store.Token, *ErrorDetail) {
	tok, err := parseToken(req.Token)
	if err != nil {
		return tok, itemError(CodeValidation, err.Error())
	}
	if len(req.Result) > MaxResultBytes {
		return tok, itemError(CodeTooLarge, fmt.Sprintf("a result is at most %d bytes; the execution goes on: complete it again with a smaller result or a failure", MaxResultBytes))
	}
	switch lifecycle.Status(req.Status) {
	case lifecycle.Success:
		if req.Error != nil {
			return tok, itemError(CodeValidation, "a SUCCESS has no error")
		}
	case lifecycle.Failed:
		if req.Error == nil {
			return tok, itemError(CodeValidation, "a FAILED completion needs error {kind, message}")
		}
		kind := lifecycle.ErrorKind(req.Error.Kind)
		if req.Error.NeedsReview {
			if kind != "" && kind != lifecycle.KindNonRetryable {
				return tok, itemError(CodeValidation, fmt.Sprintf("a failure that needs review is never retried: its kind is NON_RETRYABLE (or empty), not %q", req.Error.Kind))
			}
			kind = lifecycle.KindNonRetryable
		} else if len(req.Error.Evidence) > 0 {
			return tok, itemError(CodeValidation, "evidence goes with needsReview: true")
		}
		if len(req.Error.Evidence) > MaxResultBytes {
			return tok, itemError(CodeTooLarge, fmt.Sprintf("evidence is at most %d bytes", MaxResultBytes))
		}
		if kind != lifecycle.KindRetryable && kind != lifecycle.KindNonRetryable && kind != lifecycle.KindResource {
			return tok, itemError(CodeValidation, fmt.Sprintf("error kind %q is not RETRYABLE, NON_RETRYABLE or RESOURCE", req.Error.Kind))
		}
		if len(req.Error.Message) > MaxMessageBytes {
			return tok, itemError(CodeTooLarge, fmt.Sprintf("an error message is at most %d bytes", MaxMessageBytes))
		}
		if req.Error.RetryAfterSeconds < 0 {
			return tok, itemError(CodeValidation, "retryAfterSeconds must not be negative")
		}
	case lifecycle.Cancelled, statusReleased:
	default:
		return tok, itemError(CodeValidation, fmt.Sprintf("status %q is not SUCCESS, FAILED, CANCELLED or RELEASED", req.Status))
	}
	return tok, nil
}

// completeAll applies outcomes in one Finish: each answered in order.
func (h *Handler) completeAll(ctx context.Context, v auth.Viewer, reqs []CompleteRequest) ([]CompleteResult, *refusal) {
	res := make([]CompleteResult, len(reqs))
	toks := make([]store.Token, len(reqs))
	var readToks []store.Token
	for i, req := range reqs {
		res[i].Token = req.Token
		toks[i], res[i].Error = check(req)
		if res[i].Error == nil {
			readToks = append(readToks, toks[i])
		}
	}
	if len(readToks) == 0 {
		return res, nil
	}
	insts, err := h.read(ctx, v, readToks)
	if err != nil {
		var fe *auth.ForbiddenError
		if errors.As(err, &fe) {
			return nil, &refusal{http.StatusForbidden, ErrorDetail{Code: CodeForbidden, Message: err.Error()}}
		}
		h.cfg.Logger.Warn("worker protocol: read executions failed", "err", err)
		return nil, &refusal{http.StatusServiceUnavailable, ErrorDetail{Code: CodeUnavailable, Message: "complete failed; try again"}}
	}
	var outcomes []store.Outcome
	var at []int // res index of each outcome
	for i, req := range reqs {
		if res[i].Error != nil {
			continue
		}
		tok := toks[i]
		in, ok := insts[tok.InstanceID]
		if !ok {
			res[i].Error = itemError(CodeNotFound, fmt.Sprintf("no execution %d", tok.InstanceID))
			continue
		}
		if in.Version != tok.Version || in.Status != lifecycle.Executing {
			e := fenced(req.Token).Error
			res[i].Error = &e
			continue
		}
		o, e := h.outcome(req, tok, in)
		if e != nil {
			res[i].Error = e
			continue
		}
		outcomes = append(outcomes, o)
		at = append(at, i)
	}
	if len(outcomes) == 0 {
		return res, nil
	}
	errs, err := h.cfg.Store.Finish(auth.NewSystemContext(ctx), outcomes)
	if err != nil {
		h.cfg.Logger.Warn("worker protocol: complete failed", "err", err)
		return nil, &refusal{http.StatusServiceUnavailable, ErrorDetail{Code: CodeUnavailable, Message: "complete failed; try again"}}
	}
	for j, o := range outcomes {
		i := at[j]
		if errs[j] != nil {
			e := fenced(reqs[i].Token).Error
			res[i].Error = &e
			continue
		}
		st := o.Status
		if o.Retry != nil {
			st = lifecycle.RetryPending
		}
		res[i].TaskStatus = string(st)
	}
	return res, nil
}

// outcome builds the store's outcome of one checked request, as the pool
// builds its own: masked, the retry policy deciding a failure.
func (h *Handler) outcome(req CompleteRequest, tok store.Token, in *ent.TaskInstance) (store.Outcome, *ErrorDetail) {
	tk := in.Edges.Task
	m := h.masker(tk)
	var result json.RawMessage
	if len(req.Result) > 0 && string(req.Result) != "null" {
		var err error
		if result, _, err = m.JSON(req.Result); err != nil {
			return store.Outcome{}, itemError(CodeValidation, "the result is not JSON: "+err.Error())
		}
	}
	c := store.Claimed{Task: tk, Instance: in}
	switch lifecycle.Status(req.Status) {
	case lifecycle.Success:
		return store.Outcome{Token: tok, Status: lifecycle.Success, Result: result, Task: tk}, nil
	case lifecycle.Cancelled:
		if !tk.CancelRequested {
			return store.Outcome{}, itemError(CodeValidation, "no cancel was requested of this task: complete it SUCCESS or FAILED")
		}
		msg := "cancelled while running"
		if tk.CancelReason != "" {
			msg += ": " + tk.CancelReason
		}
		return store.Outcome{Token: tok, Status: lifecycle.Cancelled, Kind: lifecycle.KindCancelled, Error: m.String(msg), Result: result, Log: msg, Task: tk}, nil
	case statusReleased:
		// As the pool's shutdown releases what it interrupts: the attempt
		// is not used up.
		return h.failure(m, c, lifecycle.KindInterrupted, fmt.Sprintf("released: worker %s stopped before it ran it", in.WorkerID), nil, -1), nil
	}
	after := time.Duration(-1)
	if req.Error.RetryAfterSeconds > 0 {
		after = time.Duration(req.Error.RetryAfterSeconds * float64(time.Second))
	}
	kind := lifecycle.ErrorKind(req.Error.Kind)
	err := errors.New(req.Error.Message)
	if req.Error.NeedsReview {
		kind = lifecycle.KindNonRetryable
		var evidence any
		if len(req.Error.Evidence) > 0 && string(req.Error.Evidence) != "null" {
			evidence = req.Error.Evidence
		}
		err = tasktype.NeedsReview(err, evidence)
	}
	o := h.failure(m, c, kind, req.Error.Message, result, after)
	// The review the task's policy (its type's, or its own opt-in) or the
	// worker asks for, as the pool decides it.
	var typ *tasktype.Type
	if h.cfg.Registry != nil {
		typ, _ = h.cfg.Registry.Lookup(tk.Type)
	}
	return tasktype.ReviewOutcome(typ, o, err, m, h.cfg.Store.Now()), nil
}

// failure is the outcome of a failed execution, as the pool's
// (worker.FailureAfter): FAILED, with a retry when the policy allows one.
func (h *Handler) failure(m *mask.Masker, c store.Claimed, kind lifecycle.ErrorKind, msg string, result json.RawMessage, retryAfter time.Duration) store.Outcome {
	msg = dbText(m.String(msg))
	d := h.cfg.Policies.NextAfter(c.Task.RetryPolicy, c.Task.MaxAttempts, c.Instance.Attempt, kind, retryAfter, h.cfg.Store.Now())
	first, _, _ := strings.Cut(msg, "\n")
	o := store.Outcome{
		Token: c.Token(), Status: lifecycle.Failed, Kind: kind, Error: msg, Result: result, Task: c.Task,
		Log: fmt.Sprintf("attempt %d failed (%s): %s; %s", c.Instance.Attempt, kind, first, d.Reason),
	}
	if d.Retry {
		o.Retry = &store.Retry{RunAt: d.RunAt, Attempt: d.Attempt}
	}
	return o
}

// dbText is text the databases store: valid UTF-8 without NUL.
func dbText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
