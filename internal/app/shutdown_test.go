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

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/leader"
)

// TestShutdownEndsStreamsProperly: at shutdown a websocket is closed with
// 1001 (going away); an SSE subscriber gets a last UNAVAILABLE
// (SHUTTING_DOWN) error event, complete, and the end of the stream.
// Neither holds the shutdown up.
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

	// The websocket: closed with 1001, its operations left running on the
	// client's side, so that it subscribes to them again when it reconnects.
	require.NoError(t, ws.Conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	for {
		var m apptest.WSMessage
		err := ws.Conn.ReadJSON(&m)
		if err == nil {
			require.Equal(t, "next", m.Type, "a change published before the end, nothing else: %+v", m)
			var p apptest.Response
			require.NoError(t, json.Unmarshal(m.Payload, &p))
			require.Empty(t, p.Errors)
			continue
		}
		var ce *websocket.CloseError
		require.True(t, errors.As(err, &ce), "%v", err)
		require.Equal(t, websocket.CloseGoingAway, ce.Code)
		break
	}

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
