package graph_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// flaky is a task type whose handler fails (for good) the first time it
// runs a task of a given input note, and succeeds the times after; a note
// "hold" makes the first run wait until it is cancelled.
type flaky struct {
	mu   sync.Mutex
	runs map[string]int
}

func (f *flaky) register(r *tasktype.Registry) {
	tasktype.Register(r, "flaky", func(ctx context.Context, job *tasktype.Job, in struct {
		Note string `json:"note"`
	}) error {
		f.mu.Lock()
		f.runs[in.Note]++
		n := f.runs[in.Note]
		f.mu.Unlock()
		switch {
		case n > 1:
			return job.SetResult(map[string]any{"run": n})
		case in.Note == "hold":
			<-ctx.Done()
			return context.Cause(ctx)
		case in.Note == "fail":
			return tasktype.NonRetryable(errors.New("broken the first time"))
		}
		return nil
	})
}

func (f *flaky) count(note string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[note]
}

type stepView struct {
	ID, Status, StepKey string
	AvailableActions    []string
	Instances           []struct{ Status string }
}

type retriedView struct {
	Status           string
	StepsDone        int
	AvailableActions []string
	Steps            []stepView
}

func (w retriedView) step(key string) stepView {
	for _, st := range w.Steps {
		if st.StepKey == key {
			return st
		}
	}
	return stepView{}
}

const readRetried = `query($id: ID!) { workflow(id: $id) { status stepsDone availableActions
	steps { id status stepKey availableActions instances { status } } } }`

const retryWorkflow = `mutation($id: ID!, $reason: String) { retryWorkflow(id: $id, reason: $reason) { id status } }`

func waitWorkflow(t *testing.T, s *apptest.Server, id string, want ...string) retriedView {
	t.Helper()
	var got struct{ Workflow retriedView }
	apptest.Eventually(t, 30*time.Second, func() (bool, string) {
		s.Query(t, readRetried, map[string]any{"id": id}, &got)
		for _, w := range want {
			if got.Workflow.Status == w {
				return true, ""
			}
		}
		return false, got.Workflow.Status
	})
	// Once more: a query's fields are read one after another, so the
	// one that met the state may have come after the others' reads.
	s.Query(t, readRetried, map[string]any{"id": id}, &got)
	return got.Workflow
}

