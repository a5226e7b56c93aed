package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/ent/clusternode"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/fakeclock"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/nodes"
	"github.com/taskgraph/taskgraph/internal/servicetest"
	"github.com/taskgraph/taskgraph/internal/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	epoch     = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	sysCtx    = auth.NewSystemContext(context.Background())
	adminCtx  = auth.NewContext(context.Background(), auth.Viewer{User: "alice", Role: auth.RoleAdmin, Source: auth.SourceToken})
	opCtx     = auth.NewContext(context.Background(), auth.Viewer{User: "olga", Role: auth.RoleOperator, Source: auth.SourceToken})
	viewerCtx = auth.NewContext(context.Background(), auth.Viewer{User: "vic", Role: auth.RoleViewer, Source: auth.SourceToken})
)

// fakePool is a worker pool's load and claiming switch.
type fakePool struct {
	mu          sync.Mutex
	busy, total int
	paused      bool
	calls       int
}

func (p *fakePool) Load() (int, int) { p.mu.Lock(); defer p.mu.Unlock(); return p.busy, p.total }
func (p *fakePool) PauseClaiming(pause bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = pause
	p.calls++
}
func (p *fakePool) state() (bool, int) { p.mu.Lock(); defer p.mu.Unlock(); return p.paused, p.calls }

type bundle struct {
	clock *fakeclock.Clock
	store *store.Store
	svc   *nodes.Service
}

func setup(t *testing.T, dsn string) bundle {
	t.Helper()
	clock := fakeclock.New(epoch)
	st, err := store.Open(context.Background(), store.Config{DSN: dsn, Clock: clock.Now})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	access.Install(st.Client()) // as app.New does
	rec := audit.New(st.Tx, mask.Default(), func(err error) string {
		var fe *auth.ForbiddenError
		if errors.As(err, &fe) {
			return "FORBIDDEN"
		}
		return "ERR"
	}, nil, nil)
	return bundle{clock: clock, store: st, svc: nodes.NewService(st, rec, nil, time.Second)}
}

func (b bundle) registry(t *testing.T, name string, pool nodes.Pool, leading bool) *nodes.Registry {
	t.Helper()
	cfg := nodes.Config{Store: b.store, Node: name, Roles: []string{"api", "worker"}, Files: "file:///srv/files",
		Refresh: time.Second, Pool: pool, Leading: func() bool { return leading }}
	if pool == nil {
		cfg.Pool = nil // a typed nil would be a pool
	}
	r, err := nodes.New(cfg)
	require.NoError(t, err)
	return r
}

func row(t *testing.T, b bundle, name string) *ent.ClusterNode {
	t.Helper()
	n, err := b.store.Client().ClusterNode.Query().Where(clusternode.Name(name)).Only(sysCtx)
	require.NoError(t, err)
	return n
}

func TestConfig(t *testing.T) {
	t.Parallel()
	st, err := store.Open(context.Background(), store.Config{DSN: dbtest.SQLite(t)})
	require.NoError(t, err)
	defer st.Close()
	r, err := nodes.New(nodes.Config{Store: st, Node: "a"})
	require.NoError(t, err)
	c := r.Config()
	require.Equal(t, nodes.RefreshDefault, c.Refresh)
	require.Equal(t, nodes.LeaseRefreshes*nodes.RefreshDefault, c.Lease)
	require.Equal(t, nodes.ForgetDefault, c.Forget)
	require.NotEmpty(t, c.Version)

	_, err = nodes.New(nodes.Config{Store: st, Node: "a", Refresh: time.Second, Lease: time.Second})
	require.ErrorContains(t, err, "longer than the refresh interval")
	_, err = nodes.New(nodes.Config{Store: st})
	require.Error(t, err)
}

