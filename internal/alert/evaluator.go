package alert

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/alertincident"
	"github.com/taskgraph/taskgraph/ent/alertrule"
	"github.com/taskgraph/taskgraph/ent/clusternode"
	"github.com/taskgraph/taskgraph/ent/predicate"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/ent/taskreview"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/service"
	"github.com/taskgraph/taskgraph/internal/store"
)

// EvaluatorConfig configures an Evaluator.
type EvaluatorConfig struct {
	// Interval between two passes of the periodic checks (stalls,
	// backlogs, the watchdog's leader, gone nodes coming back, notices
	// held back by a quiet period or a silence). Task events are handled
	// as they come. Default: IntervalDefault.
	Interval time.Duration
	// Leader, when set, is asked before each pass; only the node it
	// answers true on evaluates. Default: always.
	Leader func(ctx context.Context) (bool, error)
	// WatchdogLeader reports whether some node's watchdog leads now (for
	// NO_LEADER rules). Default: always.
	WatchdogLeader func(ctx context.Context) (bool, error)
	// HeartbeatTimeout is the watchdog's lease: an execution it failed
	// with TIMEOUT whose last heartbeat is that old lost its node
	// (NODE_GONE). Default: 30 s.
	HeartbeatTimeout time.Duration
	// Types lists the registered task types (BACKLOG rules without a
	// type watch each).
	Types func() []string
	// OnNotice, when set, is told about each notice handed to delivery
	// ("OPENED", "RECOVERED"), for metrics.
	OnNotice func(event string)
	// Quiet, when set, keeps a failed pass out of the log when it returns
	// true (an outage the node's outage monitor counts and reports once).
	Quiet  func(error) bool
	Logger *slog.Logger
}

// IntervalDefault is EvaluatorConfig.Interval's default.
const IntervalDefault = 2 * time.Second

// batchDelay is the least time between two passes started by task
// outcomes.
const batchDelay = 100 * time.Millisecond

// noLeaderDefault is how long no watchdog may lead before a NO_LEADER rule
// without a window fires.
const noLeaderDefault = 30 * time.Second

// Evaluator applies the rules, on one node at a time. Task outcomes come
// from the events broker (on PostgreSQL the relay brings other nodes'; the
// evaluator subscribes only while it leads and some rule needs them);
// stalls, backlogs and gone nodes from cheap indexed reads of the running
// and waiting executions. It never scans the task table.
//
// A service.Loop makes a Pass every Interval on the leading node, and
// sooner when task outcomes arrive (gathered for batchDelay into one pass)
// or rules change (Wake). The first pass comes one Interval after Start:
// it subscribes to task outcomes, which matter only once the node leads.
type Evaluator struct {
	*service.Loop[PassResult]

	cfg    EvaluatorConfig
	svc    *Service
	store  *store.Store
	broker *events.Broker
	log    *slog.Logger

	// force makes the next pass of the loop run the periodic checks (the
	// rules changed).
	force atomic.Bool

	// inbox holds the task outcomes that inSub brought since the last pass
	// (forward moves them there); lost says the broker ended inSub (the
	// evaluator fell behind).
	inMu  sync.Mutex
	inSub *events.Subscription[events.TaskChange]
	inbox []events.TaskChange
	lost  bool

	// Guarded by running a pass at a time (mu).
	mu            sync.Mutex
	sub           *events.Subscription[events.TaskChange]
	lastCheck     time.Time
	windows       map[string][]time.Time // FAILURE_RATE: failures per rule and subject
	seen          map[int]time.Time      // failed executions already counted
	stalled       map[int]bool           // stalled executions already counted
	noLeaderSince time.Time
	rules         map[int]*ent.AlertRule
	open          map[string]*ent.AlertIncident // by rule and subject
	deltas        map[string]*delta
}

// delta is what a pass adds to an incident, written once per pass.
type delta struct {
	rule     *ent.AlertRule
	subject  string
	count    int
	taskID   int
	firstID  int
	summary  string
	lastSeen time.Time
}

