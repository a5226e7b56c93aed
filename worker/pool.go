// Package worker runs tasks: a Pool claims waiting instances in batches and
// runs their handlers with heartbeats, progress, logs and cooperative cancel;
// a Watchdog, running on its own, recovers executions whose worker died or
// overran its timeout. Both decide retries through named RetryPolicies and
// change state only through the store's guarded transitions.
package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"crypto/rand"
	"encoding/hex"
	"encoding/json"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/outage"
	"github.com/taskgraph/taskgraph/internal/seal"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
	"github.com/taskgraph/taskgraph/internal/telemetry"
)

// Config of a Pool.
type Config struct {
	// ID names this worker in instances (worker_id) and logs.
	// Default: host-pid-random.
	ID string
	// Concurrency is how many handlers run at once. Default: ConcurrencyDefault.
	Concurrency int
	// ClaimBatch is the most instances claimed in one statement.
	// Default: Concurrency.
	ClaimBatch int
	// PollInterval is how often the pool looks for work when nothing woke
	// it (new work normally wakes it at once). Default: PollIntervalDefault.
	PollInterval time.Duration
	// HeartbeatInterval is how often running executions are reported alive.
	// It must be well under the watchdog's heartbeat timeout.
	// Default: HeartbeatIntervalDefault.
	HeartbeatInterval time.Duration
	// FlushInterval is how long outcomes, logs and progress may wait to be
	// written in a batch. Default: FlushIntervalDefault.
	FlushInterval time.Duration
	// FetchCooldown is how long after a claim a freed slot waits before
	// the next claim, unless half a batch is free: freed slots gather into
	// one claim instead of many small ones. New work still wakes the pool
	// at once. Default: FetchCooldownDefault.
	FetchCooldown time.Duration
	// ShutdownGrace is how long Stop lets running handlers finish before
	// interrupting them. Default: ShutdownGraceDefault.
	ShutdownGrace time.Duration
	// Logger receives the pool's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Defaults of Config.
const (
	// ConcurrencyDefault is large because a handler costs a goroutine
	// only while it runs, and the claim and the flush batch what is in
	// flight: with short tasks, throughput is in-flight work over the
	// round trips of a claim and a flush (1,000 gave 1.4x the noop
	// burn-down of 256 on PostgreSQL; 2,000, the River peer's setting,
	// about 5% more again: claims and flushes may then carry up to 2,000
	// rows, the most a statement does). Types that must not run that wide
	// set their own cap (tasktype.WithConcurrency; imports 4).
	ConcurrencyDefault       = 2000
	PollIntervalDefault      = time.Second
	HeartbeatIntervalDefault = 5 * time.Second
	FlushIntervalDefault     = 20 * time.Millisecond
	FetchCooldownDefault     = 5 * time.Millisecond
	ShutdownGraceDefault     = 10 * time.Second
	// interruptWait is how long interrupted handlers get to return before
	// their instances are released without them.
	interruptWait = 2 * time.Second
	// claimTimeout bounds one claim: a few index probes and two updates of
	// at most a batch of rows. A claim that takes longer (the database is
	// in trouble) is abandoned and the next wake-up or poll tries again; a
	// heartbeat is bounded by the heartbeat interval, a flush by
	// flushCallTimeout.
	claimTimeout = 10 * time.Second
	// claimWorthDivisor: a freed slot claims at once, cooldown or not,
	// when 1/claimWorthDivisor of a claim batch is free: that many slots
	// are worth a claim of their own.
	claimWorthDivisor = 2
	// claimRampDivisor and claimRampMin: after the pool found nothing more
	// to claim, its next claim takes 1/claimRampDivisor of a batch, but at
	// least claimRampMin (rampStart).
	claimRampDivisor = 8
	claimRampMin     = 64
	// changesBuffer is how many changes the event loop may fall behind by
	// before the broker drops it; it then catches up the slow way (a claim
	// and a heartbeat) and subscribes again.
	changesBuffer = 4096
	// stackLines is how much of a panicking handler's stack goes into
	// last_error: enough to find the bug, not a page of runtime internals.
	stackLines = 24
	// noRetryAfter is the retryAfter of an error that did not say when to
	// try again (FailureAfter): the retry policy's backoff applies.
	noRetryAfter = time.Duration(-1)
	// workerIDRandomBytes ends a default worker id (6 hex digits): two
	// processes with one host name and pid (containers) still differ.
	workerIDRandomBytes = 3
)

// Deps are what a Pool works with.
type Deps struct {
	// Store claims, heartbeats and writes executions' work (a
	// *store.Store; tests give fakes).
	Store    Store
	Registry *tasktype.Registry
	Policies *tasktype.Policies
	// Broker, when set, wakes the pool on new work and delivers cancel
	// requests at once; without it the pool relies on polling and
	// heartbeats. An *events.Broker.
	Broker ChangeFeed
	Sealer *seal.Sealer
	Masker *mask.Masker
	// Recorder, when set, is told about claims and executions (metrics).
	Recorder Recorder
	// Outages, when set, counts the failures of the pool's database calls
	// during an outage (logged once by the monitor) instead of the pool
	// logging each.
	Outages *outage.Monitor
	// Tracer, when set (nil: tracing off), traces claims, executions and flushes: each
	// execution's span continues the trace that created its task (its
	// traceparent) and is in the context its handler is given.
	Tracer trace.Tracer
}

// Recorder receives what a pool does, for metrics.
type Recorder interface {
	Claimed(n int)
	Executed(taskType string, o store.Outcome, d time.Duration)
}

func (d Deps) validate() error {
	switch {
	case isNil(d.Store):
		return errors.New("worker: no store")
	case d.Registry == nil:
		return errors.New("worker: no registry")
	case d.Policies == nil:
		return errors.New("worker: no retry policies")
	case d.Sealer == nil:
		return errors.New("worker: no sealer")
	case d.Masker == nil:
		return errors.New("worker: no masker")
	}
	return nil
}

// Causes with which an execution's context is cancelled.
var (
	errCancelRequested = errors.New("cancel requested")
	errTimeout         = errors.New("task timeout exceeded")
	errShutdown        = errors.New("worker shutting down")
	errLost            = errors.New("execution moved on by someone else (watchdog or cancel)")
	errStalled         = errors.New("stalled: progress and logs stopped moving")
)

// Pool claims and runs tasks.
type Pool struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	// writes batches executions' log lines, progress and outcomes.
	writes *flusher
	// running is what runs now (it has its own lock).
	running *runningSet

	wake chan struct{}
	slot chan struct{}
	// capFreed: an execution ended while a type was held at its cap
	// (Claimer.HeldAtCap), here or on another node.
	capFreed chan struct{}
	// ramp is the most the next claim takes (rampStart); only the fetch
	// loop uses it.
	ramp int

	// mu guards started, stopping and paused.
	mu       sync.Mutex
	started  bool
	stopping bool
	paused   bool // PauseClaiming: a drained node claims nothing

	execCtx     context.Context
	execCancel  context.CancelCauseFunc
	fetchCancel context.CancelFunc
	fetchDone   chan struct{}
	loopCancel  context.CancelFunc
	flushStop   context.CancelFunc
	loops       sync.WaitGroup
	handlers    sync.WaitGroup
	stopOnce    sync.Once
	stopErr     error

	// fetchIdle is signalled each time the fetch loop waits for a wake-up,
	// a poll, a freed slot or the end of a cooldown (tests).
	fetchIdle testSignal
}

