package tg_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/tg"
	"github.com/taskgraph/taskgraph/tg/tgtype"
)

type Order struct {
	ID   int    `json:"id" jsonschema:"minimum=1"`
	Item string `json:"item"`
}

type Confirmation struct {
	OrderID int    `json:"orderId"`
	Note    string `json:"note"`
}

// shop is a program embedding taskgraph: its own table, its own typed
// handler, its own mux with the node's Handler mounted beside its routes.
type shop struct {
	c       *tg.Client
	confirm *tg.TaskType[Order, Confirmation]
	srv     *httptest.Server
	pg      bool
	mu      sync.Mutex
	runs    map[int]int // executions per order id
}

func newShop(t *testing.T, dsn string) *shop {
	t.Helper()
	ctx := context.Background()
	c, err := tg.New(ctx, tg.Config{Database: dsn, DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
		Settings: map[string]string{"rate-limit": "0"}})
	require.NoError(t, err)
	s := &shop{c: c, runs: map[int]int{}, pg: strings.HasPrefix(dsn, "postgres")}
	s.confirm, err = tg.Register(c, "order.confirm", func(ctx context.Context, job *tg.Job, in Order) (Confirmation, error) {
		s.mu.Lock()
		s.runs[in.ID]++
		s.mu.Unlock()
		job.Info("confirming", "order", in.ID)
		return Confirmation{OrderID: in.ID, Note: "confirmed " + in.Item}, nil
	}, tg.WithDescription("Confirms an order."))
	require.NoError(t, err)
	_, err = tg.Register(c, "order.confirm", func(context.Context, *tg.Job, Order) (Confirmation, error) { return Confirmation{}, nil })
	require.Error(t, err, "a name taken")
	require.NoError(t, c.Start(ctx))
	_, err = tg.Register(c, "late", func(context.Context, *tg.Job, Order) (struct{}, error) { return struct{}{}, nil })
	require.ErrorIs(t, err, tg.ErrStarted)

	mux := http.NewServeMux()
	mux.Handle("/", c.Handler())
	mux.HandleFunc("GET /orders/count", func(w http.ResponseWriter, r *http.Request) {
		var n int
		_ = c.DB().QueryRowContext(r.Context(), `SELECT COUNT(*) FROM orders`).Scan(&n)
		fmt.Fprint(w, n)
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		s.srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
	})
	_, err = c.DB().ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)`)
	require.NoError(t, err)
	// The node's row in the registry is written once it started: count
	// the tables' rows after that.
	require.Eventually(t, func() bool {
		var n int
		return c.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM cluster_nodes`).Scan(&n) == nil && n == 1
	}, 20*time.Second, 10*time.Millisecond, "the node registered")
	return s
}

// q is query with ? placeholders in the database's own.
func (s *shop) q(query string) string {
	if !s.pg {
		return query
	}
	for i := 1; strings.Contains(query, "?"); i++ {
		query = strings.Replace(query, "?", fmt.Sprintf("$%d", i), 1)
	}
	return query
}

// order saves an order and creates its confirmation in one transaction
// of the shop's, committed or rolled back.
func (s *shop) order(t testing.TB, id int, commit bool, opts ...tg.TaskOption) *tgtype.Task {
	t.Helper()
	ctx := context.Background()
	tx, err := s.c.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	_, err = tx.ExecContext(ctx, s.q(`INSERT INTO orders (id, item) VALUES (?, ?)`), id, fmt.Sprintf("item %d", id))
	require.NoError(t, err)
	task, err := s.confirm.CreateTx(ctx, tx, Order{ID: id, Item: fmt.Sprintf("item %d", id)}, append([]tg.TaskOption{tg.BizID(fmt.Sprint(id))}, opts...)...)
	require.NoError(t, err)
	if commit {
		require.NoError(t, tx.Commit())
	} else {
		require.NoError(t, tx.Rollback())
	}
	return task
}

// rows counts the rows of every table of the database.
func (s *shop) rows(t testing.TB) map[string]int {
	t.Helper()
	ctx := context.Background()
	list := `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`
	if s.pg {
		list = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`
	}
	rs, err := s.c.DB().QueryContext(ctx, list)
	require.NoError(t, err)
	var names []string
	for rs.Next() {
		var n string
		require.NoError(t, rs.Scan(&n))
		names = append(names, n)
	}
	require.NoError(t, rs.Err())
	require.NoError(t, rs.Close())
	out := map[string]int{}
	for _, n := range names {
		var c int
		require.NoError(t, s.c.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM `+n).Scan(&c))
		out[n] = c
	}
	return out
}

