package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/external"
	"github.com/taskgraph/taskgraph/internal/store"
)

// externalType is the external task type the external-worker mode's
// clients run (a noop over the protocol).
const externalType = "bench.external"

// externalRun is what runExternal measures: per round, the in-process
// pool's burn-down of n noop tasks, then the protocol's of n tasks of an
// external type, on one node (api and worker roles) and one database.
type externalRun struct {
	n, rounds, clients, claim int
}

// runExternal is `taskgraph bench -external`.
func runExternal(ctx context.Context, db string, workers int, r externalRun) int {
	dir, dsn, cleanup, err := benchDB(db)
	if err != nil {
		return benchFailed(ctx, err)
	}
	defer cleanup()
	cfg, err := app.ParseFlags(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		return benchFailed(ctx, err)
	}
	cfg.DB, cfg.DataDir, cfg.Roles = dsn, dir, []app.Role{app.RoleAPI, app.RoleWorker}
	cfg.Addr = "127.0.0.1:0"
	if workers > 0 {
		cfg.Workers = workers
	}
	a, err := app.New(ctx, cfg, app.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return benchFailed(ctx, err)
	}
	defer func() { _ = a.Shutdown(context.Background()) }()
	if err := a.Start(ctx); err != nil {
		return benchFailed(ctx, err)
	}
	// Loopback only: the server runs without authentication, and its
	// worker protocol answers requests addressed to localhost.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return benchFailed(ctx, err)
	}
	go func() { _ = a.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	sys := auth.NewSystemContext(ctx)
	if _, err := a.External.Declare(sys, external.Declaration{Name: externalType, TimeoutSeconds: 300, RetryPolicy: "none"}); err != nil {
		return benchFailed(ctx, err)
	}
	fmt.Printf("bench -external: %s, %d rounds of %d noop tasks in process (%d workers) then %d of %s by %d Go clients of the worker protocol (%d a claim, complete-many), GOMAXPROCS=%d\n",
		a.Store.Dialect(), r.rounds, r.n, a.Config.Workers, r.n, externalType, r.clients, r.claim, runtime.GOMAXPROCS(0))

	insert := func(typ string) error {
		tasks := make([]store.NewTask, 0, 5000)
		for left := r.n; left > 0; left -= len(tasks) {
			tasks = tasks[:0]
			for range min(left, cap(tasks)) {
				tasks = append(tasks, store.NewTask{Type: typ, Owner: "bench", Input: json.RawMessage(`{}`), InputHash: "-",
					TimeoutSeconds: 300, RetryPolicy: "none", MaxAttempts: 1})
			}
			if _, err := a.Store.CreateTasks(sys, tasks); err != nil {
				return err
			}
		}
		return nil
	}
	// burn inserts n tasks of typ with nothing claiming them (the pool
	// paused, no client yet), then times start until all n ended.
	burn := func(typ string, start func() func() error) (time.Duration, error) {
		a.Pool.PauseClaiming(true)
		// Subscribed before the insert: not one end is missed.
		sub := a.Broker.SubscribeInternal(func(c events.TaskChange) bool { return !c.Partial && c.Task.Type == typ && c.Task.Status.Terminal() }, r.n+16)
		defer sub.Close()
		if err := insert(typ); err != nil {
			return 0, err
		}
		t0 := time.Now()
		stop := start()
		var failed int
		for range r.n {
			select {
			case c, ok := <-sub.C:
				if !ok {
					return 0, fmt.Errorf("the event subscription dropped: %w", sub.Err())
				}
				if c.Task.Status != lifecycle.Success {
					failed++
				}
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		el := time.Since(t0)
		if err := stop(); err != nil {
			return 0, err
		}
		if failed > 0 {
			return 0, fmt.Errorf("%d %s tasks did not succeed", failed, typ)
		}
		return el, nil
	}
	var pool, ext time.Duration
	var requests int64
	for round := 1; round <= r.rounds; round++ {
		p, err := burn("noop", func() func() error {
			a.Pool.PauseClaiming(false)
			return func() error { return nil }
		})
		if err != nil {
			return benchFailed(ctx, err)
		}
		e, err := burn(externalType, func() func() error {
			cctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var errs []error
			for i := range r.clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := &external.Client{URL: url, HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}}
					b, err := c.Drive(cctx, fmt.Sprintf("bench-%d", i), []string{externalType}, r.claim, 0.2, func() bool { return cctx.Err() != nil })
					mu.Lock()
					defer mu.Unlock()
					requests += b.Requests
					if err != nil && !errors.Is(err, context.Canceled) {
						errs = append(errs, err)
					}
				}()
			}
			return func() error {
				cancel()
				wg.Wait()
				return errors.Join(errs...)
			}
		})
		if err != nil {
			return benchFailed(ctx, err)
		}
		pool += p
		ext += e
		fmt.Printf("round %d: in process %8.0f tasks/s, external %8.0f tasks/s (external/in-process %.2f)\n",
			round, float64(r.n)/p.Seconds(), float64(r.n)/e.Seconds(), p.Seconds()/e.Seconds())
	}
	total := float64(r.n * r.rounds)
	fmt.Printf("total: in process %.0f tasks/s, external %.0f tasks/s; external/in-process %.2f; %.3f requests per external task (claims and complete-manys)\n",
		total/pool.Seconds(), total/ext.Seconds(), pool.Seconds()/ext.Seconds(), float64(requests)/total)
	return 0
}
