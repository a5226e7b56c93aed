package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"entgo.io/contrib/entgql"
	"github.com/lib/pq"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/retention"
	"github.com/taskgraph/taskgraph/internal/store"
)

// RunHistory measures what years of finished tasks cost: it takes every
// figure (the console's first task-list page with and without each filter,
// countTasks, the state counts, a bulk preview over a month, a task's
// detail, a watchdog pass, a burn-down of new tasks) on an empty history,
// fills the database with -n finished tasks (their instances and log lines,
// by COPY, created over the past year), takes them again, then times the
// retention purge of the oldest month. PostgreSQL only: SQLite's limits are
// stated in docs/performance.md.
func RunHistory(args []string) int {
	fs := flag.NewFlagSet("taskgraph bench-history", flag.ContinueOnError)
	n := fs.Int("n", 10_000_000, "finished tasks to fill the history with")
	db := fs.String("db", os.Getenv("TASKGRAPH_DB"), "a PostgreSQL URL (the bench runs in a new schema of it)")
	runs := fs.Int("runs", 20, "runs of each query figure (p50, p95 of them)")
	burn := fs.Int("burn", 100_000, "tasks of the burn-down on each history (0: none)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if !store.IsPostgres(*db) || *n < 1000 || *runs < 1 || *burn < 0 {
		fmt.Fprintln(os.Stderr, "bench-history: -db must name a PostgreSQL database; -n at least 1000, -runs at least 1, -burn not negative")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
	defer stop()
	dir, dsn, cleanup, err := benchDB(*db)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-history:", err)
		return 1
	}
	defer cleanup()
	cfg, err := app.ParseFlags(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-history:", err)
		return 1
	}
	cfg.DB, cfg.DataDir, cfg.Roles = dsn, dir, []app.Role{app.RoleWorker, app.RoleWatchdog}
	a, err := app.New(ctx, cfg, app.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-history:", app.OneLine(err))
		return 1
	}
	defer func() { _ = a.Shutdown(context.Background()) }()
	// Workers run from the start (idle but for the burn-downs), as on a
	// server: the watchdog's own loop runs too, as it would.
	if err := a.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench-history:", app.OneLine(err))
		return 1
	}
	h := &history{a: a, ctx: auth.NewContext(ctx, auth.Local), runs: *runs, now: time.Now().UTC()}
	fmt.Printf("bench-history: PostgreSQL, %d finished tasks, %d runs a figure, burn-down of %d\n", *n, *runs, *burn)
	empty, err := h.measure(*burn)
	if err != nil {
		return benchFailed(ctx, err)
	}
	start := time.Now()
	if err := fill(ctx, a.Store.DB(), *n, h.now); err != nil {
		return benchFailed(ctx, err)
	}
	el := time.Since(start)
	fmt.Printf("filled %d tasks (+1 instance, 1 log line each) in %s (%.0f tasks/s, VACUUM and ANALYZE included)\n", *n, el.Round(time.Second), float64(*n)/el.Seconds())
	full, err := h.measure(*burn)
	if err != nil {
		return benchFailed(ctx, err)
	}
	fmt.Printf("%-40s %12s %12s %12s %12s %8s\n", "figure", "empty p50", "empty p95", "full p50", "full p95", "p95 x")
	for i, f := range full {
		e := empty[i]
		if f.rate > 0 {
			fmt.Printf("%-40s %10.0f/s %12s %10.0f/s %12s %7.2fx\n", f.name, e.rate, "", f.rate, "", f.rate/e.rate)
			continue
		}
		fmt.Printf("%-40s %12s %12s %12s %12s %7.1fx\n", f.name, ms(e.p50), ms(e.p95), ms(f.p50), ms(f.p95), float64(f.p95)/float64(max(e.p95, time.Microsecond)))
	}
	if err := h.accuracy(); err != nil {
		return benchFailed(ctx, err)
	}
	// The retention purge of the oldest month, as the retention loop does it
	// (batches of its default size, each its own transaction).
	p, err := retention.New(retention.Config{Age: 335 * 24 * time.Hour}, a.Store)
	if err != nil {
		return benchFailed(ctx, err)
	}
	start = time.Now()
	res, err := p.Pass(ctx)
	if err != nil {
		return benchFailed(ctx, err)
	}
	el = time.Since(start)
	fmt.Printf("retention purge of the oldest month: %d tasks in %s (%.0f tasks/s, batches of %d)\n", res.Purged, el.Round(time.Millisecond), float64(res.Purged)/el.Seconds(), retention.BatchDefault)
	return 0
}

