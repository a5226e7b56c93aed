package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	entschedule "github.com/taskgraph/taskgraph/ent/schedule"
	"github.com/taskgraph/taskgraph/ent/scheduleevent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/workflow"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/service"
	"github.com/taskgraph/taskgraph/internal/store"
)

// SchedulerConfig configures a Scheduler.
type SchedulerConfig struct {
	// Interval between two passes. Default: SchedulerIntervalDefault.
	Interval time.Duration
	// MisfireThreshold is how late a slot may be fired as usual; a slot
	// found later than this (no scheduler ran: every node was down, or
	// the database was) is a misfire, handled by the schedule's misfire
	// policy. Default: MisfireThresholdDefault.
	MisfireThreshold time.Duration
	// MaxQueued bounds the slots queued behind a live run (overlap policy
	// QUEUE); more are skipped. Default: MaxQueuedDefault.
	MaxQueued int
	// Leader, when set, is asked before each pass; the pass is skipped
	// when it answers false (another node's scheduler leads). Default:
	// always lead.
	Leader func(ctx context.Context) (bool, error)
	// Quiet, when set, keeps a failed pass out of the log when it returns
	// true (an outage the node's outage monitor counts and reports once).
	Quiet func(error) bool
	// Logger receives the scheduler's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Defaults of SchedulerConfig.
const (
	SchedulerIntervalDefault = 250 * time.Millisecond
	MisfireThresholdDefault  = 5 * time.Second
	MaxQueuedDefault         = 100
	// maxSlotsPerPass bounds the slots one pass walks through for one
	// schedule (a schedule every second after a week without a scheduler
	// has 604,800): beyond it the missed slots are counted, not listed.
	maxSlotsPerPass = 10_000
	// maxSchedulesPerPass bounds one pass's reads; the rest wait for the
	// next pass.
	maxSchedulesPerPass = 500
)

// Scheduler fires due schedules: at every pass it reads the schedules
// whose next slot has come (and those with runs queued), creates their
// tasks through the engine and moves them on to their next slot. A
// service.Loop makes a Pass every Interval on the leading node. The first
// pass comes one Interval (a quarter of a second) after Start, like every
// later one: a slot found late is fired all the same, up to the misfire
// threshold.
type Scheduler struct {
	*service.Loop[PassResult]

	cfg SchedulerConfig
	svc *Service
	log *slog.Logger
}

// NewScheduler validates its configuration.
func NewScheduler(cfg SchedulerConfig, svc *Service) (*Scheduler, error) {
	if svc == nil {
		return nil, errors.New("scheduler: no schedule service")
	}
	cfg.Interval = cmp.Or(cfg.Interval, SchedulerIntervalDefault)
	cfg.MisfireThreshold = cmp.Or(cfg.MisfireThreshold, MisfireThresholdDefault)
	cfg.MaxQueued = cmp.Or(cfg.MaxQueued, MaxQueuedDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Interval < 0 || cfg.MisfireThreshold < 0 || cfg.MaxQueued < 0 {
		return nil, errors.New("scheduler: durations and limits must not be negative")
	}
	s := &Scheduler{cfg: cfg, svc: svc, log: cfg.Logger.With("component", "scheduler")}
	var err error
	s.Loop, err = service.New(service.Config[PassResult]{
		Name: "scheduler", Interval: cfg.Interval, Delay: cfg.Interval,
		Leader: cfg.Leader, Quiet: cfg.Quiet, Logger: cfg.Logger,
	}, s.Pass)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// PassResult counts what one pass did.
type PassResult struct {
	Schedules int // schedules examined
	Fired     int // tasks created
	Skipped   int // slots skipped (overlap policy SKIP, a full queue)
	Misfired  int // slots missed
	Queued    int // slots queued behind a live run
	Failed    int // slots whose task could not be created
	Stale     int // schedules changed meanwhile (their pass was discarded)
}

// Pass makes one pass, as the system, whether or not this node leads (the
// Loop asks Leader first).
func (s *Scheduler) Pass(ctx context.Context) (PassResult, error) {
	ctx = auth.NewSystemContext(ctx)
	var res PassResult
	st := s.svc.store
	now := st.Now()
	due, err := st.Client().Schedule.Query().
		Where(entschedule.Paused(false), entschedule.NextFireAtLTE(now)).
		Order(ent.Asc(entschedule.FieldNextFireAt)).
		Limit(maxSchedulesPerPass).
		All(ctx)
	if err != nil {
		return res, fmt.Errorf("scheduler: read due schedules: %w", err)
	}
	queued, err := st.Client().Schedule.Query().
		Where(entschedule.Paused(false), entschedule.QueuedCountGT(0)).
		Limit(maxSchedulesPerPass).
		All(ctx)
	if err != nil {
		return res, fmt.Errorf("scheduler: read queued schedules: %w", err)
	}
	for _, q := range queued {
		if !slices.ContainsFunc(due, func(d *ent.Schedule) bool { return d.ID == q.ID }) {
			due = append(due, q)
		}
	}
	var errs []error
	for _, sch := range due {
		res.Schedules++
		if err := s.pass(ctx, sch, now, &res); errors.Is(err, errStale) {
			res.Stale++
			s.log.Debug("schedule changed during its pass; pass discarded", "schedule_id", sch.ID)
		} else if err != nil {
			errs = append(errs, fmt.Errorf("schedule %d: %w", sch.ID, err))
		}
	}
	return res, errors.Join(errs...)
}

// run is what one pass does to one schedule: the events it will log and
// the state it leaves, written together, on condition that nobody changed
// the schedule meanwhile.
type run struct {
	sch      *ent.Schedule
	events   []line // written with the schedule's new state
	queue    []time.Time
	lastTask *ent.Task // the latest run, once looked at
	looked   bool
	fired    *ent.Task // the latest task this pass created
	firedAt  time.Time
	created  []int // the tasks this pass created
	// A workflow schedule's: the latest run, and what this pass created.
	lastWF    *ent.Workflow
	firedWF   *ent.Workflow
	createdWF []int
}

// live is the previous run of a schedule while it is live: a task, or a
// workflow with steps not finished.
type live struct {
	what  string
	task  *ent.Task // a task schedule's
	steps []int     // a workflow schedule's steps not finished
}

func (s *Scheduler) pass(ctx context.Context, sch *ent.Schedule, now time.Time, res *PassResult) error {
	r := &run{sch: sch}
	for _, q := range sch.QueuedSlots {
		t, err := time.Parse(time.RFC3339Nano, q)
		if err == nil {
			r.queue = append(r.queue, t)
		}
	}

	// 1. A run queued behind one that has ended goes first.
	if len(r.queue) > 0 {
		prev, err := s.previousRun(ctx, r)
		if err != nil {
			return err
		}
		if prev == nil {
			slot := r.queue[0]
			r.queue = r.queue[1:]
			if err := s.create(ctx, r, slot, scheduleevent.KindFIRED, "queued slot", res); err != nil {
				return err
			}
		}
	}

	// 2. The due slots, from the stored next one up to now.
	next := sch.NextFireAt
	if next != nil && !next.After(now) {
		spec, err := SpecOf(sch)
		if err != nil {
			// The stored spec no longer parses (a time zone gone from
			// the system's database): stop it, and say why.
			s.event(r, scheduleevent.KindFAILED, next, nil, fmt.Sprintf("cannot compute its slots: %v; the schedule stopped", err))
			res.Failed++
			return s.commit(ctx, r, nil, true, res)
		}
		var missed, onTime []time.Time
		extra := 0
		t, ok := *next, true
		for ok && !t.After(now) {
			switch {
			case now.Sub(t) <= s.cfg.MisfireThreshold:
				onTime = append(onTime, t)
			case len(missed) < maxSlotsPerPass:
				missed = append(missed, t)
			default:
				extra++
				if extra >= maxSlotsPerPass {
					// Count no further: jump to the present.
					t, ok = spec.Next(now.Add(-s.cfg.MisfireThreshold))
					continue
				}
			}
			t, ok = spec.Next(t)
		}
		if len(missed) > 0 {
			n := len(missed) + extra
			first, last := missed[0], missed[len(missed)-1]
			span := fmt.Sprintf("%d slot(s) missed, %s to %s, while no scheduler ran", n, first.Format(time.RFC3339), last.Format(time.RFC3339))
			if extra > 0 {
				span = fmt.Sprintf("at least %d slots missed from %s while no scheduler ran", n, first.Format(time.RFC3339))
			}
			res.Misfired += n
			switch sch.MisfirePolicy {
			case entschedule.MisfirePolicyRUN_ONCE:
				s.eventMissed(r, first, last, n, span+"; run once for all of them (misfire policy RUN_ONCE), as slot "+last.Format(time.RFC3339))
				if err := s.fire(ctx, r, last, now, res); err != nil {
					return err
				}
			default:
				s.eventMissed(r, first, last, n, span+"; skipped (misfire policy SKIP)")
			}
		}
		for _, slot := range onTime {
			if err := s.fire(ctx, r, slot, now, res); err != nil {
				return err
			}
		}
		var nextPtr *time.Time
		if ok {
			nextPtr = &t
		} else {
			s.event(r, scheduleevent.KindENDED, nil, nil, "no slot left before its end: the schedule is done")
		}
		return s.commit(ctx, r, nextPtr, true, res)
	}
	return s.commit(ctx, r, next, false, res)
}

// fire handles one due slot by the schedule's overlap policy.
func (s *Scheduler) fire(ctx context.Context, r *run, slot, now time.Time, res *PassResult) error {
	// A task for this slot may exist already: created by a node that
	// stopped before it moved the schedule on, or by another node
	// firing at the same time. It is this slot's run.
	if done, err := s.slotTaken(ctx, r.sch.ID, slot); err != nil || done {
		return err
	}
	prev, err := s.previousRun(ctx, r)
	if err != nil {
		return err
	}
	if prev != nil {
		what := prev.what
		switch r.sch.OverlapPolicy {
		case entschedule.OverlapPolicySKIP:
			s.event(r, scheduleevent.KindSKIPPED, &slot, nil, what+": slot skipped (overlap policy SKIP)")
			res.Skipped++
			return nil
		case entschedule.OverlapPolicyQUEUE:
			if len(r.queue) >= s.cfg.MaxQueued {
				s.event(r, scheduleevent.KindSKIPPED, &slot, nil, fmt.Sprintf("%s and %d runs are queued behind it: slot skipped", what, len(r.queue)))
				res.Skipped++
				return nil
			}
			r.queue = append(r.queue, slot)
			s.event(r, scheduleevent.KindQUEUED, &slot, nil, what+": slot queued behind it (overlap policy QUEUE)")
			res.Queued++
			return nil
		case entschedule.OverlapPolicyCANCEL_PREVIOUS:
			reason := fmt.Sprintf("superseded by slot %s of schedule %d", slot.Format(time.RFC3339), r.sch.ID)
			ids, taskID := prev.steps, (*int)(nil)
			if prev.task != nil {
				ids, taskID = []int{prev.task.ID}, &prev.task.ID
			}
			for _, id := range ids {
				// On condition that the schedule is as this pass read it: a
				// stale pass cancels nothing, as it fires nothing. (A
				// workflow's steps waiting on one cancelled go with it.)
				_, err := s.svc.store.CancelTaskForSchedule(ctx, id, reason, r.sch.ID, r.sch.Version)
				if errors.Is(err, store.ErrScheduleMoved) {
					return errStale
				}
				if err != nil && !errors.Is(err, lifecycle.ErrInvalidTransition) && !ent.IsNotFound(err) {
					// (A run that ended meanwhile has nothing left to cancel.)
					return fmt.Errorf("cancel previous run %d: %w", id, err)
				}
			}
			s.eventNow(ctx, r, scheduleevent.KindCANCELLED_PREVIOUS, &slot, taskID, fmt.Sprintf("%s: cancelled (overlap policy CANCEL_PREVIOUS)", what))
		}
	}
	return s.create(ctx, r, slot, scheduleevent.KindFIRED, "", res)
}

// create creates the task of a slot through the engine, as the schedule's
// owner. A request the engine refuses (the type is gone, the input no
// longer validates) is logged and the slot is done; any other error ends
// the schedule's pass, to be tried again at the next.
func (s *Scheduler) create(ctx context.Context, r *run, slot time.Time, kind scheduleevent.Kind, note string, res *PassResult) error {
	wreq, isWorkflow, err := s.svc.workflowRequest(r.sch)
	if isWorkflow {
		return s.createWorkflow(ctx, r, wreq, err, slot, kind, note, res)
	}
	req, err := s.svc.taskRequest(r.sch)
	if err == nil {
		req.Deadline, err = Deadline(r.sch, slot)
	}
	if err == nil {
		var tk *ent.Task
		var created bool
		// Fired on condition that the schedule is as this pass read it
		// (or as its own firings left it): a node that read it before
		// another moved it on fires nothing.
		version := r.sch.Version
		tk, created, err = s.svc.engine.CreateScheduled(auth.NewContext(ctx, ownerOf(r.sch)), req, r.sch.ID, slot, &version)
		if errors.Is(err, store.ErrScheduleMoved) {
			return errStale
		}
		if err == nil {
			r.lastTask, r.looked, r.fired, r.firedAt = tk, true, tk, slot
			if !created {
				return nil
			}
			r.sch.Version++ // moved on with the task
			r.created = append(r.created, tk.ID)
			res.Fired++
			msg := "task " + tk.Code
			if note != "" {
				msg = note + ": " + msg
			}
			s.eventNow(ctx, r, kind, &slot, &tk.ID, msg)
			s.log.Info("schedule fired", "schedule_id", r.sch.ID, "slot", slot, "task_id", tk.ID, "code", tk.Code)
			return nil
		}
	}
	if !refused(err) {
		return err
	}
	res.Failed++
	s.eventNow(ctx, r, scheduleevent.KindFAILED, &slot, nil, "task not created: "+err.Error())
	s.log.Warn("schedule could not fire", "schedule_id", r.sch.ID, "slot", slot, "err", err)
	return nil
}

// createWorkflow creates the workflow of a slot, whole, as create creates
// a task.
func (s *Scheduler) createWorkflow(ctx context.Context, r *run, req engine.WorkflowRequest, err error, slot time.Time, kind scheduleevent.Kind, note string, res *PassResult) error {
	if err == nil {
		version := r.sch.Version
		var wf *ent.Workflow
		var created bool
		wf, created, err = s.svc.engine.CreateScheduledWorkflow(auth.NewContext(ctx, ownerOf(r.sch)), req, r.sch.ID, slot, &version)
		if errors.Is(err, store.ErrScheduleMoved) {
			return errStale
		}
		if err == nil {
			r.lastWF, r.looked, r.firedWF, r.firedAt = wf, true, wf, slot
			if !created {
				return nil
			}
			r.sch.Version++
			r.createdWF = append(r.createdWF, wf.ID)
			res.Fired++
			msg := fmt.Sprintf("workflow %s (%d steps)", wf.Code, wf.StepCount)
			if note != "" {
				msg = note + ": " + msg
			}
			s.eventNow(ctx, r, kind, &slot, nil, msg)
			s.log.Info("schedule fired", "schedule_id", r.sch.ID, "slot", slot, "workflow_id", wf.ID, "code", wf.Code)
			return nil
		}
	}
	if !refused(err) {
		return err
	}
	res.Failed++
	s.eventNow(ctx, r, scheduleevent.KindFAILED, &slot, nil, "workflow not created: "+err.Error())
	s.log.Warn("schedule could not fire", "schedule_id", r.sch.ID, "slot", slot, "err", err)
	return nil
}

// refused reports errors of a request that will not succeed by trying
// again at once: the slot is recorded FAILED and the schedule moves on (a
// quota's refusal, QUOTA_EXCEEDED, too: a later slot may find room).
func refused(err error) bool {
	var ve *engine.ValidationError
	var fe *auth.ForbiddenError
	var ue *auth.UnauthenticatedError
	var qe *store.QuotaError
	var tq *store.TenantQuotaError
	return errors.As(err, &ve) || errors.As(err, &fe) || errors.As(err, &ue) || errors.Is(err, access.ErrNoViewer) ||
		errors.As(err, &qe) || errors.As(err, &tq)
}

// slotTaken reports whether a task or a workflow exists for a slot.
func (s *Scheduler) slotTaken(ctx context.Context, id int, slot time.Time) (bool, error) {
	taken, err := takenIn(ctx, s.svc.store.Client(), id, slot)
	if err != nil {
		return false, fmt.Errorf("look up slot: %w", err)
	}
	return taken, nil
}

// takenIn reports whether a task or a workflow exists for a slot.
func takenIn(ctx context.Context, c *ent.Client, id int, slot time.Time) (bool, error) {
	at := slot.UTC().Truncate(time.Microsecond)
	taken, err := c.Task.Query().Where(task.ScheduleID(id), task.ScheduleSlot(at)).Exist(ctx)
	if err != nil || taken {
		return taken, err
	}
	return c.Workflow.Query().Where(workflow.ScheduleID(id), workflow.ScheduleSlot(at)).Exist(ctx)
}

// previousRun returns the schedule's latest run if it is still live: its
// task, or its workflow while a step is not finished (waiting for a
// parent included).
func (s *Scheduler) previousRun(ctx context.Context, r *run) (*live, error) {
	if len(r.sch.Workflow) == 0 || string(r.sch.Workflow) == "null" {
		tk, err := s.previous(ctx, r)
		if tk == nil || err != nil {
			return nil, err
		}
		return &live{what: fmt.Sprintf("the previous run (task %s) is still %s", tk.Code, tk.Status), task: tk}, nil
	}
	if !r.looked {
		r.looked = true
		if r.sch.LastWorkflowID != nil {
			wf, err := s.svc.store.Client().Workflow.Get(ctx, *r.sch.LastWorkflowID)
			if err != nil && !ent.IsNotFound(err) {
				return nil, fmt.Errorf("read previous run: %w", err)
			}
			r.lastWF = wf
		}
	}
	if r.lastWF == nil {
		return nil, nil
	}
	steps, err := s.svc.store.Client().Task.Query().
		Where(task.WorkflowID(r.lastWF.ID), task.StatusIn(append(slices.Clone(lifecycle.LiveStatuses), lifecycle.WaitingDependency)...)).
		Order(ent.Asc(task.FieldID)).
		IDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("read previous run: %w", err)
	}
	if len(steps) == 0 {
		return nil, nil
	}
	return &live{what: fmt.Sprintf("the previous run (workflow %s) has %d of its %d steps not finished", r.lastWF.Code, len(steps), r.lastWF.StepCount), steps: steps}, nil
}

// previous returns the schedule's latest run if it is still live.
func (s *Scheduler) previous(ctx context.Context, r *run) (*ent.Task, error) {
	if !r.looked {
		r.looked = true
		if r.sch.LastTaskID != nil {
			tk, err := s.svc.store.Client().Task.Get(ctx, *r.sch.LastTaskID)
			if err != nil && !ent.IsNotFound(err) {
				return nil, fmt.Errorf("read previous run: %w", err)
			}
			r.lastTask = tk
		}
	}
	if r.lastTask == nil || !r.lastTask.Status.Live() {
		return nil, nil
	}
	// Read again: a run seen live earlier in this pass may have ended.
	tk, err := s.svc.store.Client().Task.Get(ctx, r.lastTask.ID)
	if ent.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read previous run: %w", err)
	}
	r.lastTask = tk
	if !tk.Status.Live() {
		return nil, nil
	}
	return tk, nil
}

// line is a line of a schedule's log.
type line struct {
	kind   scheduleevent.Kind
	slot   *time.Time
	last   time.Time // MISFIRED: the last slot missed
	taskID *int
	missed int
	msg    string
}

// event adds a line to the schedule's log, written with its new state.
func (s *Scheduler) event(r *run, kind scheduleevent.Kind, slot *time.Time, taskID *int, msg string) {
	r.events = append(r.events, line{kind: kind, slot: slot, taskID: taskID, msg: msg})
}

func (s *Scheduler) eventMissed(r *run, first, last time.Time, n int, msg string) {
	r.events = append(r.events, line{kind: scheduleevent.KindMISFIRED, slot: &first, last: last, missed: n, msg: msg})
}

// eventNow writes a line at once: what it says (a task created, a run
// cancelled) has happened whether or not the schedule's state is written.
func (s *Scheduler) eventNow(ctx context.Context, r *run, kind scheduleevent.Kind, slot *time.Time, taskID *int, msg string) {
	now := s.svc.store.Now()
	err := s.svc.store.Tx(ctx, func(tx *ent.Tx) error {
		return tx.ScheduleEvent.Create().
			SetScheduleID(r.sch.ID).SetKind(kind).SetNillableSlot(slot).SetNillableTaskID(taskID).
			SetMessage(msg).SetNode(s.svc.node).SetCreatedAt(now).Exec(ctx)
	})
	if err != nil {
		s.log.Error("schedule log line not written", "schedule_id", r.sch.ID, "kind", kind, "message", msg, "err", err)
	}
}

// commit writes the schedule's new state and the pass's log lines, if
// the schedule is as the pass read it; otherwise (edited, paused, deleted,
// or moved on by another node) the lines are dropped: the next pass starts
// from what is stored now.
func (s *Scheduler) commit(ctx context.Context, r *run, next *time.Time, moveNext bool, res *PassResult) error {
	queueChanged := len(r.queue) != len(r.sch.QueuedSlots)
	if !moveNext && !queueChanged && r.fired == nil && r.firedWF == nil && len(r.events) == 0 {
		return nil
	}
	st := s.svc.store
	now := st.Now()
	err := st.Tx(ctx, func(tx *ent.Tx) error {
		up := tx.Schedule.Update().
			Where(entschedule.ID(r.sch.ID), entschedule.Version(r.sch.Version)).
			AddVersion(1).
			SetUpdatedAt(now)
		if moveNext {
			if next != nil {
				up.SetNextFireAt(*next)
			} else {
				up.ClearNextFireAt()
			}
		}
		queue := make([]string, len(r.queue))
		for i, t := range r.queue {
			queue[i] = t.UTC().Format(time.RFC3339Nano)
		}
		up.SetQueuedSlots(queue).SetQueuedCount(len(queue))
		if r.fired != nil {
			up.SetLastTaskID(r.fired.ID).SetLastFiredAt(r.firedAt)
		}
		if r.firedWF != nil {
			up.SetLastWorkflowID(r.firedWF.ID).SetLastFiredAt(r.firedAt)
		}
		n, err := up.Save(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return errStale
		}
		for _, e := range r.events {
			// A slot skipped, queued or missed here that another node
			// fired meanwhile (several nodes on one SQLite file all lead)
			// was not skipped: say nothing about it.
			if (e.kind == scheduleevent.KindSKIPPED || e.kind == scheduleevent.KindQUEUED) && e.slot != nil {
				taken, err := takenIn(ctx, tx.Client(), r.sch.ID, *e.slot)
				if err != nil {
					return err
				}
				if taken {
					continue
				}
			}
			if e.kind == scheduleevent.KindMISFIRED && e.slot != nil {
				q := tx.Task.Query().Where(task.ScheduleID(r.sch.ID), task.ScheduleSlotGTE(*e.slot), task.ScheduleSlotLTE(e.last))
				if len(r.created) > 0 {
					q.Where(task.IDNotIn(r.created...)) // this pass's own, a catch-up run
				}
				taken, err := q.Count(ctx)
				if err != nil {
					return err
				}
				wq := tx.Workflow.Query().Where(workflow.ScheduleID(r.sch.ID), workflow.ScheduleSlotGTE(*e.slot), workflow.ScheduleSlotLTE(e.last))
				if len(r.createdWF) > 0 {
					wq.Where(workflow.IDNotIn(r.createdWF...))
				}
				wtaken, err := wq.Count(ctx)
				if err != nil {
					return err
				}
				taken += wtaken
				if taken >= e.missed {
					continue
				}
				if taken > 0 {
					e.missed -= taken
					e.msg += fmt.Sprintf(" (%d of these slots were fired by another node)", taken)
				}
			}
			if err := tx.ScheduleEvent.Create().
				SetScheduleID(r.sch.ID).SetKind(e.kind).SetNillableSlot(e.slot).SetNillableTaskID(e.taskID).
				SetMissed(e.missed).SetMessage(e.msg).SetNode(s.svc.node).SetCreatedAt(now).
				Exec(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStale) {
		return fmt.Errorf("move schedule on: %w", err)
	}
	return nil
}

var errStale = errors.New("schedule changed meanwhile")
