package app_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/blobtest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/importtest"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// sharedKey is the secret key of every node of a test deployment (each has
// a data directory of its own, as separate machines do).
var sharedKey = strings.Repeat("5e", 32)

func node(roles []app.Role, blobURL string) func(*app.Config) {
	return func(c *app.Config) {
		c.Roles = roles
		c.BlobURL = blobURL
		c.SecretKey = sharedKey
	}
}

var quick = []tasktype.RetryPolicy{{Name: tasktype.DefaultPolicyName, MaxAttempts: 2, Backoff: []time.Duration{10 * time.Millisecond}}}

type fileTask struct {
	ID, Status, ResultStatus, LastError string
	Result                              map[string]any
	Instances                           []struct{ WorkerID, ErrorKind, LastError string }
}

// waitTask polls a node until the task is finished.
func waitTask(t *testing.T, s *apptest.Server, id string) fileTask {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var out struct{ Task fileTask }
		s.Query(t, `query($id: ID!) { task(id: $id) { id status resultStatus lastError result instances { workerID errorKind lastError } } }`, map[string]any{"id": id}, &out)
		switch out.Task.Status {
		case "SUCCESS", "FAILED", "CANCELLED":
			return out.Task
		}
		require.True(t, time.Now().Before(deadline), "task %s still %s", id, out.Task.Status)
		time.Sleep(20 * time.Millisecond)
	}
}

