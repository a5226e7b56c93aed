package artifact_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/blobtest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/fakeclock"
	"github.com/taskgraph/taskgraph/internal/servicetest"
	"github.com/taskgraph/taskgraph/internal/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testBundle struct {
	store *artifact.Store
	blobs *artifact.Bucket
	clock *fakeclock.Clock
	links *artifact.Links
	// denied are the users whose access to the files' tasks is revoked.
	denied     map[string]bool
	mu         sync.Mutex
	downloaded []string // "user artifact-id ok|refused"
}

var alice = auth.Viewer{User: "alice", Role: auth.RoleOperator}

// setup opens a store on dsn with files at blobURL.
func setup(t *testing.T, dsn, blobURL string) *testBundle {
	t.Helper()
	return setupWith(t, dsn, blobURL, artifact.BucketConfig{})
}

func setupWith(t *testing.T, dsn, blobURL string, cfg artifact.BucketConfig) *testBundle {
	t.Helper()
	clock := fakeclock.New(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	st, err := store.Open(context.Background(), store.Config{DSN: dsn, Clock: clock.Now})
	require.NoError(t, err)
	access.Install(st.Client())
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	bucket := openBucket(t, blobURL, cfg)
	s, err := artifact.New(artifact.Config{Client: st.Client(), Blobs: bucket, TTL: time.Hour, Clock: clock.Now, Tx: st.Tx, Node: "node-a"})
	require.NoError(t, err)
	b := &testBundle{store: s, blobs: bucket, clock: clock, denied: map[string]bool{}}
	b.links = artifact.NewLinks(make([]byte, 32), s, artifact.LinksConfig{
		TTL: 10 * time.Minute,
		Authorize: func(ctx context.Context, a *ent.Artifact) error {
			v, _ := auth.FromContext(ctx)
			if b.denied[v.User] {
				return errors.New("no longer visible")
			}
			return nil
		},
		Downloaded: func(ctx context.Context, a *ent.Artifact, err error) error {
			v, _ := auth.FromContext(ctx)
			b.mu.Lock()
			defer b.mu.Unlock()
			b.downloaded = append(b.downloaded, fmt.Sprintf("%s %d %v", v.User, a.ID, err == nil))
			return nil
		},
	})
	return b
}

func (b *testBundle) save(t *testing.T, body string) *ent.Artifact {
	t.Helper()
	a, err := b.store.Save(context.Background(), artifact.Meta{Owner: "alice", Kind: artifact.KindExport, Filename: "報告 \"1\".csv", ContentType: "text/csv; charset=utf-8"}, strings.NewReader(body))
	require.NoError(t, err)
	return a
}

func openBucket(t *testing.T, url string, cfg artifact.BucketConfig) *artifact.Bucket {
	t.Helper()
	bucket, err := artifact.OpenBucket(context.Background(), url, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = bucket.Close() })
	return bucket
}

func (b *testBundle) get(t *testing.T, path string, header ...string) (*http.Response, string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET /download/{token}", b.links)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	mux.ServeHTTP(rec, req)
	resp := rec.Result()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// files counts the files in the store.
func files(t *testing.T, bucket *artifact.Bucket) int {
	t.Helper()
	keys, err := bucket.Keys(context.Background())
	require.NoError(t, err)
	return len(keys)
}

func TestArtifacts(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		blobtest.Each(t, func(t *testing.T, bk blobtest.Backend) { artifactTests(t, d, bk) })
	})
}

