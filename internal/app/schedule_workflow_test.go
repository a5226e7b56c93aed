package app_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// TestScheduleFiresAWorkflow: a schedule given a workflow creates it whole
// at a slot, through the running app's scheduler, and its steps run in
// order to SUCCESS; a definition with a key, or with a task too, is a
// VALIDATION error.
func TestScheduleFiresAWorkflow(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		s := apptest.Start(t, d.DSN(t), app.Options{})
		steps := []any{
			map[string]any{"key": "a", "type": "noop"},
			map[string]any{"key": "b", "type": "noop", "dependsOn": []string{"a"}},
			map[string]any{"key": "c", "type": "noop", "dependsOn": []string{"a", "b"}},
		}
		for _, bad := range []map[string]any{
			{"name": "keyed", "intervalSeconds": 1, "workflow": map[string]any{"key": "k", "steps": steps}},
			{"name": "both", "intervalSeconds": 1, "task": map[string]any{"type": "noop"}, "workflow": map[string]any{"steps": steps}},
		} {
			r := s.Do(t, `mutation($in: CreateScheduleInput!) { createSchedule(input: $in) { id } }`, map[string]any{"in": bad})
			require.Len(t, r.Errors, 1, "%v", bad["name"])
			require.Equal(t, "VALIDATION", r.Errors[0].Code())
		}
		id := createSchedule(t, s, map[string]any{
			"name": "abc", "intervalSeconds": 1, "overlapPolicy": "SKIP",
			"workflow": map[string]any{"title": "abc", "steps": steps},
		})
		type workflows struct {
			Schedule struct {
				Workflows struct {
					Edges []struct {
						Node struct {
							ScheduleID   string
							ScheduleSlot time.Time
							Status       string
							StepCount    int
							Steps        []struct{ StepKey, Status string }
						}
					}
				}
			}
		}
		var out workflows
		deadline := time.Now().Add(60 * time.Second)
		for {
			s.Query(t, `query($id: ID!) { schedule(id: $id) { workflows(last: 100) { edges { node { scheduleID scheduleSlot status stepCount steps { stepKey status } } } } } }`, map[string]any{"id": id}, &out)
			done := false
			for _, e := range out.Schedule.Workflows.Edges {
				done = done || e.Node.Status == "SUCCESS"
			}
			if done {
				break
			}
			require.True(t, time.Now().Before(deadline), "no workflow of the schedule succeeded: %+v", out)
			time.Sleep(100 * time.Millisecond)
		}
		_ = s.Do(t, `mutation($id: ID!) { pauseSchedule(id: $id) { id } }`, map[string]any{"id": id})
		slots := map[time.Time]bool{}
		for _, e := range out.Schedule.Workflows.Edges {
			n := e.Node
			require.Equal(t, id, n.ScheduleID)
			require.Equal(t, 3, n.StepCount)
			require.Len(t, n.Steps, 3, "created whole")
			require.False(t, slots[n.ScheduleSlot], "one workflow per slot")
			slots[n.ScheduleSlot] = true
		}
	})
}
