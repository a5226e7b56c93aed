package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/external"
	"github.com/taskgraph/taskgraph/internal/store"
)

// BenchmarkExternalWorker compares, on one node and one database, the
// burn-down of b.N tasks on PostgreSQL by Go clients of the worker protocol (4 workers
// claiming up to 100 at a time, completing them in one complete-many:
// external.Client.Drive) with the in-process pool's burn-down of as many
// noop tasks, alternated: tasks/s of each, the ratio, and the protocol's
// requests per task. Each burn-down's tasks are inserted with nothing
// claiming them (the pool paused), and counted by a subscription made
// before the insert: one made after it missed the ends of the tasks the
// pool had run meanwhile, and a large run waited for them forever. (The
// bench command's -external mode is the same measure, outside go test.)
//
//	go test -run '^$' -bench BenchmarkExternalWorker -benchtime 5000x ./internal/app/
func BenchmarkExternalWorker(b *testing.B) {
	dsn := dbtest.Postgres(b)
	{
		path, tokens := apptest.Tokens(b, auth.Viewer{User: "ada", Role: auth.RoleAdmin}, auth.Viewer{User: "wa", Role: auth.RoleWorker, Types: []string{"py.a"}})
		s := apptest.Start(b, dsn, app.Options{}, func(c *app.Config) { c.Access.TokenFile = path; c.Workers = 400 })
		r := s.DoAs(b, tokens["ada"], declareType, map[string]any{"in": map[string]any{"name": "py.a", "timeoutSeconds": 60, "retryPolicy": "none"}})
		if len(r.Errors) > 0 {
			b.Fatal(r.Errors)
		}
		ctx := context.Background()
		insert := func(typ string, n int) {
			tasks := make([]store.NewTask, n)
			for i := range tasks {
				tasks[i] = store.NewTask{Type: typ, Owner: "bench", Input: json.RawMessage(`{}`), InputHash: "-", TimeoutSeconds: 60, RetryPolicy: "none", MaxAttempts: 1}
			}
			for chunk := 0; chunk < n; chunk += 2000 {
				if _, err := s.App.Store.CreateTasks(auth.NewSystemContext(ctx), tasks[chunk:min(chunk+2000, n)]); err != nil {
					b.Fatal(err)
				}
			}
		}
		// waitDone waits for n terminal tasks of typ.
		waitDone := func(typ string, n int) func() {
			sub := s.App.Broker.SubscribeInternal(func(c events.TaskChange) bool { return !c.Partial && c.Task.Type == typ && c.Task.Status.Terminal() }, 1<<16)
			return func() {
				defer sub.Close()
				for got := 0; got < n; got++ {
					c := <-sub.C
					if c.Task.Status != lifecycle.Success {
						b.Fatalf("%s task ended %s", typ, c.Task.Status)
					}
				}
			}
		}
		var extElapsed, poolElapsed time.Duration
		var requests atomic.Int64
		b.ResetTimer()
		for round := range 2 { // alternated: pool, external, pool, external
			_ = round
			n := b.N / 2
			// The in-process pool on noop.
			b.StopTimer()
			s.App.Pool.PauseClaiming(true)
			wait := waitDone("noop", n)
			insert("noop", n)
			b.StartTimer()
			start := time.Now()
			s.App.Pool.PauseClaiming(false)
			wait()
			poolElapsed += time.Since(start)

			// Go clients of the protocol on py.a.
			b.StopTimer()
			wait = waitDone("py.a", n)
			insert("py.a", n)
			b.StartTimer()
			start = time.Now()
			cctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := &external.Client{URL: s.URL, Token: tokens["wa"]}
					burnt, err := c.Drive(cctx, "bench-"+string(rune('a'+w)), []string{"py.a"}, 100, 0.2, func() bool { return cctx.Err() != nil })
					requests.Add(burnt.Requests)
					if err != nil && !errors.Is(err, context.Canceled) {
						b.Error(err)
					}
				}()
			}
			wait()
			extElapsed += time.Since(start)
			cancel()
			wg.Wait()
		}
		total := float64(2 * (b.N / 2))
		b.ReportMetric(total/poolElapsed.Seconds(), "pool-tasks/s")
		b.ReportMetric(total/extElapsed.Seconds(), "external-tasks/s")
		b.ReportMetric(poolElapsed.Seconds()/extElapsed.Seconds(), "external/pool")
		b.ReportMetric(float64(requests.Load())/total, "requests/task")
	}
}
