package exporter_test

import (
	"encoding/csv"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// The audit trail exports to CSV through the export task type: admins
// only (the rule of the auditLogs query), their tenant's records, filtered,
// with sensitive values masked.
func TestAuditExport(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		path, tok := apptest.Tokens(t,
			auth.Viewer{User: "root", Role: auth.RoleAdmin},
			auth.Viewer{User: "alice", Role: auth.RoleOperator},
			auth.Viewer{User: "carol", Role: auth.RoleAdmin, Tenant: "t2"},
		)
		s := apptest.Start(t, dsn, app.Options{}, func(c *app.Config) { c.Access.TokenFile = path })
		create := func(who string, in map[string]any) apptest.Response {
			return s.DoAs(t, tok[who], `mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`, map[string]any{"in": in})
		}
		idOf := func(r apptest.Response) string {
			require.Empty(t, r.Errors)
			var out struct{ CreateTask struct{ ID string } }
			require.NoError(t, jsonUnmarshal(r.Data, &out))
			return out.CreateTask.ID
		}
		finished := func(who, id string) (status, lastError string) {
			var out struct {
				Task struct{ Status, LastError string }
			}
			apptest.Eventually(t, 60*time.Second, func() (bool, string) {
				s.QueryAs(t, tok[who], `query($id: ID!) { task(id: $id) { status lastError } }`, map[string]any{"id": id}, &out)
				return out.Task.Status == "SUCCESS" || out.Task.Status == "FAILED", out.Task.Status
			})
			return out.Task.Status, out.Task.LastError
		}
		download := func(who, id string) [][]string {
			var out struct{ ArtifactDownloadURL struct{ URL string } }
			s.QueryAs(t, tok[who], `mutation($id: ID!) { artifactDownloadUrl(taskId: $id, kind: EXPORT) { url } }`, map[string]any{"id": id}, &out)
			resp, err := http.Get(out.ArtifactDownloadURL.URL)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NotContains(t, string(body), "13800138000", "masked")
			rows, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(string(body), "\ufeff"))).ReadAll()
			require.NoError(t, err)
			return rows
		}

		aliceTask := idOf(create("alice", map[string]any{"type": "noop", "title": "call 13800138000"}))
		r := create("alice", map[string]any{"type": "rocket"})
		require.NotEmpty(t, r.Errors, "a failed create is audited too")
		idOf(create("carol", map[string]any{"type": "noop"}))

		exp := idOf(create("root", map[string]any{"type": "export", "input": map[string]any{
			"source": "audit", "format": "csv", "filter": map[string]any{"actor": "alice"}}}))
		st, le := finished("root", exp)
		require.Equal(t, "SUCCESS", st, le)
		rows := download("root", exp)
		require.Equal(t, []string{"ID", "Time", "Actor", "Role", "Source", "Tenant", "Action", "Outcome", "Error code", "Tasks", "Address", "Details"}, rows[0])
		require.Len(t, rows, 3, "a header and alice's two creates: %v", rows)
		require.Equal(t, []string{"alice", "operator", "CREATE", "OK", "", aliceTask}, []string{rows[1][2], rows[1][3], rows[1][6], rows[1][7], rows[1][8], rows[1][9]})
		require.Contains(t, rows[1][11], "138****8000", "the details, masked")
		require.Equal(t, []string{"alice", "CREATE", "FAILED", "VALIDATION", ""}, []string{rows[2][2], rows[2][6], rows[2][7], rows[2][8], rows[2][9]})

		// Filters: outcome and task.
		exp2 := idOf(create("root", map[string]any{"type": "export", "input": map[string]any{
			"source": "audit", "format": "csv", "filter": map[string]any{"taskId": toInt(t, aliceTask), "outcome": "OK", "action": []string{"CREATE", "CANCEL"}}}}))
		st, le = finished("root", exp2)
		require.Equal(t, "SUCCESS", st, le)
		rows = download("root", exp2)
		require.Len(t, rows, 2, "%v", rows)
		require.Equal(t, aliceTask, rows[1][9])

		// Everything root may read: its tenant's records, not carol's.
		all := idOf(create("root", map[string]any{"type": "export", "input": map[string]any{"source": "audit", "format": "csv"}}))
		st, le = finished("root", all)
		require.Equal(t, "SUCCESS", st, le)
		rows = download("root", all)
		actors := map[string]bool{}
		for _, row := range rows[1:] {
			actors[row[2]] = true
			require.Empty(t, row[5], "tenant")
		}
		require.Equal(t, map[string]bool{"alice": true, "root": true}, actors)

		// Carol, an admin of t2, reads t2's.
		t2 := idOf(create("carol", map[string]any{"type": "export", "input": map[string]any{"source": "audit", "format": "csv"}}))
		st, le = finished("carol", t2)
		require.Equal(t, "SUCCESS", st, le)
		rows = download("carol", t2)
		require.Len(t, rows, 3, "carol's noop and this export: %v", rows)
		for _, row := range rows[1:] {
			require.Equal(t, []string{"carol", "t2"}, []string{row[2], row[5]})
		}

		// An operator may not read the audit trail, nor export it.
		r = s.DoAs(t, tok["alice"], `{ auditLogs { totalCount } }`, nil)
		require.NotEmpty(t, r.Errors)
		require.Equal(t, "FORBIDDEN", r.Errors[0].Code())
		denied := idOf(create("alice", map[string]any{"type": "export", "input": map[string]any{"source": "audit", "format": "csv"}}))
		st, le = finished("alice", denied)
		require.Equal(t, "FAILED", st)
		require.Contains(t, le, "may not read the audit log")

		// Filters of another source are refused when the task is created.
		r = create("root", map[string]any{"type": "export", "input": map[string]any{"source": "audit", "filter": map[string]any{"type": "noop"}}})
		require.NotEmpty(t, r.Errors)
		require.Equal(t, "VALIDATION", r.Errors[0].Code())
		r = create("root", map[string]any{"type": "export", "input": map[string]any{"source": "audit", "filter": map[string]any{"action": []string{"LAUNCH"}}}})
		require.NotEmpty(t, r.Errors)
		require.Equal(t, "VALIDATION", r.Errors[0].Code())
		r = create("root", map[string]any{"type": "export", "input": map[string]any{"source": "tasks", "filter": map[string]any{"actor": "alice"}}})
		require.NotEmpty(t, r.Errors)
		require.Equal(t, "VALIDATION", r.Errors[0].Code())
	})
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func toInt(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}