// NewPool validates its configuration and returns a stopped pool.
func NewPool(cfg Config, deps Deps) (*Pool, error) {
	if err := deps.validate(); err != nil {
		return nil, err
	}
	if isNil(deps.Broker) {
		deps.Broker = nil // a nil *events.Broker: no broker
	}
	if cfg.Concurrency < 0 || cfg.ClaimBatch < 0 {
		return nil, errors.New("worker: concurrency and claim batch must not be negative")
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, ConcurrencyDefault)
	cfg.ClaimBatch = min(cmp.Or(cfg.ClaimBatch, cfg.Concurrency), cfg.Concurrency)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollIntervalDefault)
	cfg.HeartbeatInterval = cmp.Or(cfg.HeartbeatInterval, HeartbeatIntervalDefault)
	cfg.FlushInterval = cmp.Or(cfg.FlushInterval, FlushIntervalDefault)
	cfg.FetchCooldown = cmp.Or(cfg.FetchCooldown, FetchCooldownDefault)
	cfg.ShutdownGrace = cmp.Or(cfg.ShutdownGrace, ShutdownGraceDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.ID == "" {
		cfg.ID = DefaultWorkerID()
	}
	p := &Pool{
		cfg:      cfg,
		deps:     deps,
		log:      cfg.Logger.With("worker_id", cfg.ID),
		wake:     make(chan struct{}, 1),
		slot:     make(chan struct{}, 1),
		capFreed: make(chan struct{}, 1),
		running:  newRunningSet(),
	}
	p.ramp = p.rampStart()
	p.writes = newFlusher(deps.Store, p.log, cfg.FlushInterval, outcomesQueuedPerSlot*cfg.Concurrency)
	p.writes.outages = deps.Outages
	p.writes.tracer = p.deps.Tracer
	p.writes.onLost = func(tok store.Token) { p.running.cancel(tok.InstanceID, errLost) }
	p.writes.onFinished = p.finished
	return p, nil
}

