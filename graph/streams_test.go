package graph_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
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

// TestASlowSubscriberIsToldWhyItWasDropped: a client that reads slower
// than changes come fills its buffer and its backlog; it is then dropped,
// and the last thing it reads is a RESYNC_REQUIRED (LAGGED) error, over
// websockets and SSE alike.
func TestASlowSubscriberIsToldWhyItWasDropped(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, dbtest.SQLite(t), app.Options{EventBacklog: 8})
	ws := s.DialWS(t, nil)
	ws.Subscribe("slow", `subscription { taskUpdated { id title } }`, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := apptest.PostSSE(ctx, s.URL+"/query", `subscription { taskUpdated { id title } }`, nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	s.WaitSubscribers(t, 2)

	// Nobody reads; large changes keep coming until both are dropped.
	big := strings.Repeat("x", 2<<10)
	deadline := time.Now().Add(30 * time.Second)
	for id := 1; s.App.Broker.Stats().Dropped < 2; id++ {
		require.True(t, time.Now().Before(deadline), "never dropped: %+v", s.App.Broker.Stats())
		s.App.Broker.PublishTasks([]events.TaskChange{{Kind: events.Created, Task: &ent.Task{ID: id, Version: 1, Title: big, Owner: "local", Status: lifecycle.Pending}}})
	}

	lastWS := ""
	for {
		m := ws.Next()
		if m.Type == "complete" {
			break
		}
		var p apptest.Response
		require.NoError(t, json.Unmarshal(m.Payload, &p))
		if len(p.Errors) > 0 {
			lastWS = p.Errors[0].Code() + "/" + fmt.Sprint(p.Errors[0].Extensions["reason"])
		}
	}
	require.Equal(t, "RESYNC_REQUIRED/LAGGED", lastWS)

	lastSSE := ""
	completed := false
	_ = apptest.ReadSSE(resp.Body, func(e apptest.SSEEvent) bool {
		if e.Event == "complete" {
			completed = true
			return false
		}
		if r, err := e.Response(); err == nil && len(r.Errors) > 0 {
			lastSSE = r.Errors[0].Code() + "/" + fmt.Sprint(r.Errors[0].Extensions["reason"])
		}
		return true
	})
	require.True(t, completed)
	require.Equal(t, "RESYNC_REQUIRED/LAGGED", lastSSE)
}
