package tg_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/taskgraph/taskgraph/tg"
)

type Batch struct {
	Rows      int `json:"rows" jsonschema:"minimum=1"`
	Bad       int `json:"bad" jsonschema:"minimum=0"`
	MaxFailed int `json:"maxFailed" jsonschema:"minimum=0"`
}

type Loaded struct {
	Written int `json:"written"`
}

// A business failure handed to a person: over its threshold of refused
// rows, the handler returns tg.NeedsReview with evidence, the task waits
// in REVIEW_PENDING, and a reviewer retries it with an edited input (a
// higher threshold); the task then runs again and succeeds.
func ExampleNeedsReview() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "tg-example-")
	defer os.RemoveAll(dir)
	c, err := tg.New(ctx, tg.Config{DataDir: dir, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	load, err := tg.Register(c, "load", func(ctx context.Context, job *tg.Job, in Batch) (Loaded, error) {
		if in.Bad > in.MaxFailed {
			return Loaded{}, tg.NeedsReview(
				fmt.Errorf("%d of %d rows refused, over the threshold of %d", in.Bad, in.Rows, in.MaxFailed),
				map[string]int{"failedRows": in.Bad, "totalRows": in.Rows})
		}
		return Loaded{Written: in.Rows - in.Bad}, nil
	}, tg.WithReview(tg.Review{NonRetryable: true}))
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer c.Stop(ctx)

	task, err := load.Create(ctx, Batch{Rows: 10, Bad: 3, MaxFailed: 2})
	if err != nil {
		log.Fatal(err)
	}
	waiting, err := c.Wait(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(waiting.Status, waiting.LastError)

	// A person raises the threshold and runs it again; a reject needs a
	// reason, and a task no longer waiting cannot be decided twice.
	if _, err := c.EditAndRetry(ctx, task.ID, Batch{Rows: 10, Bad: 3, MaxFailed: 5}, "3 bad rows are expected this month"); err != nil {
		log.Fatal(err)
	}
	done, err := c.Wait(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	out, err := load.Result(done)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.Status, out.Written)
	_, err = c.RejectReview(ctx, task.ID, "too late")
	var te *tg.TransitionError
	fmt.Println(errors.As(err, &te))
	// Output:
	// REVIEW_PENDING 3 of 10 rows refused, over the threshold of 2
	// SUCCESS 7
	// true
}
