package schedule_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	entschedule "github.com/taskgraph/taskgraph/ent/schedule"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/workflow"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/schedule"
)

// nightly is a workflow of three steps: an import, then a report and a
// push that wait for it.
func nightly() *engine.WorkflowRequest {
	return &engine.WorkflowRequest{
		Title: "nightly",
		Steps: []engine.StepRequest{
			{Key: "import", Task: engine.CreateRequest{Type: "noop", Input: json.RawMessage(`{"note":"rows"}`)}},
			{Key: "report", Task: engine.CreateRequest{Type: "noop"}, DependsOn: []string{"import"}},
			{Key: "push", Task: engine.CreateRequest{Type: "webhook", Title: "push to 13812345678",
				Input: json.RawMessage(`{"url":"http://127.0.0.1:1/x","body":{"phone":"13812345678"}}`)}, DependsOn: []string{"import"}},
		},
	}
}

func workflowEverySecond(overlap entschedule.OverlapPolicy) schedule.Input {
	return schedule.Input{Name: "nightly", Cron: "* * * * * *", OverlapPolicy: overlap, Workflow: nightly()}
}

// workflows returns the workflows a schedule created, by slot.
func (b bundle) workflows(t *testing.T, id int) []*ent.Workflow {
	t.Helper()
	wfs, err := b.store.Client().Workflow.Query().Where(workflow.ScheduleID(id)).Order(ent.Asc(workflow.FieldScheduleSlot)).All(sysCtx)
	require.NoError(t, err)
	return wfs
}

func (b bundle) stepStatuses(t *testing.T, wf *ent.Workflow) map[string]lifecycle.Status {
	t.Helper()
	steps, err := b.store.Client().Task.Query().Where(task.WorkflowID(wf.ID)).All(sysCtx)
	require.NoError(t, err)
	out := map[string]lifecycle.Status{}
	for _, st := range steps {
		out[*st.StepKey] = st.Status
	}
	return out
}

