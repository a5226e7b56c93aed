package flow_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/flowstart"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/builtin"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/fakeclock"
	"github.com/taskgraph/taskgraph/internal/flow"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/seal"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	epoch       = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	adminCtx    = auth.NewContext(context.Background(), auth.Viewer{User: "alice", Role: auth.RoleAdmin})
	platformCtx = auth.NewContext(context.Background(), auth.Viewer{User: "root", Role: auth.RolePlatform, Source: auth.SourceToken})
	sysCtx      = auth.NewSystemContext(context.Background())
)

func ptr[T any](v T) *T { return &v }

type bundle struct {
	clock *fakeclock.Clock
	store *store.Store
	svc   *flow.Service
	gate  *flow.Gate
}

func setup(t testing.TB, dsn string, opts ...flow.Option) bundle {
	t.Helper()
	clock := fakeclock.New(epoch)
	gate := flow.NewGate()
	st, err := store.Open(context.Background(), store.Config{DSN: dsn, Clock: clock.Now, Gate: gate})
	require.NoError(t, err)
	access.Install(st.Client())
	t.Cleanup(func() { _ = st.Close() })
	reg := tasktype.NewRegistry()
	builtin.Register(reg, &builtin.Webhook{})
	tasktype.Register(reg, "import", func(context.Context, *tasktype.Job, struct{}) error { return nil })
	tasktype.Register(reg, "system.sweep", func(context.Context, *tasktype.Job, struct{}) error { return nil }, tasktype.Internal())
	ps, err := tasktype.NewPolicies(tasktype.DefaultPolicies()...)
	require.NoError(t, err)
	sealer, err := seal.New(make([]byte, seal.KeySize))
	require.NoError(t, err)
	m := mask.Default()
	rec := audit.New(st.Tx, m, func(error) string { return "ERR" }, nil, nil)
	eng := engine.New(st, reg, ps, sealer, m, engine.WithAudit(rec))
	return bundle{clock: clock, store: st, svc: flow.NewService(eng, opts...), gate: gate}
}

// txQuerier is a Querier over a transaction of the tests' own (the claim's
// is internal to the store): ? placeholders, rebound for PostgreSQL.
type txQuerier struct {
	tx       *sql.Tx
	postgres bool
}