// watch subscribes to every task change over SSE, through the shop's
// mux, and returns the codes seen by state.
type watch struct {
	mu   sync.Mutex
	seen map[string][]string // code -> states, in order
}

func (s *shop) watch(t *testing.T) *watch {
	t.Helper()
	w := &watch{seen: map[string][]string{}}
	api := &apptest.Server{URL: s.srv.URL}
	st := api.SubscribeSSE(t, `subscription { taskUpdated { code status } }`, nil)
	go func() {
		for {
			e, ok := st.Next()
			if !ok {
				return
			}
			var p struct {
				Data struct{ TaskUpdated struct{ Code, Status string } }
			}
			if json.Unmarshal([]byte(e.Data), &p) == nil && p.Data.TaskUpdated.Code != "" {
				w.mu.Lock()
				w.seen[p.Data.TaskUpdated.Code] = append(w.seen[p.Data.TaskUpdated.Code], p.Data.TaskUpdated.Status)
				w.mu.Unlock()
			}
		}
	}()
	// Subscribed once the server counts it (SSE sends nothing before a
	// change).
	require.Eventually(t, func() bool {
		res, err := http.Get(s.srv.URL + "/metrics")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return strings.Contains(string(b), "\ntaskgraph_subscribers 1\n")
	}, 10*time.Second, 10*time.Millisecond, "the subscription registered")
	return w
}

func (w *watch) states(code string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.seen[code]...)
}

// TestCreateTxCommitsOrLeavesNothing: a task created in the program's own
// transaction, beside its order, runs once and has its typed result if
// the transaction commits; if it rolls back, no table has one row more,
// and a subscription opened before saw nothing of it. The program serves
// the console's API from its own mux. Both databases.
func TestCreateTxCommitsOrLeavesNothing(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := newShop(t, dsn)
		ctx := context.Background()
		w := s.watch(t)

		before := s.rows(t)
		gone := s.order(t, 1, false, tg.IdempotencyKey("order-1"), tg.StallAfter(time.Minute))
		require.Equal(t, before, s.rows(t), "a rolled-back create leaves no row in any table (task, instance, stall override, audit record)")
		_, err := s.c.Task(ctx, gone.ID)
		var nf *tg.NotFoundError
		require.ErrorAs(t, err, &nf)

		kept := s.order(t, 2, true, tg.IdempotencyKey("order-2"), tg.StallAfter(time.Minute))
		done, err := s.c.Wait(ctx, kept.ID)
		require.NoError(t, err)
		require.Equal(t, tgtype.Success, done.Status)
		out, err := s.confirm.Result(done)
		require.NoError(t, err)
		require.Equal(t, Confirmation{OrderID: 2, Note: "confirmed item 2"}, out)
		require.Len(t, done.Instances, 1)
		after := s.rows(t)
		require.Equal(t, before["orders"]+1, after["orders"])
		require.Equal(t, before["tasks"]+1, after["tasks"])
		require.Equal(t, before["task_instances"]+1, after["task_instances"])
		require.Equal(t, before["stall_overrides"]+1, after["stall_overrides"], "the stall override commits with the task")
		require.Greater(t, after["audit_logs"], before["audit_logs"], "the audit record commits with the task")

		// The subscription saw the committed task to its end, and never
		// the rolled-back one.
		require.Eventually(t, func() bool {
			st := w.states(kept.Code)
			return len(st) > 0 && st[len(st)-1] == "SUCCESS"
		}, 20*time.Second, 10*time.Millisecond, "the subscription saw the committed task end")
		require.Empty(t, w.states(gone.Code), "the rolled-back task was published")
		s.mu.Lock()
		require.Equal(t, map[int]int{2: 1}, s.runs, "the committed task ran once; the rolled-back one never")
		s.mu.Unlock()

		// The same idempotency key in another transaction: the same task,
		// nothing new.
		tx, err := s.c.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		again, err := s.confirm.CreateTx(ctx, tx, Order{ID: 2, Item: "item 2"}, tg.BizID("2"), tg.IdempotencyKey("order-2"))
		require.NoError(t, err)
		require.Equal(t, kept.ID, again.ID)
		_, err = s.confirm.CreateTx(ctx, tx, Order{ID: 2, Item: "other"}, tg.IdempotencyKey("order-2"))
		var ce *tg.ConflictError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, kept.ID, ce.TaskID)
		require.NoError(t, tx.Rollback())

		// Refused input: a typed error, nothing written.
		tx, err = s.c.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = s.confirm.CreateTx(ctx, tx, Order{ID: 0})
		var ve *tg.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, "input", ve.Problems[0].Field)
		_, err = s.c.CreateTx(ctx, tx, "no.such.type", map[string]any{})
		require.ErrorAs(t, err, &ve)
		require.Contains(t, ve.Error(), `unknown task type "no.such.type"`)
		require.NoError(t, tx.Rollback())
		_, err = s.c.CreateTx(ctx, nil, "order.confirm", Order{ID: 3})
		require.ErrorAs(t, err, &ve)

		// The program's own routes answer beside the console's API.
		res, err := http.Get(s.srv.URL + "/orders/count")
		require.NoError(t, err)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, "1", string(b))
		var types struct {
			Data struct{ TaskTypes []struct{ Name string } }
		}
		api := &apptest.Server{URL: s.srv.URL}
		api.Query(t, `{ taskTypes { name } }`, nil, &types.Data)
		var names []string
		for _, tt := range types.Data.TaskTypes {
			names = append(names, tt.Name)
		}
		require.Contains(t, names, "order.confirm", "the program's type is listed with the built-in ones")
	})
}

