package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/tasktype"
	"github.com/taskgraph/taskgraph/worker"
)

// The alert API end to end: a channel and a rule made through GraphQL, a
// failing task, the incident streamed live to a subscriber, and its notice
// delivered to a local receiver and listed as the incident's delivery.
func TestAlertsThroughTheAPI(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		var mu sync.Mutex
		var got []map[string]any
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var m map[string]any
			b, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(b, &m)
			mu.Lock()
			got = append(got, m)
			mu.Unlock()
		}))
		defer recv.Close()
		s := apptest.Start(t, dsn, app.Options{})
		var ch struct {
			CreateAlertChannel struct{ ID string } `json:"createAlertChannel"`
		}
		s.Query(t, `mutation($url: String!) { createAlertChannel(input: {name: "ops", kind: WEBHOOK, url: $url, secret: "s"}) { id } }`,
			map[string]any{"url": recv.URL + "/hook?token=t0ken"}, &ch)
		var rule struct {
			CreateAlertRule struct {
				ID       string
				Channels []struct{ URLDisplay string }
			} `json:"createAlertRule"`
		}
		s.Query(t, `mutation($ch: ID!) { createAlertRule(input: {name: "pushes fail", kind: TASK_FAILED, taskType: "webhook", channelIds: [$ch]}) { id channels { urlDisplay } } }`,
			map[string]any{"ch": ch.CreateAlertChannel.ID}, &rule)
		require.Equal(t, recv.URL+"/hook", rule.CreateAlertRule.Channels[0].URLDisplay, "no token shown")

		deadline := time.Now().Add(20 * time.Second)
		for !s.App.Evaluator.Listening() {
			require.True(t, time.Now().Before(deadline), "the evaluator does not listen")
			time.Sleep(5 * time.Millisecond)
		}
		ws := s.DialWS(t, nil)
		ws.Subscribe("1", `subscription { alertIncidentChanged { id status kind subject occurrences lastTask { id } } }`, nil)
		for s.App.Alerts.Hub().Subscribers() < 1 {
			require.True(t, time.Now().Before(deadline), "no subscriber")
			time.Sleep(5 * time.Millisecond)
		}
		var created struct {
			CreateTask struct{ ID string } `json:"createTask"`
		}
		s.Query(t, `mutation { createTask(input: {type: "webhook", maxAttempts: 1, input: {url: "http://127.0.0.1:1/"}}) { id } }`, nil, &created)
		var inc struct {
			ID, Status, Kind, Subject string
			Occurrences               int
			LastTask                  *struct{ ID string }
		}
		m := ws.Next()
		require.Equal(t, "next", m.Type, "%s", m.Payload)
		var p struct {
			Data struct {
				AlertIncidentChanged json.RawMessage `json:"alertIncidentChanged"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(m.Payload, &p))
		require.NoError(t, json.Unmarshal(p.Data.AlertIncidentChanged, &inc))
		require.Equal(t, "OPEN", inc.Status)
		require.Equal(t, "TASK_FAILED", inc.Kind)
		require.Equal(t, "type:webhook", inc.Subject)
		require.Equal(t, created.CreateTask.ID, inc.LastTask.ID)

		// Its notice is delivered, and listed on the incident.
		var q struct {
			AlertIncident struct {
				Notified   bool
				Deliveries []struct{ Type, Status, BizID string }
			} `json:"alertIncident"`
		}
		for {
			s.Query(t, `query($id: ID!) { alertIncident(id: $id) { notified deliveries { type status bizID } } }`, map[string]any{"id": inc.ID}, &q)
			if q.AlertIncident.Notified && len(q.AlertIncident.Deliveries) == 1 && q.AlertIncident.Deliveries[0].Status == "SUCCESS" {
				break
			}
			require.True(t, time.Now().Before(deadline), "delivery: %+v", q)
			time.Sleep(20 * time.Millisecond)
		}
		require.True(t, q.AlertIncident.Notified)
		require.Equal(t, "alert.deliver", q.AlertIncident.Deliveries[0].Type)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, got, 1)
		require.Equal(t, "OPENED", got[0]["event"])
	})
}

// A stalled task's stalledAt through the API: a type whose executions stall
// after 200 ms, a watchdog passing every 50 ms, a handler that hangs (and
// heartbeats). stalledAt is set while it runs, and null again once it no
// longer runs.
func TestStalledAtThroughTheAPI(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := apptest.Start(t, dsn, app.Options{
			Register: func(r *tasktype.Registry) {
				tasktype.Register(r, "hangs", func(ctx context.Context, _ *tasktype.Job, _ struct{}) error {
					<-ctx.Done()
					return ctx.Err()
				}, tasktype.WithStallDetection(200*time.Millisecond, tasktype.StallFlag))
			},
			Watchdog: worker.WatchdogConfig{Interval: 50 * time.Millisecond},
		})
		var created struct {
			CreateTask struct {
				ID        string
				CreatedAt time.Time
			} `json:"createTask"`
		}
		s.Query(t, `mutation { createTask(input: {type: "hangs"}) { id createdAt } }`, nil, &created)
		id := created.CreateTask.ID
		var q struct {
			Task struct {
				Status    string
				StalledAt *time.Time
			}
		}
		read := func() {
			s.Query(t, `query($id: ID!) { task(id: $id) { status stalledAt } }`, map[string]any{"id": id}, &q)
		}
		apptest.Eventually(t, 30*time.Second, func() (bool, string) {
			read()
			return q.Task.StalledAt != nil, "task is " + q.Task.Status + ", not flagged"
		})
		require.Equal(t, "EXECUTING", q.Task.Status, "flagged, and running on (FLAG)")
		require.False(t, q.Task.StalledAt.Before(created.CreateTask.CreatedAt.Add(200*time.Millisecond)),
			"flagged no sooner than stallAfter after it was created: created %s, stalled %s", created.CreateTask.CreatedAt, q.Task.StalledAt)

		s.Query(t, `mutation($id: ID!) { cancelTask(id: $id, reason: "test") { id } }`, map[string]any{"id": id}, nil)
		apptest.Eventually(t, 30*time.Second, func() (bool, string) {
			read()
			return q.Task.Status == "CANCELLED", "task is " + q.Task.Status
		})
		require.Nil(t, q.Task.StalledAt, "a task that does not run is not stalled")
	})
}