func TestRegistryPass(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		b := setup(t, dsn)
		pool := &fakePool{busy: 2, total: 8}
		a := b.registry(t, "node-a", pool, true)
		other := b.registry(t, "node-b", nil, false)

		// The first pass creates the row, the next ones refresh it.
		res, err := a.Pass(context.Background())
		require.NoError(t, err)
		require.Equal(t, nodes.Pass{}, res)
		n := row(t, b, "node-a")
		require.Equal(t, 2, n.Busy)
		require.Equal(t, 8, n.Total)
		require.True(t, n.Leading)
		require.Equal(t, "file:///srv/files", n.Files)
		require.Equal(t, []string{"api", "worker"}, n.Roles)
		require.Equal(t, epoch, n.LastSeenAt.UTC())
		require.Equal(t, epoch.Add(3*time.Second), n.ExpiresAt.UTC())
		require.Equal(t, nodes.Live, nodes.StateOf(n, b.store.Now()))

		_, err = other.Pass(context.Background())
		require.NoError(t, err)

		b.clock.Advance(2 * time.Second)
		pool.mu.Lock()
		pool.busy = 5
		pool.mu.Unlock()
		_, err = a.Pass(context.Background())
		require.NoError(t, err)
		n = row(t, b, "node-a")
		require.Equal(t, 5, n.Busy)
		require.Equal(t, epoch.Add(2*time.Second), n.LastSeenAt.UTC())
		require.Equal(t, epoch, n.StartedAt.UTC(), "started_at stays the process's start")
		count, err := b.store.Client().ClusterNode.Query().Count(sysCtx)
		require.NoError(t, err)
		require.Equal(t, 2, count, "one row per node")

		// node-b stopped refreshing two seconds ago: within its lease
		// (3s) it is live, past it gone.
		require.Equal(t, nodes.Live, nodes.StateOf(row(t, b, "node-b"), b.store.Now()))
		b.clock.Advance(1500 * time.Millisecond)
		require.Equal(t, nodes.Gone, nodes.StateOf(row(t, b, "node-b"), b.store.Now()))
		sum, err := b.svc.Summarize(viewerCtx)
		require.NoError(t, err)
		require.Equal(t, nodes.Summary{Live: 1, Gone: 1, Busy: 5, Total: 8}, sum, "a gone node's workers do not count")

		// A gone node that comes back is live again.
		_, err = other.Pass(context.Background())
		require.NoError(t, err)
		require.Equal(t, nodes.Live, nodes.StateOf(row(t, b, "node-b"), b.store.Now()))

		// A node shut down cleanly says so at once.
		require.NoError(t, other.MarkStopped(context.Background()))
		stopped := row(t, b, "node-b")
		require.Equal(t, nodes.Stopped, nodes.StateOf(stopped, b.store.Now()))
		require.NotNil(t, stopped.StoppedAt)

		// The leading node forgets rows gone for longer than a day; the
		// node that does not lead forgets nothing.
		b.clock.Advance(nodes.ForgetDefault - time.Second)
		res, err = a.Pass(context.Background())
		require.NoError(t, err)
		require.Zero(t, res.Forgotten, "gone for less than a day")
		b.clock.Advance(2 * time.Second)
		follower := b.registry(t, "node-c", nil, false)
		res, err = follower.Pass(context.Background())
		require.NoError(t, err)
		require.Zero(t, res.Forgotten, "only the leading node forgets")
		res, err = a.Pass(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, res.Forgotten)
		_, err = b.store.Client().ClusterNode.Query().Where(clusternode.Name("node-b")).Only(sysCtx)
		require.True(t, ent.IsNotFound(err), "node-b forgotten: %v", err)
		row(t, b, "node-a")
		row(t, b, "node-c")
	})
}

// TestAGoneNodeNeverLeads: a node killed while it led the watchdog keeps
// leading = true in its row (it never refreshed again); once its lease ran
// out the API shows it GONE and not leading, beside the node that took
// over, and a node stopped cleanly does not lead either.
func TestAGoneNodeNeverLeads(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		b := setup(t, dsn)
		dead := b.registry(t, "node-a", nil, true)
		_, err := dead.Pass(context.Background())
		require.NoError(t, err)
		leading := func() map[string]bool {
			list, err := b.svc.List(adminCtx)
			require.NoError(t, err)
			out := map[string]bool{}
			for _, v := range list {
				out[v.Name+" "+string(v.State)] = v.Leading
			}
			return out
		}
		require.Equal(t, map[string]bool{"node-a LIVE": true}, leading())

		// node-a is killed; within its lease it still shows as it was.
		b.clock.Advance(2 * time.Second)
		require.Equal(t, map[string]bool{"node-a LIVE": true}, leading())
		// Past its lease node-b takes over.
		b.clock.Advance(2 * time.Second)
		heir := b.registry(t, "node-b", nil, true)
		_, err = heir.Pass(context.Background())
		require.NoError(t, err)
		require.True(t, row(t, b, "node-a").Leading, "the dead node's row still says it leads")
		require.Equal(t, map[string]bool{"node-a GONE": false, "node-b LIVE": true}, leading())

		// A node stopped cleanly leads nothing either.
		require.NoError(t, heir.MarkStopped(context.Background()))
		require.Equal(t, map[string]bool{"node-a GONE": false, "node-b STOPPED": false}, leading())
	})
}

