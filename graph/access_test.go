package graph_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/importtest"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// jwtSecret signs the test's JWTs (HS256).
var jwtSecret = []byte("test-secret-of-at-least-32-bytes!!")

// secured is a server with authentication on: a token file with an admin
// (root), two operators (alice, bob) and a read-only token of alice's, and
// HS256 JWTs.
type secured struct {
	*apptest.Server
	tok map[string]string // by name: root, alice, bob, aliceRO
}

func startSecured(t *testing.T, dsn string, opts app.Options, configure ...func(*app.Config)) *secured {
	t.Helper()
	path, toks := apptest.Tokens(t,
		auth.Viewer{User: "root", Role: auth.RoleAdmin},
		auth.Viewer{User: "alice", Role: auth.RoleOperator},
		auth.Viewer{User: "bob", Role: auth.RoleOperator},
	)
	// A second, read-only token for alice.
	ro := auth.NewToken()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(auth.TokenLine(ro, auth.Viewer{User: "alice", Role: auth.RoleViewer}) + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	toks["aliceRO"] = ro
	keyFile := filepath.Join(t.TempDir(), "jwt.key")
	require.NoError(t, os.WriteFile(keyFile, append(jwtSecret, '\n'), 0o600))
	s := apptest.Start(t, dsn, opts, append([]func(*app.Config){func(c *app.Config) {
		c.Access.TokenFile = path
		c.Access.JWTHS256KeyFile = keyFile
		c.Access.JWTIssuer = "https://idp.test"
		c.Access.JWTAudience = "taskgraph"
	}}, configure...)...)
	return &secured{Server: s, tok: toks}
}

func signJWT(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	base := jwt.MapClaims{"iss": "https://idp.test", "aud": "taskgraph", "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range claims {
		base[k] = v
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, base).SignedString(jwtSecret)
	require.NoError(t, err)
	return s
}

func (s *secured) create(t *testing.T, who string, in map[string]any) taskView {
	t.Helper()
	var out struct{ CreateTask taskView }
	s.QueryAs(t, s.tok[who], createNoop, map[string]any{"in": in}, &out)
	return out.CreateTask
}

// code returns the code of the response's only error.
func code(t *testing.T, r apptest.Response) string {
	t.Helper()
	require.Len(t, r.Errors, 1, "%s", r.Data)
	return r.Errors[0].Code()
}

func dialAs(t *testing.T, s *apptest.Server, token string) *apptest.WS {
	t.Helper()
	return s.DialWS(t, map[string]any{"Authorization": "Bearer " + token})
}

func TestAccess(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := startSecured(t, dsn, app.Options{Register: func(r *tasktype.Registry) {
			tasktype.Register(r, "chatty", func(ctx context.Context, job *tasktype.Job, _ struct{}) error {
				job.Info("working")
				return tasktype.NonRetryable(fmt.Errorf("nope"))
			})
		}})
		// alice's task, FAILED (retryable by a person), with an instance
		// and a log line; and one of bob's.
		var a struct{ CreateTask taskView }
		s.QueryAs(t, s.tok["alice"], createNoop, map[string]any{"in": map[string]any{"type": "chatty", "title": "alice's"}}, &a)
		aliceTask := a.CreateTask
		var full struct {
			Task struct {
				Status    string
				Instances []struct{ ID string }
				Logs      struct {
					Edges []struct{ Node struct{ ID string } }
				}
			}
		}
		apptest.Eventually(t, 30*time.Second, func() (bool, string) {
			s.QueryAs(t, s.tok["alice"], `query($id: ID!) { task(id: $id) { status instances { id } logs { edges { node { id } } } } }`, map[string]any{"id": aliceTask.ID}, &full)
			return full.Task.Status == "FAILED" && len(full.Task.Logs.Edges) > 0, fmt.Sprintf("alice's task is %s with %d log lines", full.Task.Status, len(full.Task.Logs.Edges))
		})
		instID, logID := full.Task.Instances[0].ID, full.Task.Logs.Edges[0].Node.ID
		bobTask := s.create(t, "bob", map[string]any{"type": "noop", "runAt": time.Now().Add(time.Hour).Format(time.RFC3339)})
		const unknown = "987654"

		t.Run("AnOperatorCannotReadAnotherOperatorsTaskByAnyPath", func(t *testing.T) {
			as := func(q string, vars map[string]any) apptest.Response { return s.DoAs(t, s.tok["bob"], q, vars) }
			for _, id := range []string{aliceTask.ID, instID, logID} {
				r := as(`query($id: ID!) { node(id: $id) { id } }`, map[string]any{"id": id})
				require.Equal(t, "NOT_FOUND", code(t, r), "node(%s)", id)
				require.JSONEq(t, `{"node": null}`, string(r.Data))
			}
			r := as(`query($ids: [ID!]!) { nodes(ids: $ids) { id } }`, map[string]any{"ids": []string{aliceTask.ID, instID, logID, bobTask.ID}})
			require.JSONEq(t, fmt.Sprintf(`{"nodes": [null, null, null, {"id": %q}]}`, bobTask.ID), string(r.Data))
			require.Len(t, r.Errors, 3)
			for _, e := range r.Errors {
				require.Equal(t, "NOT_FOUND", e.Code())
			}
			require.Equal(t, "NOT_FOUND", code(t, as(`query($id: ID!) { task(id: $id) { id } }`, map[string]any{"id": aliceTask.ID})))
			require.Equal(t, "NOT_FOUND", code(t, as(`query($c: String!) { taskByCode(code: $c) { id } }`, map[string]any{"c": aliceTask.Code})))
			var list struct {
				Tasks struct {
					TotalCount int
					Edges      []struct{ Node struct{ ID string } }
				}
				TaskStats struct{ Total int }
			}
			s.QueryAs(t, s.tok["bob"], `{ tasks(first: 100) { totalCount edges { node { id } } } taskStats { total } }`, nil, &list)
			require.Equal(t, 1, list.Tasks.TotalCount)
			require.Equal(t, bobTask.ID, list.Tasks.Edges[0].Node.ID)
			require.Equal(t, 1, list.TaskStats.Total)
			// Filters cannot widen it.
			s.QueryAs(t, s.tok["bob"], `{ tasks(where: {owner: "alice"}) { totalCount } taskStats { total } }`, nil, &list)
			require.Zero(t, list.Tasks.TotalCount)
		})
		t.Run("AnInvisibleTaskLooksExactlyLikeAMissingOne", func(t *testing.T) {
			for _, q := range []string{
				`query($id: ID!) { task(id: $id) { id } }`,
				`query($id: ID!) { node(id: $id) { id } }`,
				`mutation($id: ID!) { cancelTask(id: $id) { id } }`,
				`mutation($id: ID!) { retryTask(id: $id) { id } }`,
			} {
				hidden := s.DoAs(t, s.tok["bob"], q, map[string]any{"id": aliceTask.ID})
				missing := s.DoAs(t, s.tok["bob"], q, map[string]any{"id": unknown})
				require.Equal(t, code(t, missing), code(t, hidden), q)
				require.Equal(t, strings.ReplaceAll(missing.Errors[0].Message, unknown, aliceTask.ID), hidden.Errors[0].Message, q)
				require.Equal(t, missing.Status, hidden.Status)
			}
		})
		t.Run("AnOperatorCannotCancelOrRetryAnotherOperatorsTask", func(t *testing.T) {
			for _, q := range []string{
				`mutation($id: ID!) { cancelTask(id: $id, reason: "mine now") { id } }`,
				`mutation($id: ID!) { retryTask(id: $id) { id } }`,
			} {
				require.Equal(t, "NOT_FOUND", code(t, s.DoAs(t, s.tok["bob"], q, map[string]any{"id": aliceTask.ID})), q)
			}
			for _, q := range []string{
				`mutation($ids: [ID!]!) { cancelTasks(ids: $ids) { id ok error { code } } }`,
				`mutation($ids: [ID!]!) { retryTasks(ids: $ids) { id ok error { code } } }`,
			} {
				var out map[string][]struct {
					ID    string
					Ok    bool
					Error *struct{ Code string }
				}
				s.QueryAs(t, s.tok["bob"], q, map[string]any{"ids": []string{aliceTask.ID}}, &out)
				for _, res := range out {
					require.False(t, res[0].Ok)
					require.Equal(t, "NOT_FOUND", res[0].Error.Code)
				}
			}
			var st struct{ Task taskView }
			s.QueryAs(t, s.tok["alice"], `query($id: ID!) { task(id: $id) { status version } }`, map[string]any{"id": aliceTask.ID}, &st)
			require.Equal(t, "FAILED", st.Task.Status, "untouched")
		})
		t.Run("AnOperatorCannotSubscribeToAnotherOperatorsTask", func(t *testing.T) {
			c := dialAs(t, s.Server, s.tok["bob"])
			defer c.Conn.Close()
			for id, q := range map[string]string{
				"u": `subscription($id: ID!) { taskUpdated(id: $id) { id } }`,
				"l": `subscription($id: ID!) { taskLogAppended(taskId: $id) { message } }`,
			} {
				c.Subscribe(id, q, map[string]any{"id": aliceTask.ID})
				m := c.Next()
				var p struct {
					Data   json.RawMessage
					Errors []apptest.Error
				}
				require.NoError(t, json.Unmarshal(m.Payload, &p))
				require.Equal(t, "null", string(p.Data))
				require.Len(t, p.Errors, 1)
				require.Equal(t, "NOT_FOUND", p.Errors[0].Code())
				require.Equal(t, "complete", c.Next().Type)
			}
		})
		t.Run("ASubscriberNeverReceivesEventsOfTasksItMayNotSee", func(t *testing.T) {
			c := dialAs(t, s.Server, s.tok["bob"])
			defer c.Conn.Close()
			c.Subscribe("all", `subscription { taskUpdated { id title } }`, nil)
			s.WaitSubscribers(t, 1)
			later := time.Now().Add(time.Hour).Format(time.RFC3339)
			// alice's change is published first: were it delivered, it
			// would arrive first.
			s.create(t, "alice", map[string]any{"type": "noop", "title": "secret", "runAt": later})
			mine := s.create(t, "bob", map[string]any{"type": "noop", "title": "bob's", "runAt": later})
			m := c.Next()
			require.Equal(t, "next", m.Type)
			require.Contains(t, string(m.Payload), mine.ID)
			require.NotContains(t, string(m.Payload), "secret")
		})
		t.Run("AnOperatorCannotReachAnotherOperatorsFilesByAnyPath", func(t *testing.T) {
			// alice imports a file with a bad row: the task has its source
			// file and an error report.
			r, status := importtest.UploadAs(t, s.Server, s.tok["alice"], "c.csv",
				importtest.CSV(importtest.ContactsHeader, importtest.Rows(3, func(i int) bool { return i == 1 }), false), "contacts", nil, "")
			require.Equal(t, http.StatusOK, status, "%+v", r.Errors)
			var up struct{ ImportFile struct{ ID string } }
			require.NoError(t, json.Unmarshal(r.Data, &up))
			var task struct {
				Task struct {
					ResultStatus *string
					Artifacts    []struct{ ID, Kind string }
				}
			}
			apptest.Eventually(t, 30*time.Second, func() (bool, string) {
				s.QueryAs(t, s.tok["alice"], `query($id: ID!) { task(id: $id) { resultStatus artifacts { id kind } } }`, map[string]any{"id": up.ImportFile.ID}, &task)
				return task.Task.ResultStatus != nil, "the import has no result yet"
			})
			require.NotEmpty(t, task.Task.Artifacts)
			linkQ := `mutation($id: ID!) { artifactDownloadUrl(taskId: $id) { url } }`
			// bob: the link, the artifact as a node, the task's artifacts.
			require.Equal(t, "NOT_FOUND", code(t, s.DoAs(t, s.tok["bob"], linkQ, map[string]any{"id": up.ImportFile.ID})))
			for _, a := range task.Task.Artifacts {
				require.Equal(t, "NOT_FOUND", code(t, s.DoAs(t, s.tok["bob"], `query($id: ID!) { node(id: $id) { id } }`, map[string]any{"id": a.ID})), a.Kind)
			}
			// alice: the link is the credential (a browser sends no token)
			// and the download is audited.
			var link struct{ ArtifactDownloadURL struct{ URL string } }
			s.QueryAs(t, s.tok["alice"], linkQ, map[string]any{"id": up.ImportFile.ID}, &link)
			resp, err := http.Get(link.ArtifactDownloadURL.URL)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			var audits struct {
				AuditLogs struct{ TotalCount int }
			}
			s.QueryAs(t, s.tok["root"], `query($id: ID!) { auditLogs(where: {action: DOWNLOAD, taskID: $id}) { totalCount } }`, map[string]any{"id": up.ImportFile.ID}, &audits)
			require.Equal(t, 1, audits.AuditLogs.TotalCount, "one record per download")
		})
		t.Run("AnOperatorsExportHoldsItsOwnTasksOnly", func(t *testing.T) {
			var out struct{ CreateTask taskView }
			s.QueryAs(t, s.tok["bob"], createNoop, map[string]any{"in": map[string]any{"type": "export", "input": map[string]any{"source": "tasks", "format": "csv"}}}, &out)
			var done struct{ Task struct{ Status string } }
			apptest.Eventually(t, 30*time.Second, func() (bool, string) {
				s.QueryAs(t, s.tok["bob"], `query($id: ID!) { task(id: $id) { status } }`, map[string]any{"id": out.CreateTask.ID}, &done)
				return done.Task.Status == "SUCCESS", "the export is " + done.Task.Status
			})
			var link struct{ ArtifactDownloadURL struct{ URL string } }
			s.QueryAs(t, s.tok["bob"], `mutation($id: ID!) { artifactDownloadUrl(taskId: $id, kind: EXPORT) { url } }`, map[string]any{"id": out.CreateTask.ID}, &link)
			resp, err := http.Get(link.ArtifactDownloadURL.URL)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Contains(t, string(body), bobTask.Code)
			require.NotContains(t, string(body), aliceTask.Code, "alice's task is not in bob's export")
		})
		t.Run("AViewerReadsItsOwnButCannotMutate", func(t *testing.T) {
			var st struct{ Task taskView }
			s.QueryAs(t, s.tok["aliceRO"], `query($id: ID!) { task(id: $id) { id status } }`, map[string]any{"id": aliceTask.ID}, &st)
			require.Equal(t, aliceTask.ID, st.Task.ID)
			require.Equal(t, "NOT_FOUND", code(t, s.DoAs(t, s.tok["aliceRO"], `query($id: ID!) { task(id: $id) { id } }`, map[string]any{"id": bobTask.ID})))
			for q, vars := range map[string]map[string]any{
				createNoop: {"in": map[string]any{"type": "noop"}},
				`mutation($id: ID!) { cancelTask(id: $id) { id } }`:              {"id": aliceTask.ID},
				`mutation($id: ID!) { retryTask(id: $id) { id } }`:               {"id": aliceTask.ID},
				`mutation($ids: [ID!]!) { cancelTasks(ids: $ids) { id } }`:       {"ids": []string{aliceTask.ID}},
				`mutation($ids: [ID!]!) { retryTasks(ids: $ids) { id } }`:        {"ids": []string{aliceTask.ID}},
				`mutation($id: ID!) { cancelTask(id: $id, reason: "x") { id } }`: {"id": unknown},
			} {
				require.Equal(t, "FORBIDDEN", code(t, s.DoAs(t, s.tok["aliceRO"], q, vars)), q)
			}
		})
		t.Run("AnAdminSeesAndActsOnEverything", func(t *testing.T) {
			var list struct{ Tasks struct{ TotalCount int } }
			s.QueryAs(t, s.tok["root"], `{ tasks { totalCount } }`, nil, &list)
			require.GreaterOrEqual(t, list.Tasks.TotalCount, 2)
			var st struct{ Task taskView }
			s.QueryAs(t, s.tok["root"], `query($id: ID!) { task(id: $id) { id } }`, map[string]any{"id": aliceTask.ID}, &st)
			require.Equal(t, aliceTask.ID, st.Task.ID)
		})
		t.Run("OnlyAnAdminReadsTheAuditLog", func(t *testing.T) {
			require.Equal(t, "FORBIDDEN", code(t, s.DoAs(t, s.tok["bob"], `{ auditLogs { totalCount } }`, nil)))
			var out struct{ AuditLogs struct{ TotalCount int } }
			s.QueryAs(t, s.tok["root"], `{ auditLogs { totalCount } }`, nil, &out)
			require.Positive(t, out.AuditLogs.TotalCount)
		})
		t.Run("NoTokenIsUnauthenticated", func(t *testing.T) {
			r := s.Do(t, `{ tasks { totalCount } }`, nil)
			require.Equal(t, http.StatusUnauthorized, r.Status)
			require.Equal(t, "UNAUTHENTICATED", code(t, r))
			require.Equal(t, "null", string(r.Data))
		})
		t.Run("ABadOrExpiredJWTIsUnauthenticated", func(t *testing.T) {
			good := signJWT(t, jwt.MapClaims{"sub": "bob", "role": "operator"})
			var viaJWT, viaFile struct{ Tasks struct{ TotalCount int } }
			s.QueryAs(t, good, `{ tasks { totalCount } }`, nil, &viaJWT)
			s.QueryAs(t, s.tok["bob"], `{ tasks { totalCount } }`, nil, &viaFile)
			require.Positive(t, viaFile.Tasks.TotalCount)
			require.Zero(t, viaJWT.Tasks.TotalCount, "a JWT for bob is another bob than the token file's (TestTenants)")
			parts := strings.Split(good, ".")
			for name, tok := range map[string]string{
				"Expired":       signJWT(t, jwt.MapClaims{"sub": "bob", "role": "operator", "exp": time.Now().Add(-time.Hour).Unix()}),
				"WrongAudience": signJWT(t, jwt.MapClaims{"sub": "bob", "role": "operator", "aud": "else"}),
				"Tampered":      parts[0] + "." + parts[1] + "x." + parts[2],
				"Garbage":       "not-a-token",
			} {
				r := s.DoAs(t, tok, `{ tasks { totalCount } }`, nil)
				require.Equal(t, http.StatusUnauthorized, r.Status, name)
				require.Equal(t, "UNAUTHENTICATED", code(t, r), name)
				if name == "Expired" {
					require.Contains(t, r.Errors[0].Message, "expired")
				}
			}
		})
		t.Run("AWebsocketEndsWhenItsJWTExpires", func(t *testing.T) {
			c := dialAs(t, s.Server, signJWT(t, jwt.MapClaims{"sub": "bob", "role": "operator", "exp": time.Now().Add(2 * time.Second).Unix()}))
			defer c.Conn.Close()
			c.Subscribe("q", `{ tasks { totalCount } }`, nil)
			require.Equal(t, "next", c.Next().Type, "it works until then")
			require.NoError(t, c.Conn.SetReadDeadline(time.Now().Add(20*time.Second)))
			for {
				if _, _, err := c.Conn.ReadMessage(); err != nil {
					require.False(t, strings.Contains(err.Error(), "timeout"), "not closed: %v", err)
					break
				}
			}
		})
		t.Run("ABadTokenInConnectionInitIsRefused", func(t *testing.T) {
			for name, payload := range map[string]string{
				"BadToken":     `{"Authorization": "Bearer tg_nope"}`,
				"ExpiredJWT":   `{"Authorization": "Bearer ` + signJWT(t, jwt.MapClaims{"sub": "bob", "role": "operator", "exp": time.Now().Add(-time.Hour).Unix()}) + `"}`,
				"NoCredential": `{}`,
			} {
				d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}}
				conn, resp, err := d.Dial(s.WS(), nil)
				require.NoError(t, err, name)
				resp.Body.Close()
				require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"connection_init","payload":`+payload+`}`)))
				_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, _, err = conn.ReadMessage()
				require.True(t, websocket.IsCloseError(err, 4403), "%s: %v", name, err)
				conn.Close()
			}
		})
	})
}
