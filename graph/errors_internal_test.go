package graph

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"entgo.io/contrib/entgql"
	"github.com/99designs/gqlgen/graphql"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/outage"
)

func TestOutagesAreUnavailable(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	mon := outage.NewMonitor(outage.MonitorConfig{Logger: log})
	present := ErrorPresenter(log, mon)
	ctx := graphql.WithResponseContext(context.Background(), graphql.DefaultErrorPresenter, nil)
	down := fmt.Errorf("claim: begin transaction: %w", &pq.Error{Code: "57P01", Message: "terminating connection due to administrator command"})
	for range 100 {
		e := present(ctx, markInternal(down))
		require.Equal(t, "UNAVAILABLE", e.Extensions["code"])
		require.Equal(t, true, e.Extensions["retryable"])
		require.Equal(t, 5, e.Extensions["retryAfterSeconds"])
		require.Equal(t, "database unreachable", e.Extensions["reason"])
		require.Equal(t, "the database is unavailable; retry shortly", e.Message, "no driver message reaches the client")
	}
	full := present(ctx, fmt.Errorf("insert: %w", errors.New("database or disk is full (13)")))
	require.Equal(t, "UNAVAILABLE", full.Extensions["code"])
	require.Equal(t, "disk full", full.Extensions["reason"])
	require.Equal(t, 1, strings.Count(logs.String(), "\n"), "one line for the outage, none per request: %s", logs.String())
	require.Equal(t, map[string]int{"request": 101}, mon.Stats().Failures)
	require.Equal(t, CodeUnavailable, ErrorCode(down), "the audit log names it the same way")
	// A bug is still INTERNAL, with a reference.
	bug := present(ctx, markInternal(errors.New("nil map")))
	require.Equal(t, "INTERNAL", bug.Extensions["code"])
}

// TestABadArgumentIsTheRequestsNeverAnOutage: a cursor cut short decodes
// to an unexpected EOF, the words of a lost connection; met while gqlgen
// reads the arguments (no resolver ran), it is VALIDATION, and the outage
// monitor never hears of it. The same error from a resolver is an outage.
func TestABadArgumentIsTheRequestsNeverAnOutage(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	mon := outage.NewMonitor(outage.MonitorConfig{Logger: log})
	present := ErrorPresenter(log, mon)
	ctx := graphql.WithResponseContext(context.Background(), graphql.DefaultErrorPresenter, nil)
	for _, garbage := range []string{"garbage", "Zm9v", "", "%%%"} {
		var c entgql.Cursor[int]
		err := c.UnmarshalGQL(garbage)
		require.Error(t, err, garbage)
		e := present(ctx, graphql.ErrorOnPath(ctx, err))
		require.Equal(t, CodeValidation, e.Extensions["code"], "%q: %v", garbage, e)
	}
	var bad entgql.Cursor[int]
	short := bad.UnmarshalGQL("garbage")
	require.ErrorIs(t, short, io.ErrUnexpectedEOF, "the words of a lost connection")
	require.Empty(t, mon.Stats().Failures, "the monitor heard of none")
	require.Empty(t, logs.String())

	// A resolver's: an outage.
	down := &pq.Error{Code: "57P01", Message: "terminating connection due to administrator command"}
	_, err := InternalErrors(ctx, func(context.Context) (any, error) { return nil, fmt.Errorf("read: %w", io.ErrUnexpectedEOF) })
	e := present(ctx, graphql.ErrorOnPath(ctx, err))
	require.Equal(t, CodeUnavailable, e.Extensions["code"])
	_, err = InternalErrors(ctx, func(context.Context) (any, error) { return nil, down })
	e = present(ctx, graphql.ErrorOnPath(ctx, err))
	require.Equal(t, CodeUnavailable, e.Extensions["code"])
	require.Equal(t, map[string]int{"request": 2}, mon.Stats().Failures)
}

func TestStreamEndErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err          error
		code, reason string
	}{
		{events.ErrLagged, CodeResyncRequired, "LAGGED"},
		{events.ErrResyncRequired, CodeResyncRequired, "MISSED_CHANGES"},
		{errMissed, CodeResyncRequired, "MISSED_CHANGES"},
		{events.ErrClosed, CodeUnavailable, "SHUTTING_DOWN"},
		{errShuttingDown, CodeUnavailable, "SHUTTING_DOWN"},
	} {
		e := streamEndError(tc.err)
		require.Equal(t, tc.code, e.Extensions["code"], "%v", tc.err)
		require.Equal(t, tc.reason, e.Extensions["reason"], "%v", tc.err)
	}
}

func TestUnavailableUploads(t *testing.T) {
	t.Parallel()
	respond := func(body string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(body))
		})
	}
	do := func(h http.Handler, contentType string) *http.Response {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/query", strings.NewReader("x"))
		req.Header.Set("Content-Type", contentType)
		UnavailableUploads(h).ServeHTTP(rec, req)
		return rec.Result()
	}
	down := `{"errors":[{"message":"the database is unavailable; retry shortly","extensions":{"code":"UNAVAILABLE","retryAfterSeconds":5}}],"data":{"importFile":null}}`
	resp := do(respond(down), "multipart/form-data; boundary=x")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "5", resp.Header.Get("Retry-After"))
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Equal(t, http.StatusOK, do(respond(down), "application/json").StatusCode, "plain GraphQL keeps 200")
	require.Equal(t, http.StatusOK, do(respond(`{"errors":[{"extensions":{"code":"VALIDATION"}}],"data":null}`), "multipart/form-data; boundary=x").StatusCode)
	require.Equal(t, http.StatusOK, do(respond(`{"data":{"importFile":{"id":"1"}}}`), "multipart/form-data; boundary=x").StatusCode)
}