func (q txQuerier) rebind(query string) string {
	if !q.postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (q txQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.tx.ExecContext(ctx, q.rebind(query), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q txQuerier) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return q.tx.QueryContext(ctx, q.rebind(query), args...)
}

func (q txQuerier) Postgres() bool { return q.postgres }

var _ flow.Querier = txQuerier{}

// inTx runs fn in a transaction of the store's database, as the claim does.
func (b bundle) inTx(t testing.TB, fn func(q flow.Querier) error) {
	t.Helper()
	tx, err := b.store.DB().BeginTx(context.Background(), nil)
	require.NoError(t, err)
	if err := fn(txQuerier{tx: tx, postgres: b.store.Postgres()}); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	require.NoError(t, tx.Commit())
}

func (b bundle) admit(t testing.TB, types ...string) map[string]int {
	t.Helper()
	var out store.Admission
	b.inTx(t, func(q flow.Querier) (err error) {
		out, err = b.gate.Admit(context.Background(), q, types, b.store.Now)
		return err
	})
	require.Equal(t, b.store.Now(), out.Now, "the claim's time is the clock's")
	return out.Room
}

// claimed admits a claim of the types of claimed and records that it
// claimed that many, in one transaction, as a claim does.
func (b bundle) claimed(t testing.TB, claimed map[string]int) {
	t.Helper()
	b.inTx(t, func(q flow.Querier) error {
		adm, err := b.gate.Admit(context.Background(), q, slices.Sorted(maps.Keys(claimed)), b.store.Now)
		if err != nil {
			return err
		}
		if adm.Record == nil {
			return errors.New("the admission records no start")
		}
		return adm.Record(context.Background(), q, claimed)
	})
}

// create makes n waiting tasks of a type.
func (b bundle) create(t testing.TB, typ string, n int) {
	t.Helper()
	tasks := make([]store.NewTask, n)
	for i := range tasks {
		tasks[i] = store.NewTask{Type: typ, Owner: "alice", Input: json.RawMessage(`{}`), InputHash: "h", TimeoutSeconds: 60, RetryPolicy: "default", MaxAttempts: 3}
	}
	_, err := b.store.CreateTasks(context.Background(), tasks)
	require.NoError(t, err)
}

func TestGate(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("AdmitsEveryTypeWithoutSettingsUnlimited", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t))
			require.Equal(t, map[string]int{"noop": flow.Unlimited, "import": flow.Unlimited}, b.admit(t, "noop", "import"))
		})
		t.Run("AdmitsWhatTheCapLeaves", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t))
			_, err := b.svc.Set(adminCtx, "import", flow.Limits{MaxRunning: ptr(3)})
			require.NoError(t, err)
			b.create(t, "import", 5)
			b.create(t, "noop", 5)
			require.Equal(t, map[string]int{"import": 3, "noop": flow.Unlimited}, b.admit(t, "import", "noop"))
			claimed, err := b.store.Claim(context.Background(), "w", []string{"import", "noop"}, 10)
			require.NoError(t, err)
			require.Len(t, claimed, 8, "the claim took 3 imports, the cap, and the 5 noops")
			require.Equal(t, map[string]int{"noop": flow.Unlimited}, b.admit(t, "import", "noop"), "import is at its cap: not admitted at all")
			// Raised live: admitted at the next claim.
			_, err = b.svc.Set(adminCtx, "import", flow.Limits{MaxRunning: ptr(10)})
			require.NoError(t, err)
			require.Equal(t, 7, b.admit(t, "import")["import"])
		})
		t.Run("OnlyAnAdmittedRateHasStartsToRecord", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t))
			records := func(types ...string) bool {
				var adm store.Admission
				b.inTx(t, func(q flow.Querier) (err error) {
					adm, err = b.gate.Admit(context.Background(), q, types, b.store.Now)
					return err
				})
				return adm.Record != nil
			}
			require.False(t, records("import", "noop"), "no control: the claim makes no call")
			_, err := b.svc.Set(adminCtx, "import", flow.Limits{MaxRunning: ptr(3)})
			require.NoError(t, err)
			require.False(t, records("import", "noop"), "a cap counts what runs, not starts")
			_, err = b.svc.Set(adminCtx, "noop", flow.Limits{RateLimit: ptr(5), RatePeriodSeconds: ptr(2)})
			require.NoError(t, err)
			require.True(t, records("import", "noop"))
			require.False(t, records("import"), "the rate-limited type is not asked for")
			b.claimed(t, map[string]int{"noop": 5})
			require.False(t, records("import", "noop"), "out of starts: not admitted, nothing to record")
		})
		t.Run("RateLimitIsASlidingWindow", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t))
			_, err := b.svc.Set(adminCtx, "noop", flow.Limits{RateLimit: ptr(5), RatePeriodSeconds: ptr(2)})
			require.NoError(t, err)
			require.Equal(t, 5, b.admit(t, "noop")["noop"])
			b.claimed(t, map[string]int{"noop": 3})
			b.clock.Advance(time.Second)
			require.Equal(t, 2, b.admit(t, "noop")["noop"])
			b.claimed(t, map[string]int{"noop": 2})
			require.NotContains(t, b.admit(t, "noop"), "noop", "five started in the window")
			b.clock.Advance(time.Second) // the first 3 leave the window
			require.Equal(t, 3, b.admit(t, "noop")["noop"])
			b.claimed(t, map[string]int{"noop": 1})
			c, err := b.svc.Get(adminCtx, "noop")
			require.NoError(t, err)
			require.Equal(t, 3, c.StartedInWindow)
			b.clock.Advance(2 * time.Second)
			b.claimed(t, map[string]int{"noop": 1})
			rows, err := b.store.Client().FlowStart.Query().Order(ent.Asc(flowstart.FieldStartedAt), ent.Asc(flowstart.FieldAdmittedAt)).All(sysCtx)
			require.NoError(t, err)
			var claims []time.Time
			for _, r := range rows {
				claims = append(claims, r.StartedAt.UTC())
				require.Equal(t, r.StartedAt.UTC(), r.AdmittedAt.UTC(), "never held back: stamped when claimed")
			}
			require.Equal(t, []time.Time{epoch.Add(time.Second), epoch.Add(2 * time.Second), epoch.Add(4 * time.Second)}, claims,
				"rows claimed two periods ago or more are forgotten")
		})
		t.Run("ALateClaimIsStampedWhenItsSlotFreed", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t))
			_, err := b.svc.Set(adminCtx, "noop", flow.Limits{RateLimit: ptr(5), RatePeriodSeconds: ptr(1)})
			require.NoError(t, err)
			b.claimed(t, map[string]int{"noop": 5})
			require.NotContains(t, b.admit(t, "noop"), "noop")
			require.Equal(t, epoch.Add(time.Second), b.gate.NextAdmission().UTC(), "the window frees at 1 s")
			b.clock.Advance(time.Second + 150*time.Millisecond)
			require.Equal(t, 5, b.admit(t, "noop")["noop"])
			b.claimed(t, map[string]int{"noop": 5})
			rows, err := b.store.Client().FlowStart.Query().Order(ent.Asc(flowstart.FieldStartedAt), ent.Asc(flowstart.FieldAdmittedAt)).All(sysCtx)
			require.NoError(t, err)
			require.Len(t, rows, 3, "one row per stamp")
			late := epoch.Add(time.Second + 150*time.Millisecond)
			for _, r := range rows[1:] {
				require.Equal(t, late, r.StartedAt.UTC())
			}
			require.Equal(t, epoch.Add(time.Second), rows[1].AdmittedAt.UTC(), "the first stamped when its slot freed, 150 ms before the claim")
			require.Equal(t, 1, rows[1].Count)
			require.Equal(t, late, rows[2].AdmittedAt.UTC(), "the others no earlier than the first one's claim")
			require.Equal(t, 4, rows[2].Count)
			c, err := b.svc.Get(adminCtx, "noop")
			require.NoError(t, err)
			require.Equal(t, epoch.Add(2*time.Second), c.NextStartAt.UTC(), "one period after the stamps, not after the claim")
		})
		t.Run("APauseEndsByItself", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t))
			_, err := b.svc.Pause(adminCtx, "noop", ptr(epoch.Add(10*time.Second)))
			require.NoError(t, err)
			require.Equal(t, map[string]int{"import": flow.Unlimited}, b.admit(t, "noop", "import"))
			b.clock.Advance(10 * time.Second)
			require.Equal(t, flow.Unlimited, b.admit(t, "noop")["noop"], "paused until now: no longer")
			_, err = b.svc.Pause(adminCtx, "noop", nil)
			require.NoError(t, err)
			require.NotContains(t, b.admit(t, "noop"), "noop")
			_, err = b.svc.Resume(adminCtx, "noop")
			require.NoError(t, err)
			require.Contains(t, b.admit(t, "noop"), "noop")
		})
		t.Run("ConcurrentClaimsNeverPassTheCap", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t))
			_, err := b.svc.Set(adminCtx, "import", flow.Limits{MaxRunning: ptr(4)})
			require.NoError(t, err)
			b.create(t, "import", 50)
			// Eight claimers at once, each asking for more than the cap.
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 5 {
						if err := b.claim(3); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			running := b.running(t, "import")
			require.Equal(t, 4, running, "eight claimers, forty claims: exactly the cap runs")
		})
	})
}

