package schedule_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/auditlog"
	entschedule "github.com/taskgraph/taskgraph/ent/schedule"
	"github.com/taskgraph/taskgraph/ent/scheduleevent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/builtin"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/fakeclock"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/schedule"
	"github.com/taskgraph/taskgraph/internal/seal"
	"github.com/taskgraph/taskgraph/internal/servicetest"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// epoch is a whole second: cron slots are.
var epoch = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

var (
	adminCtx = auth.NewContext(context.Background(), auth.Viewer{User: "alice", Role: auth.RoleAdmin})
	sysCtx   = auth.NewSystemContext(context.Background())
)

func ptr[T any](v T) *T { return &v }

type bundle struct {
	clock  *fakeclock.Clock
	store  *store.Store
	engine *engine.Engine
	svc    *schedule.Service
	sealer *seal.Sealer
	dsn    string
}

func open(t *testing.T, dsn string, clock *fakeclock.Clock) bundle {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{DSN: dsn, Clock: clock.Now})
	require.NoError(t, err)
	access.Install(st.Client())
	t.Cleanup(func() { _ = st.Close() })
	reg := tasktype.NewRegistry()
	builtin.Register(reg, &builtin.Webhook{})
	ps, err := tasktype.NewPolicies(tasktype.DefaultPolicies()...)
	require.NoError(t, err)
	sealer, err := seal.New(make([]byte, seal.KeySize))
	require.NoError(t, err)
	m := mask.Default()
	rec := audit.New(st.Tx, m, func(error) string { return "ERR" }, nil, nil)
	eng := engine.New(st, reg, ps, sealer, m, engine.WithAudit(rec))
	return bundle{clock: clock, store: st, engine: eng, svc: schedule.NewService(eng, sealer, "test", nil), sealer: sealer, dsn: dsn}
}

func setup(t *testing.T, d dbtest.Driver) bundle {
	t.Helper()
	return open(t, d.DSN(t), fakeclock.New(epoch))
}

func (b bundle) scheduler(t *testing.T, cfg schedule.SchedulerConfig) *schedule.Scheduler {
	t.Helper()
	s, err := schedule.NewScheduler(cfg, b.svc)
	require.NoError(t, err)
	return s
}

// pass runs one scheduler pass at the clock's time.
func pass(t *testing.T, s *schedule.Scheduler) schedule.PassResult {
	t.Helper()
	res, err := s.Pass(context.Background())
	require.NoError(t, err)
	return res
}

func everySecond(overlap entschedule.OverlapPolicy, misfire entschedule.MisfirePolicy) schedule.Input {
	return schedule.Input{
		Name: "every second", Cron: "* * * * * *", OverlapPolicy: overlap, MisfirePolicy: misfire,
		Task: engine.CreateRequest{Type: "noop", Title: "tick"},
	}
}

// slots returns the slots of the tasks a schedule created, in order.
func (b bundle) slots(t *testing.T, id int) []time.Time {
	t.Helper()
	tasks, err := b.store.Client().Task.Query().Where(task.ScheduleID(id)).Order(ent.Asc(task.FieldScheduleSlot)).All(sysCtx)
	require.NoError(t, err)
	out := make([]time.Time, len(tasks))
	for i, tk := range tasks {
		require.NotNil(t, tk.ScheduleSlot)
		out[i] = tk.ScheduleSlot.UTC()
	}
	return out
}

func (b bundle) events(t *testing.T, id int) []*ent.ScheduleEvent {
	t.Helper()
	evs, err := b.store.Client().ScheduleEvent.Query().Where(scheduleevent.ScheduleID(id)).Order(ent.Asc(scheduleevent.FieldID)).All(sysCtx)
	require.NoError(t, err)
	return evs
}

func kinds(evs []*ent.ScheduleEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = string(e.Kind)
	}
	return out
}

func at(secs ...int) []time.Time {
	out := make([]time.Time, len(secs))
	for i, s := range secs {
		out[i] = epoch.Add(time.Duration(s) * time.Second)
	}
	return out
}

// finish moves every live task of a schedule to SUCCESS the way a worker
// would: claimed, then finished through the store.
func (b bundle) finishAll(t *testing.T) {
	t.Helper()
	claimed, err := b.store.Claim(context.Background(), "test-worker", []string{"noop", "webhook"}, 100)
	require.NoError(t, err)
	var outs []store.Outcome
	for _, c := range claimed {
		outs = append(outs, store.Outcome{Token: c.Token(), Status: lifecycle.Success})
	}
	if len(outs) > 0 {
		_, err = b.store.Finish(context.Background(), outs)
		require.NoError(t, err)
	}
}