// errRolledBack rolls a transaction of Client.Tx back.
var errRolledBack = errors.New("rolled back")

// TestCreateTxUnderLoad: goroutines each commit or roll back, at random,
// transactions of Client.Tx that save an order and create its task. Every committed
// task runs exactly once; no rolled-back one is ever run, read or
// published. (createTxLoad transactions: 10,000 in the long tier.)
func TestCreateTxUnderLoad(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := newShop(t, dsn)
		ctx := context.Background()
		w := s.watch(t)
		const workers = 100
		var next atomic.Int64
		var mu sync.Mutex
		committed, rolledBack := map[int]string{}, map[int]string{} // order id -> task code
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for {
					id := int(next.Add(1))
					if id > createTxLoad {
						return
					}
					commit := rand.IntN(2) == 0
					var task *tgtype.Task
					err := s.c.Tx(ctx, func(tx *sql.Tx) error {
						if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO orders (id, item) VALUES (?, ?)`), id, "x"); err != nil {
							return err
						}
						var err error
						if task, err = s.confirm.CreateTx(ctx, tx, Order{ID: id, Item: "x"}); err != nil {
							return err
						}
						if !commit {
							return errRolledBack
						}
						return nil
					})
					if errors.Is(err, errRolledBack) {
						err = nil
					}
					if err != nil {
						t.Errorf("order %d: %v", id, err)
						return
					}
					mu.Lock()
					if commit {
						committed[id] = task.Code
					} else {
						rolledBack[id] = task.Code
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		var orders int
		require.NoError(t, s.c.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&orders))
		require.Equal(t, len(committed), orders)
		// Every committed task ends SUCCESS, having run once.
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, s.c.DB().QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM tasks WHERE status = ?`), "SUCCESS").Scan(&n))
			return n == len(committed)
		}, 5*time.Minute, 50*time.Millisecond, "every committed task succeeded")
		var tasks int
		require.NoError(t, s.c.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks`).Scan(&tasks))
		require.Equal(t, len(committed), tasks, "no rolled-back task in the table")
		s.mu.Lock()
		var twice, strays []int
		for id, n := range s.runs {
			if _, ok := committed[id]; !ok {
				strays = append(strays, id)
			} else if n != 1 {
				twice = append(twice, id)
			}
		}
		ran := len(s.runs)
		s.mu.Unlock()
		sort.Ints(twice)
		require.Empty(t, strays, "rolled-back tasks ran")
		require.Empty(t, twice, "committed tasks ran more than once")
		require.Equal(t, len(committed), ran)
		// The subscriber saw every committed task end, and none rolled back.
		require.Eventually(t, func() bool {
			for _, code := range committed {
				st := w.states(code)
				if len(st) == 0 || st[len(st)-1] != "SUCCESS" {
					return false
				}
			}
			return true
		}, time.Minute, 50*time.Millisecond, "the subscription saw every committed task end")
		for id, code := range rolledBack {
			require.Empty(t, w.states(code), "rolled-back order %d was published", id)
		}
		t.Logf("%d transactions: %d committed, %d rolled back", createTxLoad, len(committed), len(rolledBack))
	})
}