// running counts a type's EXECUTING instances.
func (b bundle) running(t testing.TB, typ string) int {
	t.Helper()
	var n int
	require.NoError(t, b.store.DB().QueryRow(`SELECT COUNT(*) FROM task_instances WHERE status = 'EXECUTING' AND task_type = '`+typ+`'`).Scan(&n))
	return n
}

// claim claims up to limit import instances through the store's claim,
// which asks the gate.
func (b bundle) claim(limit int) error {
	_, err := b.store.Claim(context.Background(), "w", []string{"import"}, limit)
	return err
}

// backlog inserts n waiting tasks of a type at once, with their instances.
func (b bundle) backlog(t testing.TB, typ string, n int) {
	t.Helper()
	ctx := context.Background()
	now := b.store.Now()
	tx, err := b.store.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	q := txQuerier{tx: tx, postgres: b.store.Postgres()}
	series := `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?) `
	if q.postgres {
		series = `WITH g(n) AS (SELECT generate_series(1, CAST(? AS INTEGER))) `
	}
	_, err = q.Exec(ctx, `INSERT INTO tasks (code, type, biz_id, title, status, priority, owner, owner_role, input, input_hash,
	timeout_seconds, retry_policy, max_attempts, progress_done, progress_total, version, cancel_requested, run_at, updated_at, created_at) `+
		series+`SELECT ? || '-' || n, ?, '', '', 'PENDING', 5, 'alice', '', '{}', 'h', 60, 'default', 3, 0, 0, 1, false, ?, ?, ? FROM g`,
		n, typ, typ, now, now, now)
	require.NoError(t, err)
	_, err = q.Exec(ctx, `INSERT INTO task_instances (task_id, instance_no, status, attempt, task_type, priority, run_at, version, created_at)
	SELECT id, 1, 'PENDING', 1, type, 5, run_at, 1, created_at FROM tasks WHERE type = ? AND status = 'PENDING'`, typ)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	// No ANALYZE: the plans must hold right after a bulk load too.
}