func TestSpec(t *testing.T) {
	t.Parallel()
	t.Run("SecondsAreOptional", func(t *testing.T) {
		t.Parallel()
		five, err := schedule.ParseSpec(schedule.SpecInput{Cron: "*/15 * * * *", Timezone: "UTC"})
		require.NoError(t, err)
		require.Equal(t, at(900, 1800), five.Preview(epoch, 2))
		six, err := schedule.ParseSpec(schedule.SpecInput{Cron: "*/20 * * * * *", Timezone: "UTC"})
		require.NoError(t, err)
		require.Equal(t, at(20, 40, 60), six.Preview(epoch, 3))
	})
	t.Run("ReadsCronInItsTimeZone", func(t *testing.T) {
		t.Parallel()
		s, err := schedule.ParseSpec(schedule.SpecInput{Cron: "0 30 9 * * *", Timezone: "Asia/Shanghai"})
		require.NoError(t, err)
		// 09:30 in Shanghai (UTC+8) is 01:30 UTC.
		got := s.Preview(epoch, 2)
		require.Equal(t, []time.Time{
			time.Date(2026, 11, 30, 1, 30, 0, 0, time.UTC),
			time.Date(2026, 12, 1, 1, 30, 0, 0, time.UTC),
		}, got)
		sh, _ := time.LoadLocation("Asia/Shanghai")
		require.Equal(t, 9, got[0].In(sh).Hour())
	})
	t.Run("DescriptorsWork", func(t *testing.T) {
		t.Parallel()
		s, err := schedule.ParseSpec(schedule.SpecInput{Cron: "@hourly", Timezone: "UTC"})
		require.NoError(t, err)
		require.Equal(t, at(3600), s.Preview(epoch, 1))
	})
	t.Run("IntervalsCountFromTheirAnchorOrStart", func(t *testing.T) {
		t.Parallel()
		s, err := schedule.ParseSpec(schedule.SpecInput{Interval: 90 * time.Second, Anchor: epoch})
		require.NoError(t, err)
		require.Equal(t, at(90, 180, 270), s.Preview(epoch.Add(time.Second), 3))
		start := epoch.Add(time.Hour)
		s, err = schedule.ParseSpec(schedule.SpecInput{Interval: time.Minute, Anchor: epoch, Start: &start})
		require.NoError(t, err)
		require.Equal(t, at(3600, 3660), s.Preview(epoch, 2), "the start is the first slot")
	})
	t.Run("StartAndEndBoundTheSlots", func(t *testing.T) {
		t.Parallel()
		start, end := epoch.Add(10*time.Second), epoch.Add(12*time.Second)
		s, err := schedule.ParseSpec(schedule.SpecInput{Cron: "* * * * * *", Start: &start, End: &end})
		require.NoError(t, err)
		require.Equal(t, at(10, 11, 12), s.Preview(epoch, 10))
	})
	t.Run("RefusesWhatItCannotRead", func(t *testing.T) {
		t.Parallel()
		end := epoch
		for _, in := range []schedule.SpecInput{
			{},
			{Cron: "* * * * *", Interval: time.Minute},
			{Cron: "61 * * * *"},
			{Cron: "not cron"},
			{Cron: "CRON_TZ=UTC * * * * *"},
			{Cron: "@every 5s"},
			{Cron: "* * * * *", Timezone: "Mars/Olympus"},
			{Cron: "* * * * *", Timezone: "Local"},
			{Interval: 500 * time.Millisecond},
			{Interval: 1500 * time.Millisecond},
			{Cron: "* * * * *", Start: ptr(epoch.Add(time.Hour)), End: &end},
			{Cron: "0 0 30 2 *"},
		} {
			_, err := schedule.ParseSpec(in)
			require.Error(t, err, "%+v", in)
			require.True(t, schedule.IsSpecError(err), "%v", err)
		}
	})
}

