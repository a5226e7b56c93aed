package graph_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/99designs/gqlgen/client"
	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

type taskView struct {
	ID               string   `json:"id"`
	Code             string   `json:"code"`
	Status           string   `json:"status"`
	Version          int      `json:"version"`
	CancelRequested  bool     `json:"cancelRequested"`
	AvailableActions []string `json:"availableActions"`
}

const createNoop = `mutation($in: CreateTaskInput!) { createTask(input: $in) { id code status version availableActions } }`

func create(t *testing.T, s *apptest.Server, in map[string]any) taskView {
	t.Helper()
	var out struct{ CreateTask taskView }
	s.Query(t, createNoop, map[string]any{"in": in}, &out)
	return out.CreateTask
}

func dialGTWS(t *testing.T, s *apptest.Server) *apptest.WS { return s.DialWS(t, nil) }

type wsMsg = apptest.WSMessage

func statusOf(t *testing.T, payload json.RawMessage) string {
	t.Helper()
	var p struct {
		Data struct {
			TaskUpdated taskView `json:"taskUpdated"`
		} `json:"data"`
		Errors []any `json:"errors"`
	}
	require.NoError(t, json.Unmarshal(payload, &p))
	require.Empty(t, p.Errors)
	return p.Data.TaskUpdated.Status
}

