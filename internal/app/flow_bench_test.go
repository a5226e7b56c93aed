package app_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/ent/taskinstance"
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

// BenchmarkRateUse: how much of a rate limit a saturated type uses. One
// node, polls an hour apart, 10 starts a second: b.N tasks wait paused,
// then run; reported as starts/s over the span from the first start to
// the last and as the share of the rate (1.0 = every slot taken the
// moment it freed). Each window's slots are handed on by the gate's next
// admission time, not found by a poll.
//
//	go test -run '^$' -bench BenchmarkRateUse -benchtime 60x ./internal/app/
func BenchmarkRateUse(b *testing.B) {
	for _, d := range dbtest.Drivers() {
		b.Run(d.Name, func(b *testing.B) { benchRateUse(b, d) })
	}
}

func benchRateUse(b *testing.B, d dbtest.Driver) {
	const rate = 10
	rec := &runs{}
	s := apptest.Start(b, d.DSN(b), app.Options{Register: rec.register, Pool: worker.Config{PollInterval: time.Hour}})
	if _, err := s.App.Flow.Set(local, "paced", flow.Limits{RateLimit: ptr(rate), RatePeriodSeconds: ptr(1)}); err != nil {
		b.Fatal(err)
	}
	if _, err := s.App.Flow.Pause(local, "paced", nil); err != nil {
		b.Fatal(err)
	}
	n := max(b.N, rate+1)
	createPaced(b, s, n, 0)
	b.ResetTimer()
	if _, err := s.App.Flow.Resume(local, "paced"); err != nil {
		b.Fatal(err)
	}
	waitAllSucceeded(b, s, n, time.Duration(n/rate)*time.Second+time.Minute)
	b.StopTimer()
	insts, err := s.App.Store.Client().TaskInstance.Query().Where(taskinstance.TaskType("paced")).All(local)
	if err != nil {
		b.Fatal(err)
	}
	first, last := *insts[0].StartedAt, *insts[0].StartedAt
	for _, in := range insts {
		if in.StartedAt.Before(first) {
			first = *in.StartedAt
		}
		if in.StartedAt.After(last) {
			last = *in.StartedAt
		}
	}
	// n starts at the full rate span (n-1)/rate windows, less the first
	// window's burst: the ideal span is the start of the last window.
	ideal := time.Duration((n-1)/rate) * time.Second
	span := last.Sub(first)
	b.ReportMetric(float64(n-1)/span.Seconds(), "starts/s")
	b.ReportMetric(ideal.Seconds()/span.Seconds(), "share-of-rate")
}
