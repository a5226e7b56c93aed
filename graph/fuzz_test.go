package graph_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// FuzzGraphQL sends random documents and random bodies to the real /query
// handler on SQLite: nothing may panic, every response must be JSON, and
// every error must carry an extensions.code. The API role only: no worker
// runs what the fuzzer manages to create (a webhook to anywhere).
//
//	go test -run='^$' -fuzz=FuzzGraphQL -fuzztime=20s ./graph/
func FuzzGraphQL(f *testing.F) {
	s := apptest.Start(f, dbtest.SQLite(f), app.Options{}, func(c *app.Config) {
		c.Roles = []app.Role{app.RoleAPI}
		c.Playground = false
	})
	for _, seed := range []struct {
		query string
		body  string
	}{
		{`{ tasks(first: 5) { totalCount edges { cursor node { id code status input availableActions } } pageInfo { hasNextPage endCursor } } }`, `{"query": "{ taskStats { total } }"}`},
		{`mutation { createTask(input: {type: "noop", title: "t", input: {sleepMs: 1}, idempotencyKey: "k"}) { id status } }`, `{"query": "mutation($i: CreateTaskInput!) { createTask(input: $i) { id } }", "variables": {"i": {"type": "noop"}}}`},
		{`{ task(id: 1) { instances { task { id } } logs(first: 2) { edges { node { message fields } } } } }`, `{"query": "{ node(id: \"4294967296\") { id } }"}`},
		{`query($w: TaskWhereInput) { tasks(where: $w, orderBy: [{field: CREATED_AT}]) { totalCount } }`, `{"query": "{ nodes(ids: [1, 2]) { id } }", "variables": null}`},
		{`mutation { cancelTasks(ids: [1, 2, 3], reason: "x") { id ok error { code } } }`, `{"query": `},
		{`{ a: task(id: 1) { id } b: task(id: 2) { id } ...F } fragment F on Query { taskTypes { name } }`, `{"query": "{ __schema { types { name } } }"}`},
		{`subscription { taskUpdated { id } }`, `{"query": "{ auditLogs(where: {taskID: 1}) { totalCount } }", "operationName": "x"}`},
		{`{ tasks(after: "gaJpZM0D6A", first: 1) { totalCount } }`, `[{"query": "{ taskTypes { name } }"}]`},
		// Where inputs, empty and nested empty: never INTERNAL.
		{`{ tasks(where: {}) { totalCount } countTasks(where: {not: {}}) }`, `{"query": "query($w: TaskWhereInput!) { bulkPreview(action: CANCEL, where: $w) { matched } }", "variables": {"w": {}}}`},
		{`{ auditLogs(where: {or: [{}]}) { totalCount } schedules(where: {and: [{}, {not: {}}]}) { totalCount } }`, `{"query": "subscription { taskUpdated(where: {}) { id } }"}`},
		{`subscription { taskUpdated(where: {not: {}}) { id } }`, `{"query": "{ countTasks(where: {}) }"}`},
	} {
		f.Add(seed.query, []byte(seed.body))
	}
	for name, q := range hostileDocuments() {
		if len(q) < 200<<10 {
			f.Add(q, []byte(`{"query": "{ `+name+` }"}`))
		}
	}
	f.Fuzz(func(t *testing.T, query string, raw []byte) {
		wrapped, err := json.Marshal(map[string]any{"query": query})
		if err != nil {
			return // not valid UTF-8 JSON can carry: the raw body covers bytes
		}
		for _, body := range [][]byte{wrapped, raw} {
			req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(body))
			req.Host = "127.0.0.1"
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			s.App.Handler.ServeHTTP(rec, req)
			var resp struct {
				Errors []struct {
					Message    string         `json:"message"`
					Extensions map[string]any `json:"extensions"`
				} `json:"errors"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
				t.Fatalf("status %d, body is not JSON (%v): %q\nrequest: %q", rec.Code, err, rec.Body.String(), body)
			}
			for _, e := range resp.Errors {
				if c, _ := e.Extensions["code"].(string); c == "" {
					t.Fatalf("error without a code: %+v\nrequest: %q", e, body)
				}
				if c := e.Extensions["code"]; c == "INTERNAL" {
					t.Fatalf("internal error: %+v\nrequest: %q", e, body)
				}
			}
		}
	})
}