func artifactTests(t *testing.T, d dbtest.Driver, bk blobtest.Backend) {
	{
		t.Run("SaveHashesAndBoundsTheFile", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), bk.URL(t))
			a := b.save(t, "hello")
			require.Equal(t, int64(5), a.Size)
			require.Equal(t, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", a.Sha256)
			require.Regexp(t, `^[0-9a-f]{32}$`, a.Key)
			require.Equal(t, b.clock.Now().Add(time.Hour), a.ExpiresAt.UTC())
			_, err := b.store.Save(context.Background(), artifact.Meta{Owner: "alice", Kind: artifact.KindSource, Filename: "x", MaxSize: 4}, strings.NewReader("hello"))
			var tl *artifact.TooLargeError
			require.ErrorAs(t, err, &tl)
			require.Equal(t, 1, files(t, b.blobs), "nothing left of the refused file")
		})
		t.Run("ALinkDownloadsTheFileAsAnAttachment", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), bk.URL(t))
			a := b.save(t, "a,b\n")
			resp, body := b.get(t, b.links.Sign(a, alice).Path)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, "a,b\n", body)
			require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
			require.Equal(t, "text/csv; charset=utf-8", resp.Header.Get("Content-Type"))
			require.Equal(t, `attachment; filename="__ _1_.csv"; filename*=UTF-8''%E5%A0%B1%E5%91%8A%20%221%22.csv`, resp.Header.Get("Content-Disposition"))
		})
		t.Run("TamperedRevokedAndExpiredLinksAreForbidden", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), bk.URL(t))
			a := b.save(t, "secret")
			other := b.save(t, "other")
			link := b.links.Sign(a, alice).Path
			token := strings.TrimPrefix(link, "/download/")
			p := strings.Split(token, ".")
			require.Len(t, p, 5)
			with := func(i int, v string) string {
				q := slices.Clone(p)
				q[i] = v
				return "/download/" + strings.Join(q, ".")
			}
			for name, path := range map[string]string{
				"OtherArtifact": with(0, strconv.Itoa(other.ID)),
				"LaterExpiry":   with(1, p[1]+"9"),
				"OtherUser":     with(2, base64.RawURLEncoding.EncodeToString([]byte("bob"))),
				"AdminRole":     with(3, "admin"),
				"BadMAC":        with(4, strings.Repeat("A", len(p[4]))),
				"Garbage":       "/download/..%2f..%2fsecret.key",
				"NoMAC":         "/download/" + strings.Join(p[:4], "."),
			} {
				resp, _ := b.get(t, path)
				require.Equal(t, http.StatusForbidden, resp.StatusCode, name)
			}
			resp, _ := b.get(t, link)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			b.denied["alice"] = true
			resp, _ = b.get(t, link)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "alice may no longer see the task")
			b.denied["alice"] = false
			b.clock.Advance(10 * time.Minute)
			resp, _ = b.get(t, link)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "expired")
			require.Equal(t, []string{fmt.Sprintf("alice %d true", a.ID), fmt.Sprintf("alice %d false", a.ID)}, b.downloaded,
				"every download with a valid link is reported, granted or refused")
		})
		t.Run("JanitorRemovesExpiredArtifactsInBatches", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), bk.URL(t))
			var old []*ent.Artifact
			for range 5 {
				old = append(old, b.save(t, "old"))
			}
			b.clock.Advance(30 * time.Minute)
			fresh := b.save(t, "fresh")
			b.clock.Advance(31 * time.Minute)
			j, err := artifact.NewJanitor(artifact.JanitorConfig{Batch: 2}, b.store)
			require.NoError(t, err)
			res, err := j.Pass(context.Background())
			require.NoError(t, err)
			require.Equal(t, 5, res.Removed)
			left, err := b.store.Client().Artifact.Query().All(auth.NewSystemContext(context.Background()))
			require.NoError(t, err)
			require.Len(t, left, 1)
			require.Equal(t, fresh.ID, left[0].ID)
			require.Equal(t, 1, files(t, b.blobs))
			res, err = j.Pass(context.Background())
			require.NoError(t, err)
			require.Zero(t, res.Removed)
		})
		t.Run("JanitorLeavesExpiredArtifactsToTheLeader", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), bk.URL(t))
			b.save(t, "old")
			b.clock.Advance(time.Hour)
			j, err := artifact.NewJanitor(artifact.JanitorConfig{Leader: func(context.Context) (bool, error) { return false, nil }}, b.store)
			require.NoError(t, err)
			require.False(t, j.RunOnce(context.Background()))
			require.Equal(t, 1, files(t, b.blobs))
		})
		t.Run("JanitorStartStopStress", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), bk.URL(t))
			j, err := artifact.NewJanitor(artifact.JanitorConfig{Interval: time.Millisecond}, b.store)
			require.NoError(t, err)
			servicetest.StressStartStop(t, j)
			require.False(t, j.Running())
		})
		t.Run("AnExpiredArtifactIsNotServedBeforeTheJanitorRuns", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), bk.URL(t))
			a := b.save(t, "x")
			b.clock.Advance(59 * time.Minute)
			link := b.links.Sign(a, alice)
			require.Equal(t, a.ExpiresAt.Truncate(time.Second), link.ExpiresAt.UTC(), "a link never outlives its file")
			b.clock.Advance(30 * time.Second)
			resp, _ := b.get(t, link.Path)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			b.clock.Advance(time.Minute)
			resp, _ = b.get(t, link.Path)
			require.Equal(t, http.StatusForbidden, resp.StatusCode)
		})
		t.Run("RangeRequestsAreServed", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), bk.URL(t))
			a := b.save(t, "0123456789abcdef")
			link := b.links.Sign(a, alice).Path
			resp, body := b.get(t, link, "Range", "bytes=4-9")
			require.Equal(t, http.StatusPartialContent, resp.StatusCode)
			require.Equal(t, "456789", body)
			require.Equal(t, "bytes 4-9/16", resp.Header.Get("Content-Range"))
			resp, body = b.get(t, link, "Range", "bytes=-3")
			require.Equal(t, http.StatusPartialContent, resp.StatusCode)
			require.Equal(t, "def", body)
			resp, body = b.get(t, link, "Range", "bytes=1-2,10-11")
			require.Equal(t, http.StatusPartialContent, resp.StatusCode)
			require.Contains(t, body, "12")
			require.Contains(t, body, "ab")
		})
		t.Run("ReadsAcrossBlocksMatchTheFile", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), bk.URL(t))
			// Tiny blocks, so that every read crosses some.
			small := openBucket(t, bk.URL(t), artifact.BucketConfig{ReadBlockSize: 1000, ReadBlocks: 3})
			s, err := artifact.New(artifact.Config{Client: b.store.Client(), Blobs: small})
			require.NoError(t, err)
			content := make([]byte, 123_457)
			_, _ = rand.Read(content)
			a, err := s.Save(context.Background(), artifact.Meta{Owner: "alice", Kind: artifact.KindExport, Filename: "x.bin"}, bytes.NewReader(content))
			require.NoError(t, err)
			f, err := s.Open(context.Background(), a)
			require.NoError(t, err)
			defer f.Close()
			require.Equal(t, int64(len(content)), f.Size())
			r := mrand.New(mrand.NewPCG(1, 2))
			for range 200 {
				off := r.IntN(len(content))
				p := make([]byte, r.IntN(5000)+1)
				n, err := f.ReadAt(p, int64(off))
				want := min(len(p), len(content)-off)
				require.Equal(t, want, n)
				require.Equal(t, content[off:off+want], p[:n])
				if want < len(p) {
					require.ErrorIs(t, err, io.EOF)
				} else {
					require.NoError(t, err)
				}
			}
			// The stream, from a position.
			_, err = f.Seek(100_000, io.SeekStart)
			require.NoError(t, err)
			rest, err := io.ReadAll(f)
			require.NoError(t, err)
			require.Equal(t, content[100_000:], rest)
			require.NoError(t, f.Err())
		})
		t.Run("AFailedWriteLeavesNoFileAndNoRow", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), bk.URL(t))
			// More than a part (5 MiB): on S3 a multipart upload was
			// under way, and is aborted.
			_, err := b.store.Write(context.Background(), artifact.Meta{Owner: "alice", Kind: artifact.KindExport, Filename: "x"}, func(w io.Writer) error {
				chunk := bytes.Repeat([]byte("x"), 1<<20)
				for range 12 {
					if _, err := w.Write(chunk); err != nil {
						return err
					}
				}
				return errors.New("the export's query failed")
			})
			require.EqualError(t, err, "the export's query failed")
			require.False(t, artifact.IsStoreFailure(err))
			require.Zero(t, files(t, b.blobs))
			n, err := b.store.Client().Artifact.Query().Count(auth.NewSystemContext(context.Background()))
			require.NoError(t, err)
			require.Zero(t, n)
		})
		t.Run("AFileMissingFromTheStoreSaysWhere", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), bk.URL(t))
			a := b.save(t, "x")
			require.NoError(t, b.blobs.Delete(context.Background(), a.Key))
			_, err := b.store.Open(context.Background(), a)
			require.ErrorIs(t, err, artifact.ErrNoBlob)
			require.EqualError(t, err, "not found in the blob store "+b.store.Location())
			resp, body := b.get(t, b.links.Sign(a, alice).Path)
			require.Equal(t, http.StatusNotFound, resp.StatusCode)
			require.Equal(t, "the file was not found in the blob store\n", body)
		})
		t.Run("TheFirstNodeRecordsTheDeploymentAndOthersOnItsStoreAgree", func(t *testing.T) {
			t.Parallel()
			dsn, url := d.DSN(t), bk.URL(t)
			a := setup(t, dsn, url)
			require.NoError(t, a.store.Verify(context.Background()))
			other := setup(t, dsn, url)
			require.NoError(t, other.store.Verify(context.Background()))
			require.NoError(t, other.store.Ready(context.Background()))
			require.NoError(t, other.store.Usable())
		})
		t.Run("ANodeWithAnotherStoreIsToldSoAndUsesNone", func(t *testing.T) {
			t.Parallel()
			dsn := d.DSN(t)
			a := setup(t, dsn, bk.URL(t))
			require.NoError(t, a.store.Verify(context.Background()))
			saved := a.save(t, "x")
			// A second node with a store of its own (its own data
			// directory, another bucket).
			b := setup(t, dsn, blobtest.Dir(t))
			err := b.store.Verify(context.Background())
			var me *artifact.MisconfiguredError
			require.ErrorAs(t, err, &me)
			require.Contains(t, err.Error(), "this node's blob store "+b.store.Location()+" does not hold this deployment's files (they were last confirmed at "+a.store.Location()+" by node node-a)")
			require.Contains(t, err.Error(), "--blob-url")
			require.ErrorAs(t, b.store.Ready(context.Background()), &me)
			_, err = b.store.Open(context.Background(), saved)
			require.ErrorAs(t, err, &me, "misconfigured, not missing")
			_, err = b.store.Save(context.Background(), artifact.Meta{Owner: "alice", Kind: artifact.KindSource, Filename: "y"}, strings.NewReader("y"))
			require.ErrorAs(t, err, &me)
			require.ErrorAs(t, b.store.Delete(context.Background(), saved), &me, "a misconfigured node deletes no row of a file it cannot see")
			// Served by the misconfigured node: not a 404.
			resp, _ := b.get(t, b.links.Sign(saved, alice).Path)
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			// The deployment's own store, by URL, is fine.
			resp, body := a.get(t, a.links.Sign(saved, alice).Path)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, "x", body)
		})
		t.Run("AStoreHoldingAnotherDeploymentsFilesIsRefused", func(t *testing.T) {
			t.Parallel()
			url := bk.URL(t)
			require.NoError(t, setup(t, d.DSN(t), url).store.Verify(context.Background()))
			// Another database (another deployment) pointed at the same store.
			err := setup(t, d.DSN(t), url).store.Verify(context.Background())
			var me *artifact.MisconfiguredError
			require.ErrorAs(t, err, &me)
			require.NotEmpty(t, me.Foreign)
			require.Contains(t, err.Error(), "holds another deployment's files")
		})
	}
}

