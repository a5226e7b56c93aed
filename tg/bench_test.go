package tg

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// benchBatch is how many tasks one call creates: CreateMany's most.
const benchBatch = 1000

// BenchmarkCreateMany creates noop tasks on PostgreSQL, 1,000 a call,
// through the library's CreateMany (validation, masking, sealing,
// idempotency hashing, the audit record: what a program pays) and through
// the store's insert alone (what `taskgraph bench` inserts its tasks
// with), each reporting tasks/s: `go test -run '^$' -bench CreateMany
// -count 5 ./tg/` alternates them.
func BenchmarkCreateMany(b *testing.B) {
	ctx := context.Background()
	c, err := New(ctx, Config{Database: dbtest.Postgres(b), DataDir: b.TempDir(), Roles: []Role{RoleAPI},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Stop(context.Background()) })
	b.Run("Library", func(b *testing.B) {
		tasks := make([]NewTask, benchBatch)
		for i := range tasks {
			tasks[i] = NewTask{Type: "noop", Input: json.RawMessage(`{}`)}
		}
		start := time.Now()
		for b.Loop() {
			res, err := c.CreateMany(ctx, tasks)
			if err != nil {
				b.Fatal(err)
			}
			if res[0].Err != nil {
				b.Fatal(res[0].Err)
			}
		}
		b.ReportMetric(float64(b.N*benchBatch)/time.Since(start).Seconds(), "tasks/s")
	})
	b.Run("StoreInsert", func(b *testing.B) {
		sys := auth.NewSystemContext(ctx)
		tasks := make([]store.NewTask, benchBatch)
		for i := range tasks {
			tasks[i] = store.NewTask{Type: "noop", Owner: "bench", Input: json.RawMessage(`{}`), InputHash: "-",
				TimeoutSeconds: 60, RetryPolicy: "none", MaxAttempts: 1}
		}
		start := time.Now()
		for b.Loop() {
			if _, err := c.app.Store.CreateTasks(sys, tasks); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*benchBatch)/time.Since(start).Seconds(), "tasks/s")
	})
}
