package graph_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

type orderInput struct {
	Ref      string `json:"ref"`
	Customer struct {
		City  string `json:"city"`
		Phone string `json:"phone,omitempty"`
		VIP   bool   `json:"vip,omitempty"`
		Age   int    `json:"age,omitempty"`
		Note  string `json:"note,omitempty"`
	} `json:"customer"`
}

// startOrders starts a server with an "order" type whose result repeats
// the customer's city under shipment.city.
func startOrders(t *testing.T, dsn string) *apptest.Server {
	return apptest.Start(t, dsn, app.Options{Register: func(r *tasktype.Registry) {
		tasktype.Register(r, "order", func(ctx context.Context, job *tasktype.Job, in orderInput) error {
			return job.SetResult(map[string]any{"shipment": map[string]any{"city": in.Customer.City, "ref": in.Ref}})
		})
	}})
}

// searchCodes lists the codes of the tasks where matches, sorted.
func searchCodes(t *testing.T, s *apptest.Server, where map[string]any) []string {
	t.Helper()
	var out struct {
		Tasks struct {
			Edges []struct{ Node struct{ Code string } }
		}
	}
	s.Query(t, `query($w: TaskWhereInput) { tasks(first: 100, where: $w) { edges { node { code } } } }`, map[string]any{"w": where}, &out)
	codes := []string{}
	for _, e := range out.Tasks.Edges {
		codes = append(codes, e.Node.Code)
	}
	sort.Strings(codes)
	return codes
}

