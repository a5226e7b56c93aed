package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/store"
)

// createTasksBatch is how many items one createTasks carries: its most.
const createTasksBatch = 1000

// BenchmarkCreateTasksGraphQL creates tasks on PostgreSQL, 1,000 a call,
// through the served process's /query over loopback (an operator's token,
// the default limits, the rate limiter on with room for the run), and, in
// the same run on the same database, through the engine's CreateMany
// without HTTP and GraphQL, and through the store's insert alone (what
// `taskgraph bench` inserts with), each reporting tasks/s:
//
//	go test -run '^$' -bench CreateTasksGraphQL -count 3 ./internal/app/
//
// Every item is of a declared type with an input schema (validated), has
// an idempotency key of its own (hashed) and an input; every tenth input
// has a password (masked, so sealed). The items go as a variable, as
// clients send them (written into the document, 1,000 items are more than
// the parser's token limit lets through). The answers ask for each item's
// index, created, task id and status, and error.
func BenchmarkCreateTasksGraphQL(b *testing.B) {
	dsn := dbtest.Postgres(b)
	path, tokens := apptest.Tokens(b,
		auth.Viewer{User: "ada", Role: auth.RoleAdmin},
		auth.Viewer{User: "otto", Role: auth.RoleOperator})
	s := apptest.Start(b, dsn, app.Options{}, func(c *app.Config) {
		c.Access.TokenFile = path
		c.Roles = []app.Role{app.RoleAPI} // nothing claims the tasks
		c.Access.RateLimit, c.Access.RateBurst = 1e6, 1_000_000
	})
	r := s.DoAs(b, tokens["ada"], declareType, map[string]any{"in": map[string]any{
		"name": "bench.a", "timeoutSeconds": 60, "retryPolicy": "none",
		"inputSchema": map[string]any{"type": "object", "properties": map[string]any{
			"n": map[string]any{"type": "integer"}, "note": map[string]any{"type": "string"}, "password": map[string]any{"type": "string"},
		}, "required": []string{"n"}},
	}})
	if len(r.Errors) > 0 {
		b.Fatal(r.Errors)
	}
	seq := 0 // keys are never reused: every item creates a task
	item := func(n int) (title, key string, input []byte) {
		seq++
		input = append(strconv.AppendInt(append(input, `{"n":`...), int64(n), 10), `,"note":"row `...)
		input = append(strconv.AppendInt(input, int64(n), 10), '"')
		if n%10 == 0 {
			input = append(strconv.AppendInt(append(input, `,"password":"hunter2-`...), int64(n), 10), '"')
		}
		return "bench " + strconv.Itoa(n), "k-" + strconv.Itoa(seq), append(input, '}')
	}
	const fields = `{ index created task { id status } error { code message } }`
	client := &http.Client{}
	post := func(b *testing.B, body []byte) {
		req, err := http.NewRequest(http.MethodPost, s.URL+"/query", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tokens["otto"])
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		var out struct {
			Data struct {
				CreateTasks []struct {
					Created bool
					Error   *struct{ Code, Message string }
				}
			}
			Errors []apptest.Error
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			b.Fatalf("%d: %s", resp.StatusCode, raw)
		}
		if len(out.Errors) > 0 || len(out.Data.CreateTasks) != createTasksBatch {
			b.Fatalf("%d: %.500s", resp.StatusCode, raw)
		}
		for _, c := range out.Data.CreateTasks {
			if c.Error != nil || !c.Created {
				b.Fatalf("an item: %+v", c)
			}
		}
	}
	b.Run("GraphQL", func(b *testing.B) {
		// The body is written by hand: the client shares the cores with
		// the server, and json.Marshal of maps cost it a tenth of them.
		var body []byte
		start := time.Now()
		for b.Loop() {
			body = append(body[:0], `{"query":"mutation($in: [CreateTaskInput!]!) { createTasks(inputs: $in) `+fields+` }","variables":{"in":[`...)
			for i := range createTasksBatch {
				title, key, input := item(i)
				if i > 0 {
					body = append(body, ',')
				}
				body = append(body, `{"type":"bench.a","title":"`+title+`","idempotencyKey":"`+key+`","input":`...)
				body = append(append(body, input...), '}')
			}
			body = append(body, "]}}"...)
			post(b, body)
		}
		b.ReportMetric(float64(b.N*createTasksBatch)/time.Since(start).Seconds(), "tasks/s")
	})
	b.Run("Engine", func(b *testing.B) {
		ctx := auth.NewContext(context.Background(), auth.Viewer{User: "otto", Role: auth.RoleOperator, Source: auth.SourceToken})
		start := time.Now()
		for b.Loop() {
			reqs := make([]engine.CreateRequest, createTasksBatch)
			for i := range reqs {
				title, key, input := item(i)
				reqs[i] = engine.CreateRequest{Type: "bench.a", Title: title, IdempotencyKey: &key, Input: input}
			}
			res, err := s.App.Engine.CreateMany(ctx, reqs)
			if err != nil {
				b.Fatal(err)
			}
			if res[0].Err != nil {
				b.Fatal(res[0].Err)
			}
		}
		b.ReportMetric(float64(b.N*createTasksBatch)/time.Since(start).Seconds(), "tasks/s")
	})
	b.Run("StoreInsert", func(b *testing.B) {
		sys := auth.NewSystemContext(context.Background())
		tasks := make([]store.NewTask, createTasksBatch)
		for i := range tasks {
			tasks[i] = store.NewTask{Type: "bench.a", Owner: "bench", Input: json.RawMessage(`{}`), InputHash: "-",
				TimeoutSeconds: 60, RetryPolicy: "none", MaxAttempts: 1}
		}
		start := time.Now()
		for b.Loop() {
			if _, err := s.App.Store.CreateTasks(sys, tasks); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*createTasksBatch)/time.Since(start).Seconds(), "tasks/s")
	})
}