func TestOpenBucketRefusesBadURLs(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"/srv/files":                            "not a URL",
		"ftp://host/files":                      `scheme "ftp" is not file or s3`,
		"s3://key:secret@bucket?region=x":       "credentials do not belong in the URL",
		"file://host/srv/files":                 "three slashes",
		"file:///srv/files?metadata=x":          "takes no parameters",
		"s3://bucket?region=x&use_path_style=y": "use_path_style",
		"s3://bucket?region=x&colour=blue":      `unknown query parameter "colour"`,
	} {
		_, err := artifact.OpenBucket(context.Background(), url, artifact.BucketConfig{})
		require.ErrorContains(t, err, want, url)
		require.NotContains(t, err.Error(), "secret", url)
	}
}

func TestBucketRefusesMalformedKeys(t *testing.T) {
	t.Parallel()
	bucket := openBucket(t, blobtest.Dir(t), artifact.BucketConfig{})
	ctx := context.Background()
	for _, key := range []string{"../secret.key", "", "ABCDEF0123456789ABCDEF0123456789", strings.Repeat("a", 33), "taskgraph-deployment"} {
		_, err := bucket.Open(ctx, key)
		require.ErrorContains(t, err, "malformed", key)
		require.ErrorContains(t, bucket.Delete(ctx, key), "malformed", key)
		_, err = bucket.Create(ctx, key, "")
		require.ErrorContains(t, err, "malformed", key)
	}
}

