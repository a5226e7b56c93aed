package exporter_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	entartifact "github.com/taskgraph/taskgraph/ent/artifact"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/blobtest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// An export whose S3 server is down fails as a resource error naming the
// store, leaves no file and no row, and succeeds once the store is back.
func TestAnExportWaitsForItsStore(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		srv := blobtest.StartServer(t)
		s := apptest.Start(t, d.DSN(t), app.Options{Policies: []tasktype.RetryPolicy{{Name: tasktype.DefaultPolicyName, MaxAttempts: 10,
			Backoff: []time.Duration{10 * time.Millisecond}, ResourceBackoff: []time.Duration{100 * time.Millisecond}}}},
			func(c *app.Config) { c.BlobURL = srv.Bucket(t) })
		all := s.App.Broker.SubscribeTasks(func(events.TaskChange) bool { return true }, 1<<14)
		t.Cleanup(all.Close)
		b := &bundle{s: s, sub: s.App.Broker.SubscribeTasks(func(c events.TaskChange) bool { return c.Task.Status.Terminal() }, 1024)}
		t.Cleanup(b.sub.Close)
		imported := b.importContacts(t)

		srv.Stop(t)
		id := b.create(t, "export", map[string]any{"source": "contacts", "format": "csv"})
		want, _ := strconv.Atoi(id)
		timeout := time.After(60 * time.Second)
	waiting:
		for {
			select {
			case c := <-all.C:
				if c.Task.ID == want && c.Task.Status == lifecycle.RetryPending {
					break waiting
				}
				require.False(t, c.Task.ID == want && c.Task.Status.Terminal(), "ended %s: %s", c.Task.Status, c.Task.LastError)
			case <-timeout:
				t.Fatal("the export did not meet the outage")
			}
		}
		srv.Start(t)
		final := b.finished(t, id)
		ctx := auth.NewSystemContext(context.Background())
		insts, err := s.App.Store.Client().Task.QueryInstances(final).Order(ent.Asc(taskinstance.FieldInstanceNo)).All(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(insts), 2)
		require.Equal(t, lifecycle.KindResource, *insts[0].ErrorKind)
		require.Contains(t, insts[0].LastError, "blob store s3://")
		exports, err := s.App.Store.Client().Artifact.Query().Where(entartifact.KindEQ(artifact.KindExport)).All(ctx)
		require.NoError(t, err)
		require.Len(t, exports, 1, "the failed attempts left no row")
		keys, err := s.App.Artifacts.Blobs().Keys(context.Background())
		require.NoError(t, err)
		require.Len(t, keys, 2, "the source and the export: the failed attempts left no file")
		body := string(b.download(t, id, "EXPORT"))
		require.Equal(t, 11, strings.Count(body, "\n"), "a header and the 10 contacts of import %s", imported)
	})
}