func TestSearchInPayloads(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := startOrders(t, dsn)
		mk := func(ref, city string, extra map[string]any) string {
			cust := map[string]any{"city": city}
			for k, v := range extra {
				cust[k] = v
			}
			var out struct{ CreateTask struct{ Code, Status string } }
			s.Query(t, `mutation($in: CreateTaskInput!) { createTask(input: $in) { code status } }`,
				map[string]any{"in": map[string]any{"type": "order", "input": map[string]any{"ref": ref, "customer": cust}}}, &out)
			return out.CreateTask.Code
		}
		a := mk("A-1", "Shanghai", map[string]any{"vip": true, "age": 30, "phone": "13800138000"})
		b := mk("B-1", "Shenzhen", map[string]any{"age": 41})
		c := mk("C-1", "Beijing", map[string]any{"note": "50%_off"})
		// Not an order: other types' tasks answer the same filters.
		var noop struct{ CreateTask struct{ Code string } }
		s.Query(t, `mutation { createTask(input: {type: "noop"}) { code } }`, nil, &noop)
		// Every order finished: the results are in place.
		apptest.Eventually(t, 20e9, func() (bool, string) {
			var out struct{ Tasks struct{ TotalCount int } }
			s.Query(t, `{ tasks(where: {type: "order", status: SUCCESS}) { totalCount } }`, nil, &out)
			return out.Tasks.TotalCount == 3, fmt.Sprintf("%d orders done", out.Tasks.TotalCount)
		})
		sorted := func(codes ...string) []string { out := append([]string{}, codes...); sort.Strings(out); return out }
		in := func(preds ...map[string]any) map[string]any { return map[string]any{"input": preds} }
		res := func(preds ...map[string]any) map[string]any { return map[string]any{"result": preds} }
		cases := []struct {
			name  string
			where map[string]any
			want  []string
		}{
			{"EqString", in(map[string]any{"path": "customer.city", "eq": "Shenzhen"}), sorted(b)},
			{"EqIsCaseSensitive", in(map[string]any{"path": "customer.city", "eq": "shenzhen"}), sorted()},
			{"EqNumber", in(map[string]any{"path": "customer.age", "eq": 41}), sorted(b)},
			{"EqNumberIsNotAString", in(map[string]any{"path": "customer.age", "eq": "41"}), sorted()},
			{"EqBool", in(map[string]any{"path": "customer.vip", "eq": true}), sorted(a)},
			{"EqBoolIsNotANumber", in(map[string]any{"path": "customer.vip", "eq": 1}), sorted()},
			{"EqTopLevel", in(map[string]any{"path": "ref", "eq": "C-1"}), sorted(c)},
			{"EqOnAnObjectFindsNothing", in(map[string]any{"path": "customer", "eq": "Shanghai"}), sorted()},
			{"Prefix", in(map[string]any{"path": "customer.city", "prefix": "Sh"}), sorted(a, b)},
			{"PrefixIsCaseSensitive", in(map[string]any{"path": "customer.city", "prefix": "sh"}), sorted()},
			{"PrefixWildcardsAreLiteral", in(map[string]any{"path": "customer.note", "prefix": "50%_"}), sorted(c)},
			{"PrefixWildcardsDoNotMatchOthers", in(map[string]any{"path": "customer.note", "prefix": "5_%"}), sorted()},
			{"PrefixOnlyOnStrings", in(map[string]any{"path": "customer.age", "prefix": "4"}), sorted()},
			{"Exists", in(map[string]any{"path": "customer.age", "exists": true}), sorted(a, b)},
			{"NotExists", map[string]any{"type": "order", "input": []any{map[string]any{"path": "customer.age", "exists": false}}}, sorted(c)},
			{"ExistsDeeperThanAScalar", in(map[string]any{"path": "customer.city.name", "exists": true}), sorted()},
			{"Conjunction", in(map[string]any{"path": "customer.city", "prefix": "Sh"}, map[string]any{"path": "customer.age", "eq": 30}), sorted(a)},
			{"WithOtherFilters", map[string]any{"search": "ORDER", "input": []any{map[string]any{"path": "customer.city", "prefix": "S"}}}, sorted(a, b)},
			{"InOr", map[string]any{"or": []any{in(map[string]any{"path": "ref", "eq": "A-1"}), in(map[string]any{"path": "ref", "eq": "C-1"})}}, sorted(a, c)},
			{"ResultEq", res(map[string]any{"path": "shipment.city", "eq": "Beijing"}), sorted(c)},
			{"ResultPrefix", res(map[string]any{"path": "shipment.ref", "prefix": "B-"}), sorted(b)},
			{"ResultExists", res(map[string]any{"path": "shipment", "exists": true}), sorted(a, b, c)},
			{"ResultNotInInput", in(map[string]any{"path": "shipment.city", "exists": true}), sorted()},
			// The input is stored masked: the phone number's real value
			// is not there to be found, only its masked form.
			{"MaskedValueNotSearchable", in(map[string]any{"path": "customer.phone", "eq": "13800138000"}), sorted()},
			{"MaskedValueNotSearchableByPrefix", in(map[string]any{"path": "customer.phone", "prefix": "1380013"}), sorted()},
			{"MaskedFormSearchable", in(map[string]any{"path": "customer.phone", "prefix": "138****"}), sorted(a)},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				require.Equal(t, tc.want, searchCodes(t, s, tc.where))
			})
		}

		t.Run("Subscription", func(t *testing.T) {
			// A subscription's payload conditions are confirmed by the
			// database (where_match leaves custom predicates to it): the
			// changes of the matching task only arrive.
			c := s.DialWS(t, nil)
			defer c.Conn.Close()
			c.Subscribe("p", `subscription($w: TaskWhereInput) { taskUpdated(where: $w) { id code status } }`,
				map[string]any{"w": in(map[string]any{"path": "customer.city", "eq": "Lhasa"})})
			s.WaitSubscribers(t, 1)
			mkID := func(ref, city string) string {
				var out struct{ CreateTask struct{ ID string } }
				s.Query(t, `mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`,
					map[string]any{"in": map[string]any{"type": "order", "input": map[string]any{"ref": ref, "customer": map[string]any{"city": city}}}}, &out)
				return out.CreateTask.ID
			}
			mkID("D-1", "Nyingchi")
			want := mkID("E-1", "Lhasa")
			for {
				tk := c.NextTask()
				require.Equal(t, want, tk.ID)
				if tk.Status == "SUCCESS" {
					break
				}
			}
		})

		t.Run("StoredPhoneIsMasked", func(t *testing.T) {
			var out struct {
				Tasks struct {
					Edges []struct {
						Node struct{ Input map[string]any }
					}
				}
			}
			s.Query(t, `query($w: TaskWhereInput) { tasks(where: $w) { edges { node { input } } } }`,
				map[string]any{"w": in(map[string]any{"path": "ref", "eq": "A-1"})}, &out)
			require.Len(t, out.Tasks.Edges, 1)
			phone := out.Tasks.Edges[0].Node.Input["customer"].(map[string]any)["phone"]
			require.Equal(t, "138****8000", phone)
		})

		t.Run("BadConditions", func(t *testing.T) {
			for _, tc := range []struct {
				name     string
				pred     map[string]any
				contains string
			}{
				{"EmptyPath", map[string]any{"path": "", "exists": true}, "where.input[0].path: empty path"},
				{"BadKey", map[string]any{"path": "customer.ci ty", "exists": true}, `key "ci ty"`},
				{"Quote", map[string]any{"path": `a"b`, "exists": true}, `key "a\"b"`},
				{"ArrayIndex", map[string]any{"path": "items.0", "exists": true}, `key "0"`},
				{"EmptyKey", map[string]any{"path": "customer..city", "exists": true}, `key ""`},
				{"TooDeep", map[string]any{"path": "a.b.c.d.e.f.g.h.i", "exists": true}, "more than 8 keys"},
				{"TooLong", map[string]any{"path": strings.Repeat("a", 201), "exists": true}, "longer than 200"},
				{"NoOperator", map[string]any{"path": "ref"}, "exactly one of eq, prefix and exists"},
				{"TwoOperators", map[string]any{"path": "ref", "eq": "x", "exists": true}, "exactly one of eq, prefix and exists"},
				{"EqObject", map[string]any{"path": "customer", "eq": map[string]any{"city": "Shanghai"}}, "where.input[0].eq: compare with a string, a number or a boolean"},
				{"EqArray", map[string]any{"path": "customer", "eq": []any{1}}, "compare with a string"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					r := s.Do(t, `query($w: TaskWhereInput) { tasks(where: $w) { totalCount } }`, map[string]any{"w": in(tc.pred)})
					require.NotEmpty(t, r.Errors, "%s", r.Data)
					require.Equal(t, "VALIDATION", r.Errors[0].Code(), "%+v", r.Errors[0])
					require.Contains(t, r.Errors[0].Message, tc.contains)
				})
			}
			r := s.Do(t, `query($w: TaskWhereInput) { tasks(where: $w) { totalCount } }`,
				map[string]any{"w": map[string]any{"result": []any{map[string]any{"path": "x", "exists": true}, map[string]any{"path": "y y", "exists": true}}}})
			require.NotEmpty(t, r.Errors)
			require.Equal(t, "VALIDATION", r.Errors[0].Code())
			require.Contains(t, r.Errors[0].Message, "where.result[1].path")
		})
	})
}