// DefaultWorkerID returns host-pid-random.
func DefaultWorkerID() string {
	host, _ := os.Hostname()
	host = strings.SplitN(host, ".", 2)[0]
	var b [workerIDRandomBytes]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", cmp.Or(host, "worker"), os.Getpid(), hex.EncodeToString(b[:]))
}

// ID is the worker's id.
func (p *Pool) ID() string { return p.cfg.ID }

// Start begins claiming and running tasks. The pool runs until Stop.
func (p *Pool) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return errors.New("worker: pool already started")
	}
	p.started = true
	// The pool is the process at work (auth.System), whoever started it;
	// handlers inherit that context.
	base := auth.NewSystemContext(context.WithoutCancel(ctx))
	p.execCtx, p.execCancel = context.WithCancelCause(base)
	var fetchCtx, loopCtx, flushCtx context.Context
	fetchCtx, p.fetchCancel = context.WithCancel(base)
	loopCtx, p.loopCancel = context.WithCancel(base)
	flushCtx, p.flushStop = context.WithCancel(base)

	p.fetchDone = make(chan struct{})
	go func() { defer close(p.fetchDone); p.fetchLoop(fetchCtx) }()
	p.loops.Add(1)
	go func() { defer p.loops.Done(); p.heartbeatLoop(loopCtx) }()
	if p.deps.Broker != nil {
		// Subscribe before Start returns: a cancel requested right after
		// must not slip between starting and listening.
		sub := p.subscribe()
		p.loops.Add(1)
		go func() { defer p.loops.Done(); p.eventLoop(loopCtx, sub) }()
	}
	go p.writes.run(flushCtx)
	p.Wake()
	return nil
}

// Wake makes the pool look for work now.
func (p *Pool) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Load returns how many handlers run and how many may run at once.
func (p *Pool) Load() (busy, total int) { return p.running.count(), p.cfg.Concurrency }

// PauseClaiming stops (true) or resumes (false) claiming work, for a
// node an admin drains: running handlers go on, nothing new starts (a
// claim under way still starts what it got). Unlike StopClaiming it can
// be undone; a pool shutting down stays stopped.
func (p *Pool) PauseClaiming(pause bool) {
	p.mu.Lock()
	p.paused = pause
	p.mu.Unlock()
	if !pause {
		p.Wake()
	}
}

// Running returns how many handlers are running (busy slots).
func (p *Pool) Running() int { return p.running.count() }

// Concurrency returns how many handlers may run at once (all slots).
func (p *Pool) Concurrency() int { return p.cfg.Concurrency }

func (p *Pool) fetchLoop(ctx context.Context) {
	tick := time.NewTicker(p.cfg.PollInterval)
	defer tick.Stop()
	cooldown := time.NewTimer(time.Hour) // stopped at once: armed by Reset only
	cooldown.Stop()
	var lastFetch time.Time
	for {
		p.fetchIdle.signal()
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-tick.C:
		case <-cooldown.C:
		case <-p.slot:
			wait := p.cfg.FetchCooldown - time.Since(lastFetch)
			if wait > 0 && p.freeSlots() < p.cfg.ClaimBatch/claimWorthDivisor {
				cooldown.Reset(wait)
				continue
			}
		case <-p.capFreed:
			// A capped type's slot may have freed: claim now, but at
			// most once a cooldown however many executions end.
			if wait := p.cfg.FetchCooldown - time.Since(lastFetch); wait > 0 {
				cooldown.Reset(wait)
				continue
			}
		}
		lastFetch = time.Now()
		for ctx.Err() == nil {
			more, err := p.fetchOnce(ctx)
			if err != nil {
				if ctx.Err() == nil && !counted(p.deps.Outages, "claim", err) {
					p.log.Error("claiming work failed", "err", err)
				}
				break
			}
			if !more {
				break
			}
		}
		// A type held back by flow control (a rate window, a pause with
		// an end) is claimed again as soon as it may be, not at the next
		// poll.
		if at := p.deps.Store.NextAdmission(); !at.IsZero() {
			if wait := time.Until(at); wait < p.cfg.PollInterval {
				cooldown.Reset(max(wait, 0))
			}
		}
	}
}