// waitNoSubscribers waits until the broker has released every subscription.
func waitNoSubscribers(t *testing.T, s *apptest.Server) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.App.Broker.Stats().TaskSubscribers > 0 {
		require.True(t, time.Now().Before(deadline), "subscriptions not released: %+v", s.App.Broker.Stats())
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSubscriptions(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("GraphQLTransportWSSeesEveryTransitionInOrder", func(t *testing.T) {
			t.Parallel()
			s := apptest.Start(t, d.DSN(t), app.Options{})
			c := dialGTWS(t, s)
			c.Subscribe("1", `subscription { taskUpdated(where: {type: "noop"}) { id status version } }`, nil)
			s.WaitSubscribers(t, 1)
			created := create(t, s, map[string]any{"type": "noop", "title": "watched"})
			var seen []string
			for len(seen) == 0 || seen[len(seen)-1] != "SUCCESS" {
				m := c.Next()
				require.Equal(t, "next", m.Type, "%s", m.Payload)
				seen = append(seen, statusOf(t, m.Payload))
			}
			require.Equal(t, []string{"PENDING", "EXECUTING", "SUCCESS"}, seen, "task %s", created.ID)
			c.Send(apptest.WSMessage{Type: "complete", ID: "1"})
			require.NoError(t, c.Conn.Close())
			waitNoSubscribers(t, s)
		})
		t.Run("WithAnIDTheCurrentStateComesFirst", func(t *testing.T) {
			t.Parallel()
			s := apptest.Start(t, d.DSN(t), app.Options{})
			tk := create(t, s, map[string]any{"type": "noop", "input": map[string]any{"sleepMs": 60000}})
			c := dialGTWS(t, s)
			defer c.Conn.Close()
			c.Subscribe("a", `subscription($id: ID!) { taskUpdated(id: $id) { id status cancelRequested } }`, map[string]any{"id": tk.ID})
			first := statusOf(t, c.Next().Payload)
			require.Contains(t, []string{"PENDING", "EXECUTING"}, first)
			var out struct{ CancelTask taskView }
			s.Query(t, `mutation($id: ID!) { cancelTask(id: $id, reason: "test") { status } }`, map[string]any{"id": tk.ID}, &out)
			last := first
			for last != "CANCELLED" {
				last = statusOf(t, c.Next().Payload)
			}
		})
		t.Run("LegacyGraphQLWSIsServedToo", func(t *testing.T) {
			t.Parallel()
			s := apptest.Start(t, d.DSN(t), app.Options{})
			tk := create(t, s, map[string]any{"type": "noop", "input": map[string]any{"sleepMs": 60000}})
			gc := client.New(s.App.Handler, client.Path("/query"))
			sub := gc.Websocket(fmt.Sprintf(`subscription { taskUpdated(id: %s) { status } }`, tk.ID))
			var resp struct{ TaskUpdated taskView }
			require.NoError(t, sub.Next(&resp))
			require.Contains(t, []string{"PENDING", "EXECUTING"}, resp.TaskUpdated.Status)
			require.NoError(t, sub.Close())
			waitNoSubscribers(t, s)
		})
		t.Run("SSEStreamsTheSameChanges", func(t *testing.T) {
			t.Parallel()
			s := apptest.Start(t, d.DSN(t), app.Options{})
			ctx, cancel := context.WithCancel(context.Background())
			body, _ := json.Marshal(map[string]any{"query": `subscription { taskUpdated(where: {type: "noop"}) { status } }`})
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/query", strings.NewReader(string(body)))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			require.Equal(t, "text/event-stream", strings.Split(resp.Header.Get("Content-Type"), ";")[0])
			events := make(chan string, 16)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer close(events)
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
						events <- data
					}
				}
			}()
			s.WaitSubscribers(t, 1)
			create(t, s, map[string]any{"type": "noop"})
			var seen []string
			for len(seen) < 3 {
				select {
				case data, ok := <-events:
					require.True(t, ok, "stream ended early")
					var p struct {
						Data struct{ TaskUpdated taskView } `json:"data"`
					}
					require.NoError(t, json.Unmarshal([]byte(data), &p))
					seen = append(seen, p.Data.TaskUpdated.Status)
				case <-time.After(20 * time.Second):
					t.Fatalf("timed out; saw %v", seen)
				}
			}
			require.Equal(t, []string{"PENDING", "EXECUTING", "SUCCESS"}, seen)
			cancel()
			resp.Body.Close()
			wg.Wait()
			waitNoSubscribers(t, s)
		})
		t.Run("LogTail", func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			s := apptest.Start(t, d.DSN(t), app.Options{Register: func(r *tasktype.Registry) {
				tasktype.Register(r, "chatty", func(ctx context.Context, job *tasktype.Job, _ struct{}) error {
					<-release
					job.Info("line one")
					job.Warn("line two", "n", 2)
					return nil
				})
			}})
			tk := create(t, s, map[string]any{"type": "chatty"})
			c := dialGTWS(t, s)
			defer c.Conn.Close()
			c.Subscribe("l", `subscription($id: ID!) { taskLogAppended(taskId: $id) { level message fields } }`, map[string]any{"id": tk.ID})
			// Make sure the subscription is in place before the lines exist.
			deadline := time.Now().Add(10 * time.Second)
			for s.App.Broker.Stats().LogSubscribers < 1 {
				require.True(t, time.Now().Before(deadline))
				time.Sleep(5 * time.Millisecond)
			}
			close(release)
			var got []string
			for len(got) < 2 {
				m := c.Next()
				var p struct {
					Data struct {
						TaskLogAppended struct{ Level, Message string } `json:"taskLogAppended"`
					} `json:"data"`
				}
				require.NoError(t, json.Unmarshal(m.Payload, &p))
				got = append(got, p.Data.TaskLogAppended.Level+" "+p.Data.TaskLogAppended.Message)
			}
			require.Equal(t, []string{"INFO line one", "WARN line two"}, got)
		})
	})
}

