package exporter_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/xuri/excelize/v2"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/exporter"
	"github.com/taskgraph/taskgraph/internal/importtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type bundle struct {
	s   *apptest.Server
	sub *events.Subscription[events.TaskChange]
}

func start(t *testing.T, dsn string) *bundle {
	t.Helper()
	s := apptest.Start(t, dsn, app.Options{})
	sub := s.App.Broker.SubscribeTasks(func(c events.TaskChange) bool { return c.Task.Status.Terminal() }, 1024)
	t.Cleanup(sub.Close)
	return &bundle{s: s, sub: sub}
}

func (b *bundle) finished(t *testing.T, id string) *ent.Task {
	t.Helper()
	want, _ := strconv.Atoi(id)
	timeout := time.After(60 * time.Second)
	for {
		select {
		case c := <-b.sub.C:
			if c.Task.ID == want {
				require.Equal(t, lifecycle.Success, c.Task.Status, "last error: %s", c.Task.LastError)
				return c.Task
			}
		case <-timeout:
			t.Fatalf("task %s did not finish", id)
		}
	}
}

func (b *bundle) create(t *testing.T, typ string, input map[string]any) string {
	t.Helper()
	var out struct{ CreateTask struct{ ID string } }
	b.s.Query(t, `mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"type": typ, "input": input}}, &out)
	return out.CreateTask.ID
}

func (b *bundle) download(t *testing.T, id, kind string) []byte {
	t.Helper()
	var out struct{ ArtifactDownloadURL struct{ URL string } }
	b.s.Query(t, `mutation($id: ID!, $kind: ArtifactKind) { artifactDownloadUrl(taskId: $id, kind: $kind) { url } }`,
		map[string]any{"id": id, "kind": kind}, &out)
	resp, err := http.Get(out.ArtifactDownloadURL.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return body
}

// dangerous are contact names a spreadsheet program would run. (Leading
// tabs and carriage returns are trimmed by the import; the writer's own test
// covers them.)
var dangerous = []string{`=HYPERLINK("http://evil.example","x")`, "+1+1", "-2+3", "@SUM(A1:A2)", "=1+2", "=cmd|' /C calc'!A0"}

func (b *bundle) importContacts(t *testing.T) string {
	t.Helper()
	rows := importtest.Rows(len(dangerous)+4, nil)
	for i, d := range dangerous {
		rows[i][0] = d
	}
	rows[len(rows)-1][4] = "广州"
	tk := importtest.MustUpload(t, b.s, "contacts.csv", importtest.CSV(importtest.ContactsHeader, rows, true), nil, "")
	b.finished(t, tk.ID)
	return tk.ID
}

func TestExport(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("ContactsAreExportedWithFormulaInjectionEscaped", func(t *testing.T) {
			t.Parallel()
			b := start(t, d.DSN(t))
			b.importContacts(t)
			for _, format := range []string{"csv", "xlsx"} {
				id := b.create(t, exporter.ExportType, map[string]any{"source": "contacts", "format": format})
				final := b.finished(t, id)
				var res exporter.ExportResult
				require.NoError(t, json.Unmarshal(final.Result, &res))
				require.Equal(t, len(dangerous)+4, res.Rows)
				body := b.download(t, id, "EXPORT")
				var rows [][]string
				if format == "csv" {
					require.True(t, bytes.HasPrefix(body, []byte("\xEF\xBB\xBF")), "a BOM for spreadsheet programs")
					r := csv.NewReader(bytes.NewReader(body[3:]))
					var err error
					rows, err = r.ReadAll()
					require.NoError(t, err)
				} else {
					f, err := excelize.OpenReader(bytes.NewReader(body))
					require.NoError(t, err)
					rows, err = f.GetRows("contacts")
					require.NoError(t, err)
					require.NoError(t, f.Close())
				}
				require.Len(t, rows, len(dangerous)+5, format)
				for i, d := range dangerous {
					require.Equal(t, "'"+d, rows[i+1][1], format)
				}
				require.Equal(t, "用户"+strconv.Itoa(len(dangerous)), rows[len(dangerous)+1][1], "safe cells are unchanged")
				// A file that leaves the system is masked like the API.
				for _, r := range rows[1:] {
					require.Regexp(t, `^138\*{4}\d{4}$`, r[2], "phone")
					require.Regexp(t, `^u\*\*\*@example\.com$`, r[3], "e-mail")
				}
			}
		})
		t.Run("AFilterSelectsRowsAcrossPages", func(t *testing.T) {
			t.Parallel()
			b := start(t, d.DSN(t))
			b.importContacts(t)
			id := b.create(t, exporter.ExportType, map[string]any{"source": "contacts", "format": "csv", "filter": map[string]any{"city": "广州"}})
			b.finished(t, id)
			rows, err := csv.NewReader(bytes.NewReader(b.download(t, id, "EXPORT")[3:])).ReadAll()
			require.NoError(t, err)
			require.Len(t, rows, 2)
			require.Equal(t, "广州", rows[1][5])

			id = b.create(t, exporter.ExportType, map[string]any{"source": "tasks", "format": "csv", "filter": map[string]any{"type": "import", "resultStatus": "SUCCESS"}})
			b.finished(t, id)
			rows, err = csv.NewReader(bytes.NewReader(b.download(t, id, "EXPORT")[3:])).ReadAll()
			require.NoError(t, err)
			require.Len(t, rows, 2)
			require.Equal(t, "import", rows[1][2])
		})
		t.Run("AFilterForAnotherSourceIsRefused", func(t *testing.T) {
			t.Parallel()
			b := start(t, d.DSN(t))
			r := b.s.Do(t, `mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`, map[string]any{"in": map[string]any{
				"type": "export", "input": map[string]any{"source": "contacts", "filter": map[string]any{"status": []string{"FAILED"}}}}})
			require.Len(t, r.Errors, 1)
			require.Equal(t, "VALIDATION", r.Errors[0].Code())
		})
	})
}

func TestReport(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("AggregatesTaskOutcomesAndContactsPerCity", func(t *testing.T) {
			t.Parallel()
			b := start(t, d.DSN(t))
			b.importContacts(t)
			id := b.create(t, exporter.ReportType, map[string]any{})
			final := b.finished(t, id)
			var res exporter.ReportResult
			require.NoError(t, json.Unmarshal(final.Result, &res))
			require.Equal(t, len(dangerous)+4, res.Contacts)
			f, err := excelize.OpenReader(bytes.NewReader(b.download(t, id, "REPORT")))
			require.NoError(t, err)
			defer f.Close()
			require.Equal(t, []string{"Summary", "Tasks by day", "Contacts by city"}, f.GetSheetList())
			summary, err := f.GetRows("Summary")
			require.NoError(t, err)
			require.Contains(t, summary, []string{"Contacts", strconv.Itoa(len(dangerous) + 4)})
			days, err := f.GetRows("Tasks by day")
			require.NoError(t, err)
			today := time.Now().UTC().Format("2006-01-02")
			var importRow []string
			for _, r := range days {
				if r[0] == today && r[1] == "import" {
					importRow = r
				}
			}
			require.NotNil(t, importRow, "%v", days)
			require.Equal(t, []string{today, "import", "1", "1"}, importRow[:4], "one import, SUCCESS")
			cities, err := f.GetRows("Contacts by city")
			require.NoError(t, err)
			require.Contains(t, cities, []string{"广州", "1"})
		})
	})
}
