package graph_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/fakeclock"
	"github.com/taskgraph/taskgraph/internal/history"
	"github.com/taskgraph/taskgraph/internal/store"
)

// histEvent is one thing the simulation did, as the test itself saw it:
// a task created, an execution started (after waiting dur) or ended
// (after running dur).
type histEvent struct {
	kind          string // created, started, ended
	typ, tenant   string
	at            time.Time
	dur           time.Duration
	outcome       string // ended: SUCCESS, FAILED, CANCELLED
	retried, sure bool   // sure: an execution (not a cancel before a run)
}

// histPoint is a HistoryPoint as the API answers it.
type histPoint struct {
	Start                                               time.Time
	Resolution                                          string
	Created, Started, Succeeded, Failed, Cancelled      int
	Retries, Waiting                                    int
	WaitP50Ms, WaitP95Ms, WaitP99Ms, RunP50Ms, RunP95Ms *int
	RunP99Ms                                            *int
}

const historyQuery = `query($from: Time!, $to: Time!, $res: HistoryResolution, $type: String, $tenant: String) {
  taskHistory(from: $from, to: $to, resolution: $res, type: $type, tenant: $tenant) {
    start resolution created started succeeded failed cancelled retries waiting
    waitP50Ms waitP95Ms waitP99Ms runP50Ms runP95Ms runP99Ms
  }
}`

