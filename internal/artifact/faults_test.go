package artifact_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/blobtest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// An S3 server that answers 5xx, refuses the credentials, or stalls is a
// store failure (RESOURCE for an execution, 503 for a download), never a
// missing file, and a refused write leaves neither a row nor an object. A
// proxy in front of the shared S3 server plays each misbehaviour.
func TestAMisbehavingS3ServerIsAFailureNotAMissingFile(t *testing.T) {
	t.Parallel()
	bucketURL, err := url.Parse(blobtest.S3Only(t))
	require.NoError(t, err)
	q := bucketURL.Query()
	upstream, err := url.Parse(q.Get("endpoint"))
	require.NoError(t, err)
	var mode atomic.Value
	mode.Store("pass")
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case "5xx":
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`))
		case "credentials":
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match the signature you provided.</Message></Error>`))
		case "stall":
			<-r.Context().Done()
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	q.Set("endpoint", srv.URL)
	bucketURL.RawQuery = q.Encode()

	// A request that moves no file, and a block read, give up after
	// OpTimeout; the caller's own context is longer, so what ends them is
	// the store's slowness, not the caller leaving.
	b := setupWith(t, dbtest.SQLite(t), bucketURL.String(), artifact.BucketConfig{OpTimeout: time.Second})
	a := b.save(t, "hello")
	for _, m := range []string{"5xx", "credentials", "stall"} {
		t.Run(m, func(t *testing.T) {
			mode.Store(m)
			defer mode.Store("pass")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			f, err := b.store.Open(ctx, a)
			if err == nil {
				_ = f.Close()
			}
			require.True(t, artifact.IsStoreFailure(err), "open: %v", err)
			require.NotErrorIs(t, err, artifact.ErrNoBlob)
			if m == "stall" {
				// A stalled write is cut by the HTTP transport's response
				// header timeout (30 s a try), too slow for this test.
				return
			}
			_, err = b.store.Save(ctx, artifact.Meta{Owner: "alice", Kind: artifact.KindSource, Filename: "y"}, strings.NewReader("y"))
			require.True(t, artifact.IsStoreFailure(err), "save: %v", err)
			n, err := b.store.Client().Artifact.Query().Count(auth.NewSystemContext(context.Background()))
			require.NoError(t, err)
			require.Equal(t, 1, n, "the refused save left no row")
		})
	}
	require.Equal(t, 1, files(t, b.blobs), "nor an object")
	f, err := b.store.Open(context.Background(), a)
	require.NoError(t, err, "the store answers again")
	require.NoError(t, f.Close())
}
