package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/service"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
	"github.com/taskgraph/taskgraph/internal/telemetry"
)

// WatchdogConfig configures a Watchdog.
type WatchdogConfig struct {
	// Interval between two passes. Default: WatchdogIntervalDefault.
	Interval time.Duration
	// HeartbeatTimeout is how long an execution may go without a heartbeat
	// before its worker is presumed dead (its lease). Default:
	// HeartbeatTimeoutDefault. Keep it several heartbeat intervals long.
	HeartbeatTimeout time.Duration
	// TimeoutGrace is how long past its task's timeout an execution is left
	// to its own worker, which normally stops it first and reports why.
	// Default: TimeoutGraceDefault.
	TimeoutGrace time.Duration
	// Leader, when set, is asked before each pass; the pass is skipped when
	// it answers false (another node's watchdog leads). Default: always lead.
	Leader func(ctx context.Context) (bool, error)
	// Quiet, when set, keeps a failed pass out of the log when it returns
	// true (an outage the node's outage monitor counts and reports once).
	Quiet func(error) bool
	// StallAfter, when set, returns a task type's stallAfter (0: no stall
	// detection), which a task's own override replaces. Executions whose
	// progress and logs stood still that long while their heartbeats went
	// on are flagged (stalled_at), and un-flagged once they move again.
	StallAfter func(taskType string) time.Duration
	// Holds, when set, reports whether this node's own pool holds an
	// execution's outcome to write (by instance id; Pool.Holds): such an
	// execution is not recovered for its heartbeats, which may only wait
	// behind the node's own writes — its handler has returned on this
	// node, alive. Its timeout still ends it.
	Holds func(instanceID int) bool
	// Tracer, when set, records each recovery as a span of the recovered
	// task's trace.
	Tracer trace.Tracer
	// OnAction, when set, is told about every applied action ("stale_heartbeat",
	// "timeout", "cancel_finished", "repair", "stalled", "unstalled"), for
	// metrics.
	OnAction func(action string)
	// Logger receives the watchdog's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Defaults of WatchdogConfig.
const (
	WatchdogIntervalDefault = time.Second
	HeartbeatTimeoutDefault = 30 * time.Second
	TimeoutGraceDefault     = 5 * time.Second
)

// Watchdog recovers executions nobody will finish: those whose worker
// stopped sending heartbeats, those past their task's timeout, and cancels
// whose worker is gone. It runs independently of any worker pool, through
// the same guarded transitions: a service.Loop makes a Pass every
// Interval on the leading node. The first pass comes one Interval after
// Start, like every later one: nothing a start could recover is urgent (an
// execution is stale only a heartbeat timeout after its last beat).
type Watchdog struct {
	*service.Loop[PassResult]

	cfg      WatchdogConfig
	store    *store.Store
	policies *tasktype.Policies
	masker   *mask.Masker
	log      *slog.Logger

	// repairFrom is where the next pass's repair reads waiting instances
	// from (store.Repair). Passes run one at a time.
	repairFrom int
}

// NewWatchdog validates its configuration.
func NewWatchdog(cfg WatchdogConfig, s *store.Store, ps *tasktype.Policies, m *mask.Masker) (*Watchdog, error) {
	if s == nil || ps == nil || m == nil {
		return nil, errors.New("watchdog: store, policies and masker are required")
	}
	cfg.Interval = cmp.Or(cfg.Interval, WatchdogIntervalDefault)
	cfg.HeartbeatTimeout = cmp.Or(cfg.HeartbeatTimeout, HeartbeatTimeoutDefault)
	cfg.TimeoutGrace = cmp.Or(cfg.TimeoutGrace, TimeoutGraceDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Interval < 0 || cfg.HeartbeatTimeout < 0 || cfg.TimeoutGrace < 0 {
		return nil, errors.New("watchdog: durations must not be negative")
	}
	w := &Watchdog{cfg: cfg, store: s, policies: ps, masker: m, log: cfg.Logger.With("component", "watchdog")}
	var err error
	w.Loop, err = service.New(service.Config[PassResult]{
		Name: "watchdog", Interval: cfg.Interval, Delay: cfg.Interval,
		Leader: cfg.Leader, Quiet: cfg.Quiet, Logger: cfg.Logger,
	}, w.Pass)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// PassResult counts what one pass did.
type PassResult struct {
	Examined        int
	StaleHeartbeats int
	TimedOut        int
	CancelsFinished int
	Stalled         int // flagged as stalled
	Unstalled       int // moved again, flag cleared
	Refused         int // moved on by someone else meanwhile
	Repaired        int // tasks and instances made to agree again (store.Repair)
}

// Pass makes one pass, as the system (it works for the whole node),
// whether or not this node leads: the Loop asks Leader first. Passes run
// one at a time.
func (w *Watchdog) Pass(ctx context.Context) (PassResult, error) {
	ctx = auth.NewSystemContext(ctx)
	var res PassResult
	rep, err := w.store.Repair(ctx, w.repairFrom)
	if err != nil {
		return res, fmt.Errorf("watchdog: %w", err)
	}
	w.repairFrom, res.Repaired = rep.Next, rep.Mended
	for range rep.Mended {
		if w.cfg.OnAction != nil {
			w.cfg.OnAction("repair")
		}
	}
	running, err := w.store.Executing(ctx)
	if err != nil {
		return res, fmt.Errorf("watchdog: %w", err)
	}
	res.Examined = len(running)
	now := w.store.Now()
	staleBefore := now.Add(-w.cfg.HeartbeatTimeout)
	var outcomes []store.Outcome
	var counters []*int // which PassResult counter each outcome adds to
	var actions []string
	var acted []store.Claimed     // the execution each outcome ends
	var stallable []store.Claimed // alive, in time: stall detection looks at them
	for _, c := range running {
		in, tk := c.Instance, c.Task
		hb := in.HeartbeatAt
		if hb == nil {
			hb = in.StartedAt
		}
		stale := hb != nil && hb.Before(staleBefore) && (w.cfg.Holds == nil || !w.cfg.Holds(in.ID))
		var started time.Time
		if in.StartedAt != nil {
			started = *in.StartedAt
		}
		deadline := started.Add(time.Duration(tk.TimeoutSeconds)*time.Second + w.cfg.TimeoutGrace)
		switch {
		case stale && tk.CancelRequested:
			msg := fmt.Sprintf("watchdog: cancel finished: worker %s stopped sending heartbeats at %s", in.WorkerID, hb.Format(time.RFC3339))
			outcomes = append(outcomes, store.Outcome{
				Token: c.Token(), Status: lifecycle.Cancelled, Kind: lifecycle.KindCancelled,
				Error: msg, StaleBefore: staleBefore, Log: msg, Task: tk,
			})
			counters = append(counters, &res.CancelsFinished)
			acted = append(acted, c)
			actions = append(actions, "cancel_finished")
		case stale:
			msg := fmt.Sprintf("watchdog: worker %s stopped sending heartbeats at %s (lease of %s expired)", in.WorkerID, hb.Format(time.RFC3339), w.cfg.HeartbeatTimeout)
			o := Failure(w.policies, w.masker, c, lifecycle.KindTimeout, msg, nil, now)
			o.StaleBefore = staleBefore
			outcomes = append(outcomes, o)
			counters = append(counters, &res.StaleHeartbeats)
			acted = append(acted, c)
			actions = append(actions, "stale_heartbeat")
		case !started.IsZero() && now.After(deadline):
			msg := fmt.Sprintf("watchdog: exceeded the timeout of %ds (started %s on worker %s, which did not stop it)", tk.TimeoutSeconds, started.Format(time.RFC3339), in.WorkerID)
			outcomes = append(outcomes, Failure(w.policies, w.masker, c, lifecycle.KindTimeout, msg, nil, now))
			counters = append(counters, &res.TimedOut)
			acted = append(acted, c)
			actions = append(actions, "timeout")
		default:
			stallable = append(stallable, c)
		}
	}
	if err := w.stalls(ctx, stallable, now, &res); err != nil {
		return res, err
	}
	if len(outcomes) == 0 {
		return res, nil
	}
	errs, err := w.store.Finish(ctx, outcomes)
	if err != nil {
		return res, fmt.Errorf("watchdog: %w", err)
	}
	for i, o := range outcomes {
		if errs[i] != nil {
			res.Refused++
			w.log.Info("watchdog action refused; the execution moved on", "instance_id", o.Token.InstanceID, "err", errs[i])
			continue
		}
		*counters[i]++
		if w.cfg.OnAction != nil {
			w.cfg.OnAction(actions[i])
		}
		w.traceRecovery(ctx, acted[i], actions[i], o)
		w.log.Warn("watchdog acted", "instance_id", o.Token.InstanceID, "status", o.Status, "error", o.Error, "retry", o.Retry != nil)
	}
	return res, nil
}

// traceRecovery records what the watchdog did to c's execution as a span
// of its task's trace (the trace that created it), if tracing is on.
func (w *Watchdog) traceRecovery(ctx context.Context, c store.Claimed, action string, o store.Outcome) {
	if w.cfg.Tracer == nil {
		return
	}
	if c.Task.TraceParent != nil {
		ctx = telemetry.ContextWithParent(ctx, *c.Task.TraceParent)
	}
	_, span := w.cfg.Tracer.Start(ctx, telemetry.SpanRecover, trace.WithAttributes(
		telemetry.AttrTaskID.Int(c.Task.ID),
		telemetry.AttrTaskCode.String(c.Task.Code),
		telemetry.AttrTaskType.String(c.Task.Type),
		telemetry.AttrInstanceID.Int(c.Instance.ID),
		telemetry.AttrAttempt.Int(c.Instance.Attempt),
		telemetry.AttrWorker.String(c.Instance.WorkerID),
		telemetry.AttrAction.String(action),
		telemetry.AttrOutcome.String(string(o.Status)),
		telemetry.AttrErrorKind.String(string(o.Kind)),
	))
	span.End()
}

// stalls flags the executions among running whose progress and logs stood
// still for their stallAfter (their heartbeats are fresh: the caller left
// out those it recovers), and clears the flag of those that moved since.
// Whether a flagged execution is also stopped is its worker's business
// (its type's StallAction, seen with the next heartbeat).
func (w *Watchdog) stalls(ctx context.Context, running []store.Claimed, now time.Time, res *PassResult) error {
	var ids []int
	for _, c := range running {
		ids = append(ids, c.Task.ID)
	}
	overrides, err := w.store.StallOverrides(ctx, ids)
	if err != nil {
		return fmt.Errorf("watchdog: %w", err)
	}
	var marks []store.StallMark
	for _, c := range running {
		in := c.Instance
		after, ok := overrides[c.Task.ID]
		if !ok && w.cfg.StallAfter != nil {
			after = w.cfg.StallAfter(c.Task.Type)
		}
		moved := in.ProgressAt
		if moved == nil {
			moved = in.StartedAt
		}
		stalled := after > 0 && moved != nil && now.Sub(*moved) >= after
		switch {
		case stalled && in.StalledAt == nil:
			marks = append(marks, store.StallMark{Token: c.Token(), Stalled: true, MovedBefore: now.Add(-after),
				Log: fmt.Sprintf("watchdog: stalled: no progress or log line since %s (stallAfter %s) while its worker %s kept sending heartbeats",
					moved.Format(time.RFC3339), after, in.WorkerID)})
		case !stalled && in.StalledAt != nil:
			marks = append(marks, store.StallMark{Token: c.Token(), Stalled: false, Log: "watchdog: moving again; no longer stalled"})
		}
	}
	if len(marks) == 0 {
		return nil
	}
	applied, err := w.store.MarkStalled(ctx, marks)
	if err != nil {
		return fmt.Errorf("watchdog: %w", err)
	}
	for i, m := range marks {
		if !applied[i] {
			continue
		}
		action := "unstalled"
		if m.Stalled {
			action = "stalled"
			res.Stalled++
			w.log.Warn("execution stalled", "instance_id", m.Token.InstanceID)
		} else {
			res.Unstalled++
			w.log.Info("execution moving again", "instance_id", m.Token.InstanceID)
		}
		if w.cfg.OnAction != nil {
			w.cfg.OnAction(action)
		}
	}
	return nil
}
