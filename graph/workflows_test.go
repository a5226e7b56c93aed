package graph_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

const createWorkflow = `mutation($in: CreateWorkflowInput!) { createWorkflow(input: $in) { id code status stepCount stepsDone } }`

type workflowView struct {
	ID        string
	Code      string
	Status    string
	StepCount int
	StepsDone int
	Steps     []struct {
		ID, Status, StepKey string
		StartedAt           *time.Time `json:"-"`
		Parents             []struct{ StepKey string }
		Children            []struct{ StepKey string }
		Instances           []struct {
			StartedAt  *time.Time
			FinishedAt *time.Time
		}
		Workflow *struct{ ID string }
	}
}

func diamondSteps() []map[string]any {
	return []map[string]any{
		{"key": "d", "type": "noop", "dependsOn": []string{"b", "c"}},
		{"key": "b", "type": "noop", "dependsOn": []string{"a"}},
		{"key": "a", "type": "noop"},
		{"key": "c", "type": "noop", "dependsOn": []string{"a"}},
	}
}

const readWorkflow = `query($id: ID!) { workflow(id: $id) { id code status stepCount stepsDone
	steps { id status stepKey parents { stepKey } children { stepKey } instances { startedAt finishedAt } workflow { id } } } }`

func TestWorkflowDiamondRunsTheJoinAfterBoth(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := apptest.Start(t, dsn, app.Options{})
		var out struct{ CreateWorkflow workflowView }
		s.Query(t, createWorkflow, map[string]any{"in": map[string]any{"title": "diamond", "steps": diamondSteps()}}, &out)
		wf := out.CreateWorkflow
		require.Equal(t, 4, wf.StepCount)
		var got struct{ Workflow workflowView }
		apptest.Eventually(t, 30*time.Second, func() (bool, string) {
			s.Query(t, readWorkflow, map[string]any{"id": wf.ID}, &got)
			return got.Workflow.Status == "SUCCESS", got.Workflow.Status
		})
		require.Equal(t, 4, got.Workflow.StepsDone)
		byKey := map[string]int{}
		for i, st := range got.Workflow.Steps {
			byKey[st.StepKey] = i
			require.Len(t, st.Instances, 1, "step %s ran once", st.StepKey)
			require.Equal(t, wf.ID, st.Workflow.ID)
		}
		steps := got.Workflow.Steps
		d := steps[byKey["d"]]
		require.ElementsMatch(t, []struct{ StepKey string }{{"b"}, {"c"}}, d.Parents)
		require.ElementsMatch(t, []struct{ StepKey string }{{"b"}, {"c"}}, steps[byKey["a"]].Children)
		for _, k := range []string{"b", "c"} {
			require.False(t, d.Instances[0].StartedAt.Before(*steps[byKey[k]].Instances[0].FinishedAt), "d started before %s ended", k)
		}
	})
}

func TestCreateWorkflowRefusesBadGraphs(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := apptest.Start(t, dsn, app.Options{})
		big := make([]map[string]any, 10_001)
		for i := range big {
			big[i] = map[string]any{"key": fmt.Sprintf("s%d", i), "type": "noop"}
		}
		for name, steps := range map[string][]map[string]any{
			"Cycle": {
				{"key": "a", "type": "noop", "dependsOn": []string{"c"}},
				{"key": "b", "type": "noop", "dependsOn": []string{"a"}},
				{"key": "c", "type": "noop", "dependsOn": []string{"b"}},
				{"key": "free", "type": "noop"},
			},
			"UnknownKey":   {{"key": "a", "type": "noop", "dependsOn": []string{"nope"}}},
			"DuplicateKey": {{"key": "a", "type": "noop"}, {"key": "a", "type": "noop"}},
			"SelfLoop":     {{"key": "a", "type": "noop", "dependsOn": []string{"a"}}},
			"BadStep":      {{"key": "a", "type": "noop"}, {"key": "b", "type": "nope", "dependsOn": []string{"a"}}},
			"Empty":        {},
			"TooMany":      big,
		} {
			r := s.Do(t, createWorkflow, map[string]any{"in": map[string]any{"steps": steps}})
			require.Len(t, r.Errors, 1, name)
			require.Equal(t, "VALIDATION", r.Errors[0].Code(), "%s: %s", name, r.Errors[0].Message)
		}
		var stats struct{ TaskStats struct{ Total int } }
		s.Query(t, `{ taskStats { total } }`, nil, &stats)
		require.Zero(t, stats.TaskStats.Total, "nothing was created")
	})
}

func TestCreateWorkflowIsIdempotent(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := apptest.Start(t, dsn, app.Options{})
		in := map[string]any{"key": "wf-1", "title": "t", "steps": diamondSteps()}
		var a, b struct{ CreateWorkflow workflowView }
		s.Query(t, createWorkflow, map[string]any{"in": in}, &a)
		s.Query(t, createWorkflow, map[string]any{"in": in}, &b)
		require.Equal(t, a.CreateWorkflow.ID, b.CreateWorkflow.ID)
		other := map[string]any{"key": "wf-1", "title": "t", "steps": diamondSteps()[2:]}
		r := s.Do(t, createWorkflow, map[string]any{"in": other})
		require.Len(t, r.Errors, 1)
		require.Equal(t, "CONFLICT", r.Errors[0].Code())
		var stats struct{ TaskStats struct{ Total int } }
		s.Query(t, `{ taskStats { total } }`, nil, &stats)
		require.Equal(t, 4, stats.TaskStats.Total, "one workflow's steps")
	})
}