func TestScheduler(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("FiresEverySlotOnceWithItsSlot", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			sch, err := b.svc.Create(adminCtx, everySecond(entschedule.OverlapPolicyALLOW, ""))
			require.NoError(t, err)
			require.Equal(t, epoch.Add(time.Second), sch.NextFireAt.UTC())
			s := b.scheduler(t, schedule.SchedulerConfig{})
			require.Zero(t, pass(t, s).Fired, "nothing due yet")
			for range 5 {
				b.clock.Advance(time.Second)
				require.Equal(t, 1, pass(t, s).Fired)
				require.Zero(t, pass(t, s).Fired, "a second pass at the same time fires nothing")
			}
			require.Equal(t, at(1, 2, 3, 4, 5), b.slots(t, sch.ID))
			require.Equal(t, []string{"FIRED", "FIRED", "FIRED", "FIRED", "FIRED"}, kinds(b.events(t, sch.ID)))
			tk, err := b.store.Client().Task.Query().Where(task.ScheduleID(sch.ID)).First(sysCtx)
			require.NoError(t, err)
			require.Equal(t, "alice", tk.Owner, "the schedule's owner owns its tasks")
			require.Equal(t, "tick", tk.Title)
		})
		t.Run("FiresLateSlotsWithinTheThreshold", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			sch, err := b.svc.Create(adminCtx, everySecond(entschedule.OverlapPolicyALLOW, ""))
			require.NoError(t, err)
			s := b.scheduler(t, schedule.SchedulerConfig{MisfireThreshold: 5 * time.Second})
			b.clock.Advance(3 * time.Second)
			require.Equal(t, 3, pass(t, s).Fired, "a slow pass fires every slot it finds")
			require.Equal(t, at(1, 2, 3), b.slots(t, sch.ID))
		})
		for _, tc := range []struct {
			policy entschedule.MisfirePolicy
			want   []time.Time
		}{
			{entschedule.MisfirePolicySKIP, at(1, 7)},
			{entschedule.MisfirePolicyRUN_ONCE, at(1, 6, 7)},
		} {
			t.Run("CatchesUpFiveMissedSlotsBy"+string(tc.policy), func(t *testing.T) {
				t.Parallel()
				b := setup(t, d)
				sch, err := b.svc.Create(adminCtx, everySecond(entschedule.OverlapPolicyALLOW, tc.policy))
				require.NoError(t, err)
				s := b.scheduler(t, schedule.SchedulerConfig{MisfireThreshold: 500 * time.Millisecond})
				b.clock.Advance(time.Second)
				require.Equal(t, 1, pass(t, s).Fired)
				// No scheduler runs for slots 2..6; it is back at 7.
				b.clock.Advance(6 * time.Second)
				res := pass(t, s)
				require.Equal(t, 5, res.Misfired)
				require.Equal(t, tc.want, b.slots(t, sch.ID))
				evs := b.events(t, sch.ID)
				var missed *ent.ScheduleEvent
				for _, e := range evs {
					if e.Kind == scheduleevent.KindMISFIRED {
						missed = e
					}
				}
				require.NotNil(t, missed, "%v", kinds(evs))
				require.Equal(t, 5, missed.Missed)
				require.Equal(t, epoch.Add(2*time.Second), missed.Slot.UTC())
				require.Contains(t, missed.Message, string(tc.policy))
				b.clock.Advance(time.Second)
				require.Equal(t, 1, pass(t, s).Fired, "and goes on as usual")
			})
		}
		t.Run("OverlapSkipSkipsWhileThePreviousRunIsLive", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			sch, err := b.svc.Create(adminCtx, everySecond(entschedule.OverlapPolicySKIP, ""))
			require.NoError(t, err)
			s := b.scheduler(t, schedule.SchedulerConfig{})
			b.clock.Advance(time.Second)
			pass(t, s)
			b.clock.Advance(time.Second)
			require.Equal(t, 1, pass(t, s).Skipped)
			b.finishAll(t)
			b.clock.Advance(time.Second)
			require.Equal(t, 1, pass(t, s).Fired)
			require.Equal(t, at(1, 3), b.slots(t, sch.ID))
			evs := b.events(t, sch.ID)
			require.Equal(t, []string{"FIRED", "SKIPPED", "FIRED"}, kinds(evs))
			require.Contains(t, evs[1].Message, "still PENDING")
		})
		t.Run("OverlapQueueRunsQueuedSlotsAfterThePreviousOne", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			sch, err := b.svc.Create(adminCtx, everySecond(entschedule.OverlapPolicyQUEUE, ""))
			require.NoError(t, err)
			s := b.scheduler(t, schedule.SchedulerConfig{})
			b.clock.Advance(time.Second)
			pass(t, s)
			b.clock.Advance(2 * time.Second)
			require.Equal(t, 2, pass(t, s).Queued)
			require.Equal(t, at(1), b.slots(t, sch.ID), "nothing runs beside the live run")
			got, err := b.store.Client().Schedule.Get(sysCtx, sch.ID)
			require.NoError(t, err)
			require.Equal(t, 2, got.QueuedCount)
			pass(t, s)
			require.Equal(t, at(1), b.slots(t, sch.ID), "still live: still queued")
			b.finishAll(t)
			require.Equal(t, 1, pass(t, s).Fired)
			require.Equal(t, at(1, 2), b.slots(t, sch.ID), "the oldest queued slot runs once the previous ended")
			b.finishAll(t)
			require.Equal(t, 1, pass(t, s).Fired)
			require.Equal(t, at(1, 2, 3), b.slots(t, sch.ID))
			got, err = b.store.Client().Schedule.Get(sysCtx, sch.ID)
			require.NoError(t, err)
			require.Zero(t, got.QueuedCount)
			require.Equal(t, []string{"FIRED", "QUEUED", "QUEUED", "FIRED", "FIRED"}, kinds(b.events(t, sch.ID)))
		})
		t.Run("OverlapCancelPreviousCancelsTheLiveRun", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			sch, err := b.svc.Create(adminCtx, everySecond(entschedule.OverlapPolicyCANCEL_PREVIOUS, ""))
			require.NoError(t, err)
			s := b.scheduler(t, schedule.SchedulerConfig{})
			b.clock.Advance(time.Second)
			pass(t, s)
			b.clock.Advance(time.Second)
			require.Equal(t, 1, pass(t, s).Fired)
			tasks, err := b.store.Client().Task.Query().Where(task.ScheduleID(sch.ID)).Order(ent.Asc(task.FieldID)).All(sysCtx)
			require.NoError(t, err)
			require.Len(t, tasks, 2)
			require.Equal(t, lifecycle.Cancelled, tasks[0].Status)
			require.Contains(t, tasks[0].CancelReason, "superseded by slot")
			require.Equal(t, lifecycle.Pending, tasks[1].Status)
			require.Equal(t, []string{"FIRED", "CANCELLED_PREVIOUS", "FIRED"}, kinds(b.events(t, sch.ID)))
		})
		t.Run("AnEditFiresOnTheNewExpressionAtTheNextSlot", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			in := everySecond(entschedule.OverlapPolicyALLOW, "")
			in.Cron = "*/2 * * * * *" // even seconds
			sch, err := b.svc.Create(adminCtx, in)
			require.NoError(t, err)
			s := b.scheduler(t, schedule.SchedulerConfig{})
			b.clock.Advance(2 * time.Second)
			pass(t, s)
			b.clock.Advance(500 * time.Millisecond)
			_, err = b.svc.Update(adminCtx, sch.ID, func(in *schedule.Input) { in.Cron = "1/2 * * * * *" }) // odd seconds
			require.NoError(t, err)
			for range 6 { // to 05.5
				b.clock.Advance(500 * time.Millisecond)
				pass(t, s)
			}
			require.Equal(t, at(2, 3, 5), b.slots(t, sch.ID))
		})
		t.Run("AFiringComputedBeforeAnEditIsDiscarded", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			sch, err := b.svc.Create(adminCtx, everySecond(entschedule.OverlapPolicySKIP, ""))
			require.NoError(t, err)
			s := b.scheduler(t, schedule.SchedulerConfig{})
			b.clock.Advance(time.Second)
			pass(t, s)
			// The pass that finds slot 2 skipped reads the schedule, then
			// the schedule is paused before it writes: its SKIPPED line
			// and its move to slot 3 are dropped.
			b.clock.Advance(time.Second)
			_, err = b.svc.Pause(adminCtx, sch.ID)
			require.NoError(t, err)
			require.Zero(t, pass(t, s).Schedules, "a paused schedule is not read")
			_, err = b.svc.Resume(adminCtx, sch.ID)
			require.NoError(t, err)
			got, err := b.store.Client().Schedule.Get(sysCtx, sch.ID)
			require.NoError(t, err)
			require.Equal(t, epoch.Add(3*time.Second), got.NextFireAt.UTC(), "resumed from the next slot after now: slot 2 passed while paused and is no misfire")
		})
		t.Run("TwoSchedulersFireEachSlotOnce", func(t *testing.T) {
			t.Parallel()
			dsn := d.DSN(t)
			clock := fakeclock.New(epoch)
			a, b := open(t, dsn, clock), open(t, dsn, clock)
			sch, err := a.svc.Create(adminCtx, everySecond(entschedule.OverlapPolicyALLOW, ""))
			require.NoError(t, err)
			// Neither is led: both fire, and the slot's key decides.
			sa, sb := a.scheduler(t, schedule.SchedulerConfig{}), b.scheduler(t, schedule.SchedulerConfig{})
			for range 10 {
				clock.Advance(time.Second)
				var wg sync.WaitGroup
				var fired [2]int
				for i, s := range []*schedule.Scheduler{sa, sb} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						res, err := s.Pass(context.Background())
						if err != nil {
							t.Error(err)
						}
						fired[i] = res.Fired
					}()
				}
				wg.Wait()
				require.Equal(t, 1, fired[0]+fired[1])
			}
			require.Equal(t, at(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), a.slots(t, sch.ID))
			n := 0
			for _, e := range a.events(t, sch.ID) {
				require.Equal(t, scheduleevent.KindFIRED, e.Kind)
				n++
			}
			require.Equal(t, 10, n)
		})
		t.Run("OnlyTheLeaderFires", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			sch, err := b.svc.Create(adminCtx, everySecond(entschedule.OverlapPolicyALLOW, ""))
			require.NoError(t, err)
			var leads atomic.Bool
			s := b.scheduler(t, schedule.SchedulerConfig{Leader: func(context.Context) (bool, error) { return leads.Load(), nil }})
			b.clock.Advance(time.Second)
			require.False(t, s.RunOnce(context.Background()), "another node leads")
			require.Empty(t, b.slots(t, sch.ID))
			leads.Store(true)
			require.True(t, s.RunOnce(context.Background()))
			require.Equal(t, at(1), b.slots(t, sch.ID))
		})
		t.Run("StartStopStress", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			s := b.scheduler(t, schedule.SchedulerConfig{Interval: time.Millisecond})
			servicetest.StressStartStop(t, s)
			require.False(t, s.Running())
		})
		t.Run("AStoppedSchedulerLeavesTheSlotToTheKey", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			sch, err := b.svc.Create(adminCtx, everySecond(entschedule.OverlapPolicySKIP, ""))
			require.NoError(t, err)
			// A node created slot 1's task and died before moving the
			// schedule on: the next pass finds the task, not an overlap.
			req := engine.CreateRequest{Type: "noop", Title: "tick"}
			_, created, err := b.engine.CreateScheduled(adminCtx, req, sch.ID, epoch.Add(time.Second), nil)
			require.NoError(t, err)
			require.True(t, created)
			_, created, err = b.engine.CreateScheduled(adminCtx, req, sch.ID, epoch.Add(time.Second), nil)
			require.NoError(t, err)
			require.False(t, created, "one task per slot")
			b.clock.Advance(time.Second)
			res := pass(t, b.scheduler(t, schedule.SchedulerConfig{}))
			require.Zero(t, res.Fired)
			require.Zero(t, res.Skipped)
			require.Equal(t, at(1), b.slots(t, sch.ID))
			got, err := b.store.Client().Schedule.Get(sysCtx, sch.ID)
			require.NoError(t, err)
			require.Equal(t, epoch.Add(2*time.Second), got.NextFireAt.UTC())
		})
		t.Run("AFiringThatReadTheScheduleStaleCreatesNothing", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			sch, err := b.svc.Create(adminCtx, everySecond(entschedule.OverlapPolicyALLOW, ""))
			require.NoError(t, err)
			read := sch.Version
			// Another node moved the schedule on (or it was edited) after
			// this pass read it: the pass's firing is refused, whole.
			_, err = b.svc.Update(adminCtx, sch.ID, func(in *schedule.Input) { in.Name = "edited" })
			require.NoError(t, err)
			req := engine.CreateRequest{Type: "noop", Title: "tick"}
			_, _, err = b.engine.CreateScheduled(adminCtx, req, sch.ID, epoch.Add(time.Second), &read)
			require.ErrorIs(t, err, store.ErrScheduleMoved)
			require.Empty(t, b.slots(t, sch.ID))
			n, err := b.store.Client().AuditLog.Query().Where(auditlog.ActionEQ(audit.Create)).Count(sysCtx)
			require.NoError(t, err)
			require.Zero(t, n, "nothing was done: nothing to audit")
			// Nor does it cancel the previous run (overlap policy
			// CANCEL_PREVIOUS): at the version it read, nothing; at the
			// schedule's own, the cancel is done.
			prev, err := b.engine.Create(adminCtx, req)
			require.NoError(t, err)
			_, err = b.store.CancelTaskForSchedule(sysCtx, prev.ID, "superseded", sch.ID, read)
			require.ErrorIs(t, err, store.ErrScheduleMoved)
			got, err := b.store.Client().Task.Get(sysCtx, prev.ID)
			require.NoError(t, err)
			require.Equal(t, lifecycle.Pending, got.Status, "a stale pass cancels nothing")
			current, err := b.store.Client().Schedule.Get(sysCtx, sch.ID)
			require.NoError(t, err)
			_, err = b.store.CancelTaskForSchedule(sysCtx, prev.ID, "superseded", sch.ID, current.Version)
			require.NoError(t, err)
			got, err = b.store.Client().Task.Get(sysCtx, prev.ID)
			require.NoError(t, err)
			require.Equal(t, lifecycle.Cancelled, got.Status)
			// At the version it is at, the firing creates the task and
			// moves the version on with it.
			now, err := b.store.Client().Schedule.Get(sysCtx, sch.ID)
			require.NoError(t, err)
			require.Equal(t, read+1, now.Version)
			_, created, err := b.engine.CreateScheduled(adminCtx, req, sch.ID, epoch.Add(time.Second), &now.Version)
			require.NoError(t, err)
			require.True(t, created)
			require.Equal(t, at(1), b.slots(t, sch.ID))
			after, err := b.store.Client().Schedule.Get(sysCtx, sch.ID)
			require.NoError(t, err)
			require.Equal(t, read+2, after.Version)
			// A pass that read it before that firing fires nothing and
			// writes nothing: the slot is the other firing's.
			_, _, err = b.engine.CreateScheduled(adminCtx, req, sch.ID, epoch.Add(2*time.Second), &now.Version)
			require.ErrorIs(t, err, store.ErrScheduleMoved)
			require.Equal(t, at(1), b.slots(t, sch.ID))
			// Run now moves it on too: a pass that read it before would
			// take the run now's place as the latest run.
			_, err = b.svc.RunNow(adminCtx, sch.ID)
			require.NoError(t, err)
			_, _, err = b.engine.CreateScheduled(adminCtx, req, sch.ID, epoch.Add(2*time.Second), &after.Version)
			require.ErrorIs(t, err, store.ErrScheduleMoved)
		})
		t.Run("SchedulesSurviveARestart", func(t *testing.T) {
			t.Parallel()
			dsn := d.DSN(t)
			clock := fakeclock.New(epoch)
			first := open(t, dsn, clock)
			sch, err := first.svc.Create(adminCtx, everySecond(entschedule.OverlapPolicyALLOW, ""))
			require.NoError(t, err)
			clock.Advance(time.Second)
			pass(t, first.scheduler(t, schedule.SchedulerConfig{}))
			require.NoError(t, first.store.Close())

			second := open(t, dsn, clock)
			got, err := second.store.Client().Schedule.Get(sysCtx, sch.ID)
			require.NoError(t, err)
			require.Equal(t, "every second", got.Name)
			clock.Advance(time.Second)
			require.Equal(t, 1, pass(t, second.scheduler(t, schedule.SchedulerConfig{})).Fired)
			require.Equal(t, at(1, 2), second.slots(t, sch.ID))
		})
		t.Run("EndsAfterItsLastSlot", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			in := everySecond(entschedule.OverlapPolicyALLOW, "")
			in.EndAt = ptr(epoch.Add(2 * time.Second))
			sch, err := b.svc.Create(adminCtx, in)
			require.NoError(t, err)
			s := b.scheduler(t, schedule.SchedulerConfig{})
			b.clock.Advance(5 * time.Second)
			pass(t, s)
			require.Equal(t, at(1, 2), b.slots(t, sch.ID))
			got, err := b.store.Client().Schedule.Get(sysCtx, sch.ID)
			require.NoError(t, err)
			require.Nil(t, got.NextFireAt)
			require.Equal(t, []string{"FIRED", "FIRED", "ENDED"}, kinds(b.events(t, sch.ID)))
		})
		t.Run("ATaskTheEngineRefusesIsLoggedAndTheSlotIsDone", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			sch, err := b.svc.Create(adminCtx, everySecond(entschedule.OverlapPolicyALLOW, ""))
			require.NoError(t, err)
			// The type is gone from this node's registry (a new release).
			_, err = b.store.Client().Schedule.UpdateOneID(sch.ID).SetTaskType("gone").Save(sysCtx)
			require.NoError(t, err)
			b.clock.Advance(time.Second)
			res := pass(t, b.scheduler(t, schedule.SchedulerConfig{}))
			require.Equal(t, 1, res.Failed)
			evs := b.events(t, sch.ID)
			require.Equal(t, []string{"FAILED"}, kinds(evs))
			require.Contains(t, evs[0].Message, `unknown task type "gone"`)
		})
	})
}

