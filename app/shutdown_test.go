package app_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"taskgraph/app"
	"taskgraph/app/apptest"
	"taskgraph/artifact"
	"taskgraph/internal/dbtest"
	"taskgraph/leader"
)

// TestShutdownEndsStreamsProperly: at shutdown a websocket subscriber gets
// a last UNAVAILABLE error for its operation, complete, and a close with
// 1001 (going away); an SSE subscriber gets the error as a last event,
// complete, and the end of the stream. Neither holds the shutdown up.
func TestShutdownEndsStreamsProperly(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, dbtest.SQLite(t), app.Options{})
	ws := s.DialWS(t, nil)
	ws.Subscribe("1", `subscription { taskUpdated { id status } }`, nil)
	sse := s.SubscribeSSE(t, `subscription { taskUpdated { id status } }`, nil)
	s.WaitSubscribers(t, 2)
	createVia(t, s, map[string]any{"type": "noop"})
	require.Equal(t, "next", ws.Next().Type)
	e, ok := sse.Next()
	require.True(t, ok)
	require.Equal(t, "next", e.Event)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, s.App.Shutdown(ctx))

	// The websocket: the operation's last error, its end, then 1001.
	for {
		m := ws.Next()
		if m.Type == "next" {
			var p apptest.Response
			require.NoError(t, json.Unmarshal(m.Payload, &p))
			if len(p.Errors) == 0 {
				continue // a change published before the end
			}
			require.Equal(t, "UNAVAILABLE", p.Errors[0].Code(), "%+v", p.Errors)
			require.Equal(t, "SHUTTING_DOWN", p.Errors[0].Extensions["reason"])
			require.Equal(t, true, p.Errors[0].Extensions["retryable"])
			break
		}
		require.FailNow(t, "unexpected message", "%+v", m)
	}
	require.Equal(t, "complete", ws.Next().Type)
	require.NoError(t, ws.Conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, _, err := ws.Conn.ReadMessage()
	var ce *websocket.CloseError
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, websocket.CloseGoingAway, ce.Code)

	// SSE: the same error as a last event, complete, and the end.
	for {
		e, ok := sse.Next()
		require.True(t, ok, "the stream ended without its last error")
		if e.Event != "next" {
			require.FailNow(t, "unexpected event", "%+v", e)
		}
		r, err := e.Response()
		require.NoError(t, err)
		if len(r.Errors) > 0 {
			require.Equal(t, "UNAVAILABLE", r.Errors[0].Code())
			break
		}
	}
	e, ok = sse.Next()
	require.True(t, ok)
	require.Equal(t, "complete", e.Event)
	require.ErrorIs(t, sse.Ended(), io.EOF)
}

// TestShutdownStopsLeaderServicesBeforeReleasingTheLock: the artifact
// janitor, the watchdog and retention run on the leading node only; they
// stop before the lock is given up, so none of them takes it again (a lock
// taken back by a stopping process would be held until it exits). Right
// after the shutdown, another node leads.
func TestShutdownStopsLeaderServicesBeforeReleasingTheLock(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresOnly(t)
	// A janitor that asks for the lock all the time.
	s := apptest.Start(t, dsn, app.Options{Janitor: artifact.JanitorConfig{Interval: time.Millisecond}})
	deadline := time.Now().Add(20 * time.Second)
	for !s.App.Leader.Leading() {
		require.True(t, time.Now().Before(deadline), "the node never led")
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, s.App.Shutdown(ctx))

	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	defer db.Close()
	led, err := leader.New(db, leader.WatchdogRole).Lead(ctx)
	require.NoError(t, err)
	require.True(t, led, "the lock is free as soon as the node has shut down")
}
