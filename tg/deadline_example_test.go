package tg_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/taskgraph/taskgraph/tg"
)

type Reconcile struct {
	Day string `json:"day"`
}

// Deadlines: a task that must finish by a time of its own (tg.FinishBy),
// or by its type's default (tg.WithFinishWithin); the server flags it at
// risk near the deadline and missed past it, and a task that finished in
// time is MET. A deadline that has already passed is refused.
func ExampleFinishBy() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "tg-example-")
	defer os.RemoveAll(dir)
	c, err := tg.New(ctx, tg.Config{DataDir: dir, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	reconcile, err := tg.Register(c, "reconcile", func(ctx context.Context, job *tg.Job, in Reconcile) (struct{}, error) {
		return struct{}{}, nil
	}, tg.WithFinishWithin(2*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer c.Stop(ctx)

	urgent, err := reconcile.Create(ctx, Reconcile{Day: "2026-12-01"}, tg.FinishBy(time.Now().Add(10*time.Minute)))
	if err != nil {
		log.Fatal(err)
	}
	done, err := c.Wait(ctx, urgent.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.Status, done.DeadlineState)

	// No FinishBy: the type's two hours after it may first run.
	later := time.Now().Add(time.Hour)
	routine, err := reconcile.Create(ctx, Reconcile{Day: "2026-12-02"}, tg.RunAt(later))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(routine.Deadline.Sub(routine.RunAt), routine.DeadlineState)

	_, err = reconcile.Create(ctx, Reconcile{Day: "2026-12-03"}, tg.FinishBy(time.Now().Add(-time.Minute)))
	var ve *tg.ValidationError
	fmt.Println(errors.As(err, &ve), ve.Problems[0].Field)
	// Output:
	// SUCCESS MET
	// 2h0m0s ON_TIME
	// true deadline
}