// quantileBound is what the history reports as the q-quantile of ds: the
// upper bound of the log2 bucket holding the ceil(q*n)-th smallest.
func quantileBound(ds []time.Duration, q float64) *int {
	if len(ds) == 0 {
		return nil
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := max(int(math.Ceil(q*float64(len(s)))), 1)
	ms := int(history.UpperBound(history.BucketOf(s[rank-1])).Milliseconds())
	return &ms
}

// expectPoints computes, from the events alone, the points of a query.
func expectPoints(events []histEvent, res history.Resolution, from, to time.Time, typ, tenant string) []histPoint {
	var out []histPoint
	for at := res.Truncate(from); at.Before(to); at = at.Add(res.Step()) {
		p := histPoint{Start: at, Resolution: string(res)}
		var waits, runs []time.Duration
		for _, e := range events {
			if res.Truncate(e.at) != at || (typ != "" && e.typ != typ) || (tenant != "*" && e.tenant != tenant) {
				continue
			}
			switch e.kind {
			case "created":
				p.Created++
			case "started":
				p.Started++
				waits = append(waits, e.dur)
			case "ended":
				switch e.outcome {
				case "SUCCESS":
					p.Succeeded++
				case "FAILED":
					p.Failed++
				case "CANCELLED":
					p.Cancelled++
				}
				if e.retried {
					p.Retries++
				}
				if e.sure {
					runs = append(runs, e.dur)
				}
			}
		}
		p.WaitP50Ms, p.WaitP95Ms, p.WaitP99Ms = quantileBound(waits, .5), quantileBound(waits, .95), quantileBound(waits, .99)
		p.RunP50Ms, p.RunP95Ms, p.RunP99Ms = quantileBound(runs, .5), quantileBound(runs, .95), quantileBound(runs, .99)
		out = append(out, p)
	}
	return out
}

// TestTaskHistoryOverThreeDays runs 4,000 tasks of 3 types and 2
// tenants through the store (created, claimed, finished, some retried,
// some cancelled before they ran) over 3 days of a fake clock, flushing
// the store's history and running the watchdog's roll-up pass as the
// loops would, then reads the charts through taskHistory: the counts and
// wait/run percentiles per minute, hour and day are those the test
// computes from what it did itself; a tenant's viewer sees its tenant
// only, a platform administrator any tenant or all; bad ranges are
// VALIDATION errors.
func TestTaskHistoryOverThreeDays(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
		clock := fakeclock.New(start)
		path, tok := apptest.Tokens(t,
			auth.Viewer{User: "root", Role: auth.RoleAdmin},
			auth.Viewer{User: "viewA", Role: auth.RoleViewer, Tenant: "A"},
			auth.Viewer{User: "opB", Role: auth.RoleOperator, Tenant: "B"},
		)
		never := 1000 * time.Hour
		srv := apptest.Start(t, dsn, app.Options{Clock: clock.Now, History: app.HistoryConfig{FlushInterval: never, RollUpInterval: never}}, func(c *app.Config) {
			// The test is the only worker: nothing else claims or
			// recovers its executions.
			c.Roles = []app.Role{app.RoleAPI}
			c.Access.TokenFile = path
			c.Access.PlatformAdmins = []auth.Identity{{Source: auth.SourceToken, User: "root"}}
		})
		st := srv.App.Store
		rollUp := app.NewHistoryRollUp(st, history.Retention{})
		ctx := auth.NewSystemContext(t.Context())
		rng := rand.New(rand.NewPCG(7, 9))
		types := []string{"email", "import", "report"}
		// A duration of whole milliseconds, log-uniform up to max.
		logDur := func(max time.Duration) time.Duration {
			return time.Duration(math.Exp(rng.Float64()*math.Log(float64(max.Milliseconds())))) * time.Millisecond
		}
		var events []histEvent
		type exec struct {
			typ, tenant string
			ready       time.Time // when it could run: created, or the retry's run_at
		}
		ready := map[int]exec{} // by task id: waiting to be claimed
		const rounds, perRound = 40, 100
		step := 72 * time.Hour / rounds
		// The waiting depths the roll-up samples: minute -> type/tenant -> depth.
		sampled := map[time.Time]map[[2]string]int{}
		for r := range rounds {
			if d := start.Add(time.Duration(r) * step).Sub(clock.Now()); d > 0 {
				clock.Advance(d)
			}
			ns := make([]store.NewTask, perRound)
			for i := range ns {
				tenant := "A"
				if i%4 == 0 {
					tenant = "B"
				}
				ns[i] = store.NewTask{Type: types[(r+i)%3], Owner: "op", OwnerSource: auth.SourceToken, Tenant: tenant,
					Input: json.RawMessage(`{}`), InputHash: "h", TimeoutSeconds: 60, RetryPolicy: "default", MaxAttempts: 3}
			}
			created, err := st.CreateTasks(ctx, ns)
			require.NoError(t, err)
			for _, c := range created {
				require.True(t, c.Created)
				events = append(events, histEvent{kind: "created", typ: c.Task.Type, tenant: c.Task.Tenant, at: clock.Now()})
				ready[c.Task.ID] = exec{c.Task.Type, c.Task.Tenant, clock.Now()}
			}
			// One of them is cancelled before it runs.
			victim := created[r%perRound].Task
			_, err = st.CancelTask(ctx, victim.ID, "not needed")
			require.NoError(t, err)
			delete(ready, victim.ID)
			events = append(events, histEvent{kind: "ended", typ: victim.Type, tenant: victim.Tenant, at: clock.Now(), outcome: "CANCELLED"})
			// The roll-up's pass samples what waits now.
			_, err = rollUp.Pass(ctx)
			require.NoError(t, err)
			depth := map[[2]string]int{}
			for _, e := range ready {
				depth[[2]string{e.typ, e.tenant}]++
			}
			sampled[history.Minute.Truncate(clock.Now())] = depth
			// Claimed in waves after waits of up to five minutes, each
			// wave finished in groups after runs of up to ten minutes.
			for len(ready) > 0 {
				clock.Advance(logDur(5 * time.Minute))
				due := clock.Now().Add(time.Hour)
				for _, e := range ready {
					if e.ready.Before(due) {
						due = e.ready
					}
				}
				if due.After(clock.Now()) {
					clock.Advance(due.Sub(clock.Now())) // only retries wait, for their backoff
				}
				claimed, err := st.Claim(ctx, srv.App.Node, types, 1+rng.IntN(40))
				require.NoError(t, err)
				require.NotEmpty(t, claimed, "%d tasks ready, none claimed", len(ready))
				for _, c := range claimed {
					e, ok := ready[c.Task.ID]
					require.True(t, ok, "claimed task %d was not ready", c.Task.ID)
					delete(ready, c.Task.ID)
					events = append(events, histEvent{kind: "started", typ: e.typ, tenant: e.tenant, at: clock.Now(), dur: clock.Now().Sub(e.ready)})
				}
				startedAt := clock.Now()
				for group := range slices.Chunk(claimed, 1+rng.IntN(10)) {
					clock.Advance(logDur(10 * time.Minute))
					outcomes := make([]store.Outcome, len(group))
					var retried []int
					for i, c := range group {
						o := store.Outcome{Token: c.Token(), Status: lifecycle.Success, Task: c.Task}
						switch x := rng.IntN(20); {
						case x < 2:
							o.Status, o.Kind, o.Error = lifecycle.Failed, lifecycle.KindNonRetryable, "bad input"
						case x < 4 && c.Instance.InstanceNo == 1:
							o.Status, o.Kind, o.Error = lifecycle.Failed, lifecycle.KindRetryable, "a blip"
							o.Retry = &store.Retry{RunAt: clock.Now().Add(time.Second), Attempt: 2}
							retried = append(retried, i)
						case x < 5:
							o.Status, o.Kind, o.Error = lifecycle.Cancelled, lifecycle.KindCancelled, "cancelled"
						}
						outcomes[i] = o
						outcome := string(o.Status)
						events = append(events, histEvent{kind: "ended", typ: c.Task.Type, tenant: c.Task.Tenant, at: clock.Now(), dur: clock.Now().Sub(startedAt), outcome: outcome, retried: o.Retry != nil, sure: true})
					}
					errs, err := st.Finish(ctx, outcomes)
					require.NoError(t, err)
					for _, e := range errs {
						require.NoError(t, e)
					}
					for _, i := range retried {
						c := group[i]
						ready[c.Task.ID] = exec{c.Task.Type, c.Task.Tenant, clock.Now().Add(time.Second)}
					}
				}
			}
			// The flush loop's and the roll-up loop's passes.
			_, err = st.FlushHistory(ctx)
			require.NoError(t, err)
			_, err = rollUp.Pass(ctx)
			require.NoError(t, err)
		}
		end := clock.Now()
		// A last pass a minute later, as the loop would make.
		clock.Advance(time.Minute)
		_, err := st.FlushHistory(ctx)
		require.NoError(t, err)
		_, err = rollUp.Pass(ctx)
		require.NoError(t, err)
		require.Less(t, end.Sub(start), 72*time.Hour+time.Hour)

		query := func(who string, vars map[string]any) ([]histPoint, apptest.Response) {
			t.Helper()
			resp := srv.DoAs(t, tok[who], historyQuery, vars)
			if len(resp.Errors) > 0 {
				return nil, resp
			}
			var out struct{ TaskHistory []histPoint }
			require.NoError(t, json.Unmarshal(resp.Data, &out))
			return out.TaskHistory, resp
		}
		check := func(who string, res history.Resolution, from, to time.Time, typ, tenant, expectTenant string) []histPoint {
			t.Helper()
			vars := map[string]any{"from": from, "to": to, "res": string(res)}
			if typ != "" {
				vars["type"] = typ
			}
			if tenant != "" {
				vars["tenant"] = tenant
			}
			got, resp := query(who, vars)
			require.Empty(t, resp.Errors)
			want := expectPoints(events, res, from, to, typ, expectTenant)
			for i := range want {
				// Per type and tenant the largest depth sampled in the
				// bucket; added over types and tenants.
				most := map[[2]string]int{}
				for at, depth := range sampled {
					if res.Truncate(at) != want[i].Start {
						continue
					}
					for k, n := range depth {
						if (typ == "" || k[0] == typ) && (expectTenant == "*" || k[1] == expectTenant) {
							most[k] = max(most[k], n)
						}
					}
				}
				for _, n := range most {
					want[i].Waiting += n
				}
			}
			for i := range got {
				got[i].Start = got[i].Start.UTC()
			}
			require.Equal(t, want, got, "%s %s %s..%s type %q tenant %q", who, res, from, to, typ, tenant)
			return got
		}
		days := check("root", history.Day, start, start.Add(72*time.Hour), "", "", "*")
		require.Len(t, days, 3)
		var total int
		for _, p := range days {
			total += p.Created
		}
		require.Equal(t, rounds*perRound, total)
		for _, typ := range types {
			check("viewA", history.Day, start, start.Add(72*time.Hour), typ, "", "A")
			check("opB", history.Day, start, start.Add(72*time.Hour), typ, "B", "B")
		}
		// Hours over the three days: the roll-up of minutes since
		// purged (kept 48 hours) is still there.
		hours := check("viewA", history.Hour, start, start.Add(72*time.Hour), "", "", "A")
		require.Len(t, hours, 72)
		require.NotZero(t, hours[0].Created)
		check("root", history.Hour, start.Add(24*time.Hour), start.Add(48*time.Hour), "import", "B", "B")
		// Minutes of the last six hours.
		check("opB", history.Minute, end.Add(-6*time.Hour), end, "", "", "B")
		check("root", history.Minute, end.Add(-6*time.Hour), end, "report", "", "*")
		// Minutes older than 48 hours are purged: the first hour's
		// minutes read empty, though its hour does not.
		old, resp := query("root", map[string]any{"from": start, "to": start.Add(time.Hour), "res": "MINUTE"})
		require.Empty(t, resp.Errors)
		require.Len(t, old, 60)
		for _, p := range old {
			require.Zero(t, p.Created+p.Started)
		}
		// The resolution by default: hours over three days.
		auto, resp := query("viewA", map[string]any{"from": start, "to": start.Add(72 * time.Hour)})
		require.Empty(t, resp.Errors)
		require.Len(t, auto, 72)
		require.Equal(t, "HOUR", auto[0].Resolution)

		// The cost report over the whole run, per type and per tenant, is
		// what the test did: executions started, outcomes, retries,
		// creates and the run time added up.
		type costRow struct {
			Key                                                        string
			Executions, Succeeded, Failed, Cancelled, Retries, Created int
			RunTimeMs                                                  float64
		}
		const costQuery = `query($from: Time!, $to: Time!, $by: CostGroup, $tenant: String) {
  taskCost(from: $from, to: $to, groupBy: $by, tenant: $tenant) { key executions succeeded failed cancelled retries created runTimeMs runP95Ms }
}`
		expectCost := func(by, tenant string) []costRow {
			rows := map[string]*costRow{}
			for _, e := range events {
				if tenant != "*" && e.tenant != tenant {
					continue
				}
				key := e.typ
				if by == "TENANT" {
					key = e.tenant
				}
				r := rows[key]
				if r == nil {
					r = &costRow{Key: key}
					rows[key] = r
				}
				switch e.kind {
				case "created":
					r.Created++
				case "started":
					r.Executions++
				case "ended":
					switch e.outcome {
					case "SUCCESS":
						r.Succeeded++
					case "FAILED":
						r.Failed++
					case "CANCELLED":
						r.Cancelled++
					}
					if e.retried {
						r.Retries++
					}
					if e.sure {
						r.RunTimeMs += float64(e.dur.Milliseconds())
					}
				}
			}
			var out []costRow
			for _, r := range rows {
				out = append(out, *r)
			}
			slices.SortFunc(out, func(a, b costRow) int {
				if a.RunTimeMs != b.RunTimeMs {
					if a.RunTimeMs > b.RunTimeMs {
						return -1
					}
					return 1
				}
				return strings.Compare(a.Key, b.Key)
			})
			return out
		}
		costOf := func(who string, vars map[string]any) []costRow {
			t.Helper()
			var out struct{ TaskCost []costRow }
			srv.QueryAs(t, tok[who], costQuery, vars, &out)
			return out.TaskCost
		}
		whole := map[string]any{"from": start, "to": start.Add(96 * time.Hour)}
		require.Equal(t, expectCost("TYPE", "*"), costOf("root", whole))
		require.Len(t, costOf("root", whole), 3)
		require.Equal(t, expectCost("TYPE", "A"), costOf("viewA", whole), "a tenant's viewer: its own tenant's cost")
		byTenant := map[string]any{"from": start, "to": start.Add(96 * time.Hour), "by": "TENANT"}
		require.Equal(t, expectCost("TENANT", "*"), costOf("root", byTenant))
		require.Equal(t, expectCost("TENANT", "B"), costOf("root", map[string]any{"from": start, "to": start.Add(96 * time.Hour), "by": "TENANT", "tenant": "B"}))
		resp = srv.DoAs(t, tok["viewA"], costQuery, map[string]any{"from": start, "to": end, "tenant": "B"})
		require.Equal(t, "FORBIDDEN", resp.Errors[0].Code(), "%v", resp.Errors)
		resp = srv.DoAs(t, tok["root"], costQuery, map[string]any{"from": end, "to": start})
		require.Equal(t, "VALIDATION", resp.Errors[0].Code(), "%v", resp.Errors)

		// A tenant's viewer reads its own tenant only.
		_, resp = query("viewA", map[string]any{"from": start, "to": end, "res": "DAY", "tenant": "B"})
		require.Equal(t, "FORBIDDEN", resp.Errors[0].Code(), "%v", resp.Errors)
		// Bad ranges.
		for _, vars := range []map[string]any{
			{"from": end, "to": end},
			{"from": end, "to": start},
			{"from": start, "to": end, "res": "MINUTE"}, // 4,320 points
		} {
			_, resp = query("root", vars)
			require.NotEmpty(t, resp.Errors, "%v", vars)
			require.Equal(t, "VALIDATION", resp.Errors[0].Code(), "%v: %v", vars, resp.Errors)
		}
	})
}
