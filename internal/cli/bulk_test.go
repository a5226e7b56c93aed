package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCreateManyUsesTheBulkMutation plays a server that has createTasks:
// the answers come back by index, in any order, and land on their lines.
func TestCreateManyUsesTheBulkMutation(t *testing.T) {
	t.Parallel()
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		calls = append(calls, string(b))
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"data":{"createTasks":[
			{"index":1,"created":false,"task":null,"error":{"code":"VALIDATION","message":"unknown task type \"rocket\""}},
			{"index":0,"created":true,"task":{"id":"7","code":"NOOP-1","type":"noop","status":"PENDING","availableActions":["CANCEL"],"createdAt":"2026-11-30T00:00:00Z","updatedAt":"2026-11-30T00:00:00Z"},"error":null}]}}`)
	}))
	defer srv.Close()
	cl, err := newClient(srv.URL, "")
	require.NoError(t, err)
	c := &cmd{env: &Env{Ctx: context.Background()}}
	got, err := cl.createMany(c, []CreateTaskInput{{Type: "noop"}, {Type: "rocket"}})
	require.NoError(t, err)
	require.Len(t, calls, 1, "one call for both")
	require.Contains(t, calls[0], `"operationName":"CreateTasks"`)
	require.Equal(t, "7", got[0].task.Id)
	require.True(t, got[0].created)
	require.Equal(t, "VALIDATION", got[1].err.Code)
	require.True(t, strings.Contains(got[1].err.Message, "rocket"))
}
