//go:build long

package importer_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/importer"
	"github.com/taskgraph/taskgraph/internal/importtest"
	"github.com/taskgraph/taskgraph/internal/spreadsheet"
)

// TestImportAtScale: ten thousand rows, two hundred of them bad: a partial success, its report listing exactly the bad rows (long tier).
func TestImportAtScale(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("TenThousandRowsWithTwoHundredBadOnesAreAPartialSuccess", func(t *testing.T) {
			t.Parallel()
			b := start(t, d.DSN(t), app.Options{})
			bad := func(i int) bool { return i%50 == 7 }
			file := importtest.XLSX(t, importtest.ContactsHeader, importtest.Rows(10000, bad))
			tk := importtest.MustUpload(t, b.s, "客户名单.xlsx", file, nil, "")
			seen := b.wait(t, tk.ID, "finished", func(tk *ent.Task) bool { return tk.Status.Terminal() })
			final := seen[len(seen)-1].Task
			require.Equal(t, lifecycle.Success, final.Status, "last error: %s", final.LastError)
			sum := summaryOf(t, final)
			require.Equal(t, importer.StatusPartialSuccess, sum.Status)
			require.Equal(t, 10000, sum.TotalCount)
			require.Equal(t, 9800, sum.SuccessCount)
			require.Equal(t, 200, sum.FailedCount)
			require.NotNil(t, sum.ReportFile)
			require.Equal(t, 9800, contacts(t, b.s, final.ID))

			// Progress was published live, with the file's row count.
			var progressed bool
			for _, c := range seen {
				progressed = progressed || (c.Kind == events.Progressed && c.Task.ProgressTotal == 10000 && c.Task.ProgressDone > 0)
			}
			require.True(t, progressed, "no progress event")

			// PARTIAL_SUCCESS is visible and filterable.
			var list struct {
				Tasks struct {
					TotalCount int
					Edges      []struct {
						Node struct{ ID, ResultStatus string }
					}
				}
			}
			b.s.Query(t, `{ tasks(where: {resultStatus: PARTIAL_SUCCESS}) { totalCount edges { node { id resultStatus } } } }`, nil, &list)
			require.Equal(t, 1, list.Tasks.TotalCount)
			require.Equal(t, tk.ID, list.Tasks.Edges[0].Node.ID)

			// The report lists exactly the 200 bad rows, with their row
			// numbers (header = row 1), column, masked value and reason,
			// followed by the original row.
			resp, body := download(t, b.s, tk.ID, "ERROR_REPORT", "XLSX")
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
			require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
			require.Equal(t, spreadsheet.XLSX.ContentType(), resp.Header.Get("Content-Type"))
			require.Contains(t, resp.Header.Get("Content-Disposition"), "attachment;")
			require.Contains(t, resp.Header.Get("Content-Disposition"), "filename*=UTF-8''"+tk.Code+"-errors.xlsx")
			rows := xlsxRows(t, body)
			require.Len(t, rows, 201)
			require.Equal(t, append(append([]string{}, importer.ReportHeader...), importtest.ContactsHeader...), rows[0])
			n := 0
			for i := range 10000 {
				if !bad(i) {
					continue
				}
				n++
				r := rows[n]
				require.Equal(t, strconv.Itoa(i+2), r[0])
				require.Equal(t, "手机 (phone)", r[1])
				original := fmt.Sprintf("12%d", i)
				require.NotEqual(t, original, r[2], "a sensitive value is masked")
				require.Equal(t, len(original), len(r[2]))
				require.Equal(t, importtest.BadPhone(len(original)), r[3])
				require.Equal(t, fmt.Sprintf("用户%d", i), r[4], "the original row follows")
			}
			// And as CSV.
			resp, body = download(t, b.s, tk.ID, "ERROR_REPORT", "CSV")
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, "text/csv; charset=utf-8", resp.Header.Get("Content-Type"))
			require.Equal(t, 201, bytes.Count(body, []byte("\n")))
		})
	})
}
