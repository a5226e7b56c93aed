package nodes_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/ent/externalworker"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/nodes"
	"github.com/taskgraph/taskgraph/internal/store"
)

func workerRow(t *testing.T, b bundle, name string) *ent.ExternalWorker {
	t.Helper()
	w, err := b.store.Client().ExternalWorker.Query().Where(externalworker.Name(name)).Only(sysCtx)
	require.NoError(t, err)
	return w
}

// TestWorkersRecordClaimsAtTheRefreshPace: a worker's claims write its row
// when it is new, says something new, or was written a refresh interval
// ago — not at every claim; another node's drain reaches it by the next
// write, this node's at once; past its lease it is GONE; admins see (and
// drain) their tenant's workers only, audited.
func TestWorkersRecordClaimsAtTheRefreshPace(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		b := setup(t, dsn)
		ws := nodes.NewWorkers(b.store, "n1", 5*time.Second, 90*time.Second, nil)
		b.svc.Workers = ws
		info := nodes.WorkerInfo{Name: "py-1", User: "wa", Language: "python", Version: "3.11", Types: []string{"py.a"}}
		drained, err := ws.Seen(sysCtx, info)
		require.NoError(t, err)
		require.False(t, drained)
		first := workerRow(t, b, "py-1")
		require.Equal(t, "n1", first.Node)
		require.Equal(t, []string{"py.a"}, first.Types)

		// Within the refresh interval: no write, and the flag as last read
		// (another node drains it meanwhile).
		b.clock.Advance(time.Second)
		_, err = b.store.Client().ExternalWorker.Update().Where(externalworker.Name("py-1")).SetDraining(true).Save(sysCtx)
		require.NoError(t, err)
		drained, err = ws.Seen(sysCtx, info)
		require.NoError(t, err)
		require.False(t, drained, "not read again within the interval")
		require.True(t, workerRow(t, b, "py-1").LastSeenAt.Equal(first.LastSeenAt), "no write per claim")
		b.clock.Advance(5 * time.Second)
		drained, err = ws.Seen(sysCtx, info)
		require.NoError(t, err)
		require.True(t, drained, "the next write reads the flag")
		require.True(t, workerRow(t, b, "py-1").LastSeenAt.After(first.LastSeenAt))

		// Something new of itself: written at once.
		info.Version = "3.12"
		_, err = ws.Seen(sysCtx, info)
		require.NoError(t, err)
		require.Equal(t, "3.12", workerRow(t, b, "py-1").Version)

		// This node's undrain: the next claim knows at once.
		list, err := b.svc.ListWorkers(adminCtx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, nodes.Draining, list[0].State)
		v, err := b.svc.DrainWorker(adminCtx, list[0].ID, false)
		require.NoError(t, err)
		require.Equal(t, nodes.Live, v.State)
		drained, err = ws.Seen(sysCtx, info)
		require.NoError(t, err)
		require.False(t, drained)
		n, err := b.store.Client().AuditLog.Query().Where(auditlog.ActionEQ(auditlog.ActionWORKER_UNDRAIN)).Count(sysCtx)
		require.NoError(t, err)
		require.Equal(t, 1, n)

		// Tenants: another tenant's admin sees none and drains none; an
		// operator sees nothing.
		other := auth.NewContext(sysCtx, auth.Viewer{User: "tom", Role: auth.RoleAdmin, Source: auth.SourceToken, Tenant: "t2"})
		list, err = b.svc.ListWorkers(other)
		require.NoError(t, err)
		require.Empty(t, list)
		_, err = b.svc.DrainWorker(other, v.ID, true)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.svc.ListWorkers(opCtx)
		var fe *auth.ForbiddenError
		require.ErrorAs(t, err, &fe)

		// Past its lease: GONE.
		b.clock.Advance(91 * time.Second)
		list, err = b.svc.ListWorkers(adminCtx)
		require.NoError(t, err)
		require.Equal(t, nodes.Gone, list[0].State)
	})
}
