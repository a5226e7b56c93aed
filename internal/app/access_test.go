package app_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// syncBuffer is a log destination written by many goroutines.
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

// dumpDatabase renders every row of every table as text.
func dumpDatabase(t *testing.T, db *sql.DB, postgres bool) string {
	t.Helper()
	ctx := context.Background()
	q := `SELECT name FROM sqlite_master WHERE type = 'table'`
	if postgres {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`
	}
	rows, err := db.QueryContext(ctx, q)
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		tables = append(tables, name)
	}
	require.NoError(t, rows.Err())
	rows.Close()
	require.Contains(t, tables, "tasks")
	var out strings.Builder
	for _, table := range tables {
		rows, err := db.QueryContext(ctx, `SELECT * FROM "`+table+`"`)
		require.NoError(t, err)
		cols, err := rows.Columns()
		require.NoError(t, err)
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			fmt.Fprintf(&out, "%s:", table)
			for i, v := range vals {
				if b, ok := v.([]byte); ok {
					v = string(b)
				}
				fmt.Fprintf(&out, " %s=%v", cols[i], v)
			}
			out.WriteByte('\n')
		}
		require.NoError(t, rows.Err())
		rows.Close()
	}
	return out.String()
}

type leakyIn struct {
	Phone       string `json:"phone"`
	IDNo        string `json:"idNo"`
	Note        string `json:"note"`
	EmployeeRef string `json:"employeeRef"`
	// The classes a hostile review found: a URL with credentials, a PIN, a request
	// body held as a JSON string, header pairs, an old 15-digit ID.
	DSN     string              `json:"dsn"`
	Pin     string              `json:"pin"`
	Body    string              `json:"body"`
	Headers []map[string]string `json:"headers"`
	OldID   string              `json:"oldId"`
}

// Secrets of TestSensitiveInputNeverShowsInPlaintext: a mobile number and a
// national ID number (built-in rules), an employee number (a pattern from
// the rules file) and a value under a key named by -mask-keys.
const (
	phone    = "13912345678"
	idNo     = "11010519491231002X"
	employee = "EMP-123456"
	keyed    = "ref-secret-4242"
	dbPass   = "db-pass-7781"
	pin      = "pin-90210"
	bodyPass = "body-pass-5521"
	header   = "hdr-key-3390"
	oldID    = "110105491231002"
	cardNo   = "6222020200112233446"
)

func TestSensitiveInputNeverShowsInPlaintext(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		logs := &syncBuffer{}
		rules := filepath.Join(t.TempDir(), "mask.json")
		require.NoError(t, os.WriteFile(rules, []byte(`{"patterns": [{"name": "employee", "regexp": "\\bEMP-\\d{6}\\b", "keepHead": 4}]}`), 0o600))
		s := apptest.Start(t, dsn, app.Options{
			Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Register: func(r *tasktype.Registry) {
				tasktype.Register(r, "leaky", func(ctx context.Context, job *tasktype.Job, in leakyIn) error {
					job.Info("calling "+in.Phone+" about "+in.IDNo, "phone", in.Phone, "idNo", in.IDNo, "note", in.Note, "ref", in.EmployeeRef)
					job.Info("connecting to "+in.DSN, "body", in.Body, "oldId", in.OldID)
					job.SetResult(map[string]any{"reached": in.Phone, "note": in.Note})
					return tasktype.NonRetryable(fmt.Errorf("customer %s (id %s, %s, %s) refused; %s; body %s; old id %s",
						in.Phone, in.IDNo, in.Note, in.EmployeeRef, in.DSN, in.Body, in.OldID))
				})
				tasktype.Register(r, "panicky", func(ctx context.Context, job *tasktype.Job, in leakyIn) error {
					panic("cannot reach " + in.Phone + " " + in.IDNo)
				})
			},
		}, func(c *app.Config) {
			c.Access.MaskFile = rules
			c.Access.MaskKeys = []string{"employeeRef"}
		})
		all := s.App.Broker.SubscribeTasks(func(events.TaskChange) bool { return true }, 1024)
		defer all.Close()

		input := map[string]any{"phone": phone, "idNo": idNo, "note": "badge " + employee + ", card " + cardNo, "employeeRef": keyed,
			"dsn": "postgres://app:" + dbPass + "@db.internal/x", "pin": pin, "body": `{"password":"` + bodyPass + `"}`,
			"headers": []map[string]string{{"name": "X-Access-Key", "value": header}}, "oldId": oldID}
		var api strings.Builder // every API response, as the client got it
		var ids []string
		for _, typ := range []string{"leaky", "panicky"} {
			r := s.Do(t, `mutation($in: CreateTaskInput!) { createTask(input: $in) { id title bizID input } }`, map[string]any{"in": map[string]any{
				"type": typ, "title": "call tel_" + phone, "bizId": idNo, "input": input, "maxAttempts": 1,
				"idempotencyKey": typ + "-" + oldID,
			}})
			require.Empty(t, r.Errors)
			api.Write(r.Data)
			var out struct{ CreateTask struct{ ID string } }
			require.NoError(t, json.Unmarshal(r.Data, &out))
			ids = append(ids, out.CreateTask.ID)
		}
		// A bad input is refused with problems that do not quote it.
		r := s.Do(t, `mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`, map[string]any{"in": map[string]any{
			"type": "noop", "input": map[string]any{"sleepMs": phone, phone: idNo},
		}})
		require.NotEmpty(t, r.Errors)
		raw, _ := json.Marshal(r.Errors)
		api.Write(raw)

		for _, id := range ids {
			var st struct{ Task struct{ Status string } }
			apptest.Eventually(t, 30*time.Second, func() (bool, string) {
				s.Query(t, `query($id: ID!) { task(id: $id) { status } }`, map[string]any{"id": id}, &st)
				return st.Task.Status == "FAILED", "task " + id + " is " + st.Task.Status
			})
			r := s.Do(t, `query($id: ID!) { task(id: $id) { title bizID input result lastError instances { lastError result }
				logs { edges { node { message fields } } } } }`, map[string]any{"id": id})
			require.Empty(t, r.Errors)
			api.Write(r.Data)
		}
		var cancelled struct {
			CancelTasks []struct{ Error struct{ Message string } }
		}
		s.Query(t, `mutation($ids: [ID!]!) { cancelTasks(ids: $ids, reason: "customer `+phone+` asked") { error { message } } }`, map[string]any{"ids": ids}, &cancelled)
		raw, _ = json.Marshal(cancelled)
		api.Write(raw)

		// Every event published meanwhile, as subscribers got them.
		var evs strings.Builder
		for len(all.C) > 0 {
			c := <-all.C
			b, err := json.Marshal(c.Task)
			require.NoError(t, err)
			evs.Write(b)
		}

		dump := dumpDatabase(t, s.App.Store.DB(), s.App.Store.Postgres())
		require.Contains(t, dump, "139****5678", "the dump holds the masked task")
		require.Contains(t, evs.String(), "139****5678", "events were captured")
		require.Contains(t, logs.String(), "handler panicked", "the log was captured")
		for where, text := range map[string]string{"database": dump, "API": api.String(), "events": evs.String(), "log": logs.String()} {
			for _, secret := range []string{phone, idNo, employee, keyed, dbPass, pin, bodyPass, header, oldID, cardNo} {
				require.NotContains(t, text, secret, "%s shows %s in plaintext", where, secret)
			}
		}
	})
}

// auditRecord is an auditLogs node.
type auditRecord struct {
	ID         string
	Actor      string
	Role       string
	Tenant     string
	Action     string
	TaskIds    []string
	Outcome    string
	ErrorCode  string
	RemoteAddr string
	Details    map[string]any
}

func auditLog(t *testing.T, s *apptest.Server, token string, where map[string]any) []auditRecord {
	t.Helper()
	var out struct {
		AuditLogs struct {
			TotalCount int
			Edges      []struct{ Node auditRecord }
		}
	}
	s.QueryAs(t, token, `query($w: AuditLogWhereInput) { auditLogs(first: 500, where: $w) { totalCount edges { node {
		id actor role tenant action taskIds outcome errorCode remoteAddr details } } } }`, map[string]any{"w": where}, &out)
	recs := make([]auditRecord, len(out.AuditLogs.Edges))
	for i, e := range out.AuditLogs.Edges {
		recs[i] = e.Node
	}
	require.Len(t, recs, out.AuditLogs.TotalCount)
	sort.Slice(recs, func(i, j int) bool { a, _ := strconv.Atoi(recs[i].ID); b, _ := strconv.Atoi(recs[j].ID); return a < b })
	return recs
}

func TestEveryAuditedActionLeavesExactlyOneRecord(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		path, tok := apptest.Tokens(t,
			auth.Viewer{User: "root", Role: auth.RoleAdmin},
			auth.Viewer{User: "alice", Role: auth.RoleOperator, Tenant: "acme"},
			auth.Viewer{User: "vera", Role: auth.RoleViewer},
		)
		s := apptest.Start(t, dsn, app.Options{Register: func(r *tasktype.Registry) {
			tasktype.Register(r, "fails", func(ctx context.Context, job *tasktype.Job, _ struct{}) error {
				return tasktype.NonRetryable(fmt.Errorf("no"))
			})
		}}, func(c *app.Config) {
			c.Access.TokenFile = path
			c.Access.TrustedProxies = nil
			// root reads every tenant's records (alice is of acme).
			c.Access.PlatformAdmins = []auth.Identity{{Source: auth.SourceToken, User: "root"}}
		})
		later := time.Now().Add(time.Hour).Format(time.RFC3339)
		do := func(token, q string, vars map[string]any) apptest.Response { return s.DoAs(t, token, q, vars) }
		id := func(r apptest.Response, field string) string {
			var out map[string]struct{ ID string }
			require.NoError(t, json.Unmarshal(r.Data, &out))
			return out[field].ID
		}
		// The reads below write nothing.
		do(tok["alice"], `{ tasks { totalCount } taskStats { total } }`, nil)

		waiting := id(do(tok["alice"], `mutation($at: Time) { createTask(input: {type: "noop", title: "first", idempotencyKey: "k", runAt: $at}) { id } }`, map[string]any{"at": later}), "createTask")
		again := id(do(tok["alice"], `mutation($at: Time) { createTask(input: {type: "noop", title: "first", idempotencyKey: "k", runAt: $at}) { id } }`, map[string]any{"at": later}), "createTask")
		require.Equal(t, waiting, again)
		require.NotEmpty(t, do(tok["alice"], `mutation { createTask(input: {type: "rocket"}) { id } }`, nil).Errors)
		waiting2 := id(do(tok["alice"], `mutation($at: Time) { createTask(input: {type: "noop", runAt: $at}) { id } }`, map[string]any{"at": later}), "createTask")
		failing := id(do(tok["alice"], `mutation { createTask(input: {type: "fails"}) { id } }`, nil), "createTask")
		apptest.Eventually(t, 30*time.Second, func() (bool, string) {
			var st struct{ Task struct{ Status string } }
			s.QueryAs(t, tok["alice"], `query($id: ID!) { task(id: $id) { status } }`, map[string]any{"id": failing}, &st)
			return st.Task.Status == "FAILED", "the failing task is " + st.Task.Status
		})
		require.Empty(t, do(tok["alice"], `mutation($id: ID!) { cancelTask(id: $id, reason: "changed my mind") { id } }`, map[string]any{"id": waiting}).Errors)
		require.Equal(t, "NOT_FOUND", do(tok["alice"], `mutation { cancelTask(id: 987654) { id } }`, nil).Errors[0].Code())
		require.Empty(t, do(tok["alice"], `mutation($id: ID!) { retryTask(id: $id) { id } }`, map[string]any{"id": failing}).Errors)
		require.Equal(t, "INVALID_TRANSITION", do(tok["alice"], `mutation($id: ID!) { retryTask(id: $id) { id } }`, map[string]any{"id": waiting}).Errors[0].Code())
		require.Empty(t, do(tok["alice"], `mutation($ids: [ID!]!) { cancelTasks(ids: $ids) { id } }`, map[string]any{"ids": []string{waiting2, "987654"}}).Errors)
		require.Empty(t, do(tok["alice"], `mutation($ids: [ID!]!) { retryTasks(ids: $ids) { id } }`, map[string]any{"ids": []string{waiting}}).Errors)
		require.Equal(t, "FORBIDDEN", do(tok["vera"], `mutation { createTask(input: {type: "noop"}) { id } }`, nil).Errors[0].Code())
		// A download (the download handler records it with this call).
		failingID, _ := strconv.Atoi(failing)
		ctx := auth.WithClientAddr(auth.NewContext(context.Background(), auth.Viewer{User: "alice", Role: auth.RoleOperator}), "192.0.2.1")
		require.NoError(t, s.App.Audit.Record(ctx, auditEntryDownload(failingID)))

		recs := auditLog(t, s, tok["root"], nil)
		type summary struct{ Actor, Action, Outcome, Code, Tasks string }
		var got []summary
		for _, r := range recs {
			got = append(got, summary{r.Actor, r.Action, r.Outcome, r.ErrorCode, strings.Join(r.TaskIds, ",")})
		}
		require.Equal(t, []summary{
			{"alice", "CREATE", "OK", "", waiting},
			{"alice", "CREATE", "OK", "", waiting}, // the idempotent replay
			{"alice", "CREATE", "FAILED", "VALIDATION", ""},
			{"alice", "CREATE", "OK", "", waiting2},
			{"alice", "CREATE", "OK", "", failing},
			{"alice", "CANCEL", "OK", "", waiting},
			{"alice", "CANCEL", "FAILED", "NOT_FOUND", "987654"},
			{"alice", "RETRY", "OK", "", failing},
			{"alice", "RETRY", "FAILED", "INVALID_TRANSITION", waiting},
			{"alice", "CANCEL_MANY", "PARTIAL", "", waiting2 + ",987654"},
			{"alice", "RETRY_MANY", "FAILED", "INVALID_TRANSITION", waiting},
			{"vera", "CREATE", "FAILED", "FORBIDDEN", ""},
			{"alice", "DOWNLOAD", "OK", "", failing},
		}, got)
		require.Equal(t, "acme", recs[0].Tenant)
		require.Equal(t, "operator", recs[0].Role)
		require.Equal(t, "127.0.0.1", recs[0].RemoteAddr)
		require.Equal(t, "192.0.2.1", recs[len(recs)-1].RemoteAddr)
		require.Equal(t, true, recs[1].Details["existing"])
		require.Equal(t, "changed my mind", recs[5].Details["reason"])
		require.Equal(t, []any{
			map[string]any{"id": json.Number(waiting2), "ok": true},
			map[string]any{"id": json.Number("987654"), "ok": false, "error": "NOT_FOUND"},
		}, numbers(t, recs[9].Details["results"]))

		byTask := auditLog(t, s, tok["root"], map[string]any{"taskID": failing})
		require.Len(t, byTask, 3, "create, retry and download of this task: %+v", byTask)
		byTask = auditLog(t, s, tok["root"], map[string]any{"taskID": waiting2})
		require.Len(t, byTask, 2, "create and bulk cancel of this task: %+v", byTask)
		byActor := auditLog(t, s, tok["root"], map[string]any{"actor": "vera"})
		require.Len(t, byActor, 1)
	})
}

// numbers re-decodes v keeping numbers as json.Number, for comparison.
func numbers(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	require.NoError(t, dec.Decode(&out))
	return out
}

func TestRateLimits(t *testing.T) {
	t.Parallel()
	path, tok := apptest.Tokens(t,
		auth.Viewer{User: "root", Role: auth.RoleAdmin},
		auth.Viewer{User: "alice", Role: auth.RoleOperator},
		auth.Viewer{User: "bob", Role: auth.RoleOperator},
	)
	s := apptest.Start(t, dbtest.SQLite(t), app.Options{}, func(c *app.Config) {
		c.Access.TokenFile = path
		c.Access.RateLimit = 0.001 // a token every quarter of an hour: none comes back during the test
		c.Access.RateBurst = 2
	})
	create := `mutation { createTask(input: {type: "noop"}) { id } }`
	require.Empty(t, s.DoAs(t, tok["alice"], create, nil).Errors)
	require.Empty(t, s.DoAs(t, tok["alice"], create, nil).Errors)
	r := s.DoAs(t, tok["alice"], create, nil)
	require.Len(t, r.Errors, 1)
	require.Equal(t, "RATE_LIMITED", r.Errors[0].Code())
	require.Contains(t, r.Errors[0].Message, "retry in")
	after, _ := r.Errors[0].Extensions["retryAfterSeconds"].(float64)
	require.Greater(t, after, 60.0)
	// Cancels and retries count too; other users have their own bucket.
	require.Equal(t, "RATE_LIMITED", s.DoAs(t, tok["alice"], `mutation { cancelTask(id: 1) { id } }`, nil).Errors[0].Code())
	var bulk struct{ CancelTasks []struct{ Ok bool } }
	s.QueryAs(t, tok["bob"], `mutation { cancelTasks(ids: [987651, 987652, 987653]) { ok } }`, nil, &bulk)
	require.Len(t, bulk.CancelTasks, 3, "a bulk action larger than the burst is admitted on a full bucket")
	r = s.DoAs(t, tok["bob"], `mutation { retryTask(id: 1) { id } }`, nil)
	require.Equal(t, "RATE_LIMITED", r.Errors[0].Code())
	owed, _ := r.Errors[0].Extensions["retryAfterSeconds"].(float64)
	require.Greater(t, owed, 1.5/0.001, "it cost one token per id: the third is owed, the next waits for two")
	// Reads are not limited, and refused calls are not audited.
	var out struct{ Tasks struct{ TotalCount int } }
	s.QueryAs(t, tok["alice"], `{ tasks { totalCount } }`, nil, &out)
	require.Equal(t, 2, out.Tasks.TotalCount)
	require.Len(t, auditLog(t, s, tok["root"], nil), 3)
}

func auditEntryDownload(taskID int) audit.Entry {
	return audit.Entry{Action: audit.Download, TaskIDs: []int{taskID}, Details: map[string]any{"artifact": "errors/report.xlsx"}}
}

// TestAuditDetailsAreBounded: what a caller sends is recorded cut, saying
// so (a hostile review, finding 5): a refused createTask once recorded its whole
// title, megabytes of it.
func TestAuditDetailsAreBounded(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		path, tok := apptest.Tokens(t, auth.Viewer{User: "root", Role: auth.RoleAdmin}, auth.Viewer{User: "v", Role: auth.RoleViewer})
		s := apptest.Start(t, dsn, app.Options{}, func(c *app.Config) { c.Access.TokenFile = path })
		title := strings.Repeat("标题", 100_000) // 600 kB, 200,000 characters (twice: in title and key)
		r := s.DoAs(t, tok["v"], `mutation($t: String) { createTask(input: {type: "noop", title: $t, idempotencyKey: $t}) { id } }`, map[string]any{"t": title})
		require.Len(t, r.Errors, 1)
		require.Equal(t, "FORBIDDEN", r.Errors[0].Code())
		recs := auditLog(t, s, tok["root"], map[string]any{"actor": "v"})
		require.Len(t, recs, 1)
		for _, key := range []string{"title", "idempotencyKey"} {
			got, _ := recs[0].Details[key].(string)
			require.Less(t, len(got), 1024, key)
			require.True(t, strings.HasPrefix(got, "标题标题"), key)
			require.True(t, strings.HasSuffix(got, "…[cut: 600000 bytes]"), "a cut value says it was cut, and how long it was: %s", got[len(got)-40:])
		}
		require.Equal(t, "noop", recs[0].Details["type"], "short values are kept whole")
	})
}

func TestCut(t *testing.T) {
	t.Parallel()
	require.Equal(t, "short", audit.Cut("short", 10))
	require.Equal(t, "ab…[cut: 5 bytes]", audit.Cut("abcde", 2))
	require.Equal(t, "é…[cut: 4 bytes]", audit.Cut("éé", 1), "never inside a character")
	require.Equal(t, "a…[cut: 9000 bytes]", audit.Cut("abcdef…[cut: 9000 bytes]", 1), "cut twice, the first length stays")
}