func (p *Pool) freeSlots() int { return p.cfg.Concurrency - p.running.count() }

// fetchOnce claims as much as the free slots allow, in one claim of every
// type (a capped type up to its room under the cap), and starts it. It
// reports whether the claim came back full (more may be waiting).
func (p *Pool) fetchOnce(ctx context.Context) (more bool, err error) {
	free, types, caps := p.room()
	limit := min(free, p.cfg.ClaimBatch, p.ramp)
	if limit == 0 || len(types) == 0 {
		return false, nil
	}
	callCtx, cancel := context.WithTimeout(ctx, claimTimeout)
	var span trace.Span
	if p.deps.Tracer != nil {
		callCtx, span = p.deps.Tracer.Start(callCtx, telemetry.SpanClaim, trace.WithAttributes(telemetry.AttrWorker.String(p.cfg.ID)))
	}
	claimed, err := p.deps.Store.ClaimEach(callCtx, p.cfg.ID, types, caps, limit)
	cancel()
	var claim trace.SpanContext
	if span != nil {
		span.SetAttributes(telemetry.AttrCount.Int(len(claimed)))
		telemetry.End(span, err)
		claim = span.SpanContext()
	}
	if err != nil {
		return false, err
	}
	if p.deps.Recorder != nil && len(claimed) > 0 {
		p.deps.Recorder.Claimed(len(claimed))
	}
	parents, err := p.parentResults(ctx, claimed)
	if err != nil {
		// The executions are claimed: they run, and a handler that
		// needs a parent's result finds none (it fails, and is retried).
		p.log.Warn("reading the results of the claimed tasks' parents", "err", err)
	}
	for _, c := range claimed {
		p.start(c, claim, parents[c.Task.ID])
	}
	if len(claimed) < limit {
		// Drained (or held back by caps and flow control): the next burst
		// starts small again.
		p.ramp = p.rampStart()
		return false, nil
	}
	p.ramp = min(2*p.ramp, p.cfg.ClaimBatch)
	return free > len(claimed), nil
}

// rampStart is the first claim's size after the pool found nothing more
// to claim: an eighth of a batch (at least claimRampMin), doubled at each
// claim that comes back full. The first executions of a burst then end,
// and are written, while the larger claims that follow are under way,
// instead of all waiting for one claim, then one flush, of a whole batch.
func (p *Pool) rampStart() int {
	return min(max(p.cfg.ClaimBatch/claimRampDivisor, claimRampMin), p.cfg.ClaimBatch)
}

// room returns the free slots, the types this pool runs and, per type,
// the most of it the claim may take: the free slots, or a capped type's
// room under its cap if that is less.
func (p *Pool) room() (free int, types []string, caps []int) {
	p.mu.Lock()
	stopping := p.stopping || p.paused
	p.mu.Unlock()
	if stopping {
		return 0, nil, nil
	}
	running, perType := p.running.usage()
	free = max(p.cfg.Concurrency-running, 0)
	for _, t := range p.deps.Registry.Types() {
		if t.External {
			continue // an outside worker's, over the worker protocol
		}
		room := free
		if t.Concurrency > 0 {
			room = min(max(t.Concurrency-perType[t.Name], 0), free)
		}
		if room > 0 {
			types = append(types, t.Name)
			caps = append(caps, room)
		}
	}
	return free, types, caps
}

