// Package auth says who is asking: the Viewer a request acts as, how a
// bearer token (from a token file or a JWT) becomes one, and the HTTP
// middleware that puts it in the request's context. What a viewer may see
// is decided by package access; what it may do, by the engine with the
// checks here.
package auth

import (
	"context"
	"fmt"
	"time"
)

// Role is what a viewer may do.
type Role string

// Roles a token may carry, and the process's own.
const (
	RoleAdmin    Role = "admin"    // everything
	RoleOperator Role = "operator" // creates tasks; sees and acts on its own
	RoleViewer   Role = "viewer"   // reads its own
	// RoleSystem is the process itself (workers, the watchdog, the bench
	// command). No token can carry it.
	RoleSystem Role = "system"
)

// ParseRole accepts the roles a token may carry.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleAdmin, RoleOperator, RoleViewer:
		return r, nil
	}
	return "", fmt.Errorf("role %q is not admin, operator or viewer", s)
}

// Viewer is the user a request acts as.
type Viewer struct {
	User string
	Role Role
	// Tenant is carried from the token and recorded in the audit log;
	// tasks have no tenant, so it does not restrict what is visible.
	Tenant string
	// Expires is when the credentials stop being valid (a JWT's exp);
	// zero for static tokens. A websocket is closed then.
	Expires time.Time
}

// SeesAll reports whether v sees every task, not only its own.
func (v Viewer) SeesAll() bool { return v.Role == RoleAdmin || v.Role == RoleSystem }

// CanMutate reports whether v may create, cancel and retry tasks (its own,
// unless it SeesAll).
func (v Viewer) CanMutate() bool { return v.Role != RoleViewer && v.Role != "" }

// Local is the viewer of a server running without authentication: it
// listens on loopback only, and whoever reaches it administers it.
var Local = Viewer{User: "local", Role: RoleAdmin}

// System is the viewer of the process's own work.
var System = Viewer{User: "system", Role: RoleSystem}

type ctxKey struct{}

// NewContext returns ctx carrying v.
func NewContext(ctx context.Context, v Viewer) context.Context {
	return context.WithValue(ctx, ctxKey{}, v)
}

// NewSystemContext returns ctx acting as System: for workers, the watchdog,
// migrations and other work of the process itself, never for a request.
func NewSystemContext(ctx context.Context) context.Context {
	return NewContext(ctx, System)
}

// FromContext returns the viewer of ctx, and false when there is none.
func FromContext(ctx context.Context) (Viewer, bool) {
	v, ok := ctx.Value(ctxKey{}).(Viewer)
	return v, ok
}

// Require returns the viewer of ctx, or an *UnauthenticatedError when
// there is none: nothing is done for nobody.
func Require(ctx context.Context) (Viewer, error) {
	v, ok := FromContext(ctx)
	if !ok || v.User == "" || v.Role == "" {
		return Viewer{}, &UnauthenticatedError{Reason: "no credentials"}
	}
	return v, nil
}

// UnauthenticatedError is a request without valid credentials: none, a
// token the server does not know, a bad signature, an expired JWT.
type UnauthenticatedError struct {
	Reason string
}

func (e *UnauthenticatedError) Error() string { return "unauthenticated: " + e.Reason }

// ForbiddenError is a viewer asking for something its role does not allow.
type ForbiddenError struct {
	Role   Role
	Action string
}

func (e *ForbiddenError) Error() string {
	return fmt.Sprintf("forbidden: role %s may not %s", e.Role, e.Action)
}

// AllowMutate returns a *ForbiddenError naming action unless v may
// mutate tasks.
func (v Viewer) AllowMutate(action string) error {
	if !v.CanMutate() {
		return &ForbiddenError{Role: v.Role, Action: action}
	}
	return nil
}