func TestCreateTaskAfterExistingOnes(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := apptest.Start(t, dsn, app.Options{})
		later := time.Now().Add(time.Hour).Format(time.RFC3339)
		parent := create(t, s, map[string]any{"type": "noop", "runAt": later})
		child := create(t, s, map[string]any{"type": "noop", "dependsOn": []string{parent.ID}})
		require.Equal(t, "WAITING_DEPENDENCY", child.Status)
		require.Equal(t, []string{"CANCEL"}, child.AvailableActions)
		var out struct{ CancelTask taskView }
		s.Query(t, `mutation($id: ID!) { cancelTask(id: $id) { status } }`, map[string]any{"id": parent.ID}, &out)
		var got struct {
			Task struct{ Status, CancelReason string }
		}
		s.Query(t, `query($id: ID!) { task(id: $id) { status cancelReason } }`, map[string]any{"id": child.ID}, &got)
		require.Equal(t, "CANCELLED", got.Task.Status)
		require.Equal(t, "parent "+parent.Code+" was cancelled", got.Task.CancelReason)

		r := s.Do(t, createNoop, map[string]any{"in": map[string]any{"type": "noop", "dependsOn": []string{"987654"}}})
		require.Len(t, r.Errors, 1)
		require.Equal(t, "NOT_FOUND", r.Errors[0].Code())
	})
}

func TestWorkflowsAreSeenByWhoSeesTheirSteps(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := startSecured(t, dsn, app.Options{})
		var out struct{ CreateWorkflow workflowView }
		s.QueryAs(t, s.tok["alice"], createWorkflow, map[string]any{"in": map[string]any{"steps": diamondSteps()}}, &out)
		r := s.DoAs(t, s.tok["bob"], readWorkflow, map[string]any{"id": out.CreateWorkflow.ID})
		require.Len(t, r.Errors, 1)
		require.Equal(t, "NOT_FOUND", r.Errors[0].Code())
		var got struct{ Workflow workflowView }
		s.QueryAs(t, s.tok["root"], readWorkflow, map[string]any{"id": out.CreateWorkflow.ID}, &got)
		require.Len(t, got.Workflow.Steps, 4, "the tenant's admin sees it")
		s.QueryAs(t, s.tok["alice"], readWorkflow, map[string]any{"id": out.CreateWorkflow.ID}, &got)
		require.Len(t, got.Workflow.Steps, 4)

		// The connection: filtered, and by the same rule.
		s.QueryAs(t, s.tok["alice"], createWorkflow, map[string]any{"in": map[string]any{"title": "nightly", "steps": diamondSteps()}}, &out)
		s.QueryAs(t, s.tok["bob"], createWorkflow, map[string]any{"in": map[string]any{"title": "nightly", "steps": diamondSteps()}}, &out)
		const list = `query($w: WorkflowWhereInput) { workflows(first: 10, where: $w) { totalCount edges { node { id title status } } } }`
		var page struct {
			Workflows struct {
				TotalCount int
				Edges      []struct {
					Node struct{ ID, Title, Status string }
				}
			}
		}
		s.QueryAs(t, s.tok["alice"], list, map[string]any{"w": map[string]any{"title": "nightly"}}, &page)
		require.Equal(t, 1, page.Workflows.TotalCount)
		require.Equal(t, "nightly", page.Workflows.Edges[0].Node.Title)
		s.QueryAs(t, s.tok["alice"], list, nil, &page)
		require.Equal(t, 2, page.Workflows.TotalCount, "alice's own two")
		s.QueryAs(t, s.tok["root"], list, nil, &page)
		require.Equal(t, 3, page.Workflows.TotalCount, "the tenant's admin sees all three")
	})
}

func TestCancelWorkflowCancelsEveryOpenStep(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := apptest.Start(t, dsn, app.Options{})
		steps := diamondSteps()
		steps[2]["input"] = map[string]any{"sleepMs": 60000} // the root, "a"
		var out struct{ CreateWorkflow workflowView }
		s.Query(t, createWorkflow, map[string]any{"in": map[string]any{"steps": steps}}, &out)
		var cancelled struct {
			CancelWorkflow struct{ ID string }
		}
		s.Query(t, `mutation($id: ID!) { cancelWorkflow(id: $id, reason: "not needed") { id } }`, map[string]any{"id": out.CreateWorkflow.ID}, &cancelled)
		require.Equal(t, out.CreateWorkflow.ID, cancelled.CancelWorkflow.ID)
		var got struct {
			Workflow struct {
				Status           string
				AvailableActions []string
				Steps            []struct{ Status string }
			}
		}
		apptest.Eventually(t, 30*time.Second, func() (bool, string) {
			s.Query(t, `query($id: ID!) { workflow(id: $id) { status availableActions steps { status } } }`, map[string]any{"id": out.CreateWorkflow.ID}, &got)
			// The running root ends CANCELLED once its handler has
			// stopped, which may come after the workflow's status says so.
			for _, st := range got.Workflow.Steps {
				if st.Status != "CANCELLED" {
					return false, fmt.Sprintf("workflow %s, a step %s", got.Workflow.Status, st.Status)
				}
			}
			return got.Workflow.Status == "CANCELLED", got.Workflow.Status
		})
		require.Equal(t, []string{"RETRY_WORKFLOW"}, got.Workflow.AvailableActions, "nothing to cancel; a retry runs it again")
		for _, st := range got.Workflow.Steps {
			require.Equal(t, "CANCELLED", st.Status)
		}
		r := s.Do(t, `mutation { cancelWorkflow(id: "987654") { id } }`, nil)
		require.Len(t, r.Errors, 1)
		require.Equal(t, "NOT_FOUND", r.Errors[0].Code())
	})
}
