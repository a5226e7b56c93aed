package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/external"
	"github.com/taskgraph/taskgraph/internal/pgdsn"
	"github.com/taskgraph/taskgraph/internal/store"
)

// benchDB returns a temporary data directory and a fresh, empty database to
// bench on: a new SQLite file in that directory, or, when db names a
// PostgreSQL database, a new schema in it (its search_path is set in the
// returned DSN). cleanup removes both. Every run starts from an empty,
// never-analyzed schema, as a user's first burst would.
//
// On PostgreSQL a bench holds an advisory lock on its schema's name for as
// long as it runs. A bench schema whose lock nobody holds was left by a
// bench that could not clean up (killed, or its machine lost): the next
// bench on the database drops it.
func benchDB(db string) (dir, dsn string, cleanup func(), err error) {
	dir, err = os.MkdirTemp("", "taskgraph-bench-")
	if err != nil {
		return "", "", nil, err
	}
	rmDir := func() { _ = os.RemoveAll(dir) }
	if db == "" {
		return dir, filepath.Join(dir, "bench.db"), rmDir, nil
	}
	if !store.IsPostgres(db) {
		return dir, db, rmDir, nil
	}
	conn, err := sql.Open("postgres", db)
	if err != nil {
		rmDir()
		return "", "", nil, err
	}
	ctx := context.Background()
	// The session whose advisory lock says the schema is in use.
	held, err := conn.Conn(ctx)
	if err != nil {
		_ = conn.Close()
		rmDir()
		return "", "", nil, fmt.Errorf("connect to bench: %w", err)
	}
	fail := func(err error) (string, string, func(), error) {
		_ = held.Close()
		_ = conn.Close()
		rmDir()
		return "", "", nil, err
	}
	if err := dropAbandonedBenchSchemas(ctx, held); err != nil {
		return fail(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "bench_" + hex.EncodeToString(b[:])
	// Locked before it exists: no other bench can take it for abandoned.
	if _, err := held.ExecContext(ctx, `SELECT pg_advisory_lock($1, hashtext($2))`, benchLockClass, schema); err != nil {
		return fail(fmt.Errorf("lock the bench's schema: %w", err))
	}
	if _, err := conn.Exec("CREATE SCHEMA " + schema); err != nil {
		return fail(fmt.Errorf("create a schema to bench in: %w", err))
	}
	inSchema, err := pgdsn.Set(db, "search_path", schema)
	if err != nil {
		return fail(err)
	}
	return dir, inSchema, func() {
		if _, err := conn.Exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			fmt.Fprintln(os.Stderr, "bench: drop schema:", err)
		}
		_ = held.Close()
		_ = conn.Close() // closes the session, and its lock with it
		rmDir()
	}, nil
}

// benchLockClass is the first key of the advisory locks benches hold on
// their schemas' names (the second is the name's hashtext).
const benchLockClass = 0x7467 // "tg"

// dropAbandonedBenchSchemas drops the bench schemas whose lock no session
// holds, on held (a session of its own: it takes and lets go each lock).
func dropAbandonedBenchSchemas(ctx context.Context, held *sql.Conn) error {
	rows, err := held.QueryContext(ctx, `SELECT nspname FROM pg_namespace WHERE nspname ~ '^bench_[0-9a-f]{12}$'`)
	if err != nil {
		return fmt.Errorf("list bench schemas: %w", err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return fmt.Errorf("list bench schemas: %w", err)
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list bench schemas: %w", err)
	}
	for _, n := range names {
		var free bool
		if err := held.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, benchLockClass, n).Scan(&free); err != nil {
			return fmt.Errorf("lock bench schema %s: %w", n, err)
		}
		if !free {
			continue // a bench runs in it
		}
		// The name matched the pattern above: it needs no quoting.
		_, err := held.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+n+" CASCADE")
		if err == nil {
			fmt.Fprintf(os.Stderr, "bench: dropped schema %s, left by a bench that did not end\n", n)
		}
		if _, uerr := held.ExecContext(ctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, benchLockClass, n); uerr != nil && err == nil {
			err = uerr
		}
		if err != nil {
			return fmt.Errorf("drop abandoned bench schema %s: %w", n, err)
		}
	}
	return nil
}