// fetch asks node s for a link to a task's artifact and downloads it
// through s, with extra request headers.
func fetch(t *testing.T, s *apptest.Server, taskID, kind, format string, header ...string) (*http.Response, []byte) {
	t.Helper()
	var out struct{ ArtifactDownloadURL struct{ URL string } }
	s.Query(t, `mutation($id: ID!, $kind: ArtifactKind, $format: FileFormat) { artifactDownloadUrl(taskId: $id, kind: $kind, format: $format) { url } }`,
		map[string]any{"id": taskID, "kind": kind, "format": format}, &out)
	require.True(t, strings.HasPrefix(out.ArtifactDownloadURL.URL, s.URL+"/download/"), out.ArtifactDownloadURL.URL)
	req, err := http.NewRequest(http.MethodGet, out.ArtifactDownloadURL.URL, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

func readyz(t *testing.T, s *apptest.Server) (int, string) {
	t.Helper()
	resp, err := http.Get(s.URL + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// The flagship use case across machines: a file uploaded to an API node is
// imported by a worker node and its error report downloaded through a
// third node; an export run on the worker is downloaded through the first.
// Each node has its own data directory; the files live at --blob-url.
func TestSplitDeploymentSharesItsFiles(t *testing.T) {
	t.Parallel()
	blobtest.Each(t, func(t *testing.T, bk blobtest.Backend) {
		dsn, url := dbtest.PostgresOnly(t), bk.URL(t)
		api := []app.Role{app.RoleAPI}
		a := apptest.Start(t, dsn, app.Options{}, node(api, url))
		b := apptest.Start(t, dsn, app.Options{Policies: quick}, node([]app.Role{app.RoleWorker, app.RoleWatchdog}, url))
		c := apptest.Start(t, dsn, app.Options{}, node(api, url))
		for _, s := range []*apptest.Server{a, b, c} {
			status, body := readyz(t, s)
			require.Equal(t, http.StatusOK, status, body)
			require.Equal(t, url, s.App.Artifacts.Location(), "the location, as given")
		}

		bad := func(i int) bool { return i%10 == 4 }
		tk := importtest.MustUpload(t, a, "contacts.csv", importtest.CSV(importtest.ContactsHeader, importtest.Rows(200, bad), false), nil, "")
		done := waitTask(t, c, tk.ID)
		require.Equal(t, "SUCCESS", done.Status, "last error: %s", done.LastError)
		require.Equal(t, "PARTIAL_SUCCESS", done.ResultStatus)
		require.Len(t, done.Instances, 1)
		require.Equal(t, b.App.Node, done.Instances[0].WorkerID, "imported by the worker node")

		resp, body := fetch(t, c, tk.ID, "ERROR_REPORT", "CSV")
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		require.Equal(t, 21, bytes.Count(body, []byte("\n")), "a header and the 20 refused rows")
		// Ranges come from the store too.
		resp, part := fetch(t, c, tk.ID, "ERROR_REPORT", "CSV", "Range", "bytes=0-9")
		require.Equal(t, http.StatusPartialContent, resp.StatusCode)
		require.Equal(t, body[:10], part)

		var exp struct{ CreateTask struct{ ID string } }
		c.Query(t, `mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`, map[string]any{"in": map[string]any{
			"type": "export", "input": map[string]any{"source": "contacts", "format": "csv", "filter": map[string]any{"importTaskId": atoi(t, tk.ID)}}}}, &exp)
		require.Equal(t, "SUCCESS", waitTask(t, a, exp.CreateTask.ID).Status)
		resp, body = fetch(t, a, exp.CreateTask.ID, "EXPORT", "CSV")
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		require.Equal(t, 181, bytes.Count(body, []byte("\n")), "a header and the 180 imported rows")
	})
}

// linesWith returns the lines of a log that contain substr.
func linesWith(log string, substr string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// The README's old several-nodes setup, as a new user ran it: one
// PostgreSQL, an API node and a worker node, each with its own data
// directory and no --blob-url. The worker node's files are not the
// deployment's: it says so at start, in one line naming --blob-url, and
// on /readyz; an import it picks up waits for a node that can read the
// file (a resource error naming the cause), never "expired?".
func TestANodeWithItsOwnFilesSaysSo(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresOnly(t)
	a := apptest.Start(t, dsn, app.Options{}, node([]app.Role{app.RoleAPI}, ""))
	var log syncBuffer
	b := apptest.Start(t, dsn, app.Options{Policies: quick, Logger: slog.New(slog.NewTextHandler(&log, nil))},
		node([]app.Role{app.RoleWorker, app.RoleWatchdog}, ""))

	status, body := readyz(t, a)
	require.Equal(t, http.StatusOK, status, body)
	status, body = readyz(t, b)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, body, "blob store: this node's blob store "+b.App.Artifacts.Location()+" does not hold this deployment's files (they were last confirmed at "+a.App.Artifacts.Location())
	require.Contains(t, body, "--blob-url")
	require.Len(t, linesWith(log.String(), "--blob-url"), 1, "one line at start:\n%s", log.String())

	tk := importtest.MustUpload(t, a, "contacts.csv", importtest.CSV(importtest.ContactsHeader, importtest.Rows(5, nil), false), nil, "")
	done := waitTask(t, a, tk.ID)
	require.Equal(t, "FAILED", done.Status)
	require.Equal(t, "RESOURCE", done.Instances[0].ErrorKind)
	require.Contains(t, done.LastError, "--blob-url")
	require.NotContains(t, done.LastError, "expired")

	// Given the deployment's store, the same node is ready.
	fixed := apptest.Start(t, dsn, app.Options{}, node([]app.Role{app.RoleWorker}, a.App.Artifacts.Location()))
	status, body = readyz(t, fixed)
	require.Equal(t, http.StatusOK, status, body)
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

func TestBlobURLFlag(t *testing.T) {
	t.Parallel()
	c, err := app.ParseFlags([]string{"-data-dir", "/srv/tg"}, env(nil), io.Discard)
	require.NoError(t, err)
	u, err := c.Blobs()
	require.NoError(t, err)
	require.Equal(t, "file:///srv/tg/artifacts", u, "one node: the data directory")
	c, err = app.ParseFlags(nil, env(map[string]string{"TASKGRAPH_BLOB_URL": "s3://files?region=eu-west-1"}), io.Discard)
	require.NoError(t, err)
	u, err = c.Blobs()
	require.NoError(t, err)
	require.Equal(t, "s3://files?region=eu-west-1", u)
	_, err = app.ParseFlags([]string{"-blob-url", "/srv/files"}, env(nil), io.Discard)
	require.ErrorContains(t, err, "-blob-url")
	// A URL that parses but does not open stops the process with one line.
	c, err = app.ParseFlags([]string{"-blob-url", "s3://files?colour=blue", "-data-dir", t.TempDir()}, env(nil), io.Discard)
	require.NoError(t, err)
	_, err = app.New(t.Context(), c, app.Options{})
	require.ErrorContains(t, err, `unknown query parameter "colour"`)
}

// /readyz reflects whether the blob store takes writes, not only whether
// its marker reads: a directory whose disk is full makes the node unready,
// naming the blob store. The full disk is simulated, honestly: the
// store's free-space floor (BucketConfig.MinFree) is raised above what
// any disk has, so that the same statfs check a full disk fails fails
// here; a write refused by the store itself (S3 down) is covered by the
// stopped server below.
func TestReadyzSaysWhenTheBlobStoreCannotWrite(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		full := apptest.Start(t, d.DSN(t), app.Options{Blob: artifact.BucketConfig{MinFree: 1 << 62}})
		status, body := readyz(t, full)
		require.Equal(t, http.StatusServiceUnavailable, status, body)
		require.Contains(t, body, "blob store")
		require.Contains(t, body, "disk full")
		require.NotContains(t, body, "database")

		srv := blobtest.StartServer(t)
		s3 := apptest.Start(t, d.DSN(t), app.Options{}, node([]app.Role{app.RoleAPI}, srv.Bucket(t)))
		status, body = readyz(t, s3)
		require.Equal(t, http.StatusOK, status, body)
		srv.Stop(t)
		apptest.Eventually(t, 2*artifact.CheckInterval+30*time.Second, func() (bool, string) {
			status, body = readyz(t, s3)
			return status == http.StatusServiceUnavailable, body
		})
		require.Contains(t, body, "blob store")
		srv.Start(t)
	})
}

// A PostgreSQL node whose task tables have autovacuum disabled says so at
// start and on /readyz, and stays ready (docs/operations.md, Autovacuum).
// The tables of this test's own schema are altered, not the shared
// server's settings.
func TestAutovacuumOffIsWarnedAndShown(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresOnly(t)
	first := apptest.Start(t, dsn, app.Options{})
	status, body := readyz(t, first)
	require.Equal(t, http.StatusOK, status, body)
	// The shared server's own setting, whichever it is, is reported as it is.
	var server string
	require.NoError(t, first.App.Store.DB().QueryRow(`SHOW autovacuum`).Scan(&server))
	if server == "on" {
		require.NotContains(t, body, "autovacuum")
	} else {
		require.Contains(t, body, "ready\nwarning: autovacuum is off (the server's autovacuum = off)")
	}
	require.NotContains(t, body, "task_instances")
	_, err := first.App.Store.DB().Exec(`ALTER TABLE task_instances SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	var log syncBuffer
	second := apptest.Start(t, dsn, app.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))}, node([]app.Role{app.RoleAPI}, first.App.Artifacts.Location()))
	status, body = readyz(t, second)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "ready\nwarning: autovacuum is off (")
	require.Contains(t, body, "autovacuum_enabled = false on task_instances): dead rows")
	require.Len(t, linesWith(log.String(), "autovacuum is off"), 1, "one line at start:\n%s", log.String())
}