// TestInputEqualityUsesTheGINIndex reads PostgreSQL's plan of the very SQL
// an equality search writes (store.PayloadWhere) and finds the GIN index
// task_input_path in it. The table is small (a few hundred rows), on which
// a sequential scan may honestly be the cheaper plan; the test turns
// sequential scans off (enable_seqscan=off) so that the plan shows whether
// the index CAN serve the condition, which is what a large table needs.
func TestInputEqualityUsesTheGINIndex(t *testing.T) {
	t.Parallel()
	s := startOrders(t, dbtest.PostgresOnly(t))
	db := s.App.Store.DB()
	ctx := context.Background()
	// Rows straight into the table: the plan is what is tested, not the
	// workers. Only input and the NOT NULL columns matter.
	_, err := db.ExecContext(ctx, `INSERT INTO tasks (code, type, biz_id, title, status, priority, owner, owner_source, tenant, owner_role, input, input_hash,
		timeout_seconds, retry_policy, max_attempts, progress_done, progress_total, version, cancel_requested, run_at, updated_at, created_at)
		SELECT 'X-' || g, 'order', '', '', 'SUCCESS', 5, 'someone', '', '', '', jsonb_build_object('customer', jsonb_build_object('city', 'city' || (g % 50))), '',
		60, 'none', 1, 0, 0, 1, false, now(), now(), now() FROM generate_series(1, 500) g`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `ANALYZE tasks`)
	require.NoError(t, err)

	p, err := store.PayloadWhere(task.FieldInput, []store.PathCondition{{Path: "customer.city", Eq: []byte(`"city7"`)}})
	require.NoError(t, err)
	sel := entsql.Dialect(dialect.Postgres).Select(task.FieldID).From(entsql.Table(task.Table))
	p(sel)
	query, args := sel.Query()

	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `SET enable_seqscan = off`)
	require.NoError(t, err)
	defer conn.ExecContext(ctx, `RESET enable_seqscan`) //nolint:errcheck
	rows, err := conn.QueryContext(ctx, "EXPLAIN "+query, args...)
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	require.Contains(t, strings.Join(plan, "\n"), "task_input_path", "plan:\n%s", strings.Join(plan, "\n"))

	var n int
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT count(*) "+query[strings.Index(query, "FROM"):], args...).Scan(&n))
	require.Equal(t, 10, n, "city7 is every 50th row")
}
