// Package auth says who is asking: the Viewer a request acts as.
package auth

import "context"

// Role is what a viewer may do.
type Role string

// Roles.
const (
	RoleAdmin    Role = "admin"    // everything
	RoleOperator Role = "operator" // creates tasks; sees and acts on its own
	RoleViewer   Role = "viewer"   // reads its own
)

// Viewer is the user a request acts as.
type Viewer struct {
	User string
	Role Role
}

// Local is the viewer of a server running without authentication: it
// listens on loopback only, and whoever reaches it administers it.
var Local = Viewer{User: "local", Role: RoleAdmin}

type ctxKey struct{}

// NewContext returns ctx carrying v.
func NewContext(ctx context.Context, v Viewer) context.Context {
	return context.WithValue(ctx, ctxKey{}, v)
}

// FromContext returns the viewer of ctx, and false when there is none.
func FromContext(ctx context.Context) (Viewer, bool) {
	v, ok := ctx.Value(ctxKey{}).(Viewer)
	return v, ok
}
