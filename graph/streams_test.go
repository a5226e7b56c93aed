package graph_test

import (
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"taskgraph/app"
	"taskgraph/app/apptest"
	"taskgraph/internal/dbtest"
)

// TestASubscriberThatMissedChangesIsToldToResync: when the changes a
// subscriber should have received are lost (events.Broker.ResyncRequired:
// a relay outage too long to replay), its stream ends with a last
// RESYNC_REQUIRED error, over websockets and SSE alike; never a bare
// complete.
func TestASubscriberThatMissedChangesIsToldToResync(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, dbtest.SQLite(t), app.Options{})
	tk := create(t, s, map[string]any{"type": "noop", "runAt": time.Now().Add(time.Hour).Format(time.RFC3339)})
	ws := s.DialWS(t, nil)
	ws.Subscribe("w", `subscription { taskUpdated(where: {type: "noop"}) { id status } }`, nil)
	ws.Subscribe("l", `subscription($id: ID!) { taskLogAppended(taskId: $id) { message } }`, map[string]any{"id": tk.ID})
	sse := s.SubscribeSSE(t, `subscription { taskUpdated { id status } }`, nil)
	s.WaitSubscribers(t, 2)
	deadline := time.Now().Add(10 * time.Second)
	for s.App.Broker.Stats().LogSubscribers < 1 {
		require.True(t, time.Now().Before(deadline))
		time.Sleep(5 * time.Millisecond)
	}

	s.App.Broker.ResyncRequired()

	ended := map[string]bool{}
	for len(ended) < 2 {
		m := ws.Next()
		require.Equal(t, "next", m.Type, "%+v", m)
		var p apptest.Response
		require.NoError(t, json.Unmarshal(m.Payload, &p))
		require.Len(t, p.Errors, 1, "%s", m.Payload)
		require.Equal(t, "RESYNC_REQUIRED", p.Errors[0].Code())
		require.Equal(t, "MISSED_CHANGES", p.Errors[0].Extensions["reason"])
		require.Equal(t, "complete", ws.Next().Type)
		ended[m.ID] = true
	}
	e, ok := sse.Next()
	require.True(t, ok)
	r, err := e.Response()
	require.NoError(t, err)
	require.Equal(t, "RESYNC_REQUIRED", r.Errors[0].Code(), "%s", e.Data)
	e, _ = sse.Next()
	require.Equal(t, "complete", e.Event)
	require.ErrorIs(t, sse.Ended(), io.EOF)

	// The connection stays up: subscribing again works.
	ws.Subscribe("w2", `subscription { taskUpdated(where: {type: "noop"}) { id status } }`, nil)
	s.WaitSubscribers(t, 1)
}

// TestNoSubscriptionStartsWhileShuttingDown: once the server goes away, a
// new subscription gets UNAVAILABLE at once.
func TestNoSubscriptionStartsWhileShuttingDown(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, dbtest.SQLite(t), app.Options{})
	ctx := t.Context()
	s.App.GraphQL.GoAway(ctx)
	sse := s.SubscribeSSE(t, `subscription { taskUpdated { id status } }`, nil)
	e, ok := sse.Next()
	require.True(t, ok)
	r, err := e.Response()
	require.NoError(t, err)
	require.Len(t, r.Errors, 1, "%s", e.Data)
	require.Equal(t, "UNAVAILABLE", r.Errors[0].Code())
	require.Equal(t, "SHUTTING_DOWN", r.Errors[0].Extensions["reason"])
}
