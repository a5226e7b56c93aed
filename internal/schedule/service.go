package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/taskgraph/taskgraph/ent"
	entschedule "github.com/taskgraph/taskgraph/ent/schedule"
	"github.com/taskgraph/taskgraph/ent/scheduleevent"
	"github.com/taskgraph/taskgraph/ent/tenantquota"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/seal"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// MaxNameLen is the longest schedule name.
const MaxNameLen = 200

// Input is a schedule as the API gives it.
type Input struct {
	Name            string
	Cron            string
	IntervalSeconds *int
	// Timezone is an IANA name; empty: the server's.
	Timezone      string
	StartAt       *time.Time
	EndAt         *time.Time
	MisfirePolicy entschedule.MisfirePolicy // empty: SKIP
	OverlapPolicy entschedule.OverlapPolicy // empty: SKIP
	Paused        bool
	// Task is the task to create at each slot (its IdempotencyKey and
	// RunAt are not used: each slot is its own key, and runs at once).
	Task engine.CreateRequest
	// Workflow, instead of Task, is a workflow to create whole at each
	// slot (its IdempotencyKey is not used: each slot is its own key).
	Workflow *engine.WorkflowRequest
	// FinishBy is a time of day, "HH:MM" in Timezone, by which each
	// fire's task must finish: the first such time after its slot (see
	// Deadline). Empty: none.
	FinishBy string
	// FinishWithinSeconds, instead of FinishBy, gives each fire's task
	// the deadline slot + this many seconds.
	FinishWithinSeconds *int
}

// Service carries out the API's schedule requests on behalf of the viewer
// of their context: operators and admins manage schedules (an operator
// its own), every viewer reads those it may see (package access), and
// every change is audited.
type Service struct {
	store  *store.Store
	engine *engine.Engine
	sealer *seal.Sealer
	node   string
	log    *slog.Logger
	// minInterval is the deployment's floor on how often a schedule fires
	// (--min-schedule-interval), for tenants whose quota sets none; zero:
	// none (MinInterval holds).
	minInterval time.Duration
}

// SetMinInterval sets the deployment's floor on how often a schedule fires
// (its interval, or its cron's shortest gap): a schedule created, edited
// or resumed below it is refused with a *store.TenantQuotaError, unless
// its tenant's quota sets a floor of its own (tenant_quotas.
// min_schedule_interval_seconds), which replaces it. Zero: no floor.
func (s *Service) SetMinInterval(d time.Duration) { s.minInterval = d }

// MinIntervalFloor is the deployment's floor (SetMinInterval).
func (s *Service) MinIntervalFloor() time.Duration { return s.minInterval }

// checkQuota refuses, with a *store.TenantQuotaError, a schedule of tenant
// (self: its id, zero for a new one) firing more often than the tenant's
// floor, or, when it is to be enabled, one beyond the tenant's cap on
// enabled schedules. It reads the tenant's quota in tx, locking it on
// PostgreSQL so that concurrent creates count one after the other, and
// counts the tenant's other enabled schedules up to one past the cap.
func (s *Service) checkQuota(ctx context.Context, tx *ent.Tx, tenant string, self int, spec Spec, enabled bool) error {
	sys := auth.NewSystemContext(ctx)
	q := tx.TenantQuota.Query().Where(tenantquota.Tenant(tenant))
	if s.store.Postgres() {
		q.ForUpdate()
	}
	row, err := q.Only(sys)
	if err != nil && !ent.IsNotFound(err) {
		return fmt.Errorf("read quota of tenant %q: %w", tenant, err)
	}
	floor := s.minInterval
	if row != nil && row.MinScheduleIntervalSeconds != nil {
		floor = time.Duration(*row.MinScheduleIntervalSeconds) * time.Second
	}
	if floor > 0 {
		if gap := spec.ShortestGap(s.store.Now()); gap > 0 && gap < floor {
			return &store.TenantQuotaError{Tenant: tenant, Quota: store.QuotaMinScheduleInterval,
				Limit: int((floor + time.Second - 1) / time.Second), Count: int(gap / time.Second)}
		}
	}
	if !enabled || row == nil || row.MaxSchedules == nil {
		return nil
	}
	others := tx.Schedule.Query().Where(entschedule.Tenant(tenant), entschedule.Paused(false))
	if self != 0 {
		others.Where(entschedule.IDNEQ(self))
	}
	// IDs, not Count: ent's Count puts the limit on the count's one row.
	ids, err := others.Limit(*row.MaxSchedules + 1).IDs(sys)
	n := len(ids)
	if err != nil {
		return fmt.Errorf("count schedules of tenant %q: %w", tenant, err)
	}
	if n >= *row.MaxSchedules {
		return &store.TenantQuotaError{Tenant: tenant, Quota: store.QuotaMaxSchedules, Limit: *row.MaxSchedules, Count: n}
	}
	return nil
}

