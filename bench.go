package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"time"

	"taskgraph/app"
	"taskgraph/events"
	"taskgraph/lifecycle"
	"taskgraph/store"
	"taskgraph/worker"
)

// benchDB returns a temporary data directory and the database to bench on:
// db, or a new SQLite file in that directory. cleanup removes the directory.
func benchDB(db string) (dir, dsn string, cleanup func(), err error) {
	dir, err = os.MkdirTemp("", "taskgraph-bench-")
	if err != nil {
		return "", "", nil, err
	}
	dsn = db
	if dsn == "" {
		dsn = filepath.Join(dir, "bench.db")
	}
	return dir, dsn, func() { _ = os.RemoveAll(dir) }, nil
}

// runBench inserts n noop tasks in bulk, starts the workers and reports
// tasks per second until every task is SUCCESS, with a line every 2 s.
func runBench(args []string) int {
	fs := flag.NewFlagSet("taskgraph bench", flag.ContinueOnError)
	n := fs.Int("n", 200000, "tasks to insert and run")
	db := fs.String("db", os.Getenv("TASKGRAPH_DB"), "database (default: a new SQLite file in a temporary directory)")
	workers := fs.Int("workers", 256, "handlers running at once")
	batch := fs.Int("batch", 0, "instances claimed per statement (default: workers)")
	every := fs.Duration("every", 2*time.Second, "interval between progress lines")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the burn-down to this file")
	nodes := fs.Int("nodes", 1, "nodes in this process, each with its own connection pool, broker, relay and workers (more than one needs PostgreSQL)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *n < 1 || *workers < 1 {
		fmt.Fprintln(os.Stderr, "bench: -n and -workers must be positive")
		return 2
	}
	dir, dsn, cleanup, err := benchDB(*db)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench"+":", err)
		return 1
	}
	defer cleanup()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var apps []*app.App
	defer func() {
		for _, a := range apps {
			_ = a.Shutdown(context.Background())
		}
	}()
	for range *nodes {
		cfg := app.Config{DB: dsn, DataDir: dir, Workers: *workers, Roles: []app.Role{app.RoleWorker},
			ShutdownGrace: 10 * time.Second, HeartbeatTimeout: 30 * time.Second}
		a, err := app.New(ctx, cfg, app.Options{Logger: quiet, Pool: worker.Config{ClaimBatch: *batch}})
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", app.OneLine(err))
			return 1
		}
		apps = append(apps, a)
	}
	a := apps[0]
	fmt.Printf("bench: %s, %d noop tasks, %d node(s) x %d workers, GOMAXPROCS=%d\n", a.Store.Dialect(), *n, *nodes, *workers, runtime.GOMAXPROCS(0))

	start := time.Now()
	tasks := make([]store.NewTask, 0, 5000)
	for left := *n; left > 0; {
		tasks = tasks[:0]
		for range min(left, cap(tasks)) {
			tasks = append(tasks, store.NewTask{Type: "noop", Owner: "bench", Input: json.RawMessage(`{}`), InputHash: "-",
				TimeoutSeconds: 60, RetryPolicy: "none", MaxAttempts: 1})
		}
		if err := a.Store.CreateTasks(ctx, tasks); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", app.OneLine(err))
			return 1
		}
		left -= len(tasks)
	}
	ins := time.Since(start)
	fmt.Printf("inserted %d tasks in %s (%.0f tasks/s)\n", *n, ins.Round(time.Millisecond), float64(*n)/ins.Seconds())

	// Each node counts its own completions (full, local changes); internal
	// subscriptions do not make the relay re-read other nodes' changes.
	var done, failed atomic.Int64
	for _, a := range apps {
		sub := a.Broker.SubscribeInternal(func(c events.TaskChange) bool { return !c.Partial && c.Task.Status.Terminal() }, 1<<16)
		go func() {
			for c := range sub.C {
				if c.Task.Status == lifecycle.Success {
					done.Add(1)
				} else {
					failed.Add(1)
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
	start = time.Now()
	for _, a := range apps {
		if err := a.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", app.OneLine(err))
			return 1
		}
	}
	tick := time.NewTicker(*every)
	defer tick.Stop()
	last, lastAt := int64(0), start
	for done.Load()+failed.Load() < int64(*n) {
		select {
		case now := <-tick.C:
			d := done.Load()
			fmt.Printf("%6.1fs  %8d done  %8.0f tasks/s (last %s)  %8.0f tasks/s (overall)\n",
				now.Sub(start).Seconds(), d, float64(d-last)/now.Sub(lastAt).Seconds(), *every, float64(d)/now.Sub(start).Seconds())
			last, lastAt = d, now
		case <-time.After(10 * time.Millisecond):
		}
	}
	el := time.Since(start)
	fmt.Printf("total: %d tasks SUCCESS (%d failed) in %s = %.0f tasks/s end to end on %s\n",
		done.Load(), failed.Load(), el.Round(time.Millisecond), float64(*n)/el.Seconds(), a.Store.Dialect())
	if failed.Load() > 0 {
		return 1
	}
	return 0
}