func TestDrain(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		b := setup(t, dsn)
		pool := &fakePool{total: 4}
		r := b.registry(t, "node-a", pool, false)
		_, err := r.Pass(context.Background())
		require.NoError(t, err)

		v, err := b.svc.Drain(adminCtx, "node-a", true)
		require.NoError(t, err)
		require.Equal(t, nodes.Draining, v.State)
		paused, _ := pool.state()
		require.False(t, paused, "the node applies the flag at its next refresh")

		res, err := r.Pass(context.Background())
		require.NoError(t, err)
		require.True(t, res.Draining)
		require.True(t, r.Draining())
		paused, calls := pool.state()
		require.True(t, paused)
		// Its own refreshes keep the flag.
		_, err = r.Pass(context.Background())
		require.NoError(t, err)
		require.True(t, row(t, b, "node-a").Draining)
		_, calls2 := pool.state()
		require.Equal(t, calls, calls2, "the pool is told once")

		_, err = b.svc.Drain(adminCtx, "node-a", false)
		require.NoError(t, err)
		res, err = r.Pass(context.Background())
		require.NoError(t, err)
		require.False(t, res.Draining)
		paused, _ = pool.state()
		require.False(t, paused, "undrained: claiming again")
		require.Equal(t, nodes.Live, nodes.StateOf(row(t, b, "node-a"), b.store.Now()))

		// Unknown nodes, and roles that may not drain.
		_, err = b.svc.Drain(adminCtx, "nobody", true)
		require.ErrorIs(t, err, store.ErrNotFound)
		var fe *auth.ForbiddenError
		_, err = b.svc.Drain(opCtx, "node-a", true)
		require.ErrorAs(t, err, &fe)
		require.False(t, row(t, b, "node-a").Draining)

		// Each attempt is audited with its outcome.
		logs, err := b.store.Client().AuditLog.Query().Order(ent.Asc(auditlog.FieldID)).All(sysCtx)
		require.NoError(t, err)
		require.Len(t, logs, 4)
		require.Equal(t, audit.NodeDrain, logs[0].Action)
		require.Equal(t, auditlog.OutcomeOK, logs[0].Outcome)
		require.Equal(t, "alice", logs[0].Actor)
		require.Equal(t, "node-a", logs[0].Details["node"])
		require.Equal(t, audit.NodeUndrain, logs[1].Action)
		require.Equal(t, auditlog.OutcomeFAILED, logs[2].Outcome)
		require.Equal(t, auditlog.OutcomeFAILED, logs[3].Outcome)
		require.Equal(t, "FORBIDDEN", logs[3].ErrorCode)
		require.Equal(t, "olga", logs[3].Actor)
	})
}