// start runs one claimed execution in its own goroutine, in a span of
// its own that continues its task's trace, linked to the claim's; a
// workflow's step gets its parents' results.
func (p *Pool) start(c store.Claimed, claim trace.SpanContext, parents []store.ParentResult) {
	typ, ok := p.deps.Registry.Lookup(c.Task.Type)
	job, ctl := tasktype.NewJob(jobTask(c.Task), jobInstance(c.Instance, time.Duration(c.Task.TimeoutSeconds)*time.Second), c.Token(), jobWriter{writes: p.writes, clock: p.deps.Store}, p.deps.Masker)
	if parents != nil {
		job.Parents = make(map[string]json.RawMessage, len(parents))
		job.Outcomes = make(map[string]tasktype.ParentOutcome, len(parents))
		for _, r := range parents {
			job.Parents[r.Key] = r.Result
			job.Outcomes[r.Key] = tasktype.ParentOutcome{ID: r.ID, Code: r.Code, Status: r.Status, Result: r.Result, Error: r.Error}
		}
	}
	spanCtx, span := p.startSpan(c, claim)
	ctx, cancel := context.WithCancelCause(spanCtx)
	ex := &execution{c: c, job: job, ctl: ctl, typ: typ, cancel: cancel, done: make(chan struct{})}

	p.running.add(ex)
	if c.Task.CancelRequested {
		cancel(errCancelRequested)
	}

	p.handlers.Add(1)
	go func() {
		defer p.handlers.Done()
		defer close(ex.done)
		// The timeout is a cause like the others, so that context.Cause
		// tells a timeout from a cancel, a shutdown or a lost lease.
		timeout := time.Duration(c.Task.TimeoutSeconds) * time.Second
		began := time.Now()
		runCtx, stopTimer := context.WithTimeoutCause(ctx, timeout, errTimeout)
		var err error
		if !ok {
			err = tasktype.NonRetryable(fmt.Errorf("task type %q is not registered on worker %s", c.Task.Type, p.cfg.ID))
		} else {
			err = p.run(runCtx, ex)
		}
		o, write := p.outcome(ex, err, context.Cause(runCtx))
		o.ResultStatus = ctl.ResultStatus()
		o.RowsImported, o.RowsExported = ctl.Rows()
		if write {
			o = tasktype.ReviewOutcome(typ, o, err, ctl.Masker(), p.deps.Store.Now())
		}
		stopTimer()
		cancel(nil)
		endExecution(span, o, write)
		if write && p.deps.Recorder != nil {
			p.deps.Recorder.Executed(c.Task.Type, o, time.Since(began))
		}
		if write {
			if !p.writes.finish(context.Background(), o) {
				p.log.Error("outcome not written: the pool stopped", "task_id", c.Task.ID, "instance_id", c.Instance.ID)
			}
		}
		p.release(ex)
	}()
}

// startSpan starts the span of c's execution: a child of the span that
// created its task (the traceparent it keeps, from whichever node), or a
// root when it has none, linked to the claim that took it. With tracing
// off it returns the pool's context and no span.
func (p *Pool) startSpan(c store.Claimed, claim trace.SpanContext) (context.Context, trace.Span) {
	ctx := p.execCtx
	if p.deps.Tracer == nil {
		return ctx, nil
	}
	if c.Task.TraceParent != nil {
		ctx = telemetry.ContextWithParent(ctx, *c.Task.TraceParent)
	}
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			telemetry.AttrTaskID.Int(c.Task.ID),
			telemetry.AttrTaskCode.String(c.Task.Code),
			telemetry.AttrTaskType.String(c.Task.Type),
			telemetry.AttrInstanceID.Int(c.Instance.ID),
			telemetry.AttrAttempt.Int(c.Instance.Attempt),
			telemetry.AttrWorker.String(p.cfg.ID),
		),
	}
	if claim.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: claim}))
	}
	return p.deps.Tracer.Start(ctx, telemetry.SpanExecute, opts...)
}

// endExecution ends an execution's span (nil: tracing is off) with its
// outcome (write false: another took the execution over, and nothing of
// it is written).
func endExecution(span trace.Span, o store.Outcome, write bool) {
	if span == nil {
		return
	}
	if !write {
		span.SetAttributes(telemetry.AttrOutcome.String("ABANDONED"))
		span.End()
		return
	}
	span.SetAttributes(telemetry.AttrOutcome.String(string(o.Status)))
	if o.Kind != "" {
		span.SetAttributes(telemetry.AttrErrorKind.String(string(o.Kind)))
	}
	if o.Status != lifecycle.Success {
		span.SetStatus(codes.Error, o.Error)
	}
	span.End()
}

// run decodes the input and calls the handler, turning a panic into an
// error.
func (p *Pool) run(ctx context.Context, ex *execution) (err error) {
	c := ex.c
	input := json.RawMessage(c.Task.Input)
	if len(c.Task.InputSealed) > 0 {
		plain, err := p.deps.Sealer.Open(c.Task.InputSealed)
		if err != nil {
			return tasktype.NonRetryable(err)
		}
		input = plain
		// Values masked by their key in the input stay masked when the
		// handler repeats them elsewhere (a log line, an error).
		ex.ctl.SetMasker(p.deps.Masker.WithValuesOf(plain))
	}
	in, err := ex.typ.DecodeAccepted(input)
	if err != nil {
		return tasktype.NonRetryable(err)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, trimStack(debug.Stack()))
			p.log.Error("handler panicked", "task_id", c.Task.ID, "instance_id", c.Instance.ID, "panic", ex.ctl.Masker().String(fmt.Sprint(r)))
		}
	}()
	return ex.typ.Handle(ctx, ex.job, in)
}