func TestAPIErrors(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := apptest.Start(t, dsn, app.Options{})
		countTasks := func() int {
			var out struct{ Tasks struct{ TotalCount int } }
			s.Query(t, `{ tasks { totalCount } }`, nil, &out)
			return out.Tasks.TotalCount
		}
		done := create(t, s, map[string]any{"type": "noop"})
		var waited struct{ Task taskView }
		apptest.Eventually(t, 30*time.Second, func() (bool, string) {
			s.Query(t, `query($id: ID!) { task(id: $id) { status } }`, map[string]any{"id": done.ID}, &waited)
			return waited.Task.Status == "SUCCESS", "the noop task is " + waited.Task.Status
		})
		before := countTasks()

		cases := []struct {
			name, query string
			vars        map[string]any
			code        string
			contains    string
		}{
			{"MalformedQuery", `{ tasks(first: 5 { id }`, nil, "GRAPHQL_PARSE_FAILED", "Expected"},
			{"UnknownField", `{ tasks { nope } }`, nil, "GRAPHQL_VALIDATION_FAILED", "nope"},
			{"WrongArgumentType", `mutation { createTask(input: {type: 5}) { id } }`, nil, "GRAPHQL_VALIDATION_FAILED", "String"},
			{"WrongVariableType", `mutation($p: Int) { createTask(input: {type: "noop", priority: $p}) { id } }`, map[string]any{"p": "high"}, "GRAPHQL_VALIDATION_FAILED", "Int"},
			{"UnknownTaskID", `{ task(id: 987654) { id } }`, nil, "NOT_FOUND", "987654"},
			{"UnknownNode", `{ node(id: 987654) { id } }`, nil, "NOT_FOUND", "987654"},
			{"CancelUnknownTask", `mutation { cancelTask(id: 987654) { id } }`, nil, "NOT_FOUND", "987654"},
			{"UnknownTaskType", `mutation { createTask(input: {type: "rocket"}) { id } }`, nil, "VALIDATION", `unknown task type "rocket"`},
			{"InputFailsTheTypesSchema", `mutation { createTask(input: {type: "noop", input: {sleepMs: "soon"}}) { id } }`, nil, "VALIDATION", "sleepMs"},
			{"UnknownInputField", `mutation { createTask(input: {type: "webhook", input: {url: "http://x.test", colour: "red"}}) { id } }`, nil, "VALIDATION", "colour"},
			{"PriorityOutOfRange", `mutation { createTask(input: {type: "noop", priority: 1000}) { id } }`, nil, "VALIDATION", "priority"},
			{"UnknownRetryPolicy", `mutation { createTask(input: {type: "noop", retryPolicy: "forever"}) { id } }`, nil, "VALIDATION", "forever"},
			{"TooManyAttempts", `mutation { createTask(input: {type: "noop", maxAttempts: 1000}) { id } }`, nil, "VALIDATION", "maxAttempts"},
			{"PageTooLarge", `{ tasks(first: 1000) { totalCount } }`, nil, "LIMIT_EXCEEDED", "500"},
			{"NotAnID", `{ task(id: "abc") { id } }`, nil, "VALIDATION", `"abc" is not an ID: an ID is a whole number`},
			{"NoSuchFile", `mutation($id: ID!) { artifactDownloadUrl(taskId: $id, format: CSV) { url } }`, map[string]any{"id": done.ID}, "NOT_FOUND", " has no ERROR_REPORT file in CSV (yet)"},
			{"CancelFinishedTask", `mutation($id: ID!) { cancelTask(id: $id) { id } }`, map[string]any{"id": done.ID}, "INVALID_TRANSITION", "SUCCESS to CANCELLED"},
			{"RetrySucceededTask", `mutation($id: ID!) { retryTask(id: $id) { id } }`, map[string]any{"id": done.ID}, "INVALID_TRANSITION", "SUCCESS to RETRY_PENDING"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := s.Do(t, tc.query, tc.vars)
				require.NotEmpty(t, r.Errors, "%s", r.Data)
				require.Equal(t, tc.code, r.Errors[0].Code(), "%+v", r.Errors[0])
				require.Contains(t, r.Errors[0].Message, tc.contains)
			})
		}
		t.Run("NotJSON", func(t *testing.T) {
			r := s.DoRaw(t, "application/json", []byte(`{"query": `))
			require.NotEmpty(t, r.Errors)
		})
		require.Equal(t, before, countTasks(), "bad requests change nothing")
	})
}