// NewEvaluator returns a stopped evaluator.
func NewEvaluator(cfg EvaluatorConfig, svc *Service, broker *events.Broker) (*Evaluator, error) {
	if svc == nil || broker == nil {
		return nil, errors.New("alert: evaluator needs the service and the broker")
	}
	cfg.Interval = cmp.Or(cfg.Interval, IntervalDefault)
	cfg.HeartbeatTimeout = cmp.Or(cfg.HeartbeatTimeout, 30*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Interval < 0 || cfg.HeartbeatTimeout < 0 {
		return nil, errors.New("alert: durations must not be negative")
	}
	e := &Evaluator{cfg: cfg, svc: svc, store: svc.cfg.Store, broker: broker, log: cfg.Logger.With("component", "alert-evaluator")}
	e.reset()
	var leader func(context.Context) (bool, error)
	if cfg.Leader != nil {
		leader = func(ctx context.Context) (bool, error) {
			led, err := cfg.Leader(ctx)
			if err == nil && !led {
				// Another node evaluates: stop receiving task outcomes.
				e.mu.Lock()
				e.unsubscribe()
				e.mu.Unlock()
			}
			return led, err
		}
	}
	var err error
	e.Loop, err = service.New(service.Config[PassResult]{
		Name: "alert-evaluator", Interval: cfg.Interval, Delay: cfg.Interval, Settle: batchDelay,
		Leader: leader, Quiet: cfg.Quiet, Logger: cfg.Logger,
	}, func(ctx context.Context) (PassResult, error) { return e.pass(ctx, e.force.Swap(false)) })
	if err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Evaluator) reset() {
	e.windows, e.seen, e.stalled, e.deltas = map[string][]time.Time{}, map[int]time.Time{}, map[int]bool{}, map[string]*delta{}
	e.noLeaderSince, e.lastCheck = time.Time{}, time.Time{}
}

// PassResult says what a pass did.
type PassResult struct {
	Changes   int // task changes handled
	Opened    int // incidents opened
	Counted   int // occurrences added to open incidents
	Recovered int // incidents resolved because the condition cleared
	Notices   int // notices handed to delivery (one per incident and event)
}

// eventKinds are the rules fed by task outcomes.
var eventKinds = []alertrule.Kind{alertrule.KindTASK_FAILED, alertrule.KindTIMEOUT, alertrule.KindFAILURE_RATE, alertrule.KindNODE_GONE}

// recoverKinds are the rules an execution of the subject's type that
// succeeds clears.
var recoverKinds = []alertrule.Kind{alertrule.KindTASK_FAILED, alertrule.KindTIMEOUT, alertrule.KindFAILURE_RATE}

// Pass makes one pass, as the system, whether or not this node leads (the
// Loop asks Leader first): task outcomes received since the last, the
// periodic checks, and the notices due.
func (e *Evaluator) Pass(ctx context.Context) (PassResult, error) {
	return e.pass(ctx, true)
}

// pass runs the periodic checks when their interval has passed, or always
// with force.
func (e *Evaluator) pass(ctx context.Context, force bool) (PassResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ctx = auth.NewSystemContext(ctx)
	var res PassResult
	now := e.store.Now()
	if err := e.load(ctx); err != nil {
		return res, err
	}
	changes := e.receive()
	res.Changes = len(changes)
	if err := e.process(ctx, now, changes, &res); err != nil {
		return res, err
	}
	if force || time.Since(e.lastCheck) >= e.cfg.Interval {
		e.lastCheck = time.Now()
		if err := e.check(ctx, now, &res); err != nil {
			return res, err
		}
	}
	if err := e.flush(ctx, &res); err != nil {
		return res, err
	}
	if err := e.notify(ctx, now, &res); err != nil {
		return res, err
	}
	return res, nil
}

// load reads the rules and the open incidents (small tables), and
// subscribes to task outcomes while a rule needs them.
func (e *Evaluator) load(ctx context.Context) error {
	rules, err := e.svc.client.AlertRule.Query().Where(alertrule.Enabled(true)).All(ctx)
	if err != nil {
		return fmt.Errorf("alert: read rules: %w", err)
	}
	e.rules = make(map[int]*ent.AlertRule, len(rules))
	needEvents := false
	for _, r := range rules {
		e.rules[r.ID] = r
		needEvents = needEvents || containsKind(eventKinds, r.Kind)
	}
	open, err := e.svc.client.AlertIncident.Query().Where(alertincident.StatusEQ(alertincident.StatusOPEN)).All(ctx)
	if err != nil {
		return fmt.Errorf("alert: read open incidents: %w", err)
	}
	e.open = make(map[string]*ent.AlertIncident, len(open))
	for _, inc := range open {
		e.open[key(inc.RuleID, inc.Subject)] = inc
	}
	switch {
	case needEvents && e.sub == nil:
		e.subscribe()
	case !needEvents && e.sub != nil:
		e.unsubscribe()
	}
	return nil
}

func containsKind(ks []alertrule.Kind, k alertrule.Kind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

func key(ruleID int, subject string) string { return fmt.Sprintf("%d/%s", ruleID, subject) }

// subscribe listens for task outcomes. It is a client subscription (not an
// internal one): on PostgreSQL the relay then re-reads other nodes'
// changes in full, on this node only, and only while it leads with rules
// that need them. forward moves what it brings to the inbox and wakes the
// loop.
func (e *Evaluator) subscribe() {
	sub := e.broker.SubscribeTasks(func(c events.TaskChange) bool {
		if c.Kind != events.Transitioned || strings.HasPrefix(c.Task.Type, "alert.") {
			return false
		}
		switch c.Task.Status {
		case lifecycle.Failed, lifecycle.RetryPending, lifecycle.Success:
			return true
		}
		return false
	}, 1<<16)
	e.sub = sub
	e.inMu.Lock()
	e.inSub, e.inbox, e.lost = sub, nil, false
	e.inMu.Unlock()
	go e.forward(sub)
}

// forward moves sub's task outcomes to the inbox, waking the loop, until
// sub ends: closed by unsubscribe, or by the broker when the evaluator
// fell behind (lost).
func (e *Evaluator) forward(sub *events.Subscription[events.TaskChange]) {
	for c := range sub.C {
		e.inMu.Lock()
		current := e.inSub == sub
		if current {
			e.inbox = append(e.inbox, c)
		}
		e.inMu.Unlock()
		if current {
			e.Loop.Wake()
		}
	}
	e.inMu.Lock()
	lost := e.inSub == sub && sub.Err() != nil
	e.lost = e.lost || lost
	e.inMu.Unlock()
	if lost {
		e.Loop.Wake()
	}
}

func (e *Evaluator) unsubscribe() {
	if e.sub != nil {
		e.sub.Close()
		e.sub = nil
	}
	e.inMu.Lock()
	e.inSub, e.inbox, e.lost = nil, nil, false
	e.inMu.Unlock()
	e.reset()
}

// receive takes what the inbox holds now.
func (e *Evaluator) receive() []events.TaskChange {
	e.inMu.Lock()
	out, lost := e.inbox, e.lost
	e.inbox, e.lost = nil, false
	e.inMu.Unlock()
	if lost && e.sub != nil {
		e.log.Warn("task outcomes were lost (the evaluator fell behind); counting again from now", "err", e.sub.Err())
		e.sub = nil
		e.subscribe()
	}
	return out
}

// matches reports whether a rule watches a task.
func matches(r *ent.AlertRule, tk *ent.Task) bool {
	return r.Tenant == taskTenant(tk) && (r.TaskType == "" || r.TaskType == tk.Type) && (r.Owner == "" || r.Owner == tk.Owner)
}

// taskTenant is the tenant a task belongs to: a rule watches its own
// tenant's tasks only.
func taskTenant(t *ent.Task) string { return t.Tenant }

// failedLookback bounds the read of the executions that ended a failure:
// only those that finished recently are new.
const failedLookback = 15 * time.Minute

// process handles task outcomes: failures count on incidents, successes
// clear the incidents of their type.
func (e *Evaluator) process(ctx context.Context, now time.Time, changes []events.TaskChange, res *PassResult) error {
	if len(changes) == 0 {
		return nil
	}
	latest := make(map[int]*ent.Task, len(changes))
	for _, c := range changes {
		if cur := latest[c.Task.ID]; cur == nil || c.Task.Version > cur.Version {
			latest[c.Task.ID] = c.Task
		}
	}
	var failed []int
	for _, tk := range latest {
		if tk.Status == lifecycle.Failed || tk.Status == lifecycle.RetryPending {
			failed = append(failed, tk.ID)
		}
	}
	if len(failed) > 0 {
		insts, err := e.svc.client.TaskInstance.Query().
			Where(taskinstance.TaskIDIn(failed...), taskinstance.StatusEQ(lifecycle.Failed), taskinstance.FinishedAtGTE(now.Add(-failedLookback))).
			Order(ent.Asc(taskinstance.FieldFinishedAt), ent.Asc(taskinstance.FieldID)).
			All(ctx)
		if err != nil {
			return fmt.Errorf("alert: read failed executions: %w", err)
		}
		last := map[int]int{} // task id -> its newest failed instance
		for _, in := range insts {
			last[in.TaskID] = max(last[in.TaskID], in.InstanceNo)
		}
		for _, in := range insts {
			if _, dup := e.seen[in.ID]; dup {
				continue
			}
			e.seen[in.ID] = now
			final := latest[in.TaskID].Status == lifecycle.Failed && last[in.TaskID] == in.InstanceNo
			e.failure(latest[in.TaskID], in, final, now)
		}
		for id, at := range e.seen {
			if now.Sub(at) > 2*failedLookback {
				delete(e.seen, id)
			}
		}
	}
	for _, tk := range latest {
		if tk.Status == lifecycle.Success {
			if err := e.success(ctx, tk, now, res); err != nil {
				return err
			}
		}
	}
	return nil
}

func (e *Evaluator) failure(tk *ent.Task, in *ent.TaskInstance, final bool, now time.Time) {
	var kind lifecycle.ErrorKind
	if in.ErrorKind != nil {
		kind = *in.ErrorKind
	}
	finished := now
	if in.FinishedAt != nil {
		finished = *in.FinishedAt
	}
	alive := in.HeartbeatAt
	if alive == nil {
		alive = in.StartedAt
	}
	// The watchdog recovers an execution as TIMEOUT when its worker's
	// heartbeats stopped for the lease; a worker's own timeout, or the
	// watchdog's of an overrun, comes with fresh heartbeats.
	nodeGone := kind == lifecycle.KindTimeout && alive != nil && finished.Sub(*alive) >= e.cfg.HeartbeatTimeout*2/3
	errLine, _, _ := strings.Cut(in.LastError, "\n")
	for _, r := range e.rules {
		if !matches(r, tk) {
			continue
		}
		subject := "type:" + tk.Type
		switch r.Kind {
		case alertrule.KindTASK_FAILED:
			if final && (r.ErrorKind == "" || r.ErrorKind == string(kind)) {
				e.add(r, subject, 1, tk.ID, fmt.Sprintf("task %s (%s) FAILED after attempt %d: %s: %s", tk.Code, tk.Type, in.Attempt, kind, errLine), now)
			}
		case alertrule.KindTIMEOUT:
			if kind == lifecycle.KindTimeout {
				e.add(r, subject, 1, tk.ID, fmt.Sprintf("an execution of task %s (%s) timed out: %s", tk.Code, tk.Type, errLine), now)
			}
		case alertrule.KindFAILURE_RATE:
			k := key(r.ID, subject)
			window := time.Duration(r.WindowSeconds) * time.Second
			times := append(e.windows[k], finished)
			for len(times) > 0 && now.Sub(times[0]) > window {
				times = times[1:]
			}
			e.windows[k] = times
			_, isOpen := e.open[k]
			_, adding := e.deltas[k]
			if isOpen || adding {
				e.add(r, subject, 1, tk.ID, fmt.Sprintf("%d failed executions of %s in the last %s; last: %s", len(times), tk.Type, window, errLine), now)
			} else if len(times) >= r.Threshold {
				e.add(r, subject, len(times), tk.ID, fmt.Sprintf("%d failed executions of %s in the last %s; last: %s", len(times), tk.Type, window, errLine), now)
			}
		case alertrule.KindNODE_GONE:
			if nodeGone && in.WorkerID != "" {
				e.add(r, "worker:"+in.WorkerID, 1, tk.ID, fmt.Sprintf("worker %s stopped sending heartbeats at %s; the watchdog recovered its executions", in.WorkerID, alive.UTC().Format(time.RFC3339)), now)
			}
		}
	}
}

// add records an occurrence, written at the end of the pass.
func (e *Evaluator) add(r *ent.AlertRule, subject string, n, taskID int, summary string, now time.Time) {
	k := key(r.ID, subject)
	d := e.deltas[k]
	if d == nil {
		d = &delta{rule: r, subject: subject, firstID: taskID}
		e.deltas[k] = d
	}
	d.count += n
	if taskID != 0 {
		d.taskID = taskID
	}
	d.summary, d.lastSeen = summary, now
}

func (e *Evaluator) success(ctx context.Context, tk *ent.Task, now time.Time, res *PassResult) error {
	for _, r := range e.rules {
		if !containsKind(recoverKinds, r.Kind) || !matches(r, tk) {
			continue
		}
		k := key(r.ID, "type:"+tk.Type)
		delete(e.windows, k)
		if d := e.deltas[k]; d != nil {
			// Failures earlier in this batch, then a success: write them
			// first, so that the incident opens and then recovers.
			if err := e.flushOne(ctx, k, d, res); err != nil {
				return err
			}
		}
		if inc := e.open[k]; inc != nil {
			if err := e.resolve(ctx, inc, fmt.Sprintf("task %s (%s) succeeded", tk.Code, tk.Type), now, res); err != nil {
				return err
			}
		}
	}
	return nil
}

// check runs the periodic, read-only checks: stalled executions, gone
// nodes seen again, backlogs, the watchdog's leader.
func (e *Evaluator) check(ctx context.Context, now time.Time, res *PassResult) error {
	byKind := map[alertrule.Kind][]*ent.AlertRule{}
	for _, r := range e.rules {
		byKind[r.Kind] = append(byKind[r.Kind], r)
	}
	openOf := func(k alertrule.Kind) []*ent.AlertIncident {
		var out []*ent.AlertIncident
		for _, inc := range e.open {
			if inc.Kind.String() == k.String() {
				out = append(out, inc)
			}
		}
		return out
	}
	// Stalled executions: the running ones flagged by the watchdog, read
	// through the index of running executions.
	if len(byKind[alertrule.KindSTALLED])+len(openOf(alertrule.KindSTALLED)) > 0 {
		insts, err := e.svc.client.TaskInstance.Query().
			Where(taskinstance.StatusEQ(lifecycle.Executing), taskinstance.StalledAtNotNil()).
			WithTask().All(ctx)
		if err != nil {
			return fmt.Errorf("alert: read stalled executions: %w", err)
		}
		now := now
		current := map[int]bool{}
		still := map[string]bool{}
		for _, in := range insts {
			current[in.ID] = true
			tk := in.Edges.Task
			if tk == nil || strings.HasPrefix(tk.Type, "alert.") {
				continue
			}
			for _, r := range byKind[alertrule.KindSTALLED] {
				if !matches(r, tk) {
					continue
				}
				subject := "type:" + tk.Type
				still[key(r.ID, subject)] = true
				if !e.stalled[in.ID] {
					e.add(r, subject, 1, tk.ID, fmt.Sprintf("task %s (%s) stalled: no progress since %s on worker %s", tk.Code, tk.Type, stalledSince(in).UTC().Format(time.RFC3339), in.WorkerID), now)
				}
			}
		}
		e.stalled = current
		for _, inc := range openOf(alertrule.KindSTALLED) {
			k := key(inc.RuleID, inc.Subject)
			if !still[k] && e.deltas[k] == nil {
				if err := e.resolve(ctx, inc, "no execution of it is stalled any more", now, res); err != nil {
					return err
				}
			}
		}
	}
	// Gone nodes that show life again (a restarted node keeping its name).
	if gone := openOf(alertrule.KindNODE_GONE); len(gone) > 0 {
		running, err := e.svc.client.TaskInstance.Query().
			Where(taskinstance.StatusEQ(lifecycle.Executing), taskinstance.HeartbeatAtGTE(now.Add(-e.cfg.HeartbeatTimeout))).
			Select(taskinstance.FieldWorkerID).All(ctx)
		if err != nil {
			return fmt.Errorf("alert: read running executions: %w", err)
		}
		alive := map[string]bool{}
		for _, in := range running {
			alive["worker:"+in.WorkerID] = true
		}
		for _, inc := range gone {
			if alive[inc.Subject] {
				if err := e.resolve(ctx, inc, "its worker is sending heartbeats again", now, res); err != nil {
					return err
				}
			}
		}
	}
	// Backlogs: the oldest waiting execution of each watched type.
	if rules := byKind[alertrule.KindBACKLOG]; len(rules) > 0 || len(openOf(alertrule.KindBACKLOG)) > 0 {
		oldest := map[string]*time.Time{}
		still := map[string]bool{}
		for _, r := range rules {
			types := []string{r.TaskType}
			if r.TaskType == "" && e.cfg.Types != nil {
				types = e.cfg.Types()
			}
			limit := time.Duration(r.WindowSeconds) * time.Second
			for _, typ := range types {
				if typ == "" || strings.HasPrefix(typ, "alert.") {
					continue
				}
				at, ok := oldest[typ]
				if !ok {
					var err error
					if at, err = e.oldestWaiting(ctx, typ); err != nil {
						return err
					}
					oldest[typ] = at
				}
				if at == nil || now.Sub(*at) < limit {
					continue
				}
				subject := "type:" + typ
				k := key(r.ID, subject)
				still[k] = true
				summary := fmt.Sprintf("the oldest waiting task of %s has waited %s (limit %s)", typ, now.Sub(*at).Round(time.Second), limit)
				if inc := e.open[k]; inc == nil {
					e.add(r, subject, 1, 0, summary, now)
				} else if err := e.touch(ctx, inc, summary, now); err != nil {
					return err
				}
			}
		}
		for _, inc := range openOf(alertrule.KindBACKLOG) {
			if !still[key(inc.RuleID, inc.Subject)] {
				if err := e.resolve(ctx, inc, "the backlog is back under its limit", now, res); err != nil {
					return err
				}
			}
		}
	}
	// Nodes whose wall clock is off the database's (their rows say by how
	// much, package nodes): one incident per node and rule.
	if rules := byKind[alertrule.KindCLOCK_SKEW]; len(rules) > 0 || len(openOf(alertrule.KindCLOCK_SKEW)) > 0 {
		live, err := e.svc.client.ClusterNode.Query().
			Where(clusternode.StoppedAtIsNil(), clusternode.ExpiresAtGT(now)).All(ctx)
		if err != nil {
			return fmt.Errorf("alert: read the nodes' clocks: %w", err)
		}
		skewed := map[string]*ent.ClusterNode{}
		for _, n := range live {
			skewed[n.Name] = n
		}
		over := func(r *ent.AlertRule, n *ent.ClusterNode) bool {
			if r.Threshold > 0 {
				limit := int64(r.Threshold) * 1000
				return n.ClockOffsetMs > limit || -n.ClockOffsetMs > limit
			}
			return n.ClockSkewed
		}
		for _, inc := range openOf(alertrule.KindCLOCK_SKEW) {
			n := skewed[inc.Subject]
			var rule *ent.AlertRule
			for _, r := range rules {
				if e.open[key(r.ID, inc.Subject)] == inc {
					rule = r
				}
			}
			if n == nil || rule == nil || !over(rule, n) {
				if err := e.resolve(ctx, inc, "the node's clock agrees with the database's, or the node is gone", now, res); err != nil {
					return err
				}
			}
		}
		for _, r := range rules {
			for name, n := range skewed {
				if over(r, n) && e.open[key(r.ID, name)] == nil {
					e.add(r, name, 1, 0, fmt.Sprintf("node %s's wall clock is %s off the database's; it runs on the database's clock, but its time sync (NTP) is broken", name, (time.Duration(n.ClockOffsetMs)*time.Millisecond).String()), now)
				}
			}
		}
	}
	// Counts per task type of what a rule's kind watches, one incident per
	// rule and type while its count is at the rule's threshold (at least
	// 1), resolved when it is not: reviews past their deadline
	// (REVIEW_OVERDUE), tasks open within the deadlines' margin
	// (DEADLINE_AT_RISK), tasks that missed their deadline within the
	// rule's window (DEADLINE_MISSED).
	perType := func(kind alertrule.Kind, preds func(r *ent.AlertRule) []predicate.Task, summary func(n int, typ string, r *ent.AlertRule) string, cleared string) error {
		rules := byKind[kind]
		if len(rules) == 0 && len(openOf(kind)) == 0 {
			return nil
		}
		still := map[string]bool{}
		for _, r := range rules {
			ps := append([]predicate.Task{task.Tenant(r.Tenant)}, preds(r)...)
			if r.TaskType != "" {
				ps = append(ps, task.Type(r.TaskType))
			}
			if r.Owner != "" {
				ps = append(ps, task.Owner(r.Owner))
			}
			var counts []struct {
				Type  string `json:"type"`
				Count int    `json:"count"`
			}
			if err := e.svc.client.Task.Query().Where(ps...).GroupBy(task.FieldType).Aggregate(ent.Count()).Scan(ctx, &counts); err != nil {
				return fmt.Errorf("alert: read %s: %w", kind, err)
			}
			for _, c := range counts {
				if c.Count < max(r.Threshold, 1) {
					continue
				}
				subject := "type:" + c.Type
				k := key(r.ID, subject)
				still[k] = true
				text := summary(c.Count, c.Type, r)
				if inc := e.open[k]; inc == nil {
					e.add(r, subject, c.Count, 0, text, now)
				} else if err := e.touch(ctx, inc, text, now); err != nil {
					return err
				}
			}
		}
		for _, inc := range openOf(kind) {
			if !still[key(inc.RuleID, inc.Subject)] {
				if err := e.resolve(ctx, inc, cleared, now, res); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := perType(alertrule.KindREVIEW_OVERDUE,
		func(*ent.AlertRule) []predicate.Task {
			return []predicate.Task{task.AttentionStatusEQ(lifecycle.ReviewPending), task.StatusEQ(lifecycle.ReviewPending), overdueReview(now)}
		},
		func(n int, typ string, _ *ent.AlertRule) string {
			return fmt.Sprintf("%d task(s) of %s wait for review past their deadline", n, typ)
		}, "no review of this type is past its deadline any more"); err != nil {
		return err
	}
	// At risk: flagged by the deadlines loop and still open (the partial
	// index of the open deadlines).
	if err := perType(alertrule.KindDEADLINE_AT_RISK,
		func(*ent.AlertRule) []predicate.Task {
			return []predicate.Task{task.DeadlineNotNil(), task.DeadlineMissedAtIsNil(), task.DeadlineMetAtIsNil(), task.DeadlineAtRiskAtNotNil()}
		},
		func(n int, typ string, _ *ent.AlertRule) string {
			return fmt.Sprintf("%d task(s) of %s are not done and their deadline is near", n, typ)
		}, "no task of this type is at risk of its deadline any more (each met or missed)"); err != nil {
		return err
	}
	if err := perType(alertrule.KindDEADLINE_MISSED,
		func(r *ent.AlertRule) []predicate.Task {
			return []predicate.Task{task.DeadlineMissedAtGT(now.Add(-missedWindow(r)))}
		},
		func(n int, typ string, r *ent.AlertRule) string {
			return fmt.Sprintf("%d task(s) of %s missed their deadline in the last %s", n, typ, missedWindow(r))
		}, "no task of this type missed its deadline within the window"); err != nil {
		return err
	}
	// The watchdog's leader.
	if rules := byKind[alertrule.KindNO_LEADER]; len(rules) > 0 || len(openOf(alertrule.KindNO_LEADER)) > 0 {
		led := true
		if e.cfg.WatchdogLeader != nil {
			var err error
			if led, err = e.cfg.WatchdogLeader(ctx); err != nil {
				return fmt.Errorf("alert: watchdog leadership: %w", err)
			}
		}
		if led {
			e.noLeaderSince = time.Time{}
			for _, inc := range openOf(alertrule.KindNO_LEADER) {
				if err := e.resolve(ctx, inc, "a watchdog leads again", now, res); err != nil {
					return err
				}
			}
		} else {
			if e.noLeaderSince.IsZero() {
				e.noLeaderSince = now
			}
			for _, r := range rules {
				limit := cmp.Or(time.Duration(r.WindowSeconds)*time.Second, noLeaderDefault)
				if now.Sub(e.noLeaderSince) >= limit && e.open[key(r.ID, "watchdog")] == nil {
					e.add(r, "watchdog", 1, 0, fmt.Sprintf("no watchdog has led since %s: nothing recovers dead workers' executions or timeouts", e.noLeaderSince.UTC().Format(time.RFC3339)), now)
				}
			}
		}
	}
	return nil
}

func stalledSince(in *ent.TaskInstance) time.Time {
	if in.ProgressAt != nil {
		return *in.ProgressAt
	}
	if in.StartedAt != nil {
		return *in.StartedAt
	}
	return time.Time{}
}

// oldestWaiting returns the run_at of the execution of typ that has waited
// longest (nil: none waits). It reads the claim index (task type,
// priority, run_at) of waiting executions: the first entry of each
// priority, one probe per priority in use, never the backlog itself.
func (e *Evaluator) oldestWaiting(ctx context.Context, typ string) (*time.Time, error) {
	rows, err := e.store.DB().QueryContext(ctx, oldestWaitingQuery(e.store.Postgres()), typ, typ, typ)
	if err != nil {
		return nil, fmt.Errorf("alert: oldest waiting %s: %w", typ, err)
	}
	defer rows.Close()
	var oldest *time.Time
	for rows.Next() {
		var v any
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("alert: oldest waiting %s: %w", typ, err)
		}
		t, ok := asTime(v)
		if ok && (oldest == nil || t.Before(*oldest)) {
			oldest = &t
		}
	}
	return oldest, rows.Err()
}

// oldestWaitingQuery is oldestWaiting's statement; its three parameters
// are the task type.
func oldestWaitingQuery(postgres bool) string {
	waiting := "status IN (" + lifecycle.QuotedList(lifecycle.WaitingStatuses...) + ")"
	q := `
WITH RECURSIVE p(pr) AS (
	SELECT (SELECT priority FROM task_instances WHERE task_type = ? AND ` + waiting + ` ORDER BY priority LIMIT 1)
	UNION ALL
	SELECT (SELECT priority FROM task_instances WHERE task_type = ? AND ` + waiting + ` AND priority > p.pr ORDER BY priority LIMIT 1)
	FROM p WHERE p.pr IS NOT NULL
)
SELECT (SELECT run_at FROM task_instances WHERE task_type = ? AND ` + waiting + ` AND priority = p.pr ORDER BY run_at LIMIT 1) FROM p WHERE p.pr IS NOT NULL`
	if postgres {
		q = strings.Replace(strings.Replace(strings.Replace(q, "?", "$1", 1), "?", "$2", 1), "?", "$3", 1)
	}
	return q
}

// asTime reads a timestamp as either driver returns it from an expression
// (SQLite gives the stored text).
func asTime(v any) (time.Time, bool) {
	switch x := v.(type) {
	case time.Time:
		return x, true
	case string:
		for _, layout := range []string{"2006-01-02 15:04:05.999999999-07:00", time.RFC3339Nano, "2006-01-02 15:04:05.999999999"} {
			if t, err := time.Parse(layout, x); err == nil {
				return t, true
			}
		}
	case []byte:
		return asTime(string(x))
	}
	return time.Time{}, false
}

// flush writes the occurrences of the pass: one write per incident.
func (e *Evaluator) flush(ctx context.Context, res *PassResult) error {
	for k, d := range e.deltas {
		if err := e.flushOne(ctx, k, d, res); err != nil {
			return err
		}
	}
	return nil
}

func (e *Evaluator) flushOne(ctx context.Context, k string, d *delta, res *PassResult) error {
	delete(e.deltas, k)
	var out *ent.AlertIncident
	opened := false
	err := e.store.Tx(ctx, func(tx *ent.Tx) error {
		opened = false
		cur, err := tx.AlertIncident.Query().
			Where(alertincident.RuleID(d.rule.ID), alertincident.Subject(d.subject), alertincident.StatusEQ(alertincident.StatusOPEN)).
			Only(ctx)
		switch {
		case ent.IsNotFound(err):
			c := tx.AlertIncident.Create().SetTenant(d.rule.Tenant).SetRuleID(d.rule.ID).SetRuleName(d.rule.Name).
				SetKind(alertincident.Kind(d.rule.Kind)).SetSubject(d.subject).SetStatus(alertincident.StatusOPEN).
				SetOccurrences(d.count).SetSummary(truncate(d.summary, 1000)).SetOpenedAt(d.lastSeen).SetLastSeenAt(d.lastSeen).
				SetUpdatedAt(d.lastSeen)
			if d.taskID != 0 {
				c.SetFirstTaskID(d.firstID).SetLastTaskID(d.taskID)
			}
			out, err = c.Save(ctx)
			opened = true
		case err != nil:
			return err
		default:
			u := tx.AlertIncident.UpdateOne(cur).AddOccurrences(d.count).SetSummary(truncate(d.summary, 1000)).
				SetLastSeenAt(d.lastSeen).SetUpdatedAt(d.lastSeen)
			if d.taskID != 0 {
				u.SetLastTaskID(d.taskID)
			}
			out, err = u.Save(ctx)
		}
		if err != nil {
			return err
		}
		return e.svc.notifyTx(ctx, tx, out.ID)
	})
	if err != nil {
		return fmt.Errorf("alert: record incident of rule %d (%s): %w", d.rule.ID, d.subject, err)
	}
	e.open[k] = out
	if opened {
		res.Opened++
		e.log.Warn("incident opened", "incident_id", out.ID, "rule", d.rule.Name, "subject", d.subject, "summary", out.Summary)
	} else {
		res.Counted += d.count
	}
	e.svc.published(out)
	return nil
}

// touch refreshes a standing incident's summary (a backlog's age) without
// counting an occurrence.
func (e *Evaluator) touch(ctx context.Context, inc *ent.AlertIncident, summary string, now time.Time) error {
	var out *ent.AlertIncident
	err := e.store.Tx(ctx, func(tx *ent.Tx) error {
		var err error
		out, err = tx.AlertIncident.UpdateOneID(inc.ID).SetSummary(truncate(summary, 1000)).SetLastSeenAt(now).SetUpdatedAt(now).Save(ctx)
		if err != nil {
			return err
		}
		return e.svc.notifyTx(ctx, tx, inc.ID)
	})
	if err != nil {
		return fmt.Errorf("alert: refresh incident %d: %w", inc.ID, err)
	}
	e.open[key(out.RuleID, out.Subject)] = out
	e.svc.published(out)
	return nil
}

// resolve closes an incident whose condition cleared.
func (e *Evaluator) resolve(ctx context.Context, inc *ent.AlertIncident, why string, now time.Time, res *PassResult) error {
	var out *ent.AlertIncident
	err := e.store.Tx(ctx, func(tx *ent.Tx) error {
		n, err := tx.AlertIncident.Update().
			Where(alertincident.ID(inc.ID), alertincident.StatusEQ(alertincident.StatusOPEN)).
			SetStatus(alertincident.StatusRESOLVED).SetResolvedAt(now).SetResolution(alertincident.ResolutionRECOVERED).
			SetResolvedBy(why).SetUpdatedAt(now).Save(ctx)
		if err != nil || n == 0 {
			return err
		}
		if out, err = tx.AlertIncident.Get(ctx, inc.ID); err != nil {
			return err
		}
		return e.svc.notifyTx(ctx, tx, inc.ID)
	})
	if err != nil {
		return fmt.Errorf("alert: resolve incident %d: %w", inc.ID, err)
	}
	delete(e.open, key(inc.RuleID, inc.Subject))
	if out != nil {
		res.Recovered++
		e.log.Info("incident recovered", "incident_id", inc.ID, "rule", inc.RuleName, "subject", inc.Subject, "why", why)
		e.svc.published(out)
	}
	return nil
}

// recentlyResolved bounds the read of resolved incidents whose recovery
// notice may be due.
const recentlyResolved = time.Hour

// notify hands due notices to delivery: the opening of incidents not yet
// announced (unless silenced, or within their rule's quiet period), and
// the recovery of announced ones. A notice to each channel is a task whose
// idempotency key names the incident and event: a new leader repeating
// the step creates nothing twice.
func (e *Evaluator) notify(ctx context.Context, now time.Time, res *PassResult) error {
	for _, inc := range e.open {
		if inc.Notified {
			continue
		}
		r := e.rules[inc.RuleID]
		if r == nil || silenced(r.SilencedUntil, now) || silenced(inc.SilencedUntil, now) {
			continue
		}
		if r.QuietSeconds > 0 && r.LastNotifiedAt != nil && now.Before(r.LastNotifiedAt.Add(time.Duration(r.QuietSeconds)*time.Second)) {
			continue
		}
		if err := e.send(ctx, r, inc, EventOpened); err != nil {
			return err
		}
		var updated *ent.AlertIncident
		err := e.store.Tx(ctx, func(tx *ent.Tx) error {
			var err error
			if updated, err = tx.AlertIncident.UpdateOneID(inc.ID).SetNotified(true).SetUpdatedAt(now).Save(ctx); err != nil {
				return err
			}
			if err := tx.AlertRule.UpdateOneID(r.ID).SetLastNotifiedAt(now).Exec(ctx); err != nil && !ent.IsNotFound(err) {
				return err
			}
			return e.svc.notifyTx(ctx, tx, inc.ID)
		})
		if err != nil {
			return fmt.Errorf("alert: mark incident %d notified: %w", inc.ID, err)
		}
		r.LastNotifiedAt = &now
		e.open[key(inc.RuleID, inc.Subject)] = updated
		e.svc.published(updated)
		res.Notices++
	}
	resolved, err := e.svc.client.AlertIncident.Query().
		Where(alertincident.StatusEQ(alertincident.StatusRESOLVED), alertincident.UpdatedAtGTE(now.Add(-recentlyResolved)),
			alertincident.Notified(true), alertincident.RecoveryNotified(false)).
		All(ctx)
	if err != nil {
		return fmt.Errorf("alert: read resolved incidents: %w", err)
	}
	for _, inc := range resolved {
		r := e.rules[inc.RuleID]
		send := r != nil && inc.Resolution != nil && *inc.Resolution == alertincident.ResolutionRECOVERED &&
			!silenced(r.SilencedUntil, now) && !silenced(inc.SilencedUntil, now)
		if send {
			if err := e.send(ctx, r, inc, EventRecovered); err != nil {
				return err
			}
			res.Notices++
		}
		err := e.store.Tx(ctx, func(tx *ent.Tx) error {
			// updated_at stays: the incident did not change for its readers.
			return tx.AlertIncident.UpdateOneID(inc.ID).SetRecoveryNotified(true).Exec(ctx)
		})
		if err != nil {
			return fmt.Errorf("alert: mark incident %d recovery notified: %w", inc.ID, err)
		}
	}
	return nil
}

func silenced(until *time.Time, now time.Time) bool { return until != nil && now.Before(*until) }

// send creates a delivery task per channel of the rule.
func (e *Evaluator) send(ctx context.Context, r *ent.AlertRule, inc *ent.AlertIncident, event string) error {
	n := Notice{Event: event, IncidentID: inc.ID, Rule: r.Name, Kind: string(r.Kind), Subject: inc.Subject,
		Summary: inc.Summary, Occurrences: inc.Occurrences, OpenedAt: inc.OpenedAt}
	if inc.ResolvedAt != nil {
		n.ResolvedAt = *inc.ResolvedAt
		if inc.ResolvedBy != "" {
			n.Summary = inc.ResolvedBy + ". Was: " + inc.Summary
		}
	}
	if inc.LastTaskID != nil {
		n.TaskID = *inc.LastTaskID
	}
	if e.svc.cfg.PublicURL != "" {
		n.Link = fmt.Sprintf("%s/console/alerts/incidents/%d", e.svc.cfg.PublicURL, inc.ID)
	}
	for _, ch := range r.ChannelIds {
		if _, err := e.svc.deliver(ctx, inc.Tenant, ch, n, BizID(inc.ID), fmt.Sprintf("%s-%s-ch%d", BizID(inc.ID), strings.ToLower(event), ch)); err != nil {
			if ent.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("alert: deliver incident %d to channel %d: %w", inc.ID, ch, err)
		}
	}
	if e.cfg.OnNotice != nil {
		e.cfg.OnNotice(event)
	}
	return nil
}

// Listening reports whether the evaluator receives task outcomes now (it
// leads, and a rule needs them).
func (e *Evaluator) Listening() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sub != nil
}

// Wake makes the running loop pass now, with the periodic checks (a rule
// changed).
func (e *Evaluator) Wake() {
	e.force.Store(true)
	e.Loop.Wake()
}

// Stop ends the loop, waits for the pass under way and stops receiving
// task outcomes.
func (e *Evaluator) Stop() {
	e.Loop.Stop()
	e.mu.Lock()
	e.unsubscribe()
	e.mu.Unlock()
}

// overdueReview selects the tasks whose open review's deadline has passed.
// missedWindow is how far back a DEADLINE_MISSED rule looks.
func missedWindow(r *ent.AlertRule) time.Duration {
	return cmp.Or(time.Duration(r.WindowSeconds)*time.Second, time.Hour)
}

func overdueReview(now time.Time) predicate.Task {
	return func(s *entsql.Selector) {
		rv := entsql.Table(taskreview.Table)
		s.Where(entsql.In(s.C(task.FieldID), entsql.Select(rv.C(taskreview.FieldTaskID)).From(rv).
			Where(entsql.And(entsql.IsNull(rv.C(taskreview.FieldDecidedAt)), entsql.NotNull(rv.C(taskreview.FieldDeadline)), entsql.LTE(rv.C(taskreview.FieldDeadline), now)))))
	}
}