// NewService returns a Service. node names this process in schedule logs.
func NewService(e *engine.Engine, sealer *seal.Sealer, node string, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{store: e.Store(), engine: e, sealer: sealer, node: node, log: log.With("component", "schedule")}
}

// Preview returns the next n fire times of a spec from now, without
// saving anything.
func (s *Service) Preview(in SpecInput, n int) ([]time.Time, error) {
	now := s.store.Now()
	if in.Anchor.IsZero() {
		in.Anchor = now
	}
	spec, err := ParseSpec(in)
	if err != nil {
		return nil, validation(err)
	}
	if n < 1 || n > MaxPreview {
		return nil, &engine.ValidationError{Problems: []engine.Problem{{Field: "count", Message: fmt.Sprintf("must be between 1 and %d", MaxPreview)}}}
	}
	return spec.Preview(now, n), nil
}

// validation turns a *SpecError into the API's *engine.ValidationError.
func validation(err error) error {
	var se *SpecError
	if !errors.As(err, &se) {
		return err
	}
	ve := &engine.ValidationError{}
	for _, p := range se.Problems {
		ve.Problems = append(ve.Problems, engine.Problem{Field: p.Field, Message: p.Message})
	}
	return ve
}

// checked is a validated Input: its spec and the task it creates.
type checked struct {
	spec Spec
	task store.NewTask
	// A workflow schedule's definition, masked, and the unmasked one
	// sealed (when masking changed it).
	workflow       json.RawMessage
	workflowSealed []byte
}

// check validates in for the schedule's owner. anchor is the first slot
// of an interval schedule without a start.
func (s *Service) check(owner auth.Viewer, in Input, anchor time.Time) (checked, error) {
	ve := &engine.ValidationError{}
	add := func(field, msg string) { ve.Problems = append(ve.Problems, engine.Problem{Field: field, Message: msg}) }
	name := strings.TrimSpace(in.Name)
	switch {
	case name == "":
		add("name", "must not be empty")
	case !utf8.ValidString(name):
		add("name", "is not valid UTF-8")
	case utf8.RuneCountInString(name) > MaxNameLen:
		add("name", fmt.Sprintf("is %d characters; the limit is %d", utf8.RuneCountInString(name), MaxNameLen))
	}
	var interval time.Duration
	if in.IntervalSeconds != nil {
		interval = time.Duration(*in.IntervalSeconds) * time.Second
		if *in.IntervalSeconds <= 0 {
			add("intervalSeconds", "must be positive")
			interval = 0
		}
	}
	spec, err := ParseSpec(SpecInput{Cron: in.Cron, Interval: interval, Timezone: in.Timezone, Start: in.StartAt, End: in.EndAt, Anchor: anchor})
	if err != nil {
		var se *SpecError
		if !errors.As(err, &se) {
			return checked{}, err
		}
		for _, p := range se.Problems {
			add(p.Field, p.Message)
		}
	}
	if in.MisfirePolicy != "" && entschedule.MisfirePolicyValidator(in.MisfirePolicy) != nil {
		add("misfirePolicy", "must be SKIP or RUN_ONCE")
	}
	if in.OverlapPolicy != "" && entschedule.OverlapPolicyValidator(in.OverlapPolicy) != nil {
		add("overlapPolicy", "must be SKIP, QUEUE, CANCEL_PREVIOUS or ALLOW")
	}
	if in.FinishBy != "" || in.FinishWithinSeconds != nil {
		switch {
		case in.Workflow != nil:
			add("finishBy", "applies to a schedule of a task, not of a workflow")
		case in.FinishBy != "" && in.FinishWithinSeconds != nil:
			add("finishBy", "give finishBy or finishWithinSeconds, not both")
		case in.FinishBy != "":
			if _, err := time.Parse(finishByLayout, in.FinishBy); err != nil || len(in.FinishBy) != len(finishByLayout) {
				add("finishBy", fmt.Sprintf("%q is not a time of day HH:MM (24-hour, as 08:00)", in.FinishBy))
			}
		case *in.FinishWithinSeconds < 1 || time.Duration(*in.FinishWithinSeconds)*time.Second > tasktype.MaxFinishWithin:
			add("finishWithinSeconds", fmt.Sprintf("must be between 1 and %d", int(tasktype.MaxFinishWithin/time.Second)))
		}
	}
	var c checked
	if wf := in.Workflow; wf != nil {
		if in.Task.Type != "" {
			add("task", "give a task or a workflow, not both")
		}
		if wf.IdempotencyKey != nil {
			add("workflow.key", "each slot is its own key: give none")
		}
		req := *wf
		req.IdempotencyKey = nil
		nw, err := s.engine.ValidateWorkflow(owner, req)
		if err != nil {
			var tve *engine.ValidationError
			if !errors.As(err, &tve) {
				return checked{}, err
			}
			for _, p := range tve.Problems {
				add("workflow."+p.Field, p.Message)
			}
		} else if c.workflow, c.workflowSealed, err = s.storedWorkflow(req, nw); err != nil {
			return checked{}, err
		}
	} else {
		req := in.Task
		req.IdempotencyKey, req.RunAt = nil, nil
		task, err := s.engine.Validate(owner, req)
		if err != nil {
			var tve *engine.ValidationError
			if !errors.As(err, &tve) {
				return checked{}, err
			}
			for _, p := range tve.Problems {
				add("task."+p.Field, p.Message)
			}
		}
		c.task = task
	}
	if len(ve.Problems) > 0 {
		return checked{}, ve
	}
	c.spec = spec
	return c, nil
}

