package artifact_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"taskgraph/artifact"
	"taskgraph/auth"
	"taskgraph/ent"
	"taskgraph/internal/dbtest"
	"taskgraph/internal/fakeclock"
	"taskgraph/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testBundle struct {
	store *artifact.Store
	dir   *artifact.Dir
	clock *fakeclock.Clock
	links *artifact.Links
	// denied are the users whose access to the files' tasks is revoked.
	denied     map[string]bool
	mu         sync.Mutex
	downloaded []string // "user artifact-id ok|refused"
}

var alice = auth.Viewer{User: "alice", Role: auth.RoleOperator}

func setup(t *testing.T, dsn string) *testBundle {
	t.Helper()
	clock := fakeclock.New(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	st, err := store.Open(context.Background(), store.Config{DSN: dsn, Clock: clock.Now})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	dir, err := artifact.NewDir(filepath.Join(t.TempDir(), "artifacts"))
	require.NoError(t, err)
	s, err := artifact.New(artifact.Config{Client: st.Client(), Blobs: dir, TTL: time.Hour, Clock: clock.Now, Tx: st.Tx})
	require.NoError(t, err)
	b := &testBundle{store: s, dir: dir, clock: clock, denied: map[string]bool{}}
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

func (b *testBundle) get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET /download/{token}", b.links)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	resp := rec.Result()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func files(t *testing.T, dir *artifact.Dir) int {
	t.Helper()
	n := 0
	require.NoError(t, filepath.Walk(dir.Root(), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n++
		}
		return err
	}))
	return n
}

func TestArtifacts(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("SaveHashesAndBoundsTheFile", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t))
			a := b.save(t, "hello")
			require.Equal(t, int64(5), a.Size)
			require.Equal(t, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", a.Sha256)
			require.Regexp(t, `^[0-9a-f]{32}$`, a.Key)
			require.Equal(t, b.clock.Now().Add(time.Hour), a.ExpiresAt.UTC())
			_, err := b.store.Save(context.Background(), artifact.Meta{Owner: "alice", Kind: artifact.KindSource, Filename: "x", MaxSize: 4}, strings.NewReader("hello"))
			var tl *artifact.TooLargeError
			require.ErrorAs(t, err, &tl)
			require.Equal(t, 1, files(t, b.dir), "nothing left of the refused file")
		})
		t.Run("ALinkDownloadsTheFileAsAnAttachment", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t))
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
			b := setup(t, d.DSN(t))
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
			b := setup(t, d.DSN(t))
			var old []*ent.Artifact
			for range 5 {
				old = append(old, b.save(t, "old"))
			}
			b.clock.Advance(30 * time.Minute)
			fresh := b.save(t, "fresh")
			b.clock.Advance(31 * time.Minute)
			j, err := artifact.NewJanitor(artifact.JanitorConfig{Batch: 2}, b.store)
			require.NoError(t, err)
			res, err := j.RunOnce(context.Background())
			require.NoError(t, err)
			require.Equal(t, 5, res.Removed)
			left, err := b.store.Client().Artifact.Query().All(auth.NewSystemContext(context.Background()))
			require.NoError(t, err)
			require.Len(t, left, 1)
			require.Equal(t, fresh.ID, left[0].ID)
			require.Equal(t, 1, files(t, b.dir))
			res, err = j.RunOnce(context.Background())
			require.NoError(t, err)
			require.Zero(t, res.Removed)
		})
		t.Run("AnExpiredArtifactIsNotServedBeforeTheJanitorRuns", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t))
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
	})
}

func TestDirRefusesMalformedKeys(t *testing.T) {
	t.Parallel()
	d, err := artifact.NewDir(t.TempDir())
	require.NoError(t, err)
	for _, key := range []string{"../secret.key", "", "ABCDEF0123456789ABCDEF0123456789", strings.Repeat("a", 33)} {
		_, err := d.Open(key)
		require.Error(t, err, key)
		require.ErrorContains(t, d.Delete(key), "malformed")
		_, err = d.Create(key)
		require.Error(t, err, key)
	}
}
