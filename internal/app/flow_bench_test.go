package app_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/flow"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/worker"
)

// BenchmarkCapHandOff: how long a slot freed under a cluster-wide cap
// takes to reach the next waiting task. One node, polls an hour apart, a
// cap of 1 on a type whose handler returns at once: b.N tasks, created
// in one transaction, run one after the other, and each one's end hands the slot to the next (the
// outcome's flush, then a claim woken by its commit). Reported as
// ms/hand-off: an execution's whole turn at the cap, handler included.
//
//	go test -run '^$' -bench BenchmarkCapHandOff -benchtime 200x ./internal/app/
func BenchmarkCapHandOff(b *testing.B) {
	for _, d := range dbtest.Drivers() {
		b.Run(d.Name, func(b *testing.B) { benchCapHandOff(b, d) })
	}
}

func benchCapHandOff(b *testing.B, d dbtest.Driver) {
	{
		rec := &runs{}
		s := apptest.Start(b, d.DSN(b), app.Options{Register: rec.register, Pool: worker.Config{PollInterval: time.Hour}})
		if _, err := s.App.Flow.Set(local, "paced", flow.Limits{MaxRunning: ptr(1)}); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		// In one transaction: their creation wakes the pool once, and
		// every later claim is a hand-off's.
		tasks := make([]store.NewTask, b.N)
		for i := range tasks {
			tasks[i] = store.NewTask{Type: "paced", Owner: "bench", Input: json.RawMessage(`{}`), InputHash: "-", TimeoutSeconds: 60, RetryPolicy: "none", MaxAttempts: 1}
		}
		if _, err := s.App.Store.CreateTasks(auth.NewSystemContext(context.Background()), tasks); err != nil {
			b.Fatal(err)
		}
		waitAllSucceeded(b, s, b.N, time.Duration(b.N)*time.Second+time.Minute)
		elapsed := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(elapsed.Microseconds())/1000/float64(b.N), "ms/hand-off")
	}
}