// A stopped S3 server is a failure of the store — worth retrying — and
// never a missing file; a refused save leaves nothing behind.
func TestAStoppedStoreIsAFailureNotAMissingFile(t *testing.T) {
	t.Parallel()
	srv := blobtest.StartServer(t)
	b := setup(t, dbtest.SQLite(t), srv.Bucket(t))
	ctx := context.Background()
	require.NoError(t, b.store.Verify(ctx))
	a := b.save(t, "hello")
	srv.Stop(t)
	_, err := b.store.Open(ctx, a)
	require.True(t, artifact.IsStoreFailure(err), "%v", err)
	require.NotErrorIs(t, err, artifact.ErrNoBlob)
	_, err = b.store.Save(ctx, artifact.Meta{Owner: "alice", Kind: artifact.KindSource, Filename: "y"}, strings.NewReader("y"))
	require.True(t, artifact.IsStoreFailure(err), "%v", err)
	resp, _ := b.get(t, b.links.Sign(a, alice).Path)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "30", resp.Header.Get("Retry-After"))
	srv.Start(t)
	f, err := b.store.Open(ctx, a)
	require.NoError(t, err)
	defer f.Close()
	got, err := io.ReadAll(f)
	require.NoError(t, err)
	require.Equal(t, "hello", string(got))
	n, err := b.store.Client().Artifact.Query().Count(auth.NewSystemContext(ctx))
	require.NoError(t, err)
	require.Equal(t, 1, n, "the refused save left no row")
	require.Equal(t, 1, files(t, b.blobs), "nor a file")
}
