package web

import (
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

func get(t *testing.T, h http.Handler, target string, header ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	var r io.Reader = res.Body
	if res.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(res.Body)
		require.NoError(t, err)
		r = zr
	}
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return string(b)
}

// TestEmbeddedBundle checks the committed bundle itself: what `go build`
// puts in the binary.
func TestEmbeddedBundle(t *testing.T) {
	t.Parallel()
	h := Handler()

	t.Run("ServesIndexAtBase", func(t *testing.T) {
		t.Parallel()
		res := get(t, h, Base)
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
		require.Equal(t, "no-cache", res.Header.Get("Cache-Control"))
		require.NotEmpty(t, res.Header.Get("Content-Security-Policy"))
		require.Contains(t, body(t, res), `<div id="root">`)
	})

	t.Run("ServesHashedAssetsWithTypeAndLongCache", func(t *testing.T) {
		t.Parallel()
		index := body(t, get(t, h, Base))
		js := regexp.MustCompile(`src="(/console/assets/[^"]+\.js)"`).FindStringSubmatch(index)
		require.NotNil(t, js, "index.html references no script under %sassets/", Base)
		css := regexp.MustCompile(`href="(/console/assets/[^"]+\.css)"`).FindStringSubmatch(index)
		require.NotNil(t, css, "index.html references no stylesheet")

		res := get(t, h, js[1])
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Equal(t, "text/javascript; charset=utf-8", res.Header.Get("Content-Type"))
		require.Equal(t, "public, max-age=31536000, immutable", res.Header.Get("Cache-Control"))
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
		require.Greater(t, len(body(t, res)), 1000)

		res = get(t, h, css[1])
		require.Equal(t, "text/css; charset=utf-8", res.Header.Get("Content-Type"))
	})

	t.Run("FallsBackToIndexForClientRoutes", func(t *testing.T) {
		t.Parallel()
		for _, p := range []string{Base + "tasks", Base + "tasks/42", Base + "launch/noop", Base + "import"} {
			res := get(t, h, p)
			require.Equal(t, http.StatusOK, res.StatusCode, p)
			require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"), p)
			require.Contains(t, body(t, res), `<div id="root">`, p)
		}
	})

	t.Run("MissingAssetIs404NotIndex", func(t *testing.T) {
		t.Parallel()
		for _, p := range []string{Base + "assets/nope-123.js", Base + "missing.png"} {
			res := get(t, h, p)
			require.Equal(t, http.StatusNotFound, res.StatusCode, p)
			require.NotContains(t, body(t, res), `<div id="root">`, p)
		}
	})
}

func TestHandler(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) http.Handler {
		t.Helper()
		big := strings.Repeat("console.log('taskgraph');\n", 200)
		h, err := newHandler(fstest.MapFS{
			"index.html":         {Data: []byte(`<!doctype html><div id="root"></div>`)},
			"favicon.svg":        {Data: []byte(`<svg/>`)},
			"assets/app-abc1.js": {Data: []byte(big)},
		})
		require.NoError(t, err)
		return h
	}

	t.Run("GzipsWhenAccepted", func(t *testing.T) {
		t.Parallel()
		h := setup(t)
		res := get(t, h, Base+"assets/app-abc1.js", "Accept-Encoding", "br, gzip")
		require.Equal(t, "gzip", res.Header.Get("Content-Encoding"))
		require.Equal(t, "Accept-Encoding", res.Header.Get("Vary"))
		require.Contains(t, body(t, res), "taskgraph")

		res = get(t, h, Base+"assets/app-abc1.js", "Accept-Encoding", "gzip;q=0")
		require.Empty(t, res.Header.Get("Content-Encoding"))
	})

	t.Run("AnswersNotModifiedForMatchingETag", func(t *testing.T) {
		t.Parallel()
		h := setup(t)
		res := get(t, h, Base)
		etag := res.Header.Get("ETag")
		require.NotEmpty(t, etag)
		res = get(t, h, Base+"tasks", "If-None-Match", etag)
		require.Equal(t, http.StatusNotModified, res.StatusCode)
	})

	t.Run("NonAssetFilesAreRevalidated", func(t *testing.T) {
		t.Parallel()
		res := get(t, setup(t), Base+"favicon.svg")
		require.Equal(t, "image/svg+xml", res.Header.Get("Content-Type"))
		require.Equal(t, "no-cache", res.Header.Get("Cache-Control"))
	})

	t.Run("RejectsWrites", func(t *testing.T) {
		t.Parallel()
		rec := httptest.NewRecorder()
		setup(t).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Base, nil))
		require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	})

	t.Run("DoesNotEscapeTheBundle", func(t *testing.T) {
		t.Parallel()
		res := get(t, setup(t), Base+"../../go.mod")
		require.NotContains(t, body(t, res), "module")
	})

	t.Run("NeedsAnIndex", func(t *testing.T) {
		t.Parallel()
		_, err := newHandler(fstest.MapFS{"assets/x.js": {Data: []byte("x")}})
		require.Error(t, err)
	})
}

var _ fs.FS = fstest.MapFS{}
