package auth

import (
	"cmp"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"time"
)

// Config says how requests authenticate. With neither TokenFile nor JWT the
// server is open: every request acts as Local (see Authenticator.Open).
type Config struct {
	// TokenFile is a file of hashed static tokens (see ParseTokenFile).
	TokenFile string
	// JWT accepts signed JWTs.
	JWT *JWTConfig
	// TrustedProxies are the addresses of reverse proxies whose
	// X-Forwarded-For is believed when recording a client's address.
	TrustedProxies []netip.Prefix
	// PlatformAdmins are the identities that administer every tenant
	// (--platform-admins). Each must still authenticate with the admin
	// role; it then acts as RolePlatform.
	PlatformAdmins []Identity
	// ReloadInterval is how often the token file is looked at for changes
	// while connections hold credentials from it (see Watch). Default:
	// ReloadIntervalDefault.
	ReloadInterval time.Duration
	Log            *slog.Logger
}

// Authenticator maps the credentials of a request to a Viewer.
type Authenticator struct {
	tokens      *tokenFile
	jwt         *jwtVerifier
	trusted     []netip.Prefix
	platform    map[Identity]bool
	log         *slog.Logger
	reloadEvery time.Duration
	sess        sessions
}

// New reads the token file and checks the JWT configuration.
func New(cfg Config) (*Authenticator, error) {
	a := &Authenticator{trusted: cfg.TrustedProxies, log: cfg.Log, platform: map[Identity]bool{}, reloadEvery: cmp.Or(cfg.ReloadInterval, ReloadIntervalDefault)}
	if a.log == nil {
		a.log = slog.Default()
	}
	for _, id := range cfg.PlatformAdmins {
		a.platform[id] = true
	}
	var err error
	if cfg.TokenFile != "" {
		if a.tokens, err = openTokenFile(cfg.TokenFile, a.log); err != nil {
			return nil, err
		}
		a.tokens.changed = a.credentialsChanged
	}
	if cfg.JWT != nil {
		if a.jwt, err = newJWTVerifier(*cfg.JWT); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Open reports whether no authentication is configured. An open server
// must listen on loopback only; every request acts as Local.
func (a *Authenticator) Open() bool { return a.tokens == nil && a.jwt == nil }

// Authenticate returns the viewer of an Authorization value ("Bearer
// <token>"), or an *UnauthenticatedError. An open Authenticator returns
// Local whatever it is given.
func (a *Authenticator) Authenticate(authorization string) (Viewer, error) {
	if a.Open() {
		return Local, nil
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	token = strings.TrimSpace(token)
	if authorization == "" {
		return Viewer{}, &UnauthenticatedError{Reason: "no credentials; send Authorization: Bearer <token>"}
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return Viewer{}, &UnauthenticatedError{Reason: "the Authorization header must be Bearer <token>"}
	}
	if a.tokens != nil {
		if v, ok := a.tokens.lookup(token); ok {
			return a.promote(v), nil
		}
	}
	if a.jwt != nil && strings.Count(token, ".") == 2 {
		v, err := a.jwt.verify(token)
		if err == nil {
			return a.promote(v), nil
		}
		if errors.Is(err, errExpired) {
			// Routine: the client refreshes it.
			a.log.Debug("jwt refused", "reason", err)
			return Viewer{}, &UnauthenticatedError{Reason: "the token has expired"}
		}
		// The client is told only that the token is not valid; whoever
		// runs the server needs to know why (a wrong iss, no role, alg
		// none, another key) to fix the issuer or the configuration.
		a.log.Info("jwt refused", "reason", err.Error())
		return Viewer{}, &UnauthenticatedError{Reason: "the token is not valid"}
	}
	return Viewer{}, &UnauthenticatedError{Reason: "the token is not valid"}
}

// promote makes an admin named by Config.PlatformAdmins a platform
// administrator. The list names identities, not roles: the credentials
// must still say admin, so that demoting the user in the token file or at
// the JWT issuer takes effect.
func (a *Authenticator) promote(v Viewer) Viewer {
	if v.Role == RoleAdmin && a.platform[v.Identity()] {
		v.Role = RolePlatform
	}
	return v
}