// Run inserts n noop tasks in bulk (and, with -backlog, more that are
// scheduled later and stay waiting), starts the workers and reports tasks
// per second until the n tasks are SUCCESS: over the whole burn-down, and
// over its first and last tenth (a claim whose cost grew with the backlog
// would show as a gap between the two). On PostgreSQL it then prints the
// row versions and index entries written per task (pg_stat_user_tables).
// Its defaults are the server's: the figure it prints is what a user gets.
func Run(args []string) int {
	fs := flag.NewFlagSet("taskgraph bench", flag.ContinueOnError)
	n := fs.Int("n", 200000, "tasks to insert and run")
	backlog := fs.Int("backlog", 0, "extra tasks kept waiting behind the measured ones (scheduled a day later)")
	db := fs.String("db", os.Getenv("TASKGRAPH_DB"), "database: a PostgreSQL URL (the bench runs in a new schema of it) or a SQLite file (default: a new SQLite file in a temporary directory)")
	workers := fs.Int("workers", 0, "handlers running at once (default: the server's default)")
	batch := fs.Int("batch", 0, "instances claimed per statement (default: the pool's)")
	every := fs.Duration("every", 2*time.Second, "interval between progress lines (0: none)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the burn-down to this file")
	memProfile := fs.String("memprofile", "", "write a profile of the burn-down's allocations to this file")
	workflows := fs.Int("workflows", 0, "instead of the burn-down, alternate this many rounds of workflows (1,000 chains of 10 steps, one 10,000-wide fan-out and fan-in) with plain burn-downs of as many tasks, and compare their rates")
	tenants := fs.Int("tenants", 1, "spread the tasks over this many tenants, in turn, so that the claim shares each type among them (the fair share)")
	nodes := fs.Int("nodes", 1, "nodes in this process, each with its own connection pool, broker, relay and workers (more than one needs PostgreSQL)")
	ext := fs.Bool("external", false, "the external-worker mode: alternated rounds of the in-process burn-down of -n noop tasks and of -n tasks of an external type by Go clients of the worker protocol (over loopback HTTP); prints each one's tasks/s, their ratio and the requests per task")
	rounds := fs.Int("rounds", 2, "with -external: rounds of the two burn-downs")
	clients := fs.Int("clients", 8, "with -external: worker protocol clients")
	claim := fs.Int("claim", external.MaxClaim, "with -external: tasks a client claims at a time")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *ext {
		if *rounds < 1 || *clients < 1 || *claim < 1 || *claim > external.MaxClaim || *nodes != 1 || *backlog != 0 {
			fmt.Fprintf(os.Stderr, "bench: -external takes -rounds and -clients of at least 1, -claim 1..%d, one node and no backlog\n", external.MaxClaim)
			return 2
		}
		if *n < 10 {
			fmt.Fprintln(os.Stderr, "bench: -n must be at least 10")
			return 2
		}
		// Not SIGPIPE: with it notified, the server's writes to the
		// connections of clients that went away would end the run too.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runExternal(ctx, *db, *workers, externalRun{n: *n, rounds: *rounds, clients: *clients, claim: *claim})
	}
	if *n < 10 || *workers < 0 || *backlog < 0 || *nodes < 1 {
		fmt.Fprintln(os.Stderr, "bench: -n must be at least 10; -workers, -backlog must not be negative; -nodes at least 1")
		return 2
	}
	// An interrupt ends the run through its defers (the nodes shut down,
	// then the bench's schema or file is removed), not where it stands; so
	// does a closed output (SIGPIPE: `taskgraph bench | head -3`), whose
	// writes then fail instead of killing the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
	defer stop()
	dir, dsn, cleanup, err := benchDB(*db)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer cleanup()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var apps []*app.App
	shutdown := func() {
		for _, a := range apps {
			_ = a.Shutdown(context.Background())
		}
		apps = nil
	}
	defer shutdown()
	for range *nodes {
		// The server's defaults: the figure a user gets with no flag.
		cfg, err := app.ParseFlags(nil, func(string) string { return "" }, io.Discard)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		cfg.DB, cfg.DataDir, cfg.Roles = dsn, dir, []app.Role{app.RoleWorker}
		if *workers > 0 {
			cfg.Workers = *workers
		}
		opts := app.Options{Logger: quiet}
		opts.Pool.ClaimBatch = *batch
		a, err := app.New(ctx, cfg, opts)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", app.OneLine(err))
			return 1
		}
		apps = append(apps, a)
	}
	a := apps[0]
	if *workflows > 0 {
		return runWorkflowBench(ctx, apps, *workflows)
	}
	fmt.Printf("bench: %s, %d noop tasks (+%d waiting behind), %d node(s) x %d workers, GOMAXPROCS=%d\n",
		a.Store.Dialect(), *n, *backlog, *nodes, a.Config.Workers, runtime.GOMAXPROCS(0))
	if *tenants > 1 {
		fmt.Printf("bench: the tasks are spread over %d tenants, in turn (the claim shares the type fairly among them)\n", *tenants)
	}

	// The backlog first, so that the measured tasks sit behind it in the
	// tables (their ids are larger), then the measured ones.
	insert := func(count int, runAt time.Time) error {
		tasks := make([]store.NewTask, 0, 5000)
		for left := count; left > 0; {
			tasks = tasks[:0]
			for i := range min(left, cap(tasks)) {
				nt := store.NewTask{Type: "noop", Owner: "bench", Input: json.RawMessage(`{}`), InputHash: "-",
					TimeoutSeconds: 60, RetryPolicy: "none", MaxAttempts: 1, RunAt: runAt}
				if *tenants > 1 {
					nt.Tenant = fmt.Sprintf("tenant-%d", (left-i)%*tenants)
				}
				tasks = append(tasks, nt)
			}
			if _, err := a.Store.CreateTasks(ctx, tasks); err != nil {
				return err
			}
			left -= len(tasks)
		}
		return nil
	}
	start := time.Now()
	if err := insert(*backlog, time.Now().Add(24*time.Hour)); err != nil {
		return benchFailed(ctx, err)
	}
	if *backlog > 0 {
		el := time.Since(start)
		fmt.Printf("inserted the backlog of %d tasks in %s (%.0f tasks/s)\n", *backlog, el.Round(time.Millisecond), float64(*backlog)/el.Seconds())
	}
	start = time.Now()
	if err := insert(*n, time.Time{}); err != nil {
		return benchFailed(ctx, err)
	}
	ins := time.Since(start)
	fmt.Printf("inserted %d tasks in %s (%.0f tasks/s)\n", *n, ins.Round(time.Millisecond), float64(*n)/ins.Seconds())

	// Each node counts its own completions (full, local changes); internal
	// subscriptions do not make the relay re-read other nodes' changes. The
	// time of every tenth of the way is kept for the first/last rates.
	var done, failed, ended atomic.Int64
	finished := make(chan struct{}) // closed by the end that makes n
	// marks[i] is when i tenths were done; firstDone, when the first was.
	marks := make([]time.Time, 11)
	var firstDone time.Time
	var marksMu sync.Mutex
	tenth := int64(*n / 10)
	for _, a := range apps {
		sub := a.Broker.SubscribeInternal(func(c events.TaskChange) bool { return !c.Partial && c.Task.Status.Terminal() }, 1<<16)
		go func() {
			for c := range sub.C {
				if c.Task.Status == lifecycle.Success {
					done.Add(1)
				} else {
					failed.Add(1)
				}
				total := ended.Add(1)
				if total == int64(*n) {
					close(finished)
				}
				if total == 1 {
					marksMu.Lock()
					firstDone = time.Now()
					marksMu.Unlock()
				}
				if total%tenth == 0 && total/tenth <= 10 {
					marksMu.Lock()
					marks[total/tenth] = time.Now()
					marksMu.Unlock()
				}
			}
			if err := sub.Err(); err != nil && !errors.Is(err, events.ErrClosed) {
				fmt.Fprintln(os.Stderr, "bench: event subscription dropped:", err)
				os.Exit(1)
			}
		}()
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		// The burn-down's allocations, sampled every 4 KiB (the insert's
		// before them at the default rate).
		runtime.MemProfileRate = 4096
		defer func() {
			f, err := os.Create(*memProfile)
			if err == nil {
				err = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench:", err)
			}
		}()
	}
	meter := newCPUMeter(a.Store.Postgres(), dsn)
	cpuStart := meter.read()
	start = time.Now()
	marks[0] = start
	for _, a := range apps {
		if err := a.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", app.OneLine(err))
			return 1
		}
	}
	var tick <-chan time.Time
	if *every > 0 {
		t := time.NewTicker(*every)
		defer t.Stop()
		tick = t.C
	}
	last, lastAt := int64(0), start
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			return benchFailed(ctx, ctx.Err())
		case <-finished:
			waiting = false
		case now := <-tick:
			d := done.Load()
			fmt.Printf("%6.1fs  %8d done  %8.0f tasks/s (last %s)  %8.0f tasks/s (overall)\n",
				now.Sub(start).Seconds(), d, float64(d-last)/now.Sub(lastAt).Seconds(), *every, float64(d)/now.Sub(start).Seconds())
			last, lastAt = d, now
		}
	}
	el := time.Since(start)
	cpuEnd := meter.read()
	marksMu.Lock()
	first := float64(tenth) / marks[1].Sub(marks[0]).Seconds()
	lastTenth := float64(tenth) / marks[10].Sub(marks[9]).Seconds()
	toFirst := firstDone.Sub(start).Round(time.Millisecond)
	marksMu.Unlock()
	fmt.Printf("total: %d tasks SUCCESS (%d failed) in %s = %.0f tasks/s end to end on %s\n",
		done.Load(), failed.Load(), el.Round(time.Millisecond), float64(*n)/el.Seconds(), a.Store.Dialect())
	fmt.Printf("first 10%%: %.0f tasks/s, last 10%%: %.0f tasks/s (first/last %.2f); the first task was done %s after the start\n",
		first, lastTenth, first/lastTenth, toFirst)
	if line := meter.report(cpuStart, cpuEnd, *n); line != "" {
		fmt.Println(line)
	}
	if failed.Load() > 0 {
		return 1
	}
	if a.Store.Postgres() {
		// Table statistics are flushed by each backend as it ends.
		shutdown()
		if err := printWrites(dsn, int64(*n), int64(*backlog)); err != nil {
			fmt.Fprintln(os.Stderr, "bench: row versions:", err)
		}
	}
	return 0
}

