package graph_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
	"github.com/xuri/excelize/v2"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/exporter"
	"github.com/taskgraph/taskgraph/internal/importtest"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// tenants is a server with two tenants, A and B, and users whose names
// collide across tenants and sources:
//
//	platform  token  ""  root  admin, listed in --platform-admins
//	adminA    token  A   boss  admin
//	opA       token  A   op    operator
//	viewA     token  A   op    viewer (opA's read-only token)
//	op2A      token  A   op2   operator
//	jwtOpA    jwt    A   op    operator (not opA: another source)
//	adminB    token  B   boss  admin    (not adminA: another tenant)
//	opB       token  B   op    operator (not opA: another tenant)
type tenants struct {
	*apptest.Server
	tok map[string]string
}

var tenantViewers = map[string]auth.Viewer{
	"platform": {User: "root", Role: auth.RoleAdmin},
	"adminA":   {User: "boss", Role: auth.RoleAdmin, Tenant: "A"},
	"opA":      {User: "op", Role: auth.RoleOperator, Tenant: "A"},
	"viewA":    {User: "op", Role: auth.RoleViewer, Tenant: "A"},
	"op2A":     {User: "op2", Role: auth.RoleOperator, Tenant: "A"},
	"adminB":   {User: "boss", Role: auth.RoleAdmin, Tenant: "B"},
	"opB":      {User: "op", Role: auth.RoleOperator, Tenant: "B"},
}

func startTenants(t *testing.T, dsn string, opts app.Options) *tenants {
	t.Helper()
	toks := map[string]string{}
	var lines []string
	for label, v := range tenantViewers {
		tok := auth.NewToken()
		toks[label] = tok
		lines = append(lines, auth.TokenLine(tok, v))
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	keyFile := filepath.Join(dir, "jwt.key")
	require.NoError(t, os.WriteFile(keyFile, jwtSecret, 0o600))
	s := apptest.Start(t, dsn, opts, func(c *app.Config) {
		c.Access.TokenFile = path
		c.Access.JWTHS256KeyFile = keyFile
		c.Access.JWTIssuer = "https://idp.test"
		c.Access.JWTAudience = "taskgraph"
		c.Access.PlatformAdmins = []auth.Identity{{Source: auth.SourceToken, User: "root"}}
	})
	toks["jwtOpA"] = signJWT(t, jwt.MapClaims{"sub": "op", "role": "operator", "tenant": "A"})
	return &tenants{Server: s, tok: toks}
}

func (s *tenants) create(t *testing.T, who string, in map[string]any) taskView {
	t.Helper()
	var out struct{ CreateTask taskView }
	s.QueryAs(t, s.tok[who], createNoop, map[string]any{"in": in}, &out)
	return out.CreateTask
}

// await polls a task as who until done says so (bounded).
func (s *tenants) await(t *testing.T, who, id string, done func(status string, resultStatus *string) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var st struct {
			Task struct {
				Status       string
				ResultStatus *string
				LastError    *string
			}
		}
		s.QueryAs(t, s.tok[who], `query($id: ID!) { task(id: $id) { status resultStatus lastError } }`, map[string]any{"id": id}, &st)
		if done(st.Task.Status, st.Task.ResultStatus) {
			return
		}
		require.True(t, time.Now().Before(deadline), "task %s: still %s (%v)", id, st.Task.Status, st.Task.LastError)
		time.Sleep(20 * time.Millisecond)
	}
}

func succeeded(status string, _ *string) bool { return status == "SUCCESS" }

// importContacts imports n contacts in city as who and waits for it.
func (s *tenants) importContacts(t *testing.T, who, city string, n int) string {
	t.Helper()
	rows := importtest.Rows(n, nil)
	for _, r := range rows {
		r[4] = city
	}
	r, status := importtest.UploadAs(t, s.Server, s.tok[who], who+".csv", importtest.CSV(importtest.ContactsHeader, rows, false), "contacts", nil, "")
	require.Equal(t, http.StatusOK, status, "%+v", r.Errors)
	require.Empty(t, r.Errors)
	var up struct{ ImportFile struct{ ID string } }
	require.NoError(t, json.Unmarshal(r.Data, &up))
	s.await(t, who, up.ImportFile.ID, succeeded)
	return up.ImportFile.ID
}

