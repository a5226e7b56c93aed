package graph_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// An empty where ({}) is every row, on each query and subscription that
// takes one; an empty filter inside not, and or or is the caller's
// mistake (VALIDATION), never INTERNAL (ent's "empty predicate").
func TestAnEmptyWhereIsEveryRow(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		s := apptest.Start(t, d.DSN(t), app.Options{})
		var created struct{ CreateTask struct{ ID string } }
		s.Query(t, `mutation { createTask(input: {type: "noop", title: "t", input: {sleepMs: 1}}) { id } }`, nil, &created)
		noErrors := func(r apptest.Response) {
			t.Helper()
			require.Empty(t, r.Errors, "%s", r.Data)
		}
		for name, q := range map[string]string{
			"tasks":          `{ tasks(where: {}) { totalCount } }`,
			"countTasks":     `{ countTasks(where: {}) }`,
			"bulkPreview":    `{ bulkPreview(action: CANCEL, where: {}) { matched } }`,
			"auditLogs":      `{ auditLogs(where: {}) { totalCount } }`,
			"schedules":      `{ schedules(where: {}) { totalCount } }`,
			"tasksVariables": `query($w: TaskWhereInput!) { countTasks(where: $w) }`,
		} {
			t.Run(name, func(t *testing.T) {
				r := s.Do(t, q, map[string]any{"w": map[string]any{}})
				noErrors(r)
				if name == "countTasks" || name == "tasksVariables" {
					var out struct{ CountTasks int }
					require.NoError(t, json.Unmarshal(r.Data, &out))
					require.GreaterOrEqual(t, out.CountTasks, 1)
				}
			})
		}
		for name, q := range map[string]string{
			"tasks":       `{ tasks(where: {not: {}}) { totalCount } }`,
			"tasksAnd":    `{ tasks(where: {and: [{}, {}]}) { totalCount } }`,
			"countTasks":  `{ countTasks(where: {or: [{}]}) }`,
			"bulkPreview": `{ bulkPreview(action: CANCEL, where: {not: {}}) { matched } }`,
			"auditLogs":   `{ auditLogs(where: {not: {}}) { totalCount } }`,
			"schedules":   `{ schedules(where: {not: {}}) { totalCount } }`,
		} {
			t.Run("Nested/"+name, func(t *testing.T) {
				r := s.Do(t, q, nil)
				require.Len(t, r.Errors, 1, "%s", r.Data)
				require.Equal(t, "VALIDATION", r.Errors[0].Code(), "%+v", r.Errors[0])
			})
		}
		// The subscription, on each transport: every task's changes.
		t.Run("SubscriptionSSE", func(t *testing.T) {
			st := s.SubscribeSSE(t, `subscription { taskUpdated(where: {}) { id status } }`, nil)
			s.WaitSubscribers(t, 1)
			var next struct{ CreateTask struct{ ID string } }
			s.Query(t, `mutation { createTask(input: {type: "noop", title: "t1", input: {sleepMs: 1}}) { id } }`, nil, &next)
			for {
				e, ok := st.Next()
				require.True(t, ok, "the stream ended")
				r, err := e.Response()
				require.NoError(t, err)
				require.Empty(t, r.Errors)
				var out struct{ TaskUpdated apptest.Task }
				require.NoError(t, json.Unmarshal(r.Data, &out))
				if out.TaskUpdated.ID == next.CreateTask.ID {
					break
				}
			}
		})
		t.Run("SubscriptionWS", func(t *testing.T) {
			ws := s.DialWS(t, nil)
			ws.Subscribe("1", `subscription { taskUpdated(where: {}) { id status version } }`, nil)
			ws.Subscribe("2", `subscription { taskUpdated(where: {not: {}}) { id } }`, nil)
			m := ws.Next()
			require.Equal(t, "2", m.ID, "%s", m.Payload)
			var p struct{ Errors []apptest.Error }
			require.NoError(t, json.Unmarshal(m.Payload, &p))
			require.Len(t, p.Errors, 1, "%s", m.Payload)
			require.Equal(t, "VALIDATION", p.Errors[0].Code())
			s.Query(t, `mutation { createTask(input: {type: "noop", title: "t2", input: {sleepMs: 1}}) { id } }`, nil, nil)
			for {
				m := ws.Next()
				if m.Type == "complete" && m.ID == "2" {
					continue
				}
				require.Equal(t, "next", m.Type, "%s", m.Payload)
				require.Equal(t, "1", m.ID)
				require.NotContains(t, string(m.Payload), `"errors"`)
				break
			}
		})
	})
}