func TestMutations(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := apptest.Start(t, dsn, app.Options{})
		t.Run("IdempotentCreate", func(t *testing.T) {
			a := create(t, s, map[string]any{"type": "noop", "idempotencyKey": "k-1", "input": map[string]any{"note": "x"}})
			b := create(t, s, map[string]any{"type": "noop", "idempotencyKey": "k-1", "input": map[string]any{"note": "x"}})
			require.Equal(t, a.ID, b.ID)
			r := s.Do(t, createNoop, map[string]any{"in": map[string]any{"type": "noop", "idempotencyKey": "k-1", "input": map[string]any{"note": "y"}}})
			require.Len(t, r.Errors, 1)
			require.Equal(t, "CONFLICT", r.Errors[0].Code())
			require.Contains(t, r.Errors[0].Message, a.Code)
		})
		t.Run("BulkActionsReportEachID", func(t *testing.T) {
			slow := create(t, s, map[string]any{"type": "noop", "input": map[string]any{"sleepMs": 60000}, "runAt": time.Now().Add(time.Hour).Format(time.RFC3339)})
			var out struct {
				CancelTasks []struct {
					ID    string
					Ok    bool
					Task  *taskView
					Error *struct{ Code, Message string }
				}
			}
			s.Query(t, `mutation($ids: [ID!]!) { cancelTasks(ids: $ids, reason: "bulk") { id ok task { status } error { code message } } }`,
				map[string]any{"ids": []string{slow.ID, "987654"}}, &out)
			require.Len(t, out.CancelTasks, 2)
			require.True(t, out.CancelTasks[0].Ok)
			require.Equal(t, "CANCELLED", out.CancelTasks[0].Task.Status)
			require.False(t, out.CancelTasks[1].Ok)
			require.Equal(t, "NOT_FOUND", out.CancelTasks[1].Error.Code)
		})
		t.Run("BulkCreateAnswersEachItem", func(t *testing.T) {
			first := create(t, s, map[string]any{"type": "noop", "idempotencyKey": "bulk-1", "input": map[string]any{"note": "a"}})
			later := time.Now().Add(time.Hour).Format(time.RFC3339)
			// Aliased, as a script batching its creates would be.
			var out struct {
				A []struct {
					Index   int
					Created bool
					Task    *struct{ ID, Status, Title string }
					Error   *struct{ Code, Message string }
				}
			}
			s.Query(t, `mutation($in: [CreateTaskInput!]!) { a: createTasks(inputs: $in) { index created task { id status title } error { code message } } }`,
				map[string]any{"in": []map[string]any{
					{"type": "noop", "title": "one", "runAt": later},
					{"type": "nope"},
					{"type": "noop", "idempotencyKey": "bulk-1", "input": map[string]any{"note": "a"}},
					{"type": "noop", "idempotencyKey": "bulk-1", "input": map[string]any{"note": "b"}},
					{"type": "noop", "idempotencyKey": "bulk-2", "title": "twice", "runAt": later},
					{"type": "noop", "idempotencyKey": "bulk-2", "title": "twice", "runAt": later},
					{"type": "noop", "priority": 1000},
				}}, &out)
			r := out.A
			require.Len(t, r, 7)
			for i, item := range r {
				require.Equal(t, i, item.Index)
			}
			require.True(t, r[0].Created)
			require.Equal(t, "PENDING", r[0].Task.Status)
			require.Equal(t, "one", r[0].Task.Title)
			require.Equal(t, "VALIDATION", r[1].Error.Code, "an unknown type fails its item only")
			require.Nil(t, r[1].Task)
			require.False(t, r[2].Created, "a key used before answers with the task it made")
			require.Equal(t, first.ID, r[2].Task.ID)
			require.Equal(t, "CONFLICT", r[3].Error.Code)
			require.True(t, r[4].Created)
			require.False(t, r[5].Created, "one key twice in one call is one task")
			require.Equal(t, r[4].Task.ID, r[5].Task.ID)
			require.Equal(t, "VALIDATION", r[6].Error.Code)
			require.Contains(t, r[6].Error.Message, "priority")
		})
		t.Run("ABulkCreateOfManyAnswersEachItemInOrder", func(t *testing.T) {
			// Large enough to be prepared in parts at once (one per core):
			// each item is still answered at its place, its refusal its own.
			const n = 300
			later := time.Now().Add(time.Hour).Format(time.RFC3339)
			in := make([]map[string]any, n)
			for i := range in {
				in[i] = map[string]any{"type": "noop", "title": fmt.Sprintf("item %d", i), "runAt": later,
					"input": map[string]any{"note": fmt.Sprintf("phone 138%08d", i)}}
				if i%7 == 3 {
					in[i]["priority"] = 1000
				}
			}
			var out struct {
				CreateTasks []struct {
					Index int
					Task  *struct{ Title string }
					Error *struct{ Code string }
				}
			}
			s.Query(t, `mutation($in: [CreateTaskInput!]!) { createTasks(inputs: $in) { index task { title } error { code } } }`, map[string]any{"in": in}, &out)
			require.Len(t, out.CreateTasks, n)
			for i, item := range out.CreateTasks {
				require.Equal(t, i, item.Index)
				if i%7 == 3 {
					require.Nil(t, item.Task, "item %d", i)
					require.Equal(t, "VALIDATION", item.Error.Code, "item %d", i)
					continue
				}
				require.Nil(t, item.Error, "item %d", i)
				require.Equal(t, fmt.Sprintf("item %d", i), item.Task.Title)
			}
		})
		t.Run("SensitiveInputIsMaskedInTheAPI", func(t *testing.T) {
			var out struct {
				CreateTask struct{ Input map[string]any }
			}
			s.Query(t, fmt.Sprintf(`mutation { createTask(input: {type: "webhook", runAt: "%s", input: {url: "https://example.test/hook?token=abc", headers: {Authorization: "Bearer s3cr3t"}, body: {phone: "13812345678", idNo: "11010519491231002X"}}}) { input } }`, time.Now().Add(24*time.Hour).Format(time.RFC3339)), nil, &out)
			raw, _ := json.Marshal(out.CreateTask.Input)
			for _, secret := range []string{"13812345678", "11010519491231002X", "s3cr3t", "token=abc"} {
				require.NotContains(t, string(raw), secret)
			}
		})
		t.Run("StatsAndTypes", func(t *testing.T) {
			var out struct {
				TaskStats struct {
					Total    int
					ByStatus []struct {
						Status string
						Count  int
					}
				}
				TaskTypes []struct {
					Name        string
					InputSchema map[string]any
				}
			}
			s.Query(t, `{ taskStats { total byStatus { status count } } taskTypes { name inputSchema } }`, nil, &out)
			sum := 0
			for _, c := range out.TaskStats.ByStatus {
				sum += c.Count
			}
			require.Equal(t, out.TaskStats.Total, sum)
			require.Len(t, out.TaskStats.ByStatus, len(lifecycle.AllStatuses), "one count per state")
			names := []string{}
			for _, ty := range out.TaskTypes {
				names = append(names, ty.Name)
				require.Equal(t, "object", ty.InputSchema["type"])
			}
			require.Equal(t, []string{"export", "import", "noop", "report", "webhook"}, names)
		})
		t.Run("FilterSearchAndPage", func(t *testing.T) {
			for i := range 5 {
				create(t, s, map[string]any{"type": "noop", "title": fmt.Sprintf("Quarterly report %d", i), "bizId": fmt.Sprintf("Q-%d", i)})
			}
			var out struct {
				Tasks struct {
					TotalCount int
					PageInfo   struct {
						HasNextPage bool
						EndCursor   string
					}
					Edges []struct{ Node struct{ Title string } }
				}
			}
			s.Query(t, `{ tasks(first: 2, where: {search: "quarterly"}, orderBy: [{field: CREATED_AT, direction: DESC}]) { totalCount pageInfo { hasNextPage endCursor } edges { node { title } } } }`, nil, &out)
			require.Equal(t, 5, out.Tasks.TotalCount)
			require.Len(t, out.Tasks.Edges, 2)
			require.True(t, out.Tasks.PageInfo.HasNextPage)
			require.Equal(t, "Quarterly report 4", out.Tasks.Edges[0].Node.Title)
		})
	})
}

func TestSubscriptionPayloadsResolveTheirEdges(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		s := apptest.Start(t, d.DSN(t), app.Options{})
		c := dialGTWS(t, s)
		defer c.Conn.Close()
		c.Subscribe("1", `subscription { taskUpdated(where: {type: "noop"}) { status instances { instanceNo status } logs { totalCount } } }`, nil)
		s.WaitSubscribers(t, 1)
		create(t, s, map[string]any{"type": "noop"})
		deadline := time.Now().Add(30 * time.Second)
		for {
			require.True(t, time.Now().Before(deadline), "the task did not reach SUCCESS within 30 s")
			m := c.Next()
			require.Equal(t, "next", m.Type)
			var p struct {
				Data struct {
					TaskUpdated struct {
						Status    string
						Instances []struct{ Status string }
					}
				}
				Errors []apptest.Error
			}
			require.NoError(t, json.Unmarshal(m.Payload, &p))
			require.Empty(t, p.Errors, "edges of a published task resolve after its transaction")
			require.Len(t, p.Data.TaskUpdated.Instances, 1)
			if p.Data.TaskUpdated.Status == "SUCCESS" {
				return
			}
		}
	})
}