// printWrites prints, per task, the row versions written to each table
// (inserts and updates, how many updates were HOT, deletes) and the index
// entries they cost: an insert or a non-HOT update writes one entry in each
// index of its table (fewer where a partial index's predicate excludes the
// row, so the figure is an upper bound); a HOT update writes none.
func printWrites(dsn string, tasks, backlog int64) error {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	type stat struct {
		table                 string
		ins, upd, hot, del, n int64
	}
	var stats []stat
	// The backends' counters reach the shared statistics when they exit.
	deadline := time.Now().Add(5 * time.Second)
	for {
		stats = stats[:0]
		rows, err := db.Query(`
SELECT s.relname, s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd, s.n_tup_del,
	(SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid)
FROM pg_stat_user_tables s WHERE s.schemaname = current_schema() AND s.relname IN ('tasks', 'task_instances')`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var s stat
			if err := rows.Scan(&s.table, &s.ins, &s.upd, &s.hot, &s.del, &s.n); err != nil {
				rows.Close()
				return err
			}
			stats = append(stats, s)
		}
		rows.Close()
		var ins int64
		for _, s := range stats {
			ins += s.ins
		}
		if ins >= 2*(tasks+backlog) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	sort.Slice(stats, func(i, j int) bool { return stats[i].table < stats[j].table })
	var versions, entries float64
	for _, s := range stats {
		s.ins -= backlog // the backlog is inserted, never run
		v := float64(s.ins+s.upd) / float64(tasks)
		e := float64(s.ins+s.upd-s.hot) * float64(s.n) / float64(tasks)
		versions += v
		entries += e
		fmt.Printf("%-15s per task: %.2f row versions (%.2f inserted, %.2f updated of which %.2f HOT), %.2f deleted; <= %.2f index entries (%d indexes)\n",
			s.table, v, float64(s.ins)/float64(tasks), float64(s.upd)/float64(tasks), float64(s.hot)/float64(tasks), float64(s.del)/float64(tasks), e, s.n)
	}
	fmt.Printf("all tables      per task: %.2f row versions, <= %.2f index entries\n", versions, entries)
	return nil
}

// benchFailed reports why the run stops and returns its exit code: 130
// when it was interrupted (its defers then remove what it made).
func benchFailed(ctx context.Context, err error) int {
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench: interrupted; removing what it made")
		return 130
	}
	fmt.Fprintln(os.Stderr, "bench:", app.OneLine(err))
	return 1
}
