package graph_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// TestDeadlinesThroughTheAPI: a task is given a deadline by createTask or
// by its type's FinishWithin; a deadline that has passed, or that comes
// before runAt, is VALIDATION naming the field; deadlineState follows the
// task to MET; the on-time report counts what the viewer may see; the
// deadline alert kinds can be set as rules.
func TestDeadlinesThroughTheAPI(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := startSecured(t, dsn, app.Options{Register: func(r *tasktype.Registry) {
			tasktype.Register(r, "within-two-hours", func(context.Context, *tasktype.Job, struct{}) error { return nil }, tasktype.WithFinishWithin(2*time.Hour))
		}})
		type view struct {
			ID            string
			Status        string
			RunAt         time.Time
			Deadline      *time.Time
			DeadlineState *string
		}
		const create = `mutation($in: CreateTaskInput!) { createTask(input: $in) { id status runAt deadline deadlineState } }`
		const get = `query($id: ID!) { node(id: $id) { ... on Task { id status runAt deadline deadlineState } } }`
		now := time.Now().UTC()

		var c struct{ CreateTask view }
		due := now.Add(time.Hour).Truncate(time.Second)
		s.QueryAs(t, s.tok["alice"], create, map[string]any{"in": map[string]any{"type": "noop", "deadline": due}}, &c)
		require.NotNil(t, c.CreateTask.Deadline)
		require.True(t, due.Equal(*c.CreateTask.Deadline), "%s", c.CreateTask.Deadline)
		require.Contains(t, []string{"ON_TIME", "MET"}, *c.CreateTask.DeadlineState)
		noop := c.CreateTask.ID
		apptest.Eventually(t, 30*time.Second, func() (bool, string) {
			var g struct{ Node view }
			s.QueryAs(t, s.tok["alice"], get, map[string]any{"id": noop}, &g)
			return g.Node.Status == "SUCCESS" && g.Node.DeadlineState != nil && *g.Node.DeadlineState == "MET", g.Node.Status
		})

		// The type's default: two hours after the task may first run.
		runAt := now.Add(30 * time.Minute).Truncate(time.Second)
		s.QueryAs(t, s.tok["alice"], create, map[string]any{"in": map[string]any{"type": "within-two-hours", "runAt": runAt}}, &c)
		require.NotNil(t, c.CreateTask.Deadline)
		require.True(t, runAt.Add(2*time.Hour).Equal(*c.CreateTask.Deadline), "%s", c.CreateTask.Deadline)
		require.Equal(t, "ON_TIME", *c.CreateTask.DeadlineState)
		// Without a deadline: none.
		s.QueryAs(t, s.tok["alice"], create, map[string]any{"in": map[string]any{"type": "noop"}}, &c)
		require.Nil(t, c.CreateTask.Deadline)
		require.Nil(t, c.CreateTask.DeadlineState)

		for _, in := range []map[string]any{
			{"type": "noop", "deadline": now.Add(-time.Minute)},
			{"type": "noop", "runAt": now.Add(2 * time.Hour), "deadline": now.Add(time.Hour)},
			{"type": "noop", "deadline": now.Add(3 * 366 * 24 * time.Hour)},
		} {
			r := s.DoAs(t, s.tok["alice"], create, map[string]any{"in": in})
			require.Equal(t, "VALIDATION", code(t, r), "%v", in)
			problems, _ := r.Errors[0].Extensions["problems"].([]any)
			require.Len(t, problems, 1, "%v: %+v", in, r.Errors[0])
			require.Equal(t, "deadline", problems[0].(map[string]any)["field"], "%v: %+v", in, r.Errors[0])
		}

		const report = `query($from: Time!, $to: Time!, $g: DeadlineReportGroup) { deadlineReport(from: $from, to: $to, groupBy: $g) { key total met missed open onTimePercent } }`
		type row struct {
			Key                      string
			Total, Met, Missed, Open int
			OnTimePercent            *float64
		}
		var rep struct{ DeadlineReport []row }
		vars := map[string]any{"from": now.Add(-time.Hour), "to": now.Add(24 * time.Hour), "g": "TYPE"}
		s.QueryAs(t, s.tok["alice"], report, vars, &rep)
		hundred := 100.0
		require.Equal(t, []row{{Key: "noop", Total: 1, Met: 1, OnTimePercent: &hundred}, {Key: "within-two-hours", Total: 1, Open: 1}}, rep.DeadlineReport)
		// Another operator sees none of alice's tasks.
		s.QueryAs(t, s.tok["bob"], report, vars, &rep)
		require.Empty(t, rep.DeadlineReport)
		r := s.DoAs(t, s.tok["alice"], report, map[string]any{"from": now, "to": now.Add(-time.Hour)})
		require.Equal(t, "VALIDATION", code(t, r))

		// The deadline alert kinds (and REVIEW_OVERDUE) are rules one can set.
		for _, kind := range []string{"DEADLINE_AT_RISK", "DEADLINE_MISSED", "REVIEW_OVERDUE"} {
			var out struct{ CreateAlertRule struct{ Kind string } }
			s.QueryAs(t, s.tok["root"], `mutation($in: AlertRuleInput!) { createAlertRule(input: $in) { kind } }`,
				map[string]any{"in": map[string]any{"name": kind, "kind": kind}}, &out)
			require.Equal(t, kind, out.CreateAlertRule.Kind)
		}
	})
}
