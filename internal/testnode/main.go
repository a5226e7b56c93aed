// Command testnode is a taskgraph server with one more task type, "record",
// for the multi-process tests: every execution records itself in the table
// record_executions (instance_id is its primary key), so that a test can
// count executions, see which node ran what, and check that no instance ran
// twice and no task ran twice at the same time.
package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"

	_ "github.com/lib/pq"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

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
	os.Exit(app.Main(os.Args[1:], app.Options{Register: func(r *tasktype.Registry) {
		tasktype.Register(r, "record", record)
	}}, os.Stderr))
}
