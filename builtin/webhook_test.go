package builtin_test

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
	"go.uber.org/goleak"

	"taskgraph/app"
	"taskgraph/app/apptest"
	"taskgraph/auth"
	"taskgraph/engine"
	"taskgraph/ent"
	"taskgraph/ent/taskinstance"
	"taskgraph/internal/dbtest"
	"taskgraph/lifecycle"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type received struct {
	header http.Header
	body   string
}

// receiver answers each request with the next status in statuses (after
// delay), recording what it got.
type receiver struct {
	mu       sync.Mutex
	statuses []int
	delay    time.Duration
	got      []received
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.got = append(r.got, received{header: req.Header.Clone(), body: string(body)})
	status := r.statuses[min(len(r.got)-1, len(r.statuses)-1)]
	r.mu.Unlock()
	select {
	case <-time.After(r.delay):
	case <-req.Context().Done():
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"ok":` + map[bool]string{true: "true", false: "false"}[status < 300] + `}`))
}

func waitTerminalOrRetry(t *testing.T, s *apptest.Server, id int) *ent.Task {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		tk, err := s.App.Store.TaskByID(auth.NewSystemContext(context.Background()), id)
		require.NoError(t, err)
		if tk.Status.Terminal() || tk.Status == lifecycle.RetryPending {
			return tk
		}
		require.True(t, time.Now().Before(deadline), "task %d stuck in %s", id, tk.Status)
		time.Sleep(10 * time.Millisecond)
	}
}

func firstInstance(t *testing.T, s *apptest.Server, taskID int) *ent.TaskInstance {
	t.Helper()
	in, err := s.App.Store.Client().TaskInstance.Query().Where(taskinstance.TaskID(taskID), taskinstance.InstanceNo(1)).Only(auth.NewSystemContext(context.Background()))
	require.NoError(t, err)
	return in
}

func TestWebhook(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		s := apptest.Start(t, d.DSN(t), app.Options{})
		push := func(t *testing.T, r *receiver, in map[string]any) *ent.Task {
			srv := httptest.NewServer(r)
			t.Cleanup(srv.Close)
			if _, ok := in["url"]; !ok {
				in["url"] = srv.URL + "/hook?token=s3cret"
			}
			raw, _ := json.Marshal(in)
			tk, err := s.App.Engine.Create(auth.NewContext(context.Background(), auth.Local), engine.CreateRequest{Type: "webhook", Input: raw})
			require.NoError(t, err)
			return waitTerminalOrRetry(t, s, tk.ID)
		}
		t.Run("TwoHundredSucceedsWithStatusAndLatency", func(t *testing.T) {
			t.Parallel()
			r := &receiver{statuses: []int{201}}
			tk := push(t, r, map[string]any{"body": map[string]any{"phone": "13812345678", "n": 1},
				"headers": map[string]any{"Authorization": "Bearer abc.def"}})
			require.Equal(t, lifecycle.Success, tk.Status)
			var res struct {
				Status    int   `json:"status"`
				LatencyMs int64 `json:"latencyMs"`
			}
			require.NoError(t, json.Unmarshal(tk.Result, &res))
			require.Equal(t, 201, res.Status)
			require.GreaterOrEqual(t, res.LatencyMs, int64(0))
			require.Len(t, r.got, 1)
			h := r.got[0].header
			require.Equal(t, tk.Code, h.Get("Idempotency-Key"), "receivers can drop a retried push")
			require.Equal(t, "Bearer abc.def", h.Get("Authorization"), "the handler gets the unmasked input")
			require.JSONEq(t, `{"phone":"13812345678","n":1}`, r.got[0].body)
			require.NotContains(t, string(tk.Input), "abc.def", "stored masked")
			require.NotContains(t, string(tk.Input), "13812345678", "stored masked")
		})
		t.Run("ServerErrorIsRetried", func(t *testing.T) {
			t.Parallel()
			tk := push(t, &receiver{statuses: []int{503}}, map[string]any{})
			require.Equal(t, lifecycle.RetryPending, tk.Status)
			in := firstInstance(t, s, tk.ID)
			require.Equal(t, lifecycle.KindRetryable, *in.ErrorKind)
			require.Contains(t, in.LastError, "503")
			require.NotContains(t, in.LastError, "s3cret", "no query string in errors")
		})
		t.Run("ClientErrorFailsAtOnce", func(t *testing.T) {
			t.Parallel()
			tk := push(t, &receiver{statuses: []int{404}}, map[string]any{})
			require.Equal(t, lifecycle.Failed, tk.Status)
			require.Equal(t, lifecycle.KindNonRetryable, *firstInstance(t, s, tk.ID).ErrorKind)
			var res struct{ Status int }
			require.NoError(t, json.Unmarshal(tk.Result, &res), "the response is kept with the failure")
			require.Equal(t, 404, res.Status)
		})
		t.Run("TooManyRequestsWaitsLonger", func(t *testing.T) {
			t.Parallel()
			tk := push(t, &receiver{statuses: []int{429}}, map[string]any{})
			require.Equal(t, lifecycle.RetryPending, tk.Status)
			require.Equal(t, lifecycle.KindResource, *firstInstance(t, s, tk.ID).ErrorKind)
		})
		t.Run("TimeoutIsRetried", func(t *testing.T) {
			t.Parallel()
			tk := push(t, &receiver{statuses: []int{200}, delay: 2 * time.Second}, map[string]any{"timeoutMs": 50})
			require.Equal(t, lifecycle.RetryPending, tk.Status)
			require.Equal(t, lifecycle.KindRetryable, *firstInstance(t, s, tk.ID).ErrorKind)
		})
		t.Run("ConnectionRefusedIsRetried", func(t *testing.T) {
			t.Parallel()
			tk := push(t, &receiver{statuses: []int{200}}, map[string]any{"url": "http://127.0.0.1:1/hook"})
			require.Equal(t, lifecycle.RetryPending, tk.Status)
			require.Contains(t, firstInstance(t, s, tk.ID).LastError, "connection refused")
		})
	})
	t.Run("InputIsValidated", func(t *testing.T) {
		t.Parallel()
		s := apptest.Start(t, dbtest.SQLite(t), app.Options{})
		for _, bad := range []string{
			`{}`, `{"url": "ftp://x"}`, `{"url": "http://"}`, `{"url": "http://x", "method": "DELETE"}`,
			`{"url": "http://x", "timeoutMs": 0}`, `{"url": "http://x", "headers": {"Bad Name": "v"}}`,
		} {
			_, err := s.App.Engine.Create(auth.NewContext(context.Background(), auth.Local), engine.CreateRequest{Type: "webhook", Input: json.RawMessage(bad)})
			require.ErrorIs(t, err, engine.ErrValidation, bad)
		}
	})
}