// TestGateWithABacklog: 200,000 waiting instances of a capped and
// rate-limited type next to an uncapped one. The gate's answers are right,
// and its statements read the running instances and the window's starts
// through their indexes, never the waiting rows: what it costs does not
// depend on the backlog (BenchmarkAdmit measures it).
//
// Under the race detector, SQLite's backlog is 20,000: loading 200,000
// rows into the instrumented SQLite engine takes three and a half minutes
// (five seconds without it). Its plans do not depend on the table's size:
// SQLite plans without statistics (there is no ANALYZE here).
func TestGateWithABacklog(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		b := setup(t, dsn)
		n := 200_000
		if raceEnabled && !b.store.Postgres() {
			n = 20_000
		}
		b.backlog(t, "import", n)
		b.create(t, "noop", 10)
		_, err := b.svc.Set(adminCtx, "import", flow.Limits{MaxRunning: ptr(2), RateLimit: ptr(100)})
		require.NoError(t, err)
		require.NoError(t, b.claim(5))
		require.Equal(t, 2, b.running(t, "import"))
		require.Equal(t, map[string]int{"noop": flow.Unlimited}, b.admit(t, "import", "noop"))

		running := b.explain(t, `SELECT COUNT(*) FROM task_instances WHERE status = 'EXECUTING' AND task_type = 'import'`)
		starts := b.explain(t, `SELECT started_at, admitted_at, count FROM flow_starts WHERE task_type = 'import' AND started_at > '2026-01-01'`)
		// Either partial index of the running instances only (the
		// watchdog's, or the tenants' running caps').
		require.Regexp(t, `taskinstance_(tenant_)?running`, running, "running instances are counted through a partial index of them:\n%s", running)
		require.Contains(t, starts, "flowstart_task_type_started_at", starts)
		for _, plan := range []string{running, starts} {
			require.NotContains(t, plan, "Seq Scan", plan)
			require.NotRegexp(t, `SCAN task_instances\s*$`, plan)
			require.NotContains(t, plan, "taskinstance_claimable", "never the waiting rows")
		}
	})
}

// BenchmarkAdmit measures the gate's statements for one admission of a
// capped, rate-limited type and an uncapped one, with and without 200,000
// waiting instances of the capped type, inside one transaction (the
// claim's commit is the claim's cost, not the gate's).
func BenchmarkAdmit(b *testing.B) {
	for _, size := range []int{0, 200_000} {
		for _, d := range dbtest.Drivers() {
			b.Run(fmt.Sprintf("%s/backlog=%d", d.Name, size), func(bb *testing.B) {
				fx := setup(bb, d.DSN(bb))
				if size > 0 {
					fx.backlog(bb, "import", size)
				}
				_, err := fx.svc.Set(adminCtx, "import", flow.Limits{MaxRunning: ptr(2), RateLimit: ptr(1000)})
				require.NoError(bb, err)
				require.NoError(bb, fx.claim(2))
				tx, err := fx.store.DB().BeginTx(context.Background(), nil)
				require.NoError(bb, err)
				defer func() { _ = tx.Rollback() }()
				q := txQuerier{tx: tx, postgres: fx.store.Postgres()}
				bb.ResetTimer()
				for range bb.N {
					got, err := fx.gate.Admit(context.Background(), q, []string{"import", "noop"}, fx.store.Now)
					if err != nil || got.Room["noop"] != flow.Unlimited {
						bb.Fatal(got, err)
					}
				}
			})
		}
	}
}

func (b bundle) explain(t testing.TB, query string) string {
	t.Helper()
	prefix := "EXPLAIN QUERY PLAN "
	if b.store.Postgres() {
		prefix = "EXPLAIN (ANALYZE, COSTS OFF) "
	}
	rows, err := b.store.DB().Query(prefix + query)
	require.NoError(t, err)
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		out = append(out, fmt.Sprint(vals...))
	}
	return strings.Join(out, "\n")
}