// visible returns the ids of the tasks who lists, and its taskStats total.
func (s *tenants) visible(t *testing.T, who string, where map[string]any) ([]string, int) {
	t.Helper()
	var out struct {
		Tasks struct {
			TotalCount int
			Edges      []struct{ Node struct{ ID string } }
		}
		TaskStats struct{ Total int }
	}
	s.QueryAs(t, s.tok[who], `query($w: TaskWhereInput) { tasks(first: 500, where: $w) { totalCount edges { node { id } } } taskStats { total } }`, map[string]any{"w": where}, &out)
	var ids []string
	for _, e := range out.Tasks.Edges {
		ids = append(ids, e.Node.ID)
	}
	require.Len(t, ids, out.Tasks.TotalCount)
	sort.Strings(ids)
	return ids, out.TaskStats.Total
}

// download fetches the newest artifact of kind of a task through a link
// who asks for.
func (s *tenants) download(t *testing.T, who, id, kind string) []byte {
	t.Helper()
	var format any // exports are read as CSV
	if kind == "EXPORT" {
		format = "CSV"
	}
	var link struct{ ArtifactDownloadURL struct{ URL string } }
	s.QueryAs(t, s.tok[who], `mutation($id: ID!, $kind: ArtifactKind, $f: FileFormat) { artifactDownloadUrl(taskId: $id, kind: $kind, format: $f) { url } }`,
		map[string]any{"id": id, "kind": kind, "f": format}, &link)
	resp, err := http.Get(link.ArtifactDownloadURL.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	return body
}

// export runs a CSV export of source as who and returns its rows.
func (s *tenants) export(t *testing.T, who, source string) [][]string {
	t.Helper()
	tk := s.create(t, who, map[string]any{"type": exporter.ExportType, "input": map[string]any{"source": source, "format": "csv"}})
	s.await(t, who, tk.ID, succeeded)
	rows, err := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(s.download(t, who, tk.ID, "EXPORT"), []byte("\xEF\xBB\xBF")))).ReadAll()
	require.NoError(t, err)
	return rows[1:]
}

