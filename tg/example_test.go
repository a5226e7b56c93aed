package tg_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/taskgraph/taskgraph/tg"
)

// quiet is a logger for the examples: what they print is theirs.
var quiet = slog.New(slog.DiscardHandler)

type Greeting struct {
	Name string `json:"name" jsonschema:"minLength=1"`
}

type Greeted struct {
	Text string `json:"text"`
}

// A typed handler on an embedded database: the task's input is decoded
// into Greeting (and checked against its schema), and what the handler
// returns is the task's result.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "tg-example-")
	defer os.RemoveAll(dir)

	c, err := tg.New(ctx, tg.Config{DataDir: dir, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	greet, err := tg.Register(c, "greet", func(ctx context.Context, job *tg.Job, in Greeting) (Greeted, error) {
		job.Info("greeting", "name", in.Name)
		return Greeted{Text: "hello, " + in.Name}, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer c.Stop(ctx)

	task, err := greet.Create(ctx, Greeting{Name: "Ada"}, tg.Title("first"))
	if err != nil {
		log.Fatal(err)
	}
	done, err := c.Wait(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	out, err := greet.Result(done)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.Status, out.Text)

	// An input its schema refuses creates nothing.
	_, err = greet.Create(ctx, Greeting{})
	fmt.Println(err)
	// Output:
	// SUCCESS hello, Ada
	// taskgraph: invalid request: input: at /name: minLength: got 0, want 1
}

// A task created in the caller's transaction, beside the business row it
// is about: it exists, and runs, only if the transaction commits.
func ExampleClient_CreateTx() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "tg-example-")
	defer os.RemoveAll(dir)
	c, err := tg.New(ctx, tg.Config{DataDir: dir, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	greet, _ := tg.Register(c, "greet", func(ctx context.Context, job *tg.Job, in Greeting) (Greeted, error) {
		return Greeted{Text: "hello, " + in.Name}, nil
	})
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer c.Stop(ctx)
	db := c.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE customers (name TEXT PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}
	signUp := func(name string, commit bool) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO customers (name) VALUES (?)`, name); err != nil {
			log.Fatal(err)
		}
		task, err := greet.CreateTx(ctx, tx, Greeting{Name: name}, tg.BizID(name))
		if err != nil {
			log.Fatal(err)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				log.Fatal(err)
			}
			done, _ := c.Wait(ctx, task.ID)
			out, _ := greet.Result(done)
			fmt.Println(out.Text)
		}
	}
	signUp("Ada", true)
	signUp("Bob", false) // rolled back: no customer, no task
	var customers, tasks int
	_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM customers`).Scan(&customers)
	_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks`).Scan(&tasks)
	fmt.Println(customers, "customer,", tasks, "task")
	// Output:
	// hello, Ada
	// 1 customer, 1 task
}

// Settings the server takes as flags or TASKGRAPH_ variables, read the
// server's way.
func ExampleConfigFromEnv() {
	env := map[string]string{"TASKGRAPH_WORKERS": "16", "TASKGRAPH_RETENTION": "720h"}
	cfg, err := tg.ConfigFromEnv([]string{"--db", filepath.Join("data", "app.db")}, func(k string) string { return env[k] })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cfg.Database, cfg.Workers, cfg.Settings["retention"])

	_, err = tg.ConfigFromEnv([]string{"--workers", "lots"}, func(string) string { return "" })
	fmt.Println(strings.TrimPrefix(err.Error(), "taskgraph: configuration: "))
	// Output:
	// data/app.db 16 720h
	// --workers: "lots" is not a whole number between 1 and 10000
}

// A cleanup step that runs whatever its parents did (RUN_ANYWAY), and is
// told how each ended: here the export failed, and the cleanup reads its
// error; the report, which waited for the export's success, was cancelled.
func ExampleJob_ParentOutcomes() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "tg-example-")
	defer os.RemoveAll(dir)

	c, err := tg.New(ctx, tg.Config{DataDir: dir, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	_, err = tg.Register(c, "nightly.export", func(ctx context.Context, job *tg.Job, in struct{}) (struct{}, error) {
		return struct{}{}, tg.NonRetryable(fmt.Errorf("disk full"))
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = tg.Register(c, "nightly.report", func(ctx context.Context, job *tg.Job, in struct{}) (struct{}, error) {
		return struct{}{}, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	cleanup, err := tg.Register(c, "nightly.cleanup", func(ctx context.Context, job *tg.Job, in struct{}) (string, error) {
		export, report := job.ParentOutcomes()["export"], job.ParentOutcomes()["report"]
		return fmt.Sprintf("export %s (%s); report %s", export.Status, export.Error, report.Status), nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer c.Stop(ctx)

	wf, err := c.CreateWorkflow(ctx, "", "nightly", []tg.Step{
		{Key: "export", Type: "nightly.export"},
		{Key: "report", Type: "nightly.report", DependsOn: []string{"export"}},
		{Key: "cleanup", Type: "nightly.cleanup", DependsOn: []string{"export", "report"}, OnParentFailure: "RUN_ANYWAY"},
	})
	if err != nil {
		log.Fatal(err)
	}
	done, err := c.Wait(ctx, wf.Steps["cleanup"])
	if err != nil {
		log.Fatal(err)
	}
	told, err := cleanup.Result(done)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.Status)
	fmt.Println(told)
	// Output:
	// SUCCESS
	// export FAILED (disk full); report CANCELLED
}