// finishByLayout is the form of a schedule's FinishBy.
const finishByLayout = "15:04"

// Deadline is the deadline a schedule gives the task of its slot: slot +
// FinishWithinSeconds, or the first FinishBy time of day strictly after
// the slot in the schedule's timezone (a 02:00 slot with "08:00": 08:00
// that day; a 09:00 slot: 08:00 the next day); nil when it gives none.
// On a day a zone's clocks skip the time, the time after the gap.
func Deadline(sch *ent.Schedule, slot time.Time) (*time.Time, error) {
	if sch.FinishWithinSeconds != nil {
		d := slot.Add(time.Duration(*sch.FinishWithinSeconds) * time.Second).UTC()
		return &d, nil
	}
	if sch.FinishBy == "" {
		return nil, nil
	}
	at, err := time.Parse(finishByLayout, sch.FinishBy)
	if err != nil {
		return nil, fmt.Errorf("schedule %d: finishBy %q: %w", sch.ID, sch.FinishBy, err)
	}
	loc := time.Local
	if sch.Timezone != "" {
		if loc, err = time.LoadLocation(sch.Timezone); err != nil {
			return nil, fmt.Errorf("schedule %d: timezone %q: %w", sch.ID, sch.Timezone, err)
		}
	}
	s := slot.In(loc)
	d := time.Date(s.Year(), s.Month(), s.Day(), at.Hour(), at.Minute(), 0, 0, loc)
	if !d.After(slot) {
		d = time.Date(s.Year(), s.Month(), s.Day()+1, at.Hour(), at.Minute(), 0, 0, loc)
	}
	d = d.UTC()
	return &d, nil
}

// ownerOf is the viewer a schedule acts as: its owner, in the role it had.
func ownerOf(sch *ent.Schedule) auth.Viewer {
	return auth.Viewer{User: sch.Owner, Role: auth.Role(sch.OwnerRole), Source: sch.OwnerSource, Tenant: sch.Tenant}
}

// SpecOf returns the spec of a stored schedule.
func SpecOf(sch *ent.Schedule) (Spec, error) {
	var interval time.Duration
	if sch.IntervalSeconds != nil {
		interval = time.Duration(*sch.IntervalSeconds) * time.Second
	}
	return ParseSpec(SpecInput{Cron: sch.Cron, Interval: interval, Timezone: sch.Timezone, Start: sch.StartAt, End: sch.EndAt, Anchor: sch.CreatedAt})
}