// column returns column i of rows, sorted and without duplicates.
func column(rows [][]string, i int) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r[i])
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func TestTenants(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := startTenants(t, dsn, app.Options{Register: func(r *tasktype.Registry) {
			tasktype.Register(r, "chatty", func(ctx context.Context, job *tasktype.Job, _ struct{}) error {
				job.Info("working")
				return tasktype.NonRetryable(fmt.Errorf("nope"))
			})
		}})
		later := time.Now().Add(time.Hour).Format(time.RFC3339)
		waiting := func(who, title string) taskView {
			return s.create(t, who, map[string]any{"type": "noop", "title": title, "runAt": later})
		}
		// opA's FAILED task, with an instance, a log line and (below) the
		// import with its files; a waiting task of every operator.
		failedA := s.create(t, "opA", map[string]any{"type": "chatty", "title": "opA failed"})
		s.await(t, "opA", failedA.ID, func(st string, _ *string) bool { return st == "FAILED" })
		var full struct {
			Task struct {
				Instances []struct{ ID string }
				Logs      struct {
					Edges []struct{ Node struct{ ID string } }
				}
			}
		}
		for deadline := time.Now().Add(30 * time.Second); len(full.Task.Logs.Edges) == 0; time.Sleep(10 * time.Millisecond) {
			require.True(t, time.Now().Before(deadline), "opA's failed task has no log line")
			s.QueryAs(t, s.tok["opA"], `query($id: ID!) { task(id: $id) { instances { id } logs { edges { node { id } } } } }`, map[string]any{"id": failedA.ID}, &full)
		}
		instA, logA := full.Task.Instances[0].ID, full.Task.Logs.Edges[0].Node.ID
		waitA := waiting("opA", "opA waits")
		waitA2 := waiting("op2A", "op2A waits")
		waitJ := waiting("jwtOpA", "jwt op waits")
		waitB := waiting("opB", "opB waits")
		importA := s.importContacts(t, "opA", "甲市", 3)
		importA2 := s.importContacts(t, "op2A", "乙市", 2)
		importJ := s.importContacts(t, "jwtOpA", "丁市", 1)
		importB := s.importContacts(t, "opB", "丙市", 4)
		var artsA struct {
			Task struct{ Artifacts []struct{ ID string } }
		}
		s.QueryAs(t, s.tok["opA"], `query($id: ID!) { task(id: $id) { artifacts { id } } }`, map[string]any{"id": importA}, &artsA)
		require.NotEmpty(t, artsA.Task.Artifacts)
		artA := artsA.Task.Artifacts[0].ID

		sorted := func(ids ...string) []string { sort.Strings(ids); return ids }
		ofOpA := sorted(failedA.ID, waitA.ID, importA)
		ofTenantA := sorted(failedA.ID, waitA.ID, importA, waitA2.ID, importA2, waitJ.ID, importJ)
		ofTenantB := sorted(waitB.ID, importB)

		t.Run("EachViewerListsExactlyItsTenantsOrItsOwnTasks", func(t *testing.T) {
			for who, want := range map[string][]string{
				"platform": sorted(append(slices.Clone(ofTenantA), ofTenantB...)...),
				"adminA":   ofTenantA,
				"opA":      ofOpA,
				"viewA":    ofOpA,
				"op2A":     sorted(waitA2.ID, importA2),
				"jwtOpA":   sorted(waitJ.ID, importJ),
				"adminB":   ofTenantB,
				"opB":      ofTenantB,
			} {
				ids, total := s.visible(t, who, nil)
				require.Equal(t, want, ids, who)
				require.Equal(t, len(want), total, "%s: taskStats", who)
			}
			// Filters narrow, never widen.
			for who, where := range map[string]map[string]any{
				"adminB": {"tenant": "A"},
				"opB":    {"tenant": "A", "owner": "op"},
				"jwtOpA": {"ownerSource": "token"},
			} {
				ids, _ := s.visible(t, who, where)
				require.Empty(t, ids, who)
			}
			ids, _ := s.visible(t, "platform", map[string]any{"tenant": "B"})
			require.Equal(t, ofTenantB, ids)
		})

		t.Run("NoPathReadsATaskOfAnotherTenantOrSource", func(t *testing.T) {
			for _, who := range []string{"adminB", "opB", "jwtOpA", "op2A"} {
				as := func(q string, vars map[string]any) apptest.Response { return s.DoAs(t, s.tok[who], q, vars) }
				for _, id := range []string{failedA.ID, instA, logA, artA} {
					r := as(`query($id: ID!) { node(id: $id) { id } }`, map[string]any{"id": id})
					require.Equal(t, "NOT_FOUND", code(t, r), "%s: node(%s)", who, id)
				}
				r := as(`query($ids: [ID!]!) { nodes(ids: $ids) { id } }`, map[string]any{"ids": []string{failedA.ID, instA, logA, artA}})
				require.JSONEq(t, `{"nodes": [null, null, null, null]}`, string(r.Data), who)
				require.Equal(t, "NOT_FOUND", code(t, as(`query($id: ID!) { task(id: $id) { id } }`, map[string]any{"id": failedA.ID})), who)
				require.Equal(t, "NOT_FOUND", code(t, as(`query($c: String!) { taskByCode(code: $c) { id } }`, map[string]any{"c": failedA.Code})), who)
				require.Equal(t, "NOT_FOUND", code(t, as(`mutation($id: ID!) { artifactDownloadUrl(taskId: $id) { url } }`, map[string]any{"id": importA})), who)
			}
			// The same user name in the same tenant from another source is
			// someone else; in another tenant too.
			for _, who := range []string{"platform", "adminA", "opA", "viewA"} {
				require.Empty(t, s.DoAs(t, s.tok[who], `query($id: ID!) { node(id: $id) { id } }`, map[string]any{"id": instA}).Errors, who)
			}
		})

		t.Run("NoOneActsOnATaskOfAnotherTenantOrSource", func(t *testing.T) {
			for _, who := range []string{"adminB", "opB", "jwtOpA", "op2A"} {
				for _, q := range []string{
					`mutation($id: ID!) { cancelTask(id: $id) { id } }`,
					`mutation($id: ID!) { retryTask(id: $id) { id } }`,
				} {
					for _, id := range []string{waitA.ID, failedA.ID} {
						require.Equal(t, "NOT_FOUND", code(t, s.DoAs(t, s.tok[who], q, map[string]any{"id": id})), "%s %s %s", who, q, id)
					}
				}
				for _, q := range []string{
					`mutation($ids: [ID!]!) { cancelTasks(ids: $ids) { id ok error { code } } }`,
					`mutation($ids: [ID!]!) { retryTasks(ids: $ids) { id ok error { code } } }`,
				} {
					var out map[string][]struct {
						Ok    bool
						Error *struct{ Code string }
					}
					s.QueryAs(t, s.tok[who], q, map[string]any{"ids": []string{waitA.ID, failedA.ID}}, &out)
					for _, res := range out {
						for _, r := range res {
							require.False(t, r.Ok, who)
							require.Equal(t, "NOT_FOUND", r.Error.Code, who)
						}
					}
				}
			}
			var st struct{ A, F struct{ Status string } }
			s.QueryAs(t, s.tok["opA"], `query($a: ID!, $f: ID!) { A: task(id: $a) { status } F: task(id: $f) { status } }`, map[string]any{"a": waitA.ID, "f": failedA.ID}, &st)
			require.Equal(t, "PENDING", st.A.Status, "untouched")
			require.Equal(t, "FAILED", st.F.Status, "untouched")
			// An admin acts in its tenant, whatever the owner's source; a
			// platform administrator in every tenant.
			extraJ := waiting("jwtOpA", "jwt op's, cancelled by its admin")
			require.Empty(t, s.DoAs(t, s.tok["adminA"], `mutation($id: ID!) { cancelTask(id: $id) { id } }`, map[string]any{"id": extraJ.ID}).Errors)
			extraB := waiting("opB", "opB's, cancelled by the platform")
			require.Empty(t, s.DoAs(t, s.tok["platform"], `mutation($id: ID!) { cancelTask(id: $id) { id } }`, map[string]any{"id": extraB.ID}).Errors)
			require.Equal(t, "NOT_FOUND", code(t, s.DoAs(t, s.tok["adminA"], `mutation($id: ID!) { cancelTask(id: $id) { id } }`, map[string]any{"id": waitB.ID})))
		})

		t.Run("IdempotencyKeysBelongToTheOwnerIdentity", func(t *testing.T) {
			keyed := func(who, key string) string {
				return s.create(t, who, map[string]any{"type": "noop", "idempotencyKey": key, "runAt": later}).ID
			}
			ids := map[string]string{}
			for _, who := range []string{"opA", "opB", "jwtOpA", "op2A"} {
				ids[who] = keyed(who, "order-42")
			}
			require.Len(t, slices.Compact(sorted(ids["opA"], ids["opB"], ids["jwtOpA"], ids["op2A"])), 4, "one task per identity: %v", ids)
			for who, id := range ids {
				require.Equal(t, id, keyed(who, "order-42"), "%s's resubmission", who)
			}
			// Two keys that mask alike are two keys: the raw key's hash
			// is unique, the masked one is shown.
			k1, k2 := "tel-13912345678", "tel-13900005678"
			id1, id2 := keyed("opA", k1), keyed("opA", k2)
			require.NotEqual(t, id1, id2)
			require.Equal(t, id1, keyed("opA", k1))
			require.Equal(t, id2, keyed("opA", k2))
			var shown struct {
				A, B struct{ IdempotencyKey string }
			}
			s.QueryAs(t, s.tok["opA"], `query($a: ID!, $b: ID!) { A: task(id: $a) { idempotencyKey } B: task(id: $b) { idempotencyKey } }`, map[string]any{"a": id1, "b": id2}, &shown)
			require.Equal(t, "tel-139****5678", shown.A.IdempotencyKey)
			require.Equal(t, shown.A, shown.B)
			// The raw key appears nowhere in the database.
			dump := dumpTasks(t, s.Server)
			require.NotContains(t, dump, "13912345678")
			require.NotContains(t, dump, "13900005678")
			for _, id := range []string{id1, id2} {
				require.Empty(t, s.DoAs(t, s.tok["opA"], `mutation($id: ID!) { cancelTask(id: $id) { id } }`, map[string]any{"id": id}).Errors)
			}
		})

		t.Run("DownloadLinksAreBoundToTheWholeIdentity", func(t *testing.T) {
			a, err := s.App.Artifacts.Client().Artifact.Get(auth.NewSystemContext(context.Background()), mustAtoi(t, artA))
			require.NoError(t, err)
			get := func(v auth.Viewer) int {
				resp, err := http.Get(s.URL + s.App.Links.Sign(a, v).Path)
				require.NoError(t, err)
				resp.Body.Close()
				return resp.StatusCode
			}
			viewer := func(label, source string) auth.Viewer {
				v := tenantViewers[label]
				v.Source = source
				return v
			}
			require.Equal(t, http.StatusOK, get(viewer("opA", auth.SourceToken)))
			require.Equal(t, http.StatusOK, get(viewer("adminA", auth.SourceToken)), "an admin of the tenant")
			require.Equal(t, http.StatusOK, get(auth.Viewer{User: "root", Role: auth.RolePlatform, Source: auth.SourceToken}))
			require.Equal(t, http.StatusForbidden, get(viewer("opA", auth.SourceJWT)), "op of A from another source")
			require.Equal(t, http.StatusForbidden, get(viewer("opB", auth.SourceToken)), "op of another tenant")
			require.Equal(t, http.StatusForbidden, get(viewer("adminB", auth.SourceToken)), "an admin of another tenant")
			require.Equal(t, http.StatusForbidden, get(viewer("op2A", auth.SourceToken)), "another operator of the tenant")
			// Through the API, as the user who asks.
			require.NotEmpty(t, s.download(t, "adminA", importA, "SOURCE"))
		})

		t.Run("ExportsHoldWhatTheirOwnerSees", func(t *testing.T) {
			// Contacts: an operator's export holds the rows its own imports
			// wrote — not those of another operator of its tenant, nor of
			// the same name from another source or tenant.
			require.Equal(t, []string{"甲市"}, column(s.export(t, "opA", "contacts"), 5))
			require.Equal(t, []string{"丁市"}, column(s.export(t, "jwtOpA", "contacts"), 5))
			require.Equal(t, []string{"丙市"}, column(s.export(t, "opB", "contacts"), 5))
			require.Equal(t, []string{"丁市", "乙市", "甲市"}, column(s.export(t, "adminA", "contacts"), 5))
			require.Equal(t, []string{"丁市", "丙市", "乙市", "甲市"}, column(s.export(t, "platform", "contacts"), 5))
			// Tasks.
			owners := func(who string) []string {
				rows := s.export(t, who, "tasks")
				var ids []string
				for _, r := range rows {
					ids = append(ids, r[0])
				}
				sort.Strings(ids)
				return ids
			}
			mine := owners("opB")
			require.NotEmpty(t, mine)
			visible, _ := s.visible(t, "opB", nil)
			require.Subset(t, visible, mine)
			tenantA := owners("adminA")
			visible, _ = s.visible(t, "adminA", nil)
			require.Subset(t, visible, tenantA)
			require.Subset(t, tenantA, ofTenantA)
			for _, id := range ofTenantB {
				require.NotContains(t, tenantA, id)
			}
		})

		t.Run("ReportsCountWhatTheirOwnerSees", func(t *testing.T) {
			report := func(who string) (tasks int, cities [][]string) {
				tk := s.create(t, who, map[string]any{"type": exporter.ReportType})
				s.await(t, who, tk.ID, succeeded)
				f, err := excelize.OpenReader(bytes.NewReader(s.download(t, who, tk.ID, "REPORT")))
				require.NoError(t, err)
				defer f.Close()
				days, err := f.GetRows("Tasks by day")
				require.NoError(t, err)
				for _, r := range days[1:] {
					n, err := strconv.Atoi(r[2])
					require.NoError(t, err)
					tasks += n
				}
				cities, err = f.GetRows("Contacts by city")
				require.NoError(t, err)
				return tasks, cities[1:]
			}
			for who, wantCities := range map[string][][]string{
				"opA":    {{"甲市", "3"}},
				"op2A":   {{"乙市", "2"}},
				"jwtOpA": {{"丁市", "1"}},
				"adminB": {{"丙市", "4"}},
				"adminA": {{"甲市", "3"}, {"乙市", "2"}, {"丁市", "1"}},
			} {
				before, _ := s.visible(t, who, nil)
				tasks, cities := report(who)
				require.Equal(t, wantCities, cities, who)
				// The report counts what its owner saw, the report itself
				// included.
				require.Equal(t, len(before)+1, tasks, who)
			}
		})

		t.Run("AuditRecordsStayInTheirTenant", func(t *testing.T) {
			type rec struct {
				Actor, Source, Tenant, Action string
				TaskIds                       []string
			}
			read := func(who string, where map[string]any) []rec {
				var out struct {
					AuditLogs struct {
						TotalCount int
						Edges      []struct{ Node rec }
					}
				}
				s.QueryAs(t, s.tok[who], `query($w: AuditLogWhereInput) { auditLogs(first: 500, where: $w) { totalCount edges { node { actor source tenant action taskIds } } } }`, map[string]any{"w": where}, &out)
				var recs []rec
				for _, e := range out.AuditLogs.Edges {
					recs = append(recs, e.Node)
				}
				require.Len(t, recs, out.AuditLogs.TotalCount)
				return recs
			}
			tenantsOf := func(recs []rec) []string {
				var ts []string
				for _, r := range recs {
					ts = append(ts, r.Tenant)
				}
				sort.Strings(ts)
				return slices.Compact(ts)
			}
			require.Equal(t, []string{"B"}, tenantsOf(read("adminB", nil)))
			require.Equal(t, []string{"A"}, tenantsOf(read("adminA", nil)))
			require.Equal(t, []string{"", "A", "B"}, tenantsOf(read("platform", nil)))
			require.Empty(t, read("adminB", map[string]any{"tenant": "A"}), "a filter cannot widen it")
			// What B's admin finds about A's task are its own users'
			// refused attempts on it, not A's record of creating it.
			attempts := read("adminB", map[string]any{"taskID": failedA.ID})
			require.NotEmpty(t, attempts)
			require.Equal(t, []string{"B"}, tenantsOf(attempts))
			require.Contains(t, read("adminA", map[string]any{"taskID": failedA.ID}), rec{Actor: "op", Source: "token", Tenant: "A", Action: "CREATE", TaskIds: []string{failedA.ID}})
			var sources []string
			for _, r := range read("adminA", map[string]any{"actor": "op", "action": "CREATE"}) {
				sources = append(sources, r.Source)
			}
			sort.Strings(sources)
			require.Equal(t, []string{"jwt", "token"}, slices.Compact(sources), "the tenant's op from both sources, told apart")
			for _, who := range []string{"opA", "jwtOpA", "viewA"} {
				require.Equal(t, "FORBIDDEN", code(t, s.DoAs(t, s.tok[who], `{ auditLogs { totalCount } }`, nil)), who)
			}
		})

		t.Run("MetricsCountWhatTheScraperSees", func(t *testing.T) {
			scrape := func(token string) (int, string) {
				req, err := http.NewRequest(http.MethodGet, s.URL+"/metrics", nil)
				require.NoError(t, err)
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(body)
			}
			line := regexp.MustCompile(`(?m)^taskgraph_tasks\{[^}]*\} (\d+)$`)
			sum := func(body string) int {
				n := 0
				for _, m := range line.FindAllStringSubmatch(body, -1) {
					v, _ := strconv.Atoi(m[1])
					n += v
				}
				return n
			}
			status, _ := scrape("")
			require.Equal(t, http.StatusUnauthorized, status)
			for _, who := range []string{"platform", "adminA", "adminB", "opA", "jwtOpA"} {
				status, body := scrape(s.tok[who])
				require.Equal(t, http.StatusOK, status, who)
				ids, _ := s.visible(t, who, nil)
				require.Equal(t, len(ids), sum(body), "%s: %s", who, body)
				require.Equal(t, who == "platform", strings.Contains(body, "taskgraph_claims_total"), "%s: node metrics are the platform's", who)
			}
		})
	})
}