// trimStack keeps the first frames of a stack: enough to find the bug,
// not a page of runtime internals in last_error.
func trimStack(stack []byte) string {
	lines := strings.Split(string(stack), "\n")
	if len(lines) > stackLines {
		lines = append(lines[:stackLines], "...")
	}
	return strings.Join(lines, "\n")
}

// outcome decides how an execution ended. write is false when there is
// nothing of ours to write (someone else moved the instance on).
func (p *Pool) outcome(ex *execution, err error, cause error) (o store.Outcome, write bool) {
	abandoned, reason := ex.ending()
	reason = cmp.Or(reason, ex.c.Task.CancelReason)
	if abandoned || errors.Is(cause, errLost) {
		return o, false
	}
	c := ex.c
	now := p.deps.Store.Now()
	switch {
	case err == nil:
		return store.Outcome{Token: c.Token(), Status: lifecycle.Success, Result: ex.ctl.Result(), Task: c.Task}, true
	case errors.Is(cause, errCancelRequested):
		msg := "cancelled while running"
		if reason != "" {
			msg += ": " + reason
		}
		return store.Outcome{Token: c.Token(), Status: lifecycle.Cancelled, Kind: lifecycle.KindCancelled,
			Error: ex.ctl.Masker().String(msg), Result: ex.ctl.Result(), Log: msg, Task: c.Task}, true
	case errors.Is(cause, errTimeout):
		return Failure(p.deps.Policies, ex.ctl.Masker(), c, lifecycle.KindTimeout,
			fmt.Sprintf("timed out after %ds: %v", c.Task.TimeoutSeconds, err), ex.ctl.Result(), now), true
	case errors.Is(cause, errStalled):
		return Failure(p.deps.Policies, ex.ctl.Masker(), c, lifecycle.KindStalled,
			fmt.Sprintf("stalled: no progress or log line since %s; stopped by its type's stall policy", ex.ctl.LastMoved().Format(time.RFC3339)), ex.ctl.Result(), now), true
	case errors.Is(cause, errShutdown):
		return Failure(p.deps.Policies, ex.ctl.Masker(), c, lifecycle.KindInterrupted,
			fmt.Sprintf("interrupted: worker %s shut down", p.cfg.ID), ex.ctl.Result(), now), true
	default:
		// An error may say when to try again (a server's Retry-After).
		after := noRetryAfter
		if d, ok := tasktype.RetryAfterOf(err); ok {
			after = d
		}
		return FailureAfter(p.deps.Policies, ex.ctl.Masker(), c, tasktype.Classify(err), err.Error(), ex.ctl.Result(), after, now), true
	}
}

// Failure builds the outcome of a failed execution: FAILED, with a new
// instance scheduled when the retry policy allows one.
func Failure(ps *tasktype.Policies, m *mask.Masker, c store.Claimed, kind lifecycle.ErrorKind, msg string, result json.RawMessage, now time.Time) store.Outcome {
	return FailureAfter(ps, m, c, kind, msg, result, noRetryAfter, now)
}