// InputOf returns a stored schedule as an Input (its task input unsealed),
// for an edit to start from.
func (s *Service) InputOf(sch *ent.Schedule) (Input, error) {
	in := Input{
		Name: sch.Name, Cron: sch.Cron, IntervalSeconds: sch.IntervalSeconds, Timezone: sch.Timezone,
		StartAt: sch.StartAt, EndAt: sch.EndAt, MisfirePolicy: sch.MisfirePolicy, OverlapPolicy: sch.OverlapPolicy,
		Paused: sch.Paused, FinishBy: sch.FinishBy, FinishWithinSeconds: sch.FinishWithinSeconds,
	}
	wf, isWorkflow, err := s.workflowRequest(sch)
	if err != nil {
		return Input{}, err
	}
	if isWorkflow {
		in.Workflow = &wf
		return in, nil
	}
	if in.Task, err = s.taskRequest(sch); err != nil {
		return Input{}, err
	}
	return in, nil
}

// taskRequest is the task a schedule creates, with its input unsealed.
func (s *Service) taskRequest(sch *ent.Schedule) (engine.CreateRequest, error) {
	input := json.RawMessage(sch.TaskInput)
	if len(sch.TaskInputSealed) > 0 {
		plain, err := s.sealer.Open(sch.TaskInputSealed)
		if err != nil {
			return engine.CreateRequest{}, fmt.Errorf("schedule %d: unseal task input: %w", sch.ID, err)
		}
		input = plain
	}
	return engine.CreateRequest{
		Type: sch.TaskType, Title: sch.TaskTitle, Input: input,
		Priority: sch.TaskPriority, TimeoutSeconds: sch.TaskTimeoutSeconds,
		RetryPolicy: sch.TaskRetryPolicy, MaxAttempts: sch.TaskMaxAttempts,
	}, nil
}

// act runs one audited schedule action for the viewer of ctx.
func (s *Service) act(ctx context.Context, action audit.Entry, fn func(v auth.Viewer) (*ent.Schedule, error)) (*ent.Schedule, error) {
	v, err := s.engine.Admit(ctx, 1)
	if err != nil {
		return nil, err
	}
	sch, err := func() (*ent.Schedule, error) {
		if err := v.AllowMutate("manage schedules"); err != nil {
			return nil, err
		}
		return fn(v)
	}()
	action.Err = err
	if action.Details == nil {
		action.Details = map[string]any{}
	}
	if sch != nil {
		action.Details["schedule"] = sch.ID
		action.Details["name"] = sch.Name
	}
	s.engine.Record(ctx, action)
	return sch, err
}

// Create validates and stores a schedule owned by the viewer of ctx.
func (s *Service) Create(ctx context.Context, in Input) (*ent.Schedule, error) {
	return s.act(ctx, audit.Entry{Action: audit.ScheduleCreate, Details: inputDetails(in)}, func(v auth.Viewer) (*ent.Schedule, error) {
		now := s.store.Now()
		c, err := s.check(v, in, now)
		if err != nil {
			return nil, err
		}
		next, ok := c.spec.Next(now)
		if !ok {
			return nil, &engine.ValidationError{Problems: []engine.Problem{{Field: "endAt", Message: "the schedule would never fire again: its end has passed"}}}
		}
		var out *ent.Schedule
		err = s.store.Tx(ctx, func(tx *ent.Tx) error {
			if err := s.checkQuota(ctx, tx, v.Tenant, 0, c.spec, !in.Paused); err != nil {
				return err
			}
			cr := tx.Schedule.Create().
				SetOwner(v.User).
				SetOwnerSource(v.Source).
				SetOwnerRole(string(v.Role)).
				SetTenant(v.Tenant).
				SetCreatedAt(now).
				SetUpdatedAt(now).
				SetNextFireAt(next)
			setFields(cr.Mutation(), in, c)
			out, err = cr.Save(ctx)
			return err
		})
		var qe *store.TenantQuotaError
		if errors.As(err, &qe) {
			return nil, qe
		}
		if err != nil {
			return nil, fmt.Errorf("create schedule: %w", err)
		}
		s.log.Info("schedule created", "schedule_id", out.ID, "name", out.Name, "next_fire_at", next)
		return out, nil
	})
}

