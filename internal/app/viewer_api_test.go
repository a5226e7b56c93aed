package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// TestViewerQuery: `viewer` says who the request's credentials are and
// what they may see — a platform administrator, a tenant's admin, an
// operator — and, on a server that authenticates nobody, a local platform
// administrator; without a token on a secured server it is UNAUTHENTICATED.
func TestViewerQuery(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		path, tokens := apptest.Tokens(t,
			auth.Viewer{User: "root", Role: auth.RoleAdmin},
			auth.Viewer{User: "ada", Role: auth.RoleAdmin, Tenant: "acme"},
			auth.Viewer{User: "otto", Role: auth.RoleOperator, Tenant: "acme"},
		)
		s := apptest.Start(t, dsn, app.Options{}, func(c *app.Config) {
			c.Access.TokenFile = path
			c.Access.PlatformAdmins = []auth.Identity{{Source: auth.SourceToken, User: "root"}}
			c.Roles = []app.Role{app.RoleAPI}
		})
		type viewer struct {
			User, Tenant, Source, Role string
			Admin, Platform            bool
		}
		const q = `{ viewer { user tenant source role admin platform expiresAt } }`
		for name, want := range map[string]viewer{
			"root": {User: "root", Source: auth.SourceToken, Role: "platform", Admin: true, Platform: true},
			"ada":  {User: "ada", Tenant: "acme", Source: auth.SourceToken, Role: "admin", Admin: true},
			"otto": {User: "otto", Tenant: "acme", Source: auth.SourceToken, Role: "operator"},
		} {
			var got struct{ Viewer viewer }
			s.QueryAs(t, tokens[name], q, nil, &got)
			require.Equal(t, want, got.Viewer, name)
		}
		r := s.DoAs(t, "", q, nil)
		require.NotEmpty(t, r.Errors)
		require.Equal(t, "UNAUTHENTICATED", r.Errors[0].Code())

		open := apptest.Start(t, dsn, app.Options{}, func(c *app.Config) { c.Roles = []app.Role{app.RoleAPI} })
		var got struct{ Viewer viewer }
		open.QueryAs(t, "", q, nil, &got)
		require.True(t, got.Viewer.Platform, "everyone is a platform administrator on an open server: %+v", got.Viewer)
		require.True(t, got.Viewer.Admin)
	})
}
