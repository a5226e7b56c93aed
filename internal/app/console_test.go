package app

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/web"
)

func TestRoutesServeConsole(t *testing.T) {
	t.Parallel()
	cfg, err := ParseFlags([]string{"--data-dir", t.TempDir(), "--role", "api"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	a, err := New(context.Background(), cfg, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })

	do := func(target string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, target, nil)
		req.Host = "127.0.0.1:8080" // an open server answers loopback names only
		a.Handler.ServeHTTP(rec, req)
		return rec
	}

	t.Run("RootRedirectsToConsole", func(t *testing.T) {
		rec := do("/")
		require.Equal(t, http.StatusFound, rec.Code)
		require.Equal(t, web.Base, rec.Header().Get("Location"))
	})
	t.Run("ConsoleAndItsRoutesServeTheApp", func(t *testing.T) {
		for _, p := range []string{web.Base, web.Base + "tasks/1"} {
			rec := do(p)
			require.Equal(t, http.StatusOK, rec.Code, p)
			require.Contains(t, rec.Body.String(), `<div id="root">`, p)
		}
	})
	t.Run("OtherRoutesAreUntouched", func(t *testing.T) {
		require.Equal(t, http.StatusOK, do("/healthz").Code)
		require.Equal(t, http.StatusForbidden, do("/download/x").Code, "a malformed download link")
		rec := do("/query?query=%7B__typename%7D")
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Body.String(), `"__typename":"Query"`)
	})
}