// setFields writes what an Input decides to a create or an update.
func setFields(m *ent.ScheduleMutation, in Input, c checked) {
	m.SetName(strings.TrimSpace(in.Name))
	m.SetCron(strings.TrimSpace(in.Cron))
	if in.IntervalSeconds != nil {
		m.SetIntervalSeconds(*in.IntervalSeconds)
	} else {
		m.ClearIntervalSeconds()
	}
	m.SetTimezone(in.Timezone)
	setTime(m.SetStartAt, m.ClearStartAt, in.StartAt)
	setTime(m.SetEndAt, m.ClearEndAt, in.EndAt)
	m.SetMisfirePolicy(orDefault(in.MisfirePolicy, entschedule.MisfirePolicySKIP))
	m.SetOverlapPolicy(orDefault(in.OverlapPolicy, entschedule.OverlapPolicySKIP))
	m.SetPaused(in.Paused)
	m.SetFinishBy(in.FinishBy)
	setPtr(m.SetFinishWithinSeconds, m.ClearFinishWithinSeconds, in.FinishWithinSeconds)
	if c.workflow != nil {
		// A workflow schedule has no task of its own.
		m.SetWorkflow(c.workflow)
		if len(c.workflowSealed) > 0 {
			m.SetWorkflowSealed(c.workflowSealed)
		} else {
			m.ClearWorkflowSealed()
		}
		m.SetTaskType("")
		m.SetTaskTitle("")
		m.SetTaskInput(json.RawMessage("null"))
		m.ClearTaskInputSealed()
		m.ClearTaskPriority()
		m.ClearTaskTimeoutSeconds()
		m.ClearTaskRetryPolicy()
		m.ClearTaskMaxAttempts()
		return
	}
	m.ClearWorkflow()
	m.ClearWorkflowSealed()
	m.SetTaskType(c.task.Type)
	m.SetTaskTitle(c.task.Title)
	m.SetTaskInput(c.task.Input)
	if len(c.task.InputSealed) > 0 {
		m.SetTaskInputSealed(c.task.InputSealed)
	} else {
		m.ClearTaskInputSealed()
	}
	setPtr(m.SetTaskPriority, m.ClearTaskPriority, in.Task.Priority)
	setPtr(m.SetTaskTimeoutSeconds, m.ClearTaskTimeoutSeconds, in.Task.TimeoutSeconds)
	setPtr(m.SetTaskRetryPolicy, m.ClearTaskRetryPolicy, in.Task.RetryPolicy)
	setPtr(m.SetTaskMaxAttempts, m.ClearTaskMaxAttempts, in.Task.MaxAttempts)
}

func setTime(set func(time.Time), clear func(), t *time.Time) {
	if t == nil {
		clear()
		return
	}
	set(t.UTC().Truncate(time.Microsecond))
}

func setPtr[T any](set func(T), clear func(), v *T) {
	if v == nil {
		clear()
		return
	}
	set(*v)
}

func orDefault[T ~string](v, def T) T {
	if v == "" {
		return def
	}
	return v
}

func inputDetails(in Input) map[string]any {
	d := map[string]any{"name": in.Name, "type": in.Task.Type}
	if in.Workflow != nil {
		d = map[string]any{"name": in.Name, "workflow": in.Workflow.Title, "steps": len(in.Workflow.Steps)}
	}
	if in.Cron != "" {
		d["cron"] = in.Cron
	}
	if in.IntervalSeconds != nil {
		d["intervalSeconds"] = *in.IntervalSeconds
	}
	if in.Timezone != "" {
		d["timezone"] = in.Timezone
	}
	return d
}

// get reads a schedule the viewer of ctx may see (NOT_FOUND otherwise).
func (s *Service) get(ctx context.Context, id int) (*ent.Schedule, error) {
	sch, err := s.store.Client().Schedule.Get(ctx, id)
	if ent.IsNotFound(err) {
		return nil, &store.NotFoundError{Entity: "schedule", ID: id}
	}
	if err != nil {
		return nil, fmt.Errorf("read schedule %d: %w", id, err)
	}
	return sch, nil
}