// A → (B, C) → D where B fails the first time: D is cancelled with it;
// retryWorkflow runs B again and D after it, and not A or C.
func TestRetryWorkflowRerunsTheFailedAndCancelledStepsOnly(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		f := &flaky{runs: map[string]int{}}
		s := apptest.Start(t, dsn, app.Options{Register: f.register})
		steps := []map[string]any{
			{"key": "a", "type": "flaky", "input": map[string]any{"note": "a"}},
			{"key": "b", "type": "flaky", "input": map[string]any{"note": "fail"}, "dependsOn": []string{"a"}},
			{"key": "c", "type": "flaky", "input": map[string]any{"note": "c"}, "dependsOn": []string{"a"}},
			{"key": "d", "type": "flaky", "input": map[string]any{"note": "d"}, "dependsOn": []string{"b", "c"}},
		}
		var out struct{ CreateWorkflow workflowView }
		s.Query(t, createWorkflow, map[string]any{"in": map[string]any{"title": "diamond", "steps": steps}}, &out)
		id := out.CreateWorkflow.ID
		wf := waitWorkflow(t, s, id, "FAILED")
		require.Equal(t, "FAILED", wf.step("b").Status)
		require.Equal(t, "CANCELLED", wf.step("d").Status)
		require.Equal(t, "SUCCESS", wf.step("c").Status)
		require.Equal(t, []string{"RETRY_WORKFLOW"}, wf.AvailableActions)
		require.Equal(t, []string{"RETRY", "REPLAY_WITH_INPUT", "RETRY_WORKFLOW"}, wf.step("b").AvailableActions)
		require.Equal(t, []string{"RETRY_WORKFLOW"}, wf.step("d").AvailableActions)
		require.Empty(t, wf.step("a").AvailableActions)
		require.Zero(t, f.count("d"), "d never ran")

		var retried struct{ RetryWorkflow struct{ ID, Status string } }
		s.Query(t, retryWorkflow, map[string]any{"id": id, "reason": "fixed the input"}, &retried)
		require.Equal(t, id, retried.RetryWorkflow.ID)
		require.Equal(t, "EXECUTING", retried.RetryWorkflow.Status)

		wf = waitWorkflow(t, s, id, "SUCCESS")
		require.Equal(t, 4, wf.StepsDone)
		require.Equal(t, 1, f.count("a"), "a is not run again")
		require.Equal(t, 1, f.count("c"), "c is not run again")
		require.Equal(t, 2, f.count("fail"), "b ran again")
		require.Equal(t, 1, f.count("d"), "d ran once, after b")
		require.Len(t, wf.step("a").Instances, 1)
		require.Len(t, wf.step("c").Instances, 1)
		require.Len(t, wf.step("b").Instances, 2)
		require.Len(t, wf.step("d").Instances, 2, "its cancelled instance and the one that ran")
		require.Empty(t, wf.AvailableActions)

		// Nothing left to re-run: refused, and the steps stay.
		r := s.Do(t, retryWorkflow, map[string]any{"id": id})
		require.Len(t, r.Errors, 1)
		require.Equal(t, "INVALID_TRANSITION", r.Errors[0].Code(), r.Errors[0].Message)
		r = s.Do(t, retryWorkflow, map[string]any{"id": "987654"})
		require.Len(t, r.Errors, 1)
		require.Equal(t, "NOT_FOUND", r.Errors[0].Code())

		// One audit record for the retry, naming the steps it moved.
		var audits struct {
			AuditLogs struct {
				Edges []struct {
					Node struct {
						TaskIds []string
						Outcome string
						Details map[string]any
					}
				}
			}
		}
		s.Query(t, `{ auditLogs(where: {action: RETRY}) { edges { node { taskIds outcome details } } } }`, nil, &audits)
		var ok, refused int
		for _, e := range audits.AuditLogs.Edges {
			if e.Node.Outcome != "OK" {
				refused++
				continue
			}
			ok++
			require.ElementsMatch(t, []string{wf.step("b").ID, wf.step("d").ID}, e.Node.TaskIds)
			require.Equal(t, "fixed the input", e.Node.Details["reason"])
		}
		require.Equal(t, 1, ok)
		require.Equal(t, 2, refused, "the refused retries are recorded too")
	})
}

// A cancelled workflow is run again from where it stopped: the step that
// was cancelled while running, and those waiting for it; a step whose
// parents all succeeded runs at once.
func TestRetryWorkflowRerunsACancelledWorkflow(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		f := &flaky{runs: map[string]int{}}
		s := apptest.Start(t, dsn, app.Options{Register: f.register})
		steps := []map[string]any{
			{"key": "a", "type": "flaky", "input": map[string]any{"note": "a"}},
			{"key": "b", "type": "flaky", "input": map[string]any{"note": "hold"}, "dependsOn": []string{"a"}},
			{"key": "c", "type": "flaky", "input": map[string]any{"note": "c"}, "dependsOn": []string{"b"}},
		}
		var out struct{ CreateWorkflow workflowView }
		s.Query(t, createWorkflow, map[string]any{"in": map[string]any{"steps": steps}}, &out)
		id := out.CreateWorkflow.ID
		apptest.Eventually(t, 30*time.Second, func() (bool, string) {
			return f.count("hold") == 1, "b has not started"
		})
		s.Query(t, `mutation($id: ID!) { cancelWorkflow(id: $id) { id } }`, map[string]any{"id": id}, nil)
		wf := waitWorkflow(t, s, id, "CANCELLED")
		require.Equal(t, "SUCCESS", wf.step("a").Status)
		require.Equal(t, []string{"RETRY_WORKFLOW"}, wf.AvailableActions)
		require.Equal(t, []string{"RETRY_WORKFLOW"}, wf.step("b").AvailableActions, "a cancelled step has no RETRY of its own")

		s.Query(t, retryWorkflow, map[string]any{"id": id}, nil)
		wf = waitWorkflow(t, s, id, "SUCCESS")
		require.Equal(t, 1, f.count("a"))
		require.Equal(t, 2, f.count("hold"))
		require.Equal(t, 1, f.count("c"))
		require.Equal(t, []string{"CANCELLED", "SUCCESS"}, instanceStatuses(wf.step("b")))
	})
}

