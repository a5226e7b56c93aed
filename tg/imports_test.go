package tg_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/importtest"
	"github.com/taskgraph/taskgraph/tg"
	"github.com/taskgraph/taskgraph/tg/tgtype"
)

// TestImportTargetsAndExportSourcesOfTheProgram: a program's own import
// target writes an uploaded file's good rows into its own table, once each
// however often the import runs, and reports the bad ones; its own export
// source writes that table to a file its owner downloads. Both databases.
func TestImportTargetsAndExportSourcesOfTheProgram(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		c, err := tg.New(ctx, tg.Config{Database: dsn, DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		pg := strings.HasPrefix(dsn, "postgres")
		q := func(s string) string {
			if !pg {
				return s
			}
			for i := 1; strings.Contains(s, "?"); i++ {
				s = strings.Replace(s, "?", fmt.Sprintf("$%d", i), 1)
			}
			return s
		}
		_, err = c.DB().ExecContext(ctx, `CREATE TABLE skus (import_id INTEGER NOT NULL, row_no INTEGER NOT NULL, sku TEXT NOT NULL, qty INTEGER NOT NULL, PRIMARY KEY (import_id, row_no))`)
		require.NoError(t, err)

		target := tg.ImportTarget{
			Name:        "skus",
			Description: "Stock by SKU.",
			Columns: []tg.Column{
				{Key: "sku", Headers: []string{"SKU", "货号"}, Required: true, MaxLen: 16},
				{Key: "qty", Headers: []string{"Quantity", "数量"}, Required: true, Type: tg.Int},
			},
			BusinessKey: []string{"task_id", "row_no"},
			Write: func(ctx context.Context, importID int, rows []tg.Row) error {
				return c.Tx(ctx, func(tx *sql.Tx) error {
					for _, r := range rows {
						// Written once whatever runs again: the import and
						// the row are the key.
						stmt := `INSERT INTO skus (import_id, row_no, sku, qty) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`
						if _, err := tx.ExecContext(ctx, q(stmt), importID, r.No, r.Values["sku"], r.Values["qty"]); err != nil {
							return err
						}
					}
					return nil
				})
			},
			Written: func(ctx context.Context, importID int) (int, error) {
				var n int
				err := c.DB().QueryRowContext(ctx, q(`SELECT COUNT(*) FROM skus WHERE import_id = ?`), importID).Scan(&n)
				return n, err
			},
		}
		require.NoError(t, tg.RegisterImportTarget(c, target))
		var ve *tg.ValidationError
		require.ErrorAs(t, tg.RegisterImportTarget(c, target), &ve, "a name taken")
		require.ErrorAs(t, tg.RegisterImportTarget(c, tg.ImportTarget{Name: "bad", Columns: []tg.Column{{Key: "x"}}}), &ve, "no writer")
		require.NoError(t, tg.RegisterExportSource(c, tg.ExportSource{
			Name:    "skus",
			Columns: []string{"SKU", "Quantity"},
			Rows: func(ctx context.Context, eq tg.ExportQuery, row func(cells ...any) error) error {
				rs, err := c.DB().QueryContext(ctx, q(`SELECT sku, qty FROM skus WHERE qty >= ? ORDER BY sku`), eq.Params["min"])
				if err != nil {
					return err
				}
				defer rs.Close()
				for rs.Next() {
					var sku string
					var qty int
					if err := rs.Scan(&sku, &qty); err != nil {
						return err
					}
					if err := row(sku, qty); err != nil {
						return err
					}
				}
				return rs.Err()
			},
		}))
		require.NoError(t, c.Start(ctx))
		srv := httptest.NewServer(c.Handler())
		t.Cleanup(func() {
			srv.Close()
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(t, c.Stop(sctx))
		})
		api := &apptest.Server{URL: srv.URL}

		file := importtest.CSV([]string{"货号", "数量"}, [][]string{{"A-1", "5"}, {"B-2", "x"}, {"C-3", "12"}}, false)
		r, status := importtest.Upload(t, api, "stock.csv", file, "skus", nil, "stock-1")
		require.Equal(t, http.StatusOK, status, "%+v", r.Errors)
		require.Empty(t, r.Errors)
		var up struct{ ImportFile struct{ ID string } }
		require.NoError(t, json.Unmarshal(r.Data, &up))
		id, err := strconv.Atoi(up.ImportFile.ID)
		require.NoError(t, err)
		done, err := c.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, tgtype.Success, done.Status)
		require.Equal(t, tgtype.ResultPartialSuccess, done.ResultStatus)
		var summary struct{ SuccessCount, FailedCount int }
		require.NoError(t, json.Unmarshal(done.Result, &summary))
		require.Equal(t, 2, summary.SuccessCount)
		require.Equal(t, 1, summary.FailedCount)
		var n int
		require.NoError(t, c.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM skus`).Scan(&n))
		require.Equal(t, 2, n, "the good rows, in the program's own table")

		// The program's source in the export type's schema, and an export
		// of it with the source's own params.
		var types struct {
			TaskTypes []struct {
				Name        string
				InputSchema json.RawMessage
			}
		}
		api.Query(t, `{ taskTypes { name inputSchema } }`, nil, &types)
		for _, tt := range types.TaskTypes {
			if tt.Name == "export" {
				require.Contains(t, string(tt.InputSchema), `"skus"`, "the export's schema lists the program's source")
			}
		}
		exp, err := c.Create(ctx, "export", map[string]any{"source": "skus", "format": "csv", "filter": map[string]any{"params": map[string]string{"min": "10"}}})
		require.NoError(t, err)
		done, err = c.Wait(ctx, exp.ID)
		require.NoError(t, err)
		require.Equal(t, tgtype.Success, done.Status, done.LastError)
		var link struct {
			ArtifactDownloadURL struct{ URL string }
		}
		api.Query(t, `mutation($id: ID!) { artifactDownloadUrl(taskId: $id, kind: EXPORT) { url } }`, map[string]any{"id": done.ID}, &link)
		url := link.ArtifactDownloadURL.URL
		if strings.HasPrefix(url, "/") {
			url = srv.URL + url
		}
		res, err := http.Get(url)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Equal(t, "\ufeffSKU,Quantity\nC-3,12\n", strings.ReplaceAll(string(body), "\r\n", "\n"), "a UTF-8 CSV with its BOM (for Excel)")

		// A filter of another source is refused when the export is created.
		_, err = c.Create(ctx, "export", map[string]any{"source": "skus", "filter": map[string]any{"city": "上海"}})
		require.ErrorAs(t, err, &ve)
	})
}
