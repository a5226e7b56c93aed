// Command river is the peer bench of docs/benchmarks.md: River's throughput
// on the PostgreSQL taskgraph's bench uses, measured as taskgraph's bench
// measures its own (noop jobs inserted first, then the time from the
// client's start until every one is completed).
//
// A module of its own (like internal/tools), so that River and pgx stay out
// of taskgraph's go.mod:
//
//	cd internal/bench/peers/river
//	go run . -db 'postgres://postgres@127.0.0.1:5432/bench?sslmode=disable' -jobs 200000 -workers 100
//
// It migrates River's tables into a schema of its own (river_bench_...),
// and drops it at the end.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done *atomic.Int64
	all  chan struct{}
	want int64
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	if w.done.Add(1) == w.want {
		close(w.all)
	}
	return nil
}

func main() {
	db := flag.String("db", "postgres://postgres@127.0.0.1:5432/bench?sslmode=disable", "the PostgreSQL to bench on (a URL)")
	jobs := flag.Int("jobs", 50000, "noop jobs to insert, then run")
	workers := flag.Int("workers", 100, "River's MaxWorkers")
	flag.Parse()
	if err := run(*db, *jobs, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "river bench:", err)
		os.Exit(1)
	}
}

func run(dsn string, jobs, workers int) error {
	if jobs < 1 {
		return errors.New("-jobs must be at least 1")
	}
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "river_bench_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return err
	}
	defer func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") }()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate River's tables: %w", err)
	}

	w := &noopWorker{done: new(atomic.Int64), all: make(chan struct{}), want: int64(jobs)}
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	client, err := river.NewClient(driver, &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers: ws,
		Schema:  schema,
		// A fetch as soon as workers are free, as River's own bench
		// configures it: the default cooldown (100 ms) caps a queue at
		// MaxWorkers jobs per 100 ms.
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	for sent := 0; sent < jobs; sent += 1000 {
		n := min(1000, jobs-sent)
		params := make([]river.InsertManyParams, n)
		for i := range params {
			params[i] = river.InsertManyParams{Args: noopArgs{}}
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return err
	}
	<-w.all
	wall := time.Since(start)
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = client.Stop(stopCtx)
	fmt.Printf("river: %d jobs in %s: %.0f jobs/s (%d workers)\n", jobs, wall.Round(time.Millisecond), float64(jobs)/wall.Seconds(), workers)
	return nil
}