// FailureAfter is Failure for an error that asked the next attempt to wait
// retryAfter (negative: it did not): that delay replaces the policy's
// backoff, up to the policy's longest delay (Policies.NextAfter).
func FailureAfter(ps *tasktype.Policies, m *mask.Masker, c store.Claimed, kind lifecycle.ErrorKind, msg string, result json.RawMessage, retryAfter time.Duration, now time.Time) store.Outcome {
	msg = dbText(m.String(msg))
	d := ps.NextAfter(c.Task.RetryPolicy, c.Task.MaxAttempts, c.Instance.Attempt, kind, retryAfter, now)
	o := store.Outcome{
		Token:  c.Token(),
		Status: lifecycle.Failed,
		Kind:   kind,
		Error:  msg,
		Result: result,
		Log:    fmt.Sprintf("attempt %d failed (%s): %s; %s", c.Instance.Attempt, kind, firstLine(msg), d.Reason),
		Task:   c.Task,
	}
	if d.Retry {
		o.Retry = &store.Retry{RunAt: d.RunAt, Attempt: d.Attempt}
	}
	return o
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Holds reports whether this pool holds the outcome of instance id's
// execution to write: its handler has returned and the node is alive,
// whatever the execution's heartbeats say (they may wait behind the node's
// own writes). The watchdog of the same node asks it before it takes an
// execution for dead (WatchdogConfig.Holds). An execution still running
// is judged by its heartbeats as any other: a handler the pool stopped
// beating for is recovered on this node as on any other.
func (p *Pool) Holds(instanceID int) bool {
	return p.writes.holds(instanceID)
}

// release frees an execution's slot.
func (p *Pool) release(ex *execution) {
	p.running.remove(ex)
	select {
	case p.slot <- struct{}{}:
	default:
	}
}

func (p *Pool) finished(o store.Outcome, err error) {
	if err != nil {
		p.log.Warn("outcome refused: the execution had been moved on", "instance_id", o.Token.InstanceID, "status", o.Status, "err", err)
	}
}

func (p *Pool) heartbeatLoop(ctx context.Context) {
	tick := time.NewTicker(p.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p.beat(ctx)
	}
}

// beat sends one heartbeat for every running execution, and for every one
// whose handler returned but whose outcome waits to be written (a write
// that waits long — behind a burst of other writes, a database that lags
// — must not get a finished execution recovered and run again), and acts
// on the answer: stop executions that were moved on, cancel those asked
// to.
func (p *Pool) beat(ctx context.Context) {
	running := p.running.snapshot()
	unwritten := p.writes.unwritten()
	if len(running)+len(unwritten) == 0 {
		return
	}
	pulses := make([]store.Pulse, 0, len(running)+len(unwritten))
	for _, ex := range running {
		pulses = append(pulses, store.Pulse{Token: ex.c.Token(), MovedAt: ex.ctl.MovedAt()})
	}
	for _, tok := range unwritten {
		pulses = append(pulses, store.Pulse{Token: tok})
	}
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.HeartbeatInterval)
	beat, err := p.deps.Store.Pulse(callCtx, pulses)
	cancel()
	if err != nil {
		if ctx.Err() == nil && !counted(p.deps.Outages, "heartbeat", err) {
			p.log.Error("heartbeat failed", "err", err)
		}
		return
	}
	for _, tok := range beat.Lost {
		p.log.Warn("execution lost its instance; stopping its handler", "instance_id", tok.InstanceID)
		p.running.cancel(tok.InstanceID, errLost)
	}
	for _, req := range beat.CancelRequested {
		if ex := p.running.instance(req.Token.InstanceID); ex != nil {
			ex.requestCancel(req.Reason)
		}
	}
	for _, tok := range beat.Stalled {
		// The watchdog flagged it; the type says whether that stops it.
		ex := p.running.instance(tok.InstanceID)
		if ex != nil && ex.typ != nil && ex.typ.StallAction == tasktype.StallCancel {
			p.log.Warn("stopping a stalled execution", "task_id", ex.c.Task.ID, "instance_id", tok.InstanceID)
			ex.stop(errStalled)
		}
	}
}

// subscribe listens for what concerns the pool: new work and cancels.
func (p *Pool) subscribe() *events.Subscription[events.TaskChange] {
	return p.deps.Broker.SubscribeInternal(func(c events.TaskChange) bool {
		switch c.Kind {
		case events.Created, events.CancelRequested:
			return true
		case events.Transitioned:
			switch c.Task.Status {
			case lifecycle.RetryPending, lifecycle.Pending:
				// A retry scheduled, or a step released by its parents.
				return true
			case lifecycle.Executing, lifecycle.WaitingDependency:
				return false
			}
			// An execution ended (or a task was cancelled): while a type
			// is held at its cap, that may have freed one of its slots.
			return p.deps.Store.HeldAtCap()
		}
		return false
	}, changesBuffer)
}

// eventLoop listens to the broker: new work wakes the pool, and a cancel
// request stops the handler running the task at once.
func (p *Pool) eventLoop(ctx context.Context, sub *events.Subscription[events.TaskChange]) {
	for {
		p.consume(ctx, sub)
		sub.Close()
		if ctx.Err() != nil || errors.Is(sub.Err(), events.ErrClosed) {
			return
		}
		// We fell behind: look for work and cancels the slow way once.
		sub = p.subscribe()
		p.Wake()
		p.beat(ctx)
	}
}

func (p *Pool) consume(ctx context.Context, sub *events.Subscription[events.TaskChange]) {
	for {
		select {
		case <-ctx.Done():
			return
		case c, ok := <-sub.C:
			if !ok {
				return
			}
			if c.Kind == events.CancelRequested {
				if ex := p.running.task(c.Task.ID); ex != nil {
					ex.requestCancel(c.Task.CancelReason)
				}
				continue
			}
			if c.Kind == events.Transitioned && c.Task.Status != lifecycle.RetryPending && c.Task.Status != lifecycle.Pending {
				select {
				case p.capFreed <- struct{}{}:
				default:
				}
				continue
			}
			p.Wake()
		}
	}
}