func TestWorkflowSchedules(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("EachSlotCreatesTheWholeWorkflowOnce", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			sch, err := b.svc.Create(adminCtx, workflowEverySecond(entschedule.OverlapPolicyALLOW))
			require.NoError(t, err)
			require.Empty(t, sch.TaskType)
			require.NotContains(t, string(sch.Workflow), "13812345678", "the definition is masked as stored")
			require.NotEmpty(t, sch.WorkflowSealed)
			s := b.scheduler(t, schedule.SchedulerConfig{})
			for range 3 {
				b.clock.Advance(time.Second)
				require.Equal(t, 1, pass(t, s).Fired)
				require.Zero(t, pass(t, s).Fired, "a second pass at the same slot fires nothing")
			}
			wfs := b.workflows(t, sch.ID)
			require.Len(t, wfs, 3)
			for i, wf := range wfs {
				require.Equal(t, at(i + 1)[0], wf.ScheduleSlot.UTC())
				require.Equal(t, engine.ScheduleSlotKey(sch.ID, *wf.ScheduleSlot), *wf.IdempotencyKey)
				require.Equal(t, "alice", wf.Owner, "the schedule's owner owns its workflows")
				require.Equal(t, map[string]lifecycle.Status{
					"import": lifecycle.Pending, "report": lifecycle.WaitingDependency, "push": lifecycle.WaitingDependency,
				}, b.stepStatuses(t, wf), "created whole, with its edges")
			}
			require.Empty(t, b.slots(t, sch.ID), "no task of the schedule's own")
			push, err := b.store.Client().Task.Query().Where(task.WorkflowID(wfs[0].ID), task.StepKey("push")).Only(sysCtx)
			require.NoError(t, err)
			require.NotContains(t, push.Title+string(push.Input), "13812345678")
			plain, err := b.sealer.Open(push.InputSealed)
			require.NoError(t, err)
			require.Contains(t, string(plain), "13812345678", "the step's handler gets the unmasked input")
			evs := b.events(t, sch.ID)
			require.Equal(t, []string{"FIRED", "FIRED", "FIRED"}, kinds(evs))
			require.Contains(t, evs[0].Message, wfs[0].Code)
		})
		t.Run("NodesFiringTheSameSlotMakeOneWorkflow", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			sch, err := b.svc.Create(adminCtx, workflowEverySecond(entschedule.OverlapPolicyALLOW))
			require.NoError(t, err)
			b.clock.Advance(time.Second)
			// Several schedulers (nodes) pass at once; and the slot's
			// creation is idempotent whatever the version.
			var wg sync.WaitGroup
			for range 4 {
				s := b.scheduler(t, schedule.SchedulerConfig{})
				wg.Go(func() {
					_, err := s.Pass(context.Background())
					require.NoError(t, err)
				})
			}
			wg.Wait()
			req := nightly()
			wf, created, err := b.engine.CreateScheduledWorkflow(adminCtx, *req, sch.ID, epoch.Add(time.Second), nil)
			require.NoError(t, err)
			require.False(t, created)
			wfs := b.workflows(t, sch.ID)
			require.Len(t, wfs, 1)
			require.Equal(t, wfs[0].ID, wf.ID)
			n, err := b.store.Client().Task.Query().Where(task.WorkflowIDNotNil()).Count(sysCtx)
			require.NoError(t, err)
			require.Equal(t, 3, n, "one workflow's steps, no more")
		})
		t.Run("OverlapSkipWaitsForTheWholeWorkflow", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			sch, err := b.svc.Create(adminCtx, workflowEverySecond(entschedule.OverlapPolicySKIP))
			require.NoError(t, err)
			s := b.scheduler(t, schedule.SchedulerConfig{})
			b.clock.Advance(time.Second)
			require.Equal(t, 1, pass(t, s).Fired)
			b.finishAll(t) // the import; its children are released
			b.clock.Advance(time.Second)
			res := pass(t, s)
			require.Zero(t, res.Fired)
			require.Equal(t, 1, res.Skipped, "its released steps are still to run")
			b.finishAll(t)
			b.clock.Advance(time.Second)
			require.Equal(t, 1, pass(t, s).Fired, "the previous workflow ended")
			require.Len(t, b.workflows(t, sch.ID), 2)
		})
		t.Run("OverlapCancelPreviousCancelsItsSteps", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			sch, err := b.svc.Create(adminCtx, workflowEverySecond(entschedule.OverlapPolicyCANCEL_PREVIOUS))
			require.NoError(t, err)
			s := b.scheduler(t, schedule.SchedulerConfig{})
			b.clock.Advance(time.Second)
			require.Equal(t, 1, pass(t, s).Fired)
			b.clock.Advance(time.Second)
			require.Equal(t, 1, pass(t, s).Fired)
			wfs := b.workflows(t, sch.ID)
			require.Len(t, wfs, 2)
			for _, st := range b.stepStatuses(t, wfs[0]) {
				require.Equal(t, lifecycle.Cancelled, st)
			}
			require.Contains(t, kinds(b.events(t, sch.ID)), "CANCELLED_PREVIOUS")
		})
		t.Run("RefusesABadWorkflowAndBothKinds", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			in := workflowEverySecond("")
			in.Workflow.Steps[1].DependsOn = []string{"nowhere"}
			in.Task = engine.CreateRequest{Type: "noop"}
			key := "mine"
			in.Workflow.IdempotencyKey = &key
			_, err := b.svc.Create(adminCtx, in)
			var ve *engine.ValidationError
			require.ErrorAs(t, err, &ve)
			var fields []string
			for _, p := range ve.Problems {
				fields = append(fields, p.Field)
			}
			require.ElementsMatch(t, []string{"task", "workflow.key", "workflow.steps[1].dependsOn"}, fields)
			n, err := b.store.Client().Schedule.Query().Count(sysCtx)
			require.NoError(t, err)
			require.Zero(t, n)
		})
		t.Run("RunNowAndEditsBetweenTaskAndWorkflow", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			sch, err := b.svc.Create(adminCtx, workflowEverySecond(entschedule.OverlapPolicyALLOW))
			require.NoError(t, err)
			_, err = b.svc.RunNow(adminCtx, sch.ID)
			var ve *engine.ValidationError
			require.ErrorAs(t, err, &ve, "a workflow schedule has no task to run")
			wf, err := b.svc.RunWorkflowNow(adminCtx, sch.ID)
			require.NoError(t, err)
			require.Equal(t, 3, wf.StepCount)
			require.Equal(t, sch.ID, *wf.ScheduleID)
			in, err := b.svc.InputOf(mustGet(t, b, sch.ID))
			require.NoError(t, err)
			require.NotNil(t, in.Workflow)
			require.Contains(t, string(in.Workflow.Steps[2].Task.Input), "13812345678", "an edit starts from the unmasked definition")
			// Edited into a task schedule, and back.
			up, err := b.svc.Update(adminCtx, sch.ID, func(in *schedule.Input) {
				in.Workflow, in.Task = nil, engine.CreateRequest{Type: "noop", Title: "tick"}
			})
			require.NoError(t, err)
			require.Empty(t, up.Workflow)
			require.Equal(t, "noop", up.TaskType)
			b.clock.Advance(time.Second)
			require.Equal(t, 1, pass(t, b.scheduler(t, schedule.SchedulerConfig{})).Fired)
			require.Equal(t, at(1), b.slots(t, sch.ID))
			_, err = b.svc.RunWorkflowNow(adminCtx, sch.ID)
			require.ErrorAs(t, err, &ve)
		})
	})
}
