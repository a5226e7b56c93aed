package importer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/importer"
	"github.com/taskgraph/taskgraph/internal/store"
)

// TestContactReaderSeesWhatTheViewerMaySee writes contacts for the imports
// of three owners in two tenants and reads them back as each kind of
// viewer: an operator its own imports' rows, an admin its tenant's, a
// platform administrator and the system every row, nobody nothing; then
// pages, filters and counts per city.
func TestContactReaderSeesWhatTheViewerMaySee(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		st, err := store.Open(ctx, store.Config{DSN: dsn})
		require.NoError(t, err)
		access.Install(st.Client())
		t.Cleanup(func() { _ = st.Close() })
		now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
		target := importer.Contacts(st.DB(), st.Tx, st.Postgres(), func() time.Time { return now })

		owners := []auth.Identity{
			{Source: auth.SourceToken, Tenant: "t1", User: "alice"},
			{Source: auth.SourceToken, Tenant: "t1", User: "bob"},
			{Source: auth.SourceToken, Tenant: "t2", User: "alice"},
		}
		imports := make([]int, len(owners))
		for i, o := range owners {
			tk, _, err := st.CreateTask(auth.NewSystemContext(ctx), store.NewTask{
				Type: importer.TaskType, Owner: o.User, OwnerSource: o.Source, Tenant: o.Tenant,
				Input: json.RawMessage(`{}`), InputHash: "h", TimeoutSeconds: 60, RetryPolicy: "default", MaxAttempts: 1,
			})
			require.NoError(t, err)
			imports[i] = tk.ID
			var rows []importer.Record
			for r := 2; r <= 4; r++ { // the header is row 1
				rows = append(rows, importer.Record{RowNo: r, Values: map[string]any{
					"name": fmt.Sprintf("%s-%d", o.User, r), "phone": fmt.Sprintf("1380000%02d%02d", i, r),
					"city": []string{"上海", "北京", ""}[r%3], "tags": []string{"vip", o.Tenant},
				}})
			}
			require.NoError(t, target.Writer.Write(ctx, tk.ID, rows))
		}
		now = now.Add(time.Hour)
		r := importer.ContactReader{DB: st.Client(), Postgres: st.Postgres()}
		as := func(id auth.Identity, role auth.Role) context.Context {
			return auth.NewContext(ctx, auth.Viewer{User: id.User, Role: role, Source: id.Source, Tenant: id.Tenant})
		}
		count := func(ctx context.Context, f importer.ContactFilter) int {
			n, err := r.Count(ctx, f)
			require.NoError(t, err)
			return n
		}
		require.Equal(t, 3, count(as(owners[0], auth.RoleOperator), importer.ContactFilter{}))
		require.Equal(t, 3, count(as(owners[0], auth.RoleViewer), importer.ContactFilter{}))
		require.Equal(t, 0, count(as(owners[0], auth.RoleOperator), importer.ContactFilter{ImportTaskID: imports[1]}), "bob's import")
		require.Equal(t, 6, count(as(owners[1], auth.RoleAdmin), importer.ContactFilter{}))
		require.Equal(t, 3, count(as(owners[2], auth.RoleAdmin), importer.ContactFilter{}))
		require.Equal(t, 9, count(as(auth.Identity{Source: auth.SourceToken, User: "root"}, auth.RolePlatform), importer.ContactFilter{}))
		require.Equal(t, 9, count(auth.NewSystemContext(ctx), importer.ContactFilter{}))
		_, err = r.Count(ctx, importer.ContactFilter{})
		require.ErrorIs(t, err, access.ErrNoViewer)
		_, err = r.Page(ctx, importer.ContactFilter{}, 0, 10)
		require.ErrorIs(t, err, access.ErrNoViewer)

		// Pages by id, or by source row within one import.
		sys := auth.NewSystemContext(ctx)
		var all []importer.Contact
		for after := 0; ; {
			page, err := r.Page(sys, importer.ContactFilter{}, after, 4)
			require.NoError(t, err)
			all = append(all, page...)
			if len(page) < 4 {
				break
			}
			after = page[len(page)-1].ID
		}
		require.Len(t, all, 9)
		for i := 1; i < len(all); i++ {
			require.Greater(t, all[i].ID, all[i-1].ID)
		}
		page, err := r.Page(as(owners[1], auth.RoleOperator), importer.ContactFilter{ImportTaskID: imports[1]}, 2, 10)
		require.NoError(t, err)
		require.Len(t, page, 2)
		c := page[0]
		require.Equal(t, 3, c.RowNo)
		require.Equal(t, imports[1], c.TaskID)
		require.Equal(t, "bob-3", c.Name)
		require.Equal(t, "13800000103", c.Phone)
		require.Equal(t, []string{"vip", "t1"}, c.Tags)
		require.Equal(t, "", c.Email)
		require.True(t, c.CreatedAt.Equal(now.Add(-time.Hour)), "created at %s", c.CreatedAt)

		// Filters.
		require.Equal(t, 3, count(sys, importer.ContactFilter{City: "北京"}))
		require.Equal(t, 1, count(as(owners[0], auth.RoleOperator), importer.ContactFilter{City: "北京"}))
		early, late := now.Add(-2*time.Hour), now
		require.Equal(t, 9, count(sys, importer.ContactFilter{CreatedAfter: &early, CreatedBefore: &late}))
		require.Equal(t, 0, count(sys, importer.ContactFilter{CreatedAfter: &late}))
		require.Equal(t, 0, count(sys, importer.ContactFilter{CreatedBefore: &early}))

		cities, err := r.CountByCity(as(owners[1], auth.RoleAdmin))
		require.NoError(t, err)
		require.ElementsMatch(t, []importer.CityCount{{City: "上海", Count: 2}, {City: "北京", Count: 2}, {City: "", Count: 2}}, cities)
	})
}