// Stop stops claiming, lets running handlers finish within the shutdown
// grace period (or until ctx ends), interrupts the rest, and releases their
// instances to RETRY_PENDING (error kind INTERRUPTED, no attempt consumed).
// Nothing is left EXECUTING without a live owner.
func (p *Pool) Stop(ctx context.Context) error {
	p.stopOnce.Do(func() { p.stopErr = p.stop(ctx) })
	return p.stopErr
}

// StopClaiming stops taking work: once it returns, no claim is made and no
// handler starts. Running handlers go on (Stop ends them). A shutdown calls
// it first, before anything that may take time.
func (p *Pool) StopClaiming() {
	p.mu.Lock()
	started := p.started
	p.stopping = true
	p.mu.Unlock()
	if started {
		p.fetchCancel()
		<-p.fetchDone
	}
}

func (p *Pool) stop(ctx context.Context) error {
	p.mu.Lock()
	started := p.started
	p.mu.Unlock()
	if !started {
		return nil
	}
	// No claim may start a handler once we wait for handlers.
	p.StopClaiming()

	grace, cancel := context.WithTimeout(ctx, p.cfg.ShutdownGrace)
	defer cancel()
	if !p.waitHandlers(grace) {
		p.log.Info("interrupting handlers still running after the grace period", "running", p.Running())
		p.execCancel(errShutdown)
		wait, cancel := context.WithTimeout(context.Background(), interruptWait)
		defer cancel()
		if !p.waitHandlers(wait) {
			p.abandonRunning()
		}
	}
	p.loopCancel()
	p.loops.Wait()
	p.flushStop()
	<-p.writes.done
	p.execCancel(errShutdown)
	return nil
}

func (p *Pool) waitHandlers(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { p.handlers.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// abandonRunning releases the instances of handlers that ignore their
// context: their outcome is written now, as an interruption, and whatever
// they return later is ignored.
func (p *Pool) abandonRunning() {
	left := p.running.abandonAll()
	now := p.deps.Store.Now()
	for _, ex := range left {
		o := Failure(p.deps.Policies, p.deps.Masker, ex.c, lifecycle.KindInterrupted,
			fmt.Sprintf("interrupted: worker %s shut down and its handler did not return", p.cfg.ID), nil, now)
		p.writes.finish(context.Background(), o)
		p.log.Warn("abandoned a handler that ignored its context", "task_id", ex.c.Task.ID, "instance_id", ex.c.Instance.ID)
	}
}

// counted reports whether err was counted by the outage monitor m (an
// outage, logged once by it); otherwise the caller logs err itself.
func counted(m *outage.Monitor, source string, err error) bool {
	return m != nil && m.Failed(source, err) != nil
}

// parentResults reads, in one query, the parents' results of the claimed
// tasks that have parents (steps of workflows, tasks created with
// dependsOn); the others cost nothing here.
func (p *Pool) parentResults(ctx context.Context, claimed []store.Claimed) (map[int][]store.ParentResult, error) {
	var ids []int
	for _, c := range claimed {
		if c.Task.WorkflowID != nil || c.Task.ParentCount > 0 {
			ids = append(ids, c.Task.ID)
		}
	}
	pr, ok := p.deps.Store.(ParentReader)
	if len(ids) == 0 || !ok {
		return nil, nil
	}
	return pr.ParentResults(ctx, ids)
}

// jobTask is what a handler is told of its task.
func jobTask(t *ent.Task) tasktype.JobTask {
	return tasktype.JobTask{
		ID: t.ID, Code: t.Code, Type: t.Type, Title: t.Title, BizID: t.BizID, Input: t.Input, Priority: t.Priority,
		Owner: t.Owner, OwnerSource: t.OwnerSource, OwnerRole: t.OwnerRole, Tenant: t.Tenant, CreatedAt: t.CreatedAt,
	}
}

// jobInstance is what a handler is told of its execution.
func jobInstance(in *ent.TaskInstance, timeout time.Duration) tasktype.JobInstance {
	ji := tasktype.JobInstance{ID: in.ID, No: in.InstanceNo, Attempt: in.Attempt, WorkerID: in.WorkerID}
	if in.StartedAt != nil {
		ji.StartedAt = *in.StartedAt
		ji.Deadline = in.StartedAt.Add(timeout)
	}
	return ji
}