func TestService(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("MasksAndSealsTheTaskInputLikeCreateTask", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			in := everySecond(entschedule.OverlapPolicyALLOW, "")
			in.Task = engine.CreateRequest{Type: "webhook", Title: "call 13812345678", Input: json.RawMessage(`{"url":"http://127.0.0.1:1/x","body":{"phone":"13812345678"}}`)}
			sch, err := b.svc.Create(adminCtx, in)
			require.NoError(t, err)
			require.NotContains(t, string(sch.TaskInput), "13812345678")
			require.NotContains(t, sch.TaskTitle, "13812345678")
			require.NotEmpty(t, sch.TaskInputSealed)
			b.clock.Advance(time.Second)
			pass(t, b.scheduler(t, schedule.SchedulerConfig{}))
			tk, err := b.store.Client().Task.Query().Where(task.ScheduleID(sch.ID)).Only(sysCtx)
			require.NoError(t, err)
			require.NotContains(t, string(tk.Input), "13812345678")
			plain, err := b.sealer.Open(tk.InputSealed)
			require.NoError(t, err)
			require.Contains(t, string(plain), "13812345678", "the handler gets the unmasked input")
			// An edit that leaves the input alone keeps it.
			_, err = b.svc.Update(adminCtx, sch.ID, func(in *schedule.Input) { in.Name = "renamed" })
			require.NoError(t, err)
			again, err := b.svc.InputOf(mustGet(t, b, sch.ID))
			require.NoError(t, err)
			require.Contains(t, string(again.Task.Input), "13812345678")
		})
		t.Run("RefusesBadSchedulesWithEveryProblem", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			_, err := b.svc.Create(adminCtx, schedule.Input{
				Cron: "61 * * * *", Timezone: "Nowhere/Never", OverlapPolicy: "SOMETIMES",
				Task: engine.CreateRequest{Type: "noop", Priority: ptr(1000)},
			})
			var ve *engine.ValidationError
			require.ErrorAs(t, err, &ve)
			var fields []string
			for _, p := range ve.Problems {
				fields = append(fields, p.Field)
			}
			require.ElementsMatch(t, []string{"name", "timezone", "cron", "overlapPolicy", "task.priority"}, fields)
			n, err := b.store.Client().Schedule.Query().Count(sysCtx)
			require.NoError(t, err)
			require.Zero(t, n)
		})
		t.Run("RolesDecideWhoManagesWhat", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			op := auth.NewContext(context.Background(), auth.Viewer{User: "olga", Role: auth.RoleOperator})
			other := auth.NewContext(context.Background(), auth.Viewer{User: "oscar", Role: auth.RoleOperator})
			viewer := auth.NewContext(context.Background(), auth.Viewer{User: "olga", Role: auth.RoleViewer})
			sch, err := b.svc.Create(op, everySecond(entschedule.OverlapPolicyALLOW, ""))
			require.NoError(t, err)
			_, err = b.svc.Create(viewer, everySecond(entschedule.OverlapPolicyALLOW, ""))
			var fe *auth.ForbiddenError
			require.ErrorAs(t, err, &fe)
			_, err = b.svc.Pause(other, sch.ID)
			require.ErrorIs(t, err, store.ErrNotFound, "another operator's schedule does not exist for oscar")
			_, err = b.svc.Pause(adminCtx, sch.ID)
			require.NoError(t, err, "an admin manages every schedule")
			tk, err := b.svc.RunNow(adminCtx, sch.ID)
			require.NoError(t, err)
			require.Equal(t, "olga", tk.Owner, "run now by an admin: still the owner's task")
			require.NotNil(t, tk.ScheduleSlot)
			_, err = b.svc.Delete(op, sch.ID)
			require.NoError(t, err)
			n, err := b.store.Client().Task.Query().Where(task.ScheduleID(sch.ID)).Count(sysCtx)
			require.NoError(t, err)
			require.Equal(t, 1, n, "tasks outlive their schedule")
			audits, err := b.store.Client().AuditLog.Query().All(sysCtx)
			require.NoError(t, err)
			var actions []string
			for _, a := range audits {
				actions = append(actions, string(a.Action)+":"+string(a.Outcome))
			}
			for _, want := range []string{"SCHEDULE_CREATE:OK", "SCHEDULE_CREATE:FAILED", "SCHEDULE_PAUSE:FAILED", "SCHEDULE_PAUSE:OK", "SCHEDULE_RUN_NOW:OK", "CREATE:OK", "SCHEDULE_DELETE:OK"} {
				require.Contains(t, actions, want)
			}
		})
		t.Run("AnotherTenantsScheduleDoesNotExist", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			acmeOp := auth.NewContext(context.Background(), auth.Viewer{User: "olga", Role: auth.RoleOperator, Tenant: "acme", Source: auth.SourceToken})
			// The same user name and source in both tenants: only the
			// tenant tells them apart.
			acmeViewer := auth.NewContext(context.Background(), auth.Viewer{User: "olga", Role: auth.RoleViewer, Tenant: "acme", Source: auth.SourceToken})
			globexViewer := auth.NewContext(context.Background(), auth.Viewer{User: "olga", Role: auth.RoleViewer, Tenant: "globex", Source: auth.SourceToken})
			acmeAdmin := auth.NewContext(context.Background(), auth.Viewer{User: "ada", Role: auth.RoleAdmin, Tenant: "acme", Source: auth.SourceToken})
			globexAdmin := auth.NewContext(context.Background(), auth.Viewer{User: "gus", Role: auth.RoleAdmin, Tenant: "globex", Source: auth.SourceToken})
			sch, err := b.svc.Create(acmeOp, everySecond(entschedule.OverlapPolicyALLOW, ""))
			require.NoError(t, err)
			require.Equal(t, "acme", sch.Tenant)
			got, err := b.store.Client().Schedule.Get(acmeViewer, sch.ID)
			require.NoError(t, err, "its owner, as a viewer of its tenant, reads it")
			require.Equal(t, sch.ID, got.ID)
			_, err = b.store.Client().Schedule.Get(acmeAdmin, sch.ID)
			require.NoError(t, err, "so does an admin of its tenant")
			_, err = b.store.Client().Schedule.Get(globexViewer, sch.ID)
			require.True(t, ent.IsNotFound(err), "a viewer of another tenant does not: %v", err)
			n, err := b.store.Client().Schedule.Query().Count(globexViewer)
			require.NoError(t, err)
			require.Zero(t, n, "nor lists it")
			// Nor does an admin of another tenant manage it.
			_, err = b.svc.Pause(globexAdmin, sch.ID)
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = b.svc.RunNow(globexAdmin, sch.ID)
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = b.svc.Delete(globexAdmin, sch.ID)
			require.ErrorIs(t, err, store.ErrNotFound)
			require.False(t, mustGet(t, b, sch.ID).Paused, "untouched")
		})
		t.Run("PreviewsWithoutSaving", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			got, err := b.svc.Preview(schedule.SpecInput{Cron: "0 0 8 * * MON-FRI", Timezone: "Asia/Shanghai"}, 3)
			require.NoError(t, err)
			// 2026-11-29 is a Sunday; 08:00 in Shanghai is 00:00 UTC.
			require.Equal(t, []time.Time{
				time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC),
				time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
				time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC),
			}, got)
			_, err = b.svc.Preview(schedule.SpecInput{Cron: "bad"}, 3)
			require.True(t, errors.Is(err, engine.ErrValidation), "%v", err)
			n, err := b.store.Client().Schedule.Query().Count(sysCtx)
			require.NoError(t, err)
			require.Zero(t, n)
		})
	})
}

func mustGet(t *testing.T, b bundle, id int) *ent.Schedule {
	t.Helper()
	sch, err := b.store.Client().Schedule.Get(sysCtx, id)
	require.NoError(t, err)
	return sch
}