// Update changes a schedule: edit receives it as an Input and changes
// what the request changes. The new settings take effect from the next
// slot after now, on every node, without a restart; a firing computed
// from the old settings meanwhile is discarded (see Scheduler).
func (s *Service) Update(ctx context.Context, id int, edit func(*Input)) (*ent.Schedule, error) {
	return s.act(ctx, audit.Entry{Action: audit.ScheduleUpdate, Details: map[string]any{"schedule": id}}, func(v auth.Viewer) (*ent.Schedule, error) {
		sch, err := s.get(ctx, id)
		if err != nil {
			return nil, err
		}
		in, err := s.InputOf(sch)
		if err != nil {
			return nil, err
		}
		edit(&in)
		c, err := s.check(ownerOf(sch), in, sch.CreatedAt)
		if err != nil {
			return nil, err
		}
		now := s.store.Now()
		next, ok := c.spec.Next(now)
		var out *ent.Schedule
		err = s.store.Tx(ctx, func(tx *ent.Tx) error {
			if err := s.checkQuota(ctx, tx, sch.Tenant, id, c.spec, !in.Paused); err != nil {
				return err
			}
			up := tx.Schedule.UpdateOneID(id).AddVersion(1).SetUpdatedAt(now)
			setFields(up.Mutation(), in, c)
			if ok {
				up.SetNextFireAt(next)
			} else {
				up.ClearNextFireAt()
			}
			out, err = up.Save(ctx)
			return err
		})
		if ent.IsNotFound(err) {
			return nil, &store.NotFoundError{Entity: "schedule", ID: id}
		}
		var qe *store.TenantQuotaError
		if errors.As(err, &qe) {
			return nil, qe
		}
		if err != nil {
			return nil, fmt.Errorf("update schedule %d: %w", id, err)
		}
		s.log.Info("schedule updated", "schedule_id", id, "next_fire_at", out.NextFireAt)
		return out, nil
	})
}

