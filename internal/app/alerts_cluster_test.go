package app_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// Two nodes: the evaluator leads on the worker node B, where the task
// fails; the console's subscriber is on the api node A, which hears of the
// incident through PostgreSQL (pg_notify in the incident's transaction).
func TestAlertIncidentsReachSubscribersOnOtherNodes(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresOnly(t)
	fast := func(c *app.Config) { c.AlertInterval = 100 * time.Millisecond }
	b := apptest.Start(t, dsn, app.Options{}, workerOnly, fast)
	deadline := time.Now().Add(20 * time.Second)
	for !b.App.AlertLeader.Leading() {
		require.True(t, time.Now().Before(deadline), "node B's evaluator does not lead")
		time.Sleep(10 * time.Millisecond)
	}
	a := apptest.Start(t, dsn, app.Options{}, apiOnly, fast)
	require.NotNil(t, a.App.AlertListener)

	var rule struct{ CreateAlertRule struct{ ID string } }
	a.Query(t, `mutation { createAlertRule(input: {name: "pushes fail", kind: TASK_FAILED, taskType: "webhook"}) { id } }`, nil, &rule)
	for !b.App.Evaluator.Listening() {
		require.True(t, time.Now().Before(deadline), "node B's evaluator does not listen")
		time.Sleep(10 * time.Millisecond)
	}
	require.False(t, a.App.Evaluator.Listening(), "one evaluator")
	ws := a.DialWS(t, nil)
	ws.Subscribe("1", `subscription { alertIncidentChanged { id status subject ruleName } }`, nil)
	for a.App.Alerts.Hub().Subscribers() < 1 {
		require.True(t, time.Now().Before(deadline), "no subscriber")
		time.Sleep(5 * time.Millisecond)
	}
	createVia(t, a, map[string]any{"type": "webhook", "maxAttempts": 1, "input": map[string]any{"url": "http://127.0.0.1:1/"}})
	m := ws.Next()
	require.Equal(t, "next", m.Type, "%s", m.Payload)
	var p struct {
		Data struct {
			AlertIncidentChanged struct{ Status, Subject, RuleName string } `json:"alertIncidentChanged"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(m.Payload, &p))
	require.Equal(t, "OPEN", p.Data.AlertIncidentChanged.Status)
	require.Equal(t, "type:webhook", p.Data.AlertIncidentChanged.Subject)
}