func TestOnlyAdminsSeeDetails(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		b := setup(t, dsn)
		pool := &fakePool{busy: 1, total: 4}
		r := b.registry(t, "node-a", pool, true)
		_, err := r.Pass(context.Background())
		require.NoError(t, err)
		// Two executions on node-a: one of tenant t1, one of t2.
		created, err := b.store.CreateTasks(sysCtx, []store.NewTask{
			{Type: "x", Owner: "u", Tenant: "t1", Input: json.RawMessage(`{}`), InputHash: "-", TimeoutSeconds: 60, RetryPolicy: "default", MaxAttempts: 1},
			{Type: "x", Owner: "u", Tenant: "t2", Input: json.RawMessage(`{}`), InputHash: "-", TimeoutSeconds: 60, RetryPolicy: "default", MaxAttempts: 1},
		})
		require.NoError(t, err)
		claimed, err := b.store.Claim(sysCtx, "node-a", []string{"x"}, 10)
		require.NoError(t, err)
		require.Len(t, claimed, 2)

		for _, ctx := range []context.Context{opCtx, viewerCtx} {
			_, err := b.svc.List(ctx)
			var fe *auth.ForbiddenError
			require.ErrorAs(t, err, &fe)
			// Nor through the ent client.
			n, err := b.store.Client().ClusterNode.Query().Count(ctx)
			require.NoError(t, err)
			require.Zero(t, n)
			sum, err := b.svc.Summarize(ctx)
			require.NoError(t, err)
			require.Equal(t, nodes.Summary{Live: 1, Busy: 1, Total: 4}, sum)
		}
		_, err = b.svc.Summarize(context.Background())
		var ue *auth.UnauthenticatedError
		require.ErrorAs(t, err, &ue)

		platform := auth.NewContext(context.Background(), auth.Viewer{User: "p", Role: auth.RolePlatform, Source: auth.SourceToken})
		list, err := b.svc.List(platform)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Len(t, list[0].Running, 2)
		require.Equal(t, created[0].Task.ID, list[0].Running[0].TaskID)

		// A tenant's admin sees the node, and only its tenant's executions.
		t1Admin := auth.NewContext(context.Background(), auth.Viewer{User: "a", Role: auth.RoleAdmin, Source: auth.SourceToken, Tenant: "t1"})
		list, err = b.svc.List(t1Admin)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, "node-a", list[0].Name)
		require.Len(t, list[0].Running, 1)
		require.Equal(t, created[0].Task.ID, list[0].Running[0].TaskID)
		// But it may not take out of service a node that runs every
		// tenant's tasks; a platform admin may.
		_, err = b.svc.Drain(t1Admin, "node-a", true)
		var fe *auth.ForbiddenError
		require.ErrorAs(t, err, &fe)
		_, err = b.svc.Drain(platform, "node-a", true)
		require.NoError(t, err)
	})
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	b := setup(t, dbtest.SQLite(t))
	r := b.registry(t, "node-a", &fakePool{}, true)
	servicetest.StressStartStop(t, r)
	// Stopped; started again, its first pass runs at Start (a Stop right
	// after a Start may come before it: the stress above proves nothing of
	// that).
	require.NoError(t, r.Start(context.Background()))
	defer r.Stop()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := b.store.Client().ClusterNode.Query().Where(clusternode.Name("node-a")).Count(sysCtx)
		require.NoError(t, err)
		if n == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "no row after Start")
		time.Sleep(10 * time.Millisecond)
	}
}

// A node measures its offset to the database's clock at every refresh and
// writes it in its row; past the threshold it is skewed (on PostgreSQL; on
// SQLite, one node, the offset is always zero).
func TestARefreshMeasuresTheClockOffset(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		skew := 2 * time.Minute
		st, err := store.Open(context.Background(), store.Config{DSN: d.DSN(t), WallClock: func() time.Time { return time.Now().Add(skew) }})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		access.Install(st.Client())
		r, err := nodes.New(nodes.Config{Store: st, Node: "skewed", Refresh: time.Second})
		require.NoError(t, err)
		_, err = r.Pass(context.Background())
		require.NoError(t, err)
		n, err := st.Client().ClusterNode.Query().Where(clusternode.Name("skewed")).Only(sysCtx)
		require.NoError(t, err)
		offset, past := r.Skew()
		require.Equal(t, offset.Milliseconds(), n.ClockOffsetMs)
		require.Equal(t, past, n.ClockSkewed)
		if !st.Postgres() {
			require.Zero(t, n.ClockOffsetMs)
			require.False(t, n.ClockSkewed)
			return
		}
		// The database runs on this machine's clock: the offset undoes
		// the skew, to within the measurement's round trip.
		require.InDelta(t, -skew.Milliseconds(), n.ClockOffsetMs, 1000)
		require.True(t, n.ClockSkewed)
		require.True(t, nodes.SkewPast(-skew, nodes.SkewThresholdDefault))
		require.False(t, nodes.SkewPast(time.Second, nodes.SkewThresholdDefault))
	})
}