// Pause stops a schedule firing; slots that pass while it is paused are
// not fired later (they are not misfires).
func (s *Service) Pause(ctx context.Context, id int) (*ent.Schedule, error) {
	return s.act(ctx, audit.Entry{Action: audit.SchedulePause, Details: map[string]any{"schedule": id}}, func(v auth.Viewer) (*ent.Schedule, error) {
		if _, err := s.get(ctx, id); err != nil {
			return nil, err
		}
		var out *ent.Schedule
		err := s.store.Tx(ctx, func(tx *ent.Tx) (err error) {
			out, err = tx.Schedule.UpdateOneID(id).SetPaused(true).AddVersion(1).SetUpdatedAt(s.store.Now()).Save(ctx)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("pause schedule %d: %w", id, err)
		}
		return out, nil
	})
}

// Resume lets a paused schedule fire again, from its next slot after now.
func (s *Service) Resume(ctx context.Context, id int) (*ent.Schedule, error) {
	return s.act(ctx, audit.Entry{Action: audit.ScheduleResume, Details: map[string]any{"schedule": id}}, func(v auth.Viewer) (*ent.Schedule, error) {
		sch, err := s.get(ctx, id)
		if err != nil {
			return nil, err
		}
		spec, err := SpecOf(sch)
		if err != nil {
			return nil, validation(err)
		}
		now := s.store.Now()
		var out *ent.Schedule
		err = s.store.Tx(ctx, func(tx *ent.Tx) (err error) {
			if err := s.checkQuota(ctx, tx, sch.Tenant, id, spec, true); err != nil {
				return err
			}
			up := tx.Schedule.UpdateOneID(id).SetPaused(false).AddVersion(1).SetUpdatedAt(now)
			if next, ok := spec.Next(now); ok {
				up.SetNextFireAt(next)
			} else {
				up.ClearNextFireAt()
			}
			out, err = up.Save(ctx)
			return err
		})
		var qe *store.TenantQuotaError
		if errors.As(err, &qe) {
			return nil, qe
		}
		if err != nil {
			return nil, fmt.Errorf("resume schedule %d: %w", id, err)
		}
		return out, nil
	})
}

// Delete removes a schedule and its log. The tasks it created stay, and
// still name it.
func (s *Service) Delete(ctx context.Context, id int) (*ent.Schedule, error) {
	return s.act(ctx, audit.Entry{Action: audit.ScheduleDelete, Details: map[string]any{"schedule": id}}, func(v auth.Viewer) (*ent.Schedule, error) {
		sch, err := s.get(ctx, id)
		if err != nil {
			return nil, err
		}
		err = s.store.Tx(ctx, func(tx *ent.Tx) error {
			if _, err := tx.ScheduleEvent.Delete().Where(scheduleevent.ScheduleID(id)).Exec(ctx); err != nil {
				return err
			}
			return tx.Schedule.DeleteOneID(id).Exec(ctx)
		})
		if err != nil {
			return nil, fmt.Errorf("delete schedule %d: %w", id, err)
		}
		return sch, nil
	})
}

// RunNow creates the schedule's task at once, whatever its slots, paused
// or not; its slot is the time of the request. The task is the schedule
// owner's, like those it fires.
func (s *Service) RunNow(ctx context.Context, id int) (*ent.Task, error) {
	var tk *ent.Task
	_, err := s.act(ctx, audit.Entry{Action: audit.ScheduleRunNow, Details: map[string]any{"schedule": id}}, func(v auth.Viewer) (*ent.Schedule, error) {
		sch, err := s.get(ctx, id)
		if err != nil {
			return nil, err
		}
		if _, isWorkflow, err := s.workflowRequest(sch); err != nil || isWorkflow {
			if err == nil {
				err = &engine.ValidationError{Problems: []engine.Problem{{Field: "id", Message: "the schedule creates workflows: run it with runScheduleWorkflowNow"}}}
			}
			return sch, err
		}
		req, err := s.taskRequest(sch)
		if err != nil {
			return nil, err
		}
		slot := s.store.Now()
		if req.Deadline, err = Deadline(sch, slot); err != nil {
			return nil, err
		}
		tk, _, err = s.engine.CreateScheduled(auth.NewContext(ctx, ownerOf(sch)), req, id, slot, nil)
		if err != nil {
			return sch, err
		}
		err = s.store.Tx(ctx, func(tx *ent.Tx) error {
			if err := tx.ScheduleEvent.Create().
				SetScheduleID(id).SetKind(scheduleevent.KindRUN_NOW).SetSlot(slot).SetTaskID(tk.ID).
				SetMessage(fmt.Sprintf("run now by %s: task %s", v.User, tk.Code)).
				SetNode(s.node).SetCreatedAt(slot).Exec(ctx); err != nil {
				return err
			}
			// The overlap policy looks at the latest run, this one too; the
			// version moves on, so a pass that read the schedule before
			// (and would write its own latest run over this one) is
			// discarded.
			return tx.Schedule.UpdateOneID(id).SetLastTaskID(tk.ID).AddVersion(1).Exec(ctx)
		})
		if err != nil {
			return sch, fmt.Errorf("run schedule %d now: %w", id, err)
		}
		return sch, nil
	})
	if err != nil {
		return nil, err
	}
	return tk, nil
}

// RunWorkflowNow creates the schedule's workflow at once, whatever its
// slots, paused or not, as RunNow creates a task: its slot is the time of
// the request; the workflow is the schedule owner's. A schedule that
// creates tasks is a VALIDATION error.
func (s *Service) RunWorkflowNow(ctx context.Context, id int) (*ent.Workflow, error) {
	var wf *ent.Workflow
	_, err := s.act(ctx, audit.Entry{Action: audit.ScheduleRunNow, Details: map[string]any{"schedule": id}}, func(v auth.Viewer) (*ent.Schedule, error) {
		sch, err := s.get(ctx, id)
		if err != nil {
			return nil, err
		}
		req, isWorkflow, err := s.workflowRequest(sch)
		if err != nil {
			return sch, err
		}
		if !isWorkflow {
			return sch, &engine.ValidationError{Problems: []engine.Problem{{Field: "id", Message: "the schedule creates tasks: run it with runScheduleNow"}}}
		}
		slot := s.store.Now()
		wf, _, err = s.engine.CreateScheduledWorkflow(auth.NewContext(ctx, ownerOf(sch)), req, id, slot, nil)
		if err != nil {
			return sch, err
		}
		err = s.store.Tx(ctx, func(tx *ent.Tx) error {
			if err := tx.ScheduleEvent.Create().
				SetScheduleID(id).SetKind(scheduleevent.KindRUN_NOW).SetSlot(slot).
				SetMessage(fmt.Sprintf("run now by %s: workflow %s", v.User, wf.Code)).
				SetNode(s.node).SetCreatedAt(slot).Exec(ctx); err != nil {
				return err
			}
			// As RunNow: the overlap policy looks at this run too.
			return tx.Schedule.UpdateOneID(id).SetLastWorkflowID(wf.ID).AddVersion(1).Exec(ctx)
		})
		if err != nil {
			return sch, fmt.Errorf("run schedule %d now: %w", id, err)
		}
		return sch, nil
	})
	if err != nil {
		return nil, err
	}
	return wf, nil
}