// TestTenantSubscriptions: no transport streams a change of a task of
// another tenant or source.
func TestTenantSubscriptions(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := startTenants(t, dsn, app.Options{Register: func(r *tasktype.Registry) {
			tasktype.Register(r, "chatty", func(ctx context.Context, job *tasktype.Job, _ struct{}) error {
				job.Info("working")
				return nil
			})
		}})
		later := time.Now().Add(time.Hour).Format(time.RFC3339)
		a := s.create(t, "opA", map[string]any{"type": "chatty", "title": "opA's"})
		s.await(t, "opA", a.ID, succeeded)

		t.Run("ByIDAnInvisibleTaskIsNotFound", func(t *testing.T) {
			for _, who := range []string{"adminB", "opB", "jwtOpA"} {
				c := dialAs(t, s.Server, s.tok[who])
				for id, q := range map[string]string{
					"u": `subscription($id: ID!) { taskUpdated(id: $id) { id } }`,
					"l": `subscription($id: ID!) { taskLogAppended(taskId: $id) { message } }`,
				} {
					c.Subscribe(id, q, map[string]any{"id": a.ID})
					var p struct{ Errors []apptest.Error }
					require.NoError(t, json.Unmarshal(c.Next().Payload, &p))
					require.Len(t, p.Errors, 1, who)
					require.Equal(t, "NOT_FOUND", p.Errors[0].Code(), who)
					require.Equal(t, "complete", c.Next().Type)
				}
				c.Conn.Close()
			}
			waitNoSubscribers(t, s.Server)
		})

		t.Run("AQueryOverAWebsocketReadsWhatItReadsOverHTTP", func(t *testing.T) {
			for _, who := range []string{"adminB", "jwtOpA", "opA"} {
				want, _ := s.visible(t, who, nil)
				c := dialAs(t, s.Server, s.tok[who])
				c.Subscribe("q", `{ tasks(first: 500) { edges { node { id } } } task: node(id: `+a.ID+`) { id } }`, nil)
				m := c.Next()
				require.Equal(t, "next", m.Type, "%s", m.Payload)
				var p struct {
					Data struct {
						Tasks struct {
							Edges []struct{ Node struct{ ID string } }
						}
					}
					Errors []apptest.Error
				}
				require.NoError(t, json.Unmarshal(m.Payload, &p))
				var got []string
				for _, e := range p.Data.Tasks.Edges {
					got = append(got, e.Node.ID)
				}
				sort.Strings(got)
				require.Equal(t, want, got, who)
				if who == "opA" {
					require.Empty(t, p.Errors)
				} else {
					require.Len(t, p.Errors, 1, who)
					require.Equal(t, "NOT_FOUND", p.Errors[0].Code(), who)
				}
				c.Conn.Close()
			}
		})

		t.Run("AFilteredStreamCarriesOnlyVisibleChanges", func(t *testing.T) {
			// Over a websocket and over SSE, an admin of B and the JWT op
			// of A subscribe to every change; then tenant A's token op,
			// the JWT op and B's op each create a task, in that order.
			// Were a foreign change delivered, it would arrive first.
			type stream struct {
				who  string
				next func() string // the title of the next change
			}
			var streams []stream
			for _, who := range []string{"adminB", "jwtOpA", "adminA"} {
				c := dialAs(t, s.Server, s.tok[who])
				c.Subscribe("all", `subscription { taskUpdated { title } }`, nil)
				streams = append(streams, stream{who + " over a websocket", func() string {
					m := c.Next()
					require.Equal(t, "next", m.Type, "%s", m.Payload)
					var p struct {
						Data struct{ TaskUpdated struct{ Title string } }
					}
					require.NoError(t, json.Unmarshal(m.Payload, &p))
					return p.Data.TaskUpdated.Title
				}})
				streams = append(streams, stream{who + " over SSE", sseTitles(t, s.Server, s.tok[who], `subscription { taskUpdated { title } }`)})
			}
			s.WaitSubscribers(t, len(streams))
			for _, who := range []string{"opA", "jwtOpA", "opB"} {
				s.create(t, who, map[string]any{"type": "noop", "title": "by " + who, "runAt": later})
			}
			want := map[string][]string{
				"adminB": {"by opB"},
				"jwtOpA": {"by jwtOpA"},
				"adminA": {"by opA", "by jwtOpA"},
			}
			for _, st := range streams {
				who, _, _ := strings.Cut(st.who, " ")
				for _, title := range want[who] {
					require.Equal(t, title, st.next(), st.who)
				}
			}
		})
	})
}

