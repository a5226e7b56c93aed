package graph_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/exporter"
	"github.com/taskgraph/taskgraph/internal/importer"
	"github.com/taskgraph/taskgraph/internal/importtest"
)

// TestCostCountsRowsAndBytes runs real imports and exports in two tenants
// — tenant A imports 7 contacts and exports them, tenant B imports 5 rows
// of which 2 are refused (3 imported, an error report written) and
// exports its 3 — and reads taskCost per type and per tenant: the rows
// imported and exported are those, and the bytes stored are the sizes of
// the artifacts the tasks wrote (the uploaded files, the error report in
// both formats, the exports), added up per type and tenant.
func TestCostCountsRowsAndBytes(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := startTenants(t, dsn, app.Options{})
		from := time.Now().UTC().Add(-time.Hour)

		s.importContacts(t, "opA", "甲市", 7)
		content := importtest.CSV(importtest.ContactsHeader, importtest.Rows(5, func(i int) bool { return i%2 == 1 }), false)
		r, status := importtest.UploadAs(t, s.Server, s.tok["opB"], "opB.csv", content, "contacts", nil, "")
		require.Equal(t, http.StatusOK, status, "%+v", r.Errors)
		require.Empty(t, r.Errors)
		var up struct{ ImportFile struct{ ID string } }
		require.NoError(t, json.Unmarshal(r.Data, &up))
		s.await(t, "opB", up.ImportFile.ID, func(status string, rs *string) bool {
			return status == "SUCCESS" && rs != nil && *rs == "PARTIAL_SUCCESS"
		})
		require.Len(t, s.export(t, "adminA", "contacts"), 7)
		require.Len(t, s.export(t, "opB", "contacts"), 3)

		// What the tasks stored, from the artifacts table: every artifact
		// belongs to a task by now, and none was replaced.
		arts, err := s.App.Store.Client().Artifact.Query().WithTask().All(auth.NewSystemContext(t.Context()))
		require.NoError(t, err)
		require.Len(t, arts, 2+2+2) // two uploads, B's error report (xlsx, CSV), two exports
		type figures struct{ RowsImported, RowsExported, BytesStored float64 }
		byType, byTenant := map[string]figures{}, map[string]figures{}
		add := func(m map[string]figures, key string, f figures) {
			g := m[key]
			g.RowsImported += f.RowsImported
			g.RowsExported += f.RowsExported
			g.BytesStored += f.BytesStored
			m[key] = g
		}
		var uploaded bool
		for _, a := range arts {
			require.NotNil(t, a.Edges.Task, "artifact %d has no task", a.ID)
			if a.Tenant == "B" && a.Kind == "SOURCE" {
				require.Equal(t, int64(len(content)), a.Size, "the upload's size is the file's")
				uploaded = true
			}
			add(byType, a.Edges.Task.Type, figures{BytesStored: float64(a.Size)})
			add(byTenant, a.Tenant, figures{BytesStored: float64(a.Size)})
		}
		require.True(t, uploaded)
		for tenant, n := range map[string]float64{"A": 7, "B": 3} {
			add(byType, importer.TaskType, figures{RowsImported: n})
			add(byType, exporter.ExportType, figures{RowsExported: n})
			add(byTenant, tenant, figures{RowsImported: n, RowsExported: n})
		}

		const costQuery = `query($from: Time!, $to: Time!, $by: CostGroup, $tenant: String) {
  taskCost(from: $from, to: $to, groupBy: $by, tenant: $tenant) { key rowsImported rowsExported bytesStored }
}`
		costOf := func(who string, vars map[string]any) map[string]figures {
			t.Helper()
			var out struct {
				TaskCost []struct {
					Key string
					figures
				}
			}
			s.QueryAs(t, s.tok[who], costQuery, vars, &out)
			got := map[string]figures{}
			for _, r := range out.TaskCost {
				got[r.Key] = r.figures
			}
			return got
		}
		to := time.Now().UTC().Add(time.Hour)
		whole := map[string]any{"from": from, "to": to}
		// An execution is counted once its finish committed, and written
		// by the next flush: flush until the last finish has been counted.
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := s.App.Store.FlushHistory(t.Context())
			require.NoError(t, err)
			if got := costOf("platform", whole); got[exporter.ExportType].RowsExported == 10 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		require.Equal(t, byType, costOf("platform", whole), "per type")
		require.Equal(t, byTenant, costOf("platform", map[string]any{"from": from, "to": to, "by": "TENANT"}), "per tenant")
		// Tenant B's operator: its own tenant's figures per type.
		wantB := map[string]figures{}
		for _, a := range arts {
			if a.Tenant == "B" {
				add(wantB, a.Edges.Task.Type, figures{BytesStored: float64(a.Size)})
			}
		}
		add(wantB, importer.TaskType, figures{RowsImported: 3})
		add(wantB, exporter.ExportType, figures{RowsExported: 3})
		require.Equal(t, wantB, costOf("opB", whole), "tenant B")
	})
}