func TestService(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("WaitingSaysWhy", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t))
			b.create(t, "import", 3)
			waiting := func() *ent.Task {
				tk, err := b.store.Client().Task.Query().Where(task.Type("import"), task.StatusEQ(lifecycle.Pending)).First(sysCtx)
				require.NoError(t, err)
				return tk
			}
			reason := func() *flow.Wait {
				_, err := b.svc.Get(adminCtx, "import") // fresh, not cached
				require.NoError(t, err)
				w, err := b.svc.WaitReason(adminCtx, waiting())
				require.NoError(t, err)
				return w
			}
			require.Nil(t, reason(), "nothing holds it back")

			_, err := b.svc.Set(adminCtx, "import", flow.Limits{MaxRunning: ptr(1)})
			require.NoError(t, err)
			require.NoError(t, b.claim(5))
			w := reason()
			require.Equal(t, flow.AtCap, w.Kind)
			require.Equal(t, "waiting: import at its cap 1/1", w.Message)

			_, err = b.svc.Set(adminCtx, "import", flow.Limits{RateLimit: ptr(1), RatePeriodSeconds: ptr(10)})
			require.NoError(t, err)
			require.NoError(t, b.claim(5))
			w = reason()
			require.Equal(t, flow.RateLimited, w.Kind)
			require.Equal(t, epoch.Add(10*time.Second), w.Until.UTC(), "the next start is when the first start leaves the window")
			require.Contains(t, w.Message, "next start at 2026-11-29T09:00:10Z")

			_, err = b.svc.Pause(adminCtx, "import", ptr(epoch.Add(time.Hour)))
			require.NoError(t, err)
			w = reason()
			require.Equal(t, flow.Paused, w.Kind)
			require.Equal(t, "import is paused for every tenant by alice until 2026-11-29T10:00:00Z", w.Message)

			later, _, err := b.store.CreateTask(sysCtx, store.NewTask{Type: "noop", Owner: "alice", Input: json.RawMessage(`{}`), InputHash: "h",
				TimeoutSeconds: 60, RetryPolicy: "default", MaxAttempts: 1, RunAt: epoch.Add(time.Minute)})
			require.NoError(t, err)
			w, err = b.svc.WaitReason(adminCtx, later)
			require.NoError(t, err)
			require.Equal(t, flow.NotDue, w.Kind)
		})
		t.Run("ViewersReadPlatformAdminsChange", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t))
			viewer := auth.NewContext(context.Background(), auth.Viewer{User: "vera", Role: auth.RoleViewer})
			op := auth.NewContext(context.Background(), auth.Viewer{User: "otto", Role: auth.RoleOperator})
			_, err := b.svc.Set(viewer, "noop", flow.Limits{MaxRunning: ptr(2)})
			var fe *auth.ForbiddenError
			require.ErrorAs(t, err, &fe)
			_, err = b.svc.Set(op, "noop", flow.Limits{MaxRunning: ptr(2)})
			require.ErrorAs(t, err, &fe, "an operator changes no type's control for every tenant")
			c, err := b.svc.Set(platformCtx, "noop", flow.Limits{MaxRunning: ptr(2)})
			require.NoError(t, err)
			require.Equal(t, "root", c.UpdatedBy)
			list, err := b.svc.List(viewer)
			require.NoError(t, err)
			var types []string
			for _, c := range list {
				types = append(types, c.Type)
				if c.Type == "noop" {
					require.Equal(t, 2, *c.MaxRunning)
				}
			}
			require.Equal(t, []string{"import", "noop", "system.sweep", "webhook"}, types)
			_, err = b.svc.Set(platformCtx, "nope", flow.Limits{})
			require.ErrorIs(t, err, engine.ErrValidation)
			_, err = b.svc.Set(platformCtx, "noop", flow.Limits{MaxRunning: ptr(0), RatePeriodSeconds: ptr(0)})
			var ve *engine.ValidationError
			require.ErrorAs(t, err, &ve)
			require.Len(t, ve.Problems, 2)
			_, err = b.svc.Pause(platformCtx, "noop", ptr(epoch.Add(-time.Second)))
			require.ErrorIs(t, err, engine.ErrValidation, "a pause that has already ended")
			audits, err := b.store.Client().AuditLog.Query().All(sysCtx)
			require.NoError(t, err)
			var seen []string
			for _, a := range audits {
				seen = append(seen, string(a.Action)+":"+string(a.Outcome)+":"+a.Actor)
			}
			require.Subset(t, seen, []string{"FLOW_CONTROL_SET:FAILED:vera", "FLOW_CONTROL_SET:FAILED:otto", "FLOW_CONTROL_SET:OK:root", "FLOW_CONTROL_SET:FAILED:root", "TYPE_PAUSE:FAILED:root"})
		})
	})
}
