package importer_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/blobtest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/importer"
	"github.com/taskgraph/taskgraph/internal/importtest"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// startOn runs a process on dsn with its files at blobURL.
func startOn(t *testing.T, dsn, blobURL string, opts app.Options, configure ...func(*app.Config)) *bundle {
	t.Helper()
	if opts.Policies == nil {
		opts.Policies = quickPolicies
	}
	s := apptest.Start(t, dsn, opts, append(configure, func(c *app.Config) {
		c.BlobURL = blobURL
		c.SecretKey = strings.Repeat("ab", 32) // the nodes' own data directories hold none they share
	})...)
	sub := s.App.Broker.SubscribeTasks(func(c events.TaskChange) bool { return c.Task.Type == importer.TaskType }, 1<<16)
	t.Cleanup(sub.Close)
	return &bundle{s: s, subs: sub}
}

// The S3 server dies while an import reads its file: the execution fails
// with a resource error naming the store, a later one reads the file again
// once the store is back, and every good row is written exactly once.
func TestImportSurvivesTheStoreStoppingMidImport(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		srv := blobtest.StartServer(t)
		var once sync.Once
		stopped := make(chan struct{})
		b := startOn(t, d.DSN(t), srv.Bucket(t), app.Options{
			Policies: []tasktype.RetryPolicy{{Name: tasktype.DefaultPolicyName, MaxAttempts: 10,
				Backoff: []time.Duration{10 * time.Millisecond}, ResourceBackoff: []time.Duration{100 * time.Millisecond}}},
			// Small blocks: the reader fetches the file as it goes, so
			// that the outage is met half-way through it.
			Blob: artifact.BucketConfig{ReadBlockSize: 8 << 10, ReadBlocks: 2},
			Import: importer.Config{
				ChunkSize: 100,
				ChunkHook: func(ctx context.Context, job *tasktype.Job, chunk int) error {
					if job.Attempt() == 1 && chunk == 5 {
						once.Do(func() {
							srv.Stop(t)
							close(stopped)
						})
					}
					return nil
				},
			},
		})
		bad := func(i int) bool { return i%20 == 3 }
		tk := importtest.MustUpload(t, b.s, "contacts.csv", importtest.CSV(importtest.ContactsHeader, importtest.Rows(3000, bad), false), nil, "")
		// The first execution meets the outage and waits for another try.
		b.wait(t, tk.ID, "retried after the outage", func(tk *ent.Task) bool {
			return tk.Status == lifecycle.RetryPending || tk.Status.Terminal()
		})
		<-stopped
		srv.Start(t)
		final := b.waitTerminal(t, tk.ID)
		require.Equal(t, lifecycle.Success, final.Status, "last error: %s", final.LastError)
		insts, err := b.s.App.Store.Client().Task.QueryInstances(final).Order(ent.Asc(taskinstance.FieldInstanceNo)).All(sysCtx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(insts), 2)
		for _, in := range insts {
			t.Logf("instance %d: %v %s", in.InstanceNo, in.ErrorKind, in.LastError)
		}
		require.Equal(t, lifecycle.KindResource, *insts[0].ErrorKind)
		require.Contains(t, insts[0].LastError, "blob store s3://")
		require.NotContains(t, insts[0].LastError, "expired")
		for _, in := range insts[1 : len(insts)-1] {
			require.Equal(t, lifecycle.KindResource, *in.ErrorKind, "attempts while the store was down: %s", in.LastError)
		}
		sum := summaryOf(t, final)
		require.Equal(t, 3000, sum.TotalCount)
		require.Equal(t, 150, sum.FailedCount)
		requireEachRowOnce(t, b.s, final.ID, 2850)
		resp, body := download(t, b.s, tk.ID, "ERROR_REPORT", "CSV")
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, 151, strings.Count(string(body), "\n"))
	})
}

// A source file that is gone says where it was looked for, and "expired"
// only when its row says it expired.
func TestAMissingSourceSaysWhereAndExpiredOnlyWhenItIs(t *testing.T) {
	t.Parallel()
	blobtest.Each(t, func(t *testing.T, bk blobtest.Backend) {
		for _, expired := range []bool{false, true} {
			t.Run(map[bool]string{false: "Missing", true: "Expired"}[expired], func(t *testing.T) {
				t.Parallel()
				dsn, url := dbtest.PostgresOnly(t), bk.URL(t)
				// Uploaded through an API node; the file is lost before a
				// worker node (without the janitor) runs the import.
				a := startOn(t, dsn, url, app.Options{}, func(c *app.Config) { c.Roles = []app.Role{app.RoleAPI} })
				tk := importtest.MustUpload(t, a.s, "contacts.csv", importtest.CSV(importtest.ContactsHeader, importtest.Rows(10, nil), false), nil, "")
				src, err := a.s.App.Artifacts.Latest(sysCtx, atoi(t, tk.ID), artifact.KindSource)
				require.NoError(t, err)
				require.NoError(t, a.s.App.Artifacts.Blobs().Delete(context.Background(), src.Key))
				if expired {
					require.NoError(t, a.s.App.Store.Client().Artifact.UpdateOne(src).SetExpiresAt(time.Now().Add(-time.Hour)).Exec(sysCtx))
				}
				b := startOn(t, dsn, url, app.Options{}, func(c *app.Config) { c.Roles = []app.Role{app.RoleWorker} })
				final := b.waitTerminal(t, tk.ID)
				require.Equal(t, lifecycle.Failed, final.Status)
				insts, err := b.s.App.Store.Client().Task.QueryInstances(final).All(sysCtx)
				require.NoError(t, err)
				require.Len(t, insts, 1, "not retried")
				require.Equal(t, lifecycle.KindNonRetryable, *insts[0].ErrorKind)
				if expired {
					require.Contains(t, final.LastError, `the uploaded file "contacts.csv" expired at `)
					require.Contains(t, final.LastError, "upload it again")
				} else {
					require.Equal(t, `the uploaded file "contacts.csv" was not found in the blob store `+b.s.App.Artifacts.Location(), final.LastError)
				}
			})
		}
	})
}

// An upload refused because S3 is down says that the blob store failed,
// never that the database did (the database is fine): UNAVAILABLE with
// reason "blob store unavailable" and HTTP 503.
func TestAnUploadRefusedWhileTheStoreIsDownNamesTheStore(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		srv := blobtest.StartServer(t)
		b := startOn(t, d.DSN(t), srv.Bucket(t), app.Options{})
		srv.Stop(t)
		resp, status := importtest.Upload(t, b.s, "contacts.csv", importtest.CSV(importtest.ContactsHeader, importtest.Rows(10, nil), false), "contacts", nil, "")
		require.Equal(t, 503, status, "%+v", resp)
		require.Len(t, resp.Errors, 1)
		e := resp.Errors[0]
		require.Equal(t, "UNAVAILABLE", e.Code())
		require.Equal(t, "blob store unavailable", e.Extensions["reason"])
		require.Contains(t, e.Message, "blob store")
		require.NotContains(t, e.Message, "database")
		srv.Start(t)
	})
}