// instanceStatuses lists a step's instances' statuses, oldest first.
func instanceStatuses(st stepView) []string {
	out := make([]string, len(st.Instances))
	for i, in := range st.Instances {
		out[len(out)-1-i] = in.Status
	}
	return out
}

// A step is seen by who may see its workflow, and by no one else: by id,
// in the task list, and as a parent or child of a step they see.
func TestAStepIsSeenOnlyByWhoSeesItsWorkflow(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := startSecured(t, dsn, app.Options{})
		var out struct{ CreateWorkflow workflowView }
		s.QueryAs(t, s.tok["alice"], createWorkflow, map[string]any{"in": map[string]any{"steps": diamondSteps()}}, &out)
		var alices struct{ Workflow workflowView }
		s.QueryAs(t, s.tok["alice"], readWorkflow, map[string]any{"id": out.CreateWorkflow.ID}, &alices)
		require.Len(t, alices.Workflow.Steps, 4)
		for _, st := range alices.Workflow.Steps {
			r := s.DoAs(t, s.tok["bob"], `query($id: ID!) { task(id: $id) { id } }`, map[string]any{"id": st.ID})
			require.Len(t, r.Errors, 1, "bob reads step %s", st.StepKey)
			require.Equal(t, "NOT_FOUND", r.Errors[0].Code())
			r = s.DoAs(t, s.tok["bob"], `mutation($id: ID!) { retryTask(id: $id) { id } }`, map[string]any{"id": st.ID})
			require.Len(t, r.Errors, 1)
			var root struct{ Task struct{ ID string } }
			s.QueryAs(t, s.tok["root"], `query($id: ID!) { task(id: $id) { id } }`, map[string]any{"id": st.ID}, &root)
			require.Equal(t, st.ID, root.Task.ID, "the tenant's admin sees it")
		}
		var list struct{ Tasks struct{ TotalCount int } }
		s.QueryAs(t, s.tok["bob"], `{ tasks { totalCount } }`, nil, &list)
		require.Zero(t, list.Tasks.TotalCount)
		r := s.DoAs(t, s.tok["bob"], retryWorkflow, map[string]any{"id": out.CreateWorkflow.ID})
		require.Len(t, r.Errors, 1)
		require.Equal(t, "NOT_FOUND", r.Errors[0].Code())
		r = s.DoAs(t, s.tok["bob"], `mutation($id: ID!) { cancelWorkflow(id: $id) { id } }`, map[string]any{"id": out.CreateWorkflow.ID})
		require.Len(t, r.Errors, 1)
		require.Equal(t, "NOT_FOUND", r.Errors[0].Code())

		// Bob's own task after one of alice's steps: its parent is not
		// found for him, and nothing is created.
		r = s.DoAs(t, s.tok["bob"], `mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`,
			map[string]any{"in": map[string]any{"type": "noop", "dependsOn": []string{alices.Workflow.Steps[0].ID}}})
		require.Len(t, r.Errors, 1)
		require.Equal(t, "NOT_FOUND", r.Errors[0].Code(), r.Errors[0].Message)
		s.QueryAs(t, s.tok["bob"], `{ tasks { totalCount } }`, nil, &list)
		require.Zero(t, list.Tasks.TotalCount)
	})
}
