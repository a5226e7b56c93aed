// Package auth says who is asking: the Viewer a request acts as, how a
// bearer token (from a token file or a JWT) becomes one, and the HTTP
// middleware that puts it in the request's context. What a viewer may see
// is decided by package access; what it may do, by the engine with the
// checks here.
package auth

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Role is what a viewer may do.
type Role string

// Roles a token may carry, and the ones only the server grants.
const (
	RoleAdmin    Role = "admin"    // everything in its tenant
	RoleOperator Role = "operator" // creates tasks; sees and acts on its own
	RoleViewer   Role = "viewer"   // reads its own
	// RolePlatform administers every tenant. No token carries it: an
	// admin named by Config.PlatformAdmins (--platform-admins) gets it.
	RolePlatform Role = "platform"
	// RoleWorker runs tasks of the types its credentials name
	// (Viewer.Types) over the worker protocol (package external), and
	// nothing else: it reads nothing, GraphQL refuses it. A token file
	// names it worker:<type>[,<type>...].
	RoleWorker Role = "worker"
	// RoleSystem is the process itself (workers, the watchdog, the bench
	// command). No token can carry it.
	RoleSystem Role = "system"
)

// ParseRole accepts the roles a token may carry (not a worker's: see
// ParseScopedRole).
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleAdmin, RoleOperator, RoleViewer:
		return r, nil
	}
	return "", fmt.Errorf("role %q is not admin, operator or viewer", s)
}

// ParseScopedRole accepts what a token file's role field may say: a role
// ParseRole accepts, or worker:<type>[,<type>...], a worker of those task
// types (returned as types).
func ParseScopedRole(s string) (Role, []string, error) {
	rest, ok := strings.CutPrefix(s, string(RoleWorker)+":")
	if !ok {
		r, err := ParseRole(s)
		if err != nil {
			err = fmt.Errorf("role %q is not admin, operator, viewer or worker:<type>[,<type>...]", s)
		}
		return r, nil, err
	}
	var types []string
	for t := range strings.SplitSeq(rest, ",") {
		if t = strings.TrimSpace(t); t == "" {
			return "", nil, fmt.Errorf("role %q: an empty task type (want worker:<type>[,<type>...])", s)
		}
		types = append(types, t)
	}
	return RoleWorker, types, nil
}

// RunsType reports whether v may claim and finish tasks of type typ over
// the worker protocol: a worker of that type, or the platform (an open
// server's local viewer included) and the process itself.
func (v Viewer) RunsType(typ string) bool {
	switch v.Role {
	case RoleWorker:
		for _, t := range v.Types {
			if t == typ {
				return true
			}
		}
		return false
	case RolePlatform, RoleSystem:
		return true
	}
	return false
}

// Sources of identity: where a viewer's credentials came from. The same
// user name from two sources is two people (a JWT's sub is not a token
// file's user).
const (
	SourceToken  = "token"  // the token file
	SourceJWT    = "jwt"    // a signed JWT
	SourceLocal  = "local"  // an open server (no authentication)
	SourceSystem = "system" // the process itself
)

// Viewer is the user a request acts as.
type Viewer struct {
	User string
	Role Role
	// Source is where the credentials came from (SourceToken, SourceJWT...).
	Source string
	// Tenant is the tenant the credentials name ("" is a tenant too: the
	// one of tokens that name none). Tenants isolate: a viewer sees and
	// acts on tasks of its own tenant only, unless it is a platform
	// administrator.
	Tenant string
	// Expires is when the credentials stop being valid (a JWT's exp);
	// zero for static tokens. A websocket is closed then.
	Expires time.Time
	// Types are the task types a worker (RoleWorker) runs.
	Types []string
}

// Identity is who a viewer is: source, tenant and user together. A task's
// owner is an identity; two viewers are the same person only if all three
// are equal.
type Identity struct {
	Source, Tenant, User string
}

// Identity returns who v is.
func (v Viewer) Identity() Identity {
	return Identity{Source: v.Source, Tenant: v.Tenant, User: v.User}
}

// Key is the identity as one string, for maps and rate-limit buckets: no
// two identities have the same key (each part is length-prefixed).
func (i Identity) Key() string {
	return fmt.Sprintf("%d:%s%d:%s%s", len(i.Source), i.Source, len(i.Tenant), i.Tenant, i.User)
}

// String is source:tenant:user (source:user in the empty tenant), the form
// --platform-admins takes.
func (i Identity) String() string {
	if i.Tenant == "" {
		return i.Source + ":" + i.User
	}
	return i.Source + ":" + i.Tenant + ":" + i.User
}

// ParseIdentity reads source:user (the empty tenant) or
// source:tenant:user. The user is everything after the last separator
// needed, so it may itself contain colons; a tenant may not.
func ParseIdentity(s string) (Identity, error) {
	parts := strings.SplitN(strings.TrimSpace(s), ":", 3)
	var id Identity
	switch len(parts) {
	case 2:
		id = Identity{Source: parts[0], User: parts[1]}
	case 3:
		id = Identity{Source: parts[0], Tenant: parts[1], User: parts[2]}
	default:
		return Identity{}, fmt.Errorf("%q is not source:user or source:tenant:user", s)
	}
	if id.Source != SourceToken && id.Source != SourceJWT {
		return Identity{}, fmt.Errorf("%q: the source must be %s or %s", s, SourceToken, SourceJWT)
	}
	if id.User == "" {
		return Identity{}, fmt.Errorf("%q names no user", s)
	}
	return id, nil
}

// SeesEveryTenant reports whether v reads and acts across tenants: a
// platform administrator, or the process itself.
func (v Viewer) SeesEveryTenant() bool { return v.Role == RolePlatform || v.Role == RoleSystem }

// IsAdmin reports whether v sees every task of its tenant (or of every
// tenant), not only its own, and may read the audit log.
func (v Viewer) IsAdmin() bool { return v.Role == RoleAdmin || v.SeesEveryTenant() }

// CanMutate reports whether v may create, cancel and retry tasks (its own,
// unless it IsAdmin).
func (v Viewer) CanMutate() bool {
	return v.Role != RoleViewer && v.Role != RoleWorker && v.Role != ""
}

// Local is the viewer of a server running without authentication: it
// listens on loopback only, and whoever reaches it administers it.
var Local = Viewer{User: "local", Role: RolePlatform, Source: SourceLocal}

// System is the viewer of the process's own work.
var System = Viewer{User: "system", Role: RoleSystem, Source: SourceSystem}

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

// RequireAdmin returns the viewer of ctx if it administers (a tenant's
// admin, a platform administrator); a *ForbiddenError naming action
// otherwise.
func RequireAdmin(ctx context.Context, action string) (Viewer, error) {
	v, err := Require(ctx)
	if err != nil {
		return v, err
	}
	if !v.IsAdmin() {
		return v, &ForbiddenError{Role: v.Role, Action: action}
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
