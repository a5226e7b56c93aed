//go:build long

package reliability

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// syncBuffer collects a node's log lines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// count is how many log lines contain s.
func (s *syncBuffer) count(sub string) int { return strings.Count(s.String(), sub) }

// recordInput is the input of the record task type.
type recordInput struct {
	SleepMs int `json:"sleepMs,omitempty"`
}

// recordType registers "record": every execution inserts itself into
// record_executions (instance_id is its primary key) when it starts and
// marks when it finished, so that a test can tell which tasks ran, whether
// an instance ran twice, and whether two executions of a task overlapped.
func recordType(db *sql.DB) func(r *tasktype.Registry) {
	return func(r *tasktype.Registry) {
		tasktype.Register(r, "record", func(ctx context.Context, job *tasktype.Job, in recordInput) error {
			if _, err := db.ExecContext(ctx,
				`INSERT INTO record_executions (instance_id, task_id, worker, started_at) VALUES ($1, $2, $3, clock_timestamp())`,
				job.Instance.ID, job.Task.ID, job.Instance.WorkerID); err != nil {
				if strings.Contains(err.Error(), "duplicate key") {
					return tasktype.NonRetryable(fmt.Errorf("record start: instance ran twice: %w", err))
				}
				return fmt.Errorf("record start: %w", err)
			}
			select {
			case <-time.After(time.Duration(in.SleepMs) * time.Millisecond):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			_, err := db.ExecContext(ctx, `UPDATE record_executions SET finished_at = clock_timestamp() WHERE instance_id = $1`, job.Instance.ID)
			return err
		})
	}
}

const recordTable = `CREATE TABLE record_executions (instance_id BIGINT PRIMARY KEY, task_id BIGINT NOT NULL, worker TEXT NOT NULL, started_at TIMESTAMPTZ NOT NULL, finished_at TIMESTAMPTZ)`

// reliablePolicy retries quickly and often: an execution failed by the
// outage a test causes is retried soon after it, within the test's time.
var reliablePolicy = tasktype.RetryPolicy{Name: "reliable", MaxAttempts: 20, Backoff: []time.Duration{200 * time.Millisecond}, ResourceBackoff: []time.Duration{time.Second}}

// nodeOptions are the options of a node running record tasks, logging
// into logs.
func nodeOptions(db *sql.DB, logs *syncBuffer) app.Options {
	return app.Options{
		Register: recordType(db),
		Policies: append(tasktype.DefaultPolicies(), reliablePolicy),
		Logger:   slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
}

// recordTasks creates n record tasks titled prefix-i in one batch.
func recordTasks(t *testing.T, s *apptest.Server, prefix string, n int) {
	t.Helper()
	batch := make([]store.NewTask, n)
	for i := range batch {
		batch[i] = store.NewTask{Type: "record", Title: fmt.Sprintf("%s%d", prefix, i), Owner: "local", OwnerRole: "admin",
			Input: json.RawMessage(fmt.Sprintf(`{"sleepMs":%d}`, 5+i%40)), InputHash: "-", TimeoutSeconds: 60,
			RetryPolicy: reliablePolicy.Name, MaxAttempts: reliablePolicy.MaxAttempts}
	}
	res, err := s.App.Store.CreateTasks(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}

// counter runs counting queries against the database.
type counter struct {
	t  *testing.T
	db *sql.DB
}

func (c counter) n(q string, args ...any) int {
	c.t.Helper()
	n, err := c.try(q, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// try is n for a condition of waitFor: a pooled connection the database
// dropped (a restart, a terminated backend) fails one query, and the pool
// replaces it for the next.
func (c counter) try(q string, args ...any) (int, error) {
	var n int
	if err := c.db.QueryRow(q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s: %w", q, err)
	}
	return n, nil
}

// waitFor polls cond (which may fail while the database is down) until it
// holds.
func waitFor(t *testing.T, what string, within time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (last error: %v)", what, within, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkRecordRun asserts what every record run must satisfy: every task of
// the run (title prefix) SUCCESS with one SUCCESS instance that ran to its
// end, no instance run twice, no two executions of a task overlapping,
// nothing left EXECUTING.
func checkRecordRun(t *testing.T, db *sql.DB, prefix string, total int) {
	t.Helper()
	c := counter{t, db}
	like := prefix + "%"
	if n := c.n(`SELECT count(*) FROM tasks WHERE title LIKE $1 AND status = 'SUCCESS'`, like); n != total {
		t.Errorf("%d of %d tasks SUCCESS", n, total)
	}
	if n := c.n(`SELECT count(*) FROM task_instances i JOIN tasks t ON t.id = i.task_id WHERE t.title LIKE $1 AND i.status = 'SUCCESS'`, like); n != total {
		t.Errorf("%d SUCCESS instances, want one per task", n)
	}
	if n := c.n(`SELECT count(*) FROM task_instances WHERE last_error LIKE '%ran twice%'`); n != 0 {
		t.Errorf("%d instances ran twice", n)
	}
	if n := c.n(`SELECT count(*) FROM task_instances i JOIN record_executions r ON r.instance_id = i.id JOIN tasks t ON t.id = i.task_id
WHERE t.title LIKE $1 AND i.status = 'SUCCESS' AND r.finished_at IS NOT NULL`, like); n != total {
		t.Errorf("%d SUCCESS instances with a finished execution record, want %d", n, total)
	}
	if n := c.n(`
SELECT count(*) FROM record_executions a
JOIN record_executions b ON a.task_id = b.task_id AND a.instance_id < b.instance_id
JOIN task_instances ia ON ia.id = a.instance_id
WHERE b.started_at < COALESCE(a.finished_at, ia.finished_at)`); n != 0 {
		t.Errorf("%d pairs of executions of one task overlapped", n)
	}
	if n := c.n(`SELECT count(*) FROM task_instances WHERE status = 'EXECUTING'`); n != 0 {
		t.Errorf("%d instances left EXECUTING", n)
	}
}

// finalStates reads the final state of every task of a run.
func finalStates(t *testing.T, db *sql.DB, prefix string) map[string]seenTask {
	t.Helper()
	rows, err := db.Query(`SELECT id, status, version FROM tasks WHERE title LIKE $1`, prefix+"%")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]seenTask{}
	for rows.Next() {
		var id int
		var s seenTask
		if err := rows.Scan(&id, &s.Status, &s.Version); err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprint(id)] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// postJSON posts a GraphQL query and decodes the response into out.
func postJSON(ctx context.Context, url, query string, vars map[string]any, out any) error {
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("response %d: %s", resp.StatusCode, raw)
	}
	return nil
}

// get returns the status of GET url.
// readyz answers /readyz's status, and its reason as the error when it is
// not ready (so that a wait that times out says why).
func readyz(base string) (int, error) {
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("%d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return resp.StatusCode, nil
}

func get(url string) (int, http.Header, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header, nil
}