// accuracy prints, for each filter, taskCount's answer within engine.DefaultCountBudget (an
// estimate where counting takes longer) beside the exact count.
func (h *history) accuracy() error {
	fmt.Printf("%-28s %10s %10s %10s %10s %7s %7s %s\n", "taskCount, filter", "exact", "answer", "low", "high", "error", "width", "sampled")
	for _, f := range h.filters() {
		n, err := h.a.Engine.CountTasks(h.ctx, f.where())
		if err != nil {
			return err
		}
		c, err := h.a.Engine.EstimateTasks(h.ctx, f.where(), engine.DefaultCountBudget)
		if err != nil {
			return err
		}
		if c.Exact {
			fmt.Printf("%-28s %10d %10d %10s %10s %7s %7s counted\n", f.name, n, c.N, "", "", "", "")
			continue
		}
		rel := func(v int) string { return fmt.Sprintf("%.1f%%", 100*float64(v)/float64(max(n, 1))) }
		fmt.Printf("%-28s %10d %10d %10d %10d %7s %7s %.2f%%%s\n", f.name, n, c.N, c.Low, c.High, rel(c.N-n), rel(c.High-c.Low), 100*c.Sampled,
			map[bool]string{true: "", false: " (exact count outside the interval)"}[c.Low <= n && n <= c.High])
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

type history struct {
	a    *app.App
	ctx  context.Context
	runs int
	now  time.Time
}

type figure struct {
	name     string
	p50, p95 time.Duration
	rate     float64 // tasks/s, for the burn-down
}

func (h *history) time(name string, fn func() error) (figure, error) {
	d := make([]time.Duration, 0, h.runs)
	for range h.runs {
		start := time.Now()
		if err := fn(); err != nil {
			return figure{}, fmt.Errorf("%s: %w", name, err)
		}
		d = append(d, time.Since(start))
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return figure{name: name, p50: d[len(d)/2], p95: d[(len(d)*95+99)/100-1]}, nil
}

// filters are the console's: none, each filter alone.
func (h *history) filters() []struct {
	name  string
	where func() *ent.TaskWhereInput
} {
	failed := lifecycle.Failed
	typ, owner := "report.daily", "user007"
	from, to := h.now.AddDate(0, 0, -14), h.now.AddDate(0, 0, -7)
	return []struct {
		name  string
		where func() *ent.TaskWhereInput
	}{
		{"none", func() *ent.TaskWhereInput { return &ent.TaskWhereInput{} }},
		{"status=FAILED", func() *ent.TaskWhereInput { return &ent.TaskWhereInput{Status: &failed} }},
		{"type", func() *ent.TaskWhereInput { return &ent.TaskWhereInput{Type: &typ} }},
		{"owner", func() *ent.TaskWhereInput { return &ent.TaskWhereInput{Owner: &owner} }},
		{"created in a week", func() *ent.TaskWhereInput {
			return &ent.TaskWhereInput{CreatedAtGTE: &from, CreatedAtLT: &to}
		}},
		{"input.region=eu", func() *ent.TaskWhereInput {
			w := &ent.TaskWhereInput{}
			p, err := store.PayloadWhere("input", []store.PathCondition{{Path: "region", Eq: json.RawMessage(`"eu"`)}})
			if err != nil {
				panic(err) // a constant condition
			}
			w.AddPredicates(p)
			return w
		}},
	}
}

// measure takes every figure on the history as it is, in a fixed order.
func (h *history) measure(burn int) ([]figure, error) {
	var out []figure
	add := func(name string, fn func() error) error {
		f, err := h.time(name, fn)
		if err == nil {
			out = append(out, f)
		}
		return err
	}
	newest := []*ent.TaskOrder{{Field: ent.TaskOrderFieldCreatedAt, Direction: entgql.OrderDirectionDesc}}
	first := 50
	for _, f := range h.filters() {
		// What the tasks resolver runs for the console's first page: out
		// of a GraphQL request entgql counts too, as the console's
		// totalCount makes it (countTasks below is that count alone).
		if err := add("list page+count, filter "+f.name, func() error {
			w := f.where()
			store.StatusHints(w)
			_, err := h.a.Store.Client().Task.Query().Paginate(h.ctx, nil, &first, nil, nil,
				ent.WithTaskOrder(newest), ent.WithTaskFilter(w.Filter))
			return err
		}); err != nil {
			return nil, err
		}
	}
	for _, f := range h.filters() {
		// The console's page since it asks taskCount instead of
		// totalCount: the page's statement alone.
		if err := add("list page, filter "+f.name, func() error {
			w := f.where()
			store.StatusHints(w)
			q, err := w.Filter(h.a.Store.Client().Task.Query())
			if err != nil {
				return err
			}
			_, err = q.Order(ent.Desc(task.FieldCreatedAt), ent.Asc(task.FieldID)).Limit(first + 1).All(h.ctx)
			return err
		}); err != nil {
			return nil, err
		}
	}
	for _, f := range h.filters() {
		if err := add("taskCount (exact within 150ms), "+f.name, func() error {
			_, err := h.a.Engine.EstimateTasks(h.ctx, f.where(), engine.DefaultCountBudget)
			return err
		}); err != nil {
			return nil, err
		}
	}
	for _, f := range h.filters() {
		if err := add("countTasks, filter "+f.name, func() error {
			_, err := h.a.Engine.CountTasks(h.ctx, f.where())
			return err
		}); err != nil {
			return nil, err
		}
	}
	if err := add("state counts (taskStats)", func() error {
		_, err := h.a.Engine.StatsWithin(h.ctx, engine.DefaultCountBudget)
		return err
	}); err != nil {
		return nil, err
	}
	if err := add("state counts, exact", func() error { _, err := h.a.Engine.Stats(h.ctx); return err }); err != nil {
		return nil, err
	}
	from, to := h.now.AddDate(0, -2, 0), h.now.AddDate(0, -1, 0)
	if err := add("bulk preview RETRY over a month", func() error {
		_, err := h.a.Engine.PreviewBulk(h.ctx, lifecycle.ActionRetry, &ent.TaskWhereInput{CreatedAtGTE: &from, CreatedAtLT: &to})
		return err
	}); err != nil {
		return nil, err
	}
	var id int
	if err := h.a.Store.DB().QueryRowContext(h.ctx, `SELECT coalesce(max(id) / 2, 0) FROM tasks`).Scan(&id); err != nil {
		return nil, err
	}
	if err := add("task detail (with instances)", func() error {
		if id == 0 {
			return nil // no history: nothing to read
		}
		t, err := h.a.Engine.Task(h.ctx, id)
		if err != nil {
			return err
		}
		_, err = t.QueryInstances().All(h.ctx)
		return err
	}); err != nil {
		return nil, err
	}
	if err := add("watchdog pass", func() error { _, err := h.a.Watchdog.Pass(h.ctx); return err }); err != nil {
		return nil, err
	}
	if burn > 0 {
		rate, err := h.burnDown(burn)
		if err != nil {
			return nil, err
		}
		out = append(out, figure{name: fmt.Sprintf("burn-down of %d", burn), rate: rate})
	}
	return out, nil
}

// burnDown inserts count noop tasks as the bench does and returns the
// tasks per second from the insert's end to the last one's SUCCESS (the
// workers already run).
func (h *history) burnDown(count int) (float64, error) {
	sub := h.a.Broker.SubscribeInternal(func(c events.TaskChange) bool {
		return !c.Partial && c.Task.Status.Terminal() && c.Task.Type == "noop"
	}, 1<<16)
	defer sub.Close()
	start := time.Now()
	tasks := make([]store.NewTask, 0, 5000)
	for left := count; left > 0; {
		tasks = tasks[:0]
		for range min(left, cap(tasks)) {
			tasks = append(tasks, store.NewTask{Type: "noop", Owner: "bench", Input: json.RawMessage(`{}`), InputHash: "-",
				TimeoutSeconds: 60, RetryPolicy: "none", MaxAttempts: 1})
		}
		if _, err := h.a.Store.CreateTasks(h.ctx, tasks); err != nil {
			return 0, err
		}
		left -= len(tasks)
	}
	for done := 0; done < count; {
		select {
		case <-h.ctx.Done():
			return 0, h.ctx.Err()
		case c, ok := <-sub.C:
			if !ok {
				return 0, fmt.Errorf("burn-down: subscription ended: %v", sub.Err())
			}
			if c.Task.Status != lifecycle.Success {
				return 0, fmt.Errorf("burn-down: task %d ended %s", c.Task.ID, c.Task.Status)
			}
			done++
		}
	}
	return float64(count) / time.Since(start).Seconds(), nil
}

// The history's mix.
var (
	historyTypes   = []string{"report.daily", "email.send", "import.csv", "export.csv", "invoice.render", "sync.crm", "thumbnail", "webhook.deliver"}
	historyTenants = []string{"", "acme", "globex", "initech", "umbrella"}
	historyRegions = []string{"eu", "us", "apac"}
)

// fill COPYs n finished tasks, one instance and one log line each, created
// evenly over the year before now (ids in created order, as a real history
// has them), then sets the identity past them and VACUUMs and ANALYZEs the
// tables.
func fill(ctx context.Context, db *sql.DB, n int, now time.Time) error {
	const chunk = 250_000
	span := 365 * 24 * time.Hour
	// After the tasks the empty history's burn-down made.
	var base int
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) FROM tasks`).Scan(&base); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	for lo := 1; lo <= n; lo += chunk {
		hi := min(lo+chunk-1, n)
		if err := fillChunk(ctx, db, base, lo, hi, n, now.Add(-span), span); err != nil {
			return err
		}
	}
	for _, q := range []string{
		fmt.Sprintf(`SELECT setval(pg_get_serial_sequence('tasks', 'id'), %d)`, base+n),
		// A history of years has been vacuumed and analyzed by autovacuum
		// long since: without this, autovacuum would start on the fresh
		// rows during the measures, and the measures would time it.
		`VACUUM (ANALYZE) tasks`, `VACUUM (ANALYZE) task_instances`, `VACUUM (ANALYZE) task_logs`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("fill: %s: %w", q, err)
		}
	}
	return nil
}

func fillChunk(ctx context.Context, db *sql.DB, base, lo, hi, n int, from time.Time, span time.Duration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	copyRows := func(table string, cols []string, row func(id int) []any) error {
		st, err := tx.PrepareContext(ctx, pq.CopyIn(table, cols...))
		if err != nil {
			return fmt.Errorf("fill %s: %w", table, err)
		}
		for i := lo; i <= hi; i++ {
			if _, err := st.ExecContext(ctx, row(i)...); err != nil {
				_ = st.Close()
				return fmt.Errorf("fill %s: %w", table, err)
			}
		}
		if _, err := st.ExecContext(ctx); err != nil {
			_ = st.Close()
			return fmt.Errorf("fill %s: %w", table, err)
		}
		return st.Close()
	}
	created := func(id int) time.Time { return from.Add(time.Duration(float64(span) * float64(id) / float64(n))) }
	status := func(id int) lifecycle.Status {
		switch r := (id * 7919) % 100; {
		case r < 6:
			return lifecycle.Failed
		case r < 9:
			return lifecycle.Cancelled
		default:
			return lifecycle.Success
		}
	}
	err = copyRows("tasks", []string{"id", "created_at", "code", "type", "status", "owner", "tenant", "input", "input_hash",
		"timeout_seconds", "retry_policy", "max_attempts", "result", "last_error", "run_at", "updated_at", "finished_at", "attention_status"}, func(id int) []any {
		c := created(id)
		f := c.Add(time.Duration(200+id%5000) * time.Millisecond)
		s := status(id)
		var result, lastErr, attention any
		if s == lifecycle.Success {
			result = `{"ok":true}`
		} else {
			attention = string(s) // the store keeps FAILED and CANCELLED there too
			if s == lifecycle.Failed {
				lastErr = "handler: upstream returned 503"
			}
		}
		input := fmt.Sprintf(`{"customer":"c%05d","region":"%s","amount":%d}`, (id*31)%50000, historyRegions[id%3], id%1000)
		return []any{base + id, c, fmt.Sprintf("H%010d", base+id), historyTypes[(id*13)%len(historyTypes)], string(s),
			fmt.Sprintf("user%03d", (id*17)%200), historyTenants[(id*11)%len(historyTenants)], input, "-",
			60, "none", 1, result, lastErr, c, f, f, attention}
	})
	if err != nil {
		return err
	}
	err = copyRows("task_instances", []string{"created_at", "instance_no", "status", "attempt", "task_type", "priority", "run_at",
		"worker_id", "started_at", "heartbeat_at", "finished_at", "task_id"}, func(id int) []any {
		c := created(id)
		f := c.Add(time.Duration(200+id%5000) * time.Millisecond)
		return []any{c, 1, string(status(id)), 1, historyTypes[(id*13)%len(historyTypes)], 5, c, "bench-worker", c, f, f, base + id}
	})
	if err != nil {
		return err
	}
	err = copyRows("task_logs", []string{"created_at", "level", "message", "task_id"}, func(id int) []any {
		return []any{created(id), "info", "done", base + id}
	})
	if err != nil {
		return err
	}
	return tx.Commit()
}
