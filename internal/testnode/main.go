// Command testnode is a taskgraph server with one more task type, "record",
// for the multi-process tests: every execution records itself in the table
// record_executions (instance_id is its primary key), so that a test can
// count executions, see which node ran what, and check that no instance ran
// twice and no task ran twice at the same time.
//
// Two more, "relay.p" and "relay.c" (one handler under two names, so that a
// test can pause one without the other), are for the workflow tests: each
// execution records itself and the parents' results it received in the
// table relay_executions, and sets its input's "emit" as its result.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"time"

	_ "github.com/lib/pq"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

type relayInput struct {
	Emit    json.RawMessage `json:"emit,omitempty"`
	SleepMs int             `json:"sleepMs,omitempty"`
}

type recordInput struct {
	SleepMs int `json:"sleepMs,omitempty"`
}

func main() {
	db, err := sql.Open("postgres", os.Getenv("TESTNODE_DB"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "testnode:", err)
		os.Exit(1)
	}
	record := func(ctx context.Context, job *tasktype.Job, in recordInput) error {
		if _, err := db.ExecContext(ctx,
			`INSERT INTO record_executions (instance_id, task_id, worker, started_at) VALUES ($1, $2, $3, clock_timestamp())`,
			job.Instance.ID, job.Task.ID, job.Instance.WorkerID); err != nil {
			return tasktype.NonRetryable(fmt.Errorf("record start: %w", err))
		}
		select {
		case <-time.After(time.Duration(in.SleepMs) * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		_, err := db.ExecContext(ctx, `UPDATE record_executions SET finished_at = clock_timestamp() WHERE instance_id = $1`, job.Instance.ID)
		return err
	}
	relay := func(ctx context.Context, job *tasktype.Job, in relayInput) error {
		parents, err := json.Marshal(job.Parents)
		if err != nil {
			return tasktype.NonRetryable(err)
		}
		if _, err := db.ExecContext(ctx,
			`INSERT INTO relay_executions (instance_id, task_id, worker, parents) VALUES ($1, $2, $3, $4)`,
			job.Instance.ID, job.Task.ID, job.Instance.WorkerID, string(parents)); err != nil {
			return tasktype.NonRetryable(fmt.Errorf("relay start: %w", err))
		}
		select {
		case <-time.After(time.Duration(in.SleepMs) * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if len(in.Emit) > 0 {
			return job.SetResult(in.Emit)
		}
		return nil
	}
	os.Exit(app.Main(os.Args[1:], app.Options{Register: func(r *tasktype.Registry) {
		tasktype.Register(r, "record", record)
		tasktype.Register(r, "relay.p", relay)
		tasktype.Register(r, "relay.c", relay)
	}}, os.Stderr))
}