// sseTitles subscribes over SSE as token and returns a function reading the
// title of the next taskUpdated event. The stream ends with the test.
func sseTitles(t *testing.T, s *apptest.Server, token, query string) func() string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	body, _ := json.Marshal(map[string]any{"query": query})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/query", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
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
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		wg.Wait()
	})
	return func() string {
		select {
		case data, ok := <-events:
			require.True(t, ok, "stream ended early")
			var p struct {
				Data   struct{ TaskUpdated struct{ Title string } }
				Errors []apptest.Error
			}
			require.NoError(t, json.Unmarshal([]byte(data), &p))
			require.Empty(t, p.Errors)
			return p.Data.TaskUpdated.Title
		case <-time.After(20 * time.Second):
			t.Fatal("no event")
			return ""
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

// dumpTasks renders every column of every task row as text.
func dumpTasks(t *testing.T, s *apptest.Server) string {
	t.Helper()
	return dumpRows(t, s, "tasks")
}

// dumpRows renders every column of every row of table as text.
func dumpRows(t *testing.T, s *apptest.Server, table string) string {
	t.Helper()
	rows, err := s.App.Store.DB().QueryContext(context.Background(), `SELECT * FROM `+table)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var out strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		for i, v := range vals {
			if b, ok := v.([]byte); ok {
				v = string(b)
			}
			fmt.Fprintf(&out, "%s=%v ", cols[i], v)
		}
		out.WriteByte('\n')
	}
	require.NoError(t, rows.Err())
	return out.String()
}
