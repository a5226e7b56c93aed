package schedule_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/alertincident"
	"github.com/taskgraph/taskgraph/ent/alertrule"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/alert"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/fakeclock"
	"github.com/taskgraph/taskgraph/internal/schedule"
	"github.com/taskgraph/taskgraph/internal/store"
)

func TestScheduleDeadline(t *testing.T) {
	t.Parallel()
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	require.NoError(t, err)
	sch := func(by string, within *int) *ent.Schedule {
		return &ent.Schedule{ID: 1, Timezone: "Asia/Shanghai", FinishBy: by, FinishWithinSeconds: within}
	}
	for _, c := range []struct {
		name       string
		sch        *ent.Schedule
		slot, want time.Time
	}{
		{"ByLaterThatDay", sch("08:00", nil), time.Date(2026, 11, 30, 2, 0, 0, 0, shanghai), time.Date(2026, 11, 30, 8, 0, 0, 0, shanghai)},
		{"ByTheNextDayAfterTheTime", sch("08:00", nil), time.Date(2026, 11, 30, 9, 0, 0, 0, shanghai), time.Date(2026, 12, 1, 8, 0, 0, 0, shanghai)},
		{"BySlotAtTheTimeIsTheNextDay", sch("08:00", nil), time.Date(2026, 11, 30, 8, 0, 0, 0, shanghai), time.Date(2026, 12, 1, 8, 0, 0, 0, shanghai)},
		{"Within", sch("", ptr(90)), time.Date(2026, 11, 30, 2, 0, 0, 0, shanghai), time.Date(2026, 11, 30, 2, 1, 30, 0, shanghai)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := schedule.Deadline(c.sch, c.slot)
			require.NoError(t, err)
			require.NotNil(t, got)
			require.True(t, c.want.Equal(*got), "%s, want %s", got, c.want)
		})
	}
	none, err := schedule.Deadline(sch("", nil), epoch)
	require.NoError(t, err)
	require.Nil(t, none)

	dbtest.Run(t, func(t *testing.T, dsn string) {
		t.Run("BadDeadlinesAreRefused", func(t *testing.T) {
			b := open(t, dsn, newClock())
			for _, c := range []struct {
				in    schedule.Input
				field string
			}{
				{schedule.Input{FinishBy: "8:00"}, "finishBy"},
				{schedule.Input{FinishBy: "25:00"}, "finishBy"},
				{schedule.Input{FinishBy: "08:00 tomorrow"}, "finishBy"},
				{schedule.Input{FinishBy: "08:00", FinishWithinSeconds: ptr(60)}, "finishBy"},
				{schedule.Input{FinishWithinSeconds: ptr(0)}, "finishWithinSeconds"},
				{schedule.Input{FinishWithinSeconds: ptr(-5)}, "finishWithinSeconds"},
			} {
				in := c.in
				in.Name, in.Cron, in.Task = "nightly", "0 0 2 * * *", engine.CreateRequest{Type: "noop"}
				_, err := b.svc.Create(adminCtx, in)
				var ve *engine.ValidationError
				require.ErrorAs(t, err, &ve, "%+v", c.in)
				require.Equal(t, c.field, ve.Problems[0].Field, "%+v: %v", c.in, err)
			}
			n, err := b.store.Client().Schedule.Query().Count(sysCtx)
			require.NoError(t, err)
			require.Zero(t, n)
		})

		// A nightly run at 02:00 Shanghai that must finish by 08:00: its
		// task waits (no worker takes it: it starts late), is flagged at
		// risk, then missed, once each, each with its alert incident; the
		// next night's finishes in time; the on-time report says 50%.
		t.Run("ALateNightlyRunIsAtRiskThenMissedOnceEachWithItsIncidents", func(t *testing.T) {
			clock := newClock()
			b := open(t, dsn, clock)
			sch, err := b.svc.Create(adminCtx, schedule.Input{
				Name: "nightly reconciliation", Cron: "0 0 2 * * *", Timezone: "Asia/Shanghai", FinishBy: "08:00",
				Task: engine.CreateRequest{Type: "noop", Title: "reconcile"},
			})
			require.NoError(t, err)
			require.Equal(t, "08:00", sch.FinishBy)
			sched := b.scheduler(t, schedule.SchedulerConfig{})
			deadlines, err := engine.NewDeadlines(engine.DeadlinesConfig{Margin: 15 * time.Minute}, b.engine)
			require.NoError(t, err)
			broker := events.NewBroker(events.Config{})
			t.Cleanup(broker.Close)
			svc, err := alert.New(alert.Config{Store: b.store, Engine: b.engine, Sealer: b.sealer, Node: "test"})
			require.NoError(t, err)
			ev, err := alert.NewEvaluator(alert.EvaluatorConfig{}, svc, broker)
			require.NoError(t, err)
			t.Cleanup(ev.Stop)
			risk, err := svc.CreateRule(adminCtx, alert.RuleInput{Name: "near its deadline", Kind: alertrule.KindDEADLINE_AT_RISK, Enabled: true, TaskType: "noop"})
			require.NoError(t, err)
			missed, err := svc.CreateRule(adminCtx, alert.RuleInput{Name: "late", Kind: alertrule.KindDEADLINE_MISSED, Enabled: true, WindowSeconds: 24 * 3600})
			require.NoError(t, err)
			incidents := func(rule *ent.AlertRule) (open, resolved int) {
				t.Helper()
				_, err := ev.Pass(sysCtx)
				require.NoError(t, err)
				all, err := svc.Incidents(adminCtx, alert.IncidentFilter{RuleID: &rule.ID})
				require.NoError(t, err)
				for _, in := range all {
					if in.Status == alertincident.StatusOPEN {
						open++
					} else {
						resolved++
					}
				}
				return open, resolved
			}
			flag := func() int {
				t.Helper()
				n, err := deadlines.TaskDeadlines(sysCtx)
				require.NoError(t, err)
				return n
			}
			state := func(id int) string {
				t.Helper()
				tk, err := b.store.Client().Task.Get(sysCtx, id)
				require.NoError(t, err)
				return store.DeadlineState(tk)
			}

			// 02:00 Shanghai on 30 November is 18:00 UTC on the 29th.
			setClock(clock, time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC))
			require.Equal(t, 1, pass(t, sched).Fired)
			first, err := b.store.Client().Task.Query().Where(task.ScheduleID(sch.ID)).Only(sysCtx)
			require.NoError(t, err)
			require.NotNil(t, first.Deadline)
			require.True(t, first.Deadline.Equal(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)), "08:00 Shanghai: %s", first.Deadline)
			require.Equal(t, store.DeadlineOnTime, state(first.ID))
			require.Zero(t, flag(), "six hours ahead: not at risk")
			o, _ := incidents(risk)
			require.Zero(t, o)

			setClock(clock, time.Date(2026, 11, 29, 23, 50, 0, 0, time.UTC)) // 07:50 Shanghai
			require.Equal(t, 1, flag())
			require.Zero(t, flag(), "flagged once")
			require.Equal(t, store.DeadlineAtRisk, state(first.ID))
			o, r := incidents(risk)
			require.Equal(t, []int{1, 0}, []int{o, r})
			o, r = incidents(risk)
			require.Equal(t, []int{1, 0}, []int{o, r}, "one incident, not one a pass")
			o, _ = incidents(missed)
			require.Zero(t, o)

			setClock(clock, time.Date(2026, 11, 30, 0, 0, 1, 0, time.UTC)) // 08:00:01
			require.Equal(t, 1, flag())
			require.Zero(t, flag(), "flagged once")
			require.Equal(t, store.DeadlineMissed, state(first.ID))
			o, r = incidents(missed)
			require.Equal(t, []int{1, 0}, []int{o, r})
			o, r = incidents(risk)
			require.Equal(t, []int{0, 1}, []int{o, r}, "missed: no longer at risk")

			// It runs at last: late, it stays missed.
			clock.Advance(time.Hour)
			b.finishAll(t)
			require.Equal(t, store.DeadlineMissed, state(first.ID))

			// The next night's run finishes at 02:30, well in time.
			setClock(clock, time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC))
			require.Equal(t, 1, pass(t, sched).Fired)
			clock.Advance(30 * time.Minute)
			b.finishAll(t)
			second, err := b.store.Client().Task.Query().Where(task.ScheduleID(sch.ID), task.IDNEQ(first.ID)).Only(sysCtx)
			require.NoError(t, err)
			require.Equal(t, lifecycle.Success, second.Status)
			require.Equal(t, store.DeadlineMet, state(second.ID))
			require.Zero(t, flag())

			for _, g := range []struct{ group, key string }{{engine.DeadlineByType, "noop"}, {engine.DeadlineBySchedule, itoa(sch.ID)}, {engine.DeadlineByTenant, ""}} {
				rows, err := b.engine.DeadlineReport(adminCtx, time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), g.group)
				require.NoError(t, err)
				require.Equal(t, []engine.DeadlineRow{{Key: g.key, Total: 2, Met: 1, Missed: 1}}, rows, g.group)
				pct, ok := rows[0].OnTimePercent()
				require.True(t, ok)
				require.Equal(t, 50.0, pct)
			}
			// Out of the range: nothing.
			rows, err := b.engine.DeadlineReport(adminCtx, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC), engine.DeadlineByType)
			require.NoError(t, err)
			require.Empty(t, rows)
			// A range the wrong way round, or over a year, is refused.
			for _, r := range [][2]time.Time{{epoch, epoch}, {epoch, epoch.Add(400 * 24 * time.Hour)}} {
				_, err := b.engine.DeadlineReport(adminCtx, r[0], r[1], engine.DeadlineByType)
				var ve *engine.ValidationError
				require.ErrorAs(t, err, &ve)
			}
		})
	})
}

func newClock() *fakeclock.Clock { return fakeclock.New(epoch) }

// setClock moves clock on to at.
func setClock(clock *fakeclock.Clock, at time.Time) { clock.Advance(at.Sub(clock.Now())) }

func itoa(n int) string { return strconv.Itoa(n) }
