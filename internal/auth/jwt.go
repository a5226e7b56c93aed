package auth

import (
	"bytes"
	"crypto/rsa"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// JWTConfig says which JWTs are accepted and how their claims map to a
// Viewer. At least one of HS256Key and RS256Key must be set.
type JWTConfig struct {
	// HS256Key verifies HS256 tokens (a shared secret, 32 bytes or more).
	HS256Key []byte
	// RS256Key verifies RS256 tokens (the issuer's public key).
	RS256Key *rsa.PublicKey
	// Issuer, when set, must equal the token's iss.
	Issuer string
	// Audience, when set, must be among the token's aud.
	Audience string
	// Leeway is the clock skew tolerated on exp, nbf and iat.
	Leeway time.Duration
	// UserClaim, RoleClaim and TenantClaim name the claims holding the
	// user (default "sub"), the role (default "role": admin, operator or
	// viewer) and the optional tenant (default "tenant").
	UserClaim, RoleClaim, TenantClaim string
	// Now replaces time.Now (tests).
	Now func() time.Time
}

// MinHS256KeyLen is the shortest HS256 secret accepted (RFC 7518 §3.2).
const MinHS256KeyLen = 32

type jwtVerifier struct {
	cfg     JWTConfig
	parser  *jwt.Parser
	methods []string
}

func newJWTVerifier(cfg JWTConfig) (*jwtVerifier, error) {
	if cfg.HS256Key == nil && cfg.RS256Key == nil {
		return nil, errors.New("jwt: no key")
	}
	if cfg.HS256Key != nil && len(cfg.HS256Key) < MinHS256KeyLen {
		return nil, fmt.Errorf("jwt: the HS256 key is %d bytes; at least %d are needed", len(cfg.HS256Key), MinHS256KeyLen)
	}
	cfg.UserClaim = orDefault(cfg.UserClaim, "sub")
	cfg.RoleClaim = orDefault(cfg.RoleClaim, "role")
	cfg.TenantClaim = orDefault(cfg.TenantClaim, "tenant")
	var methods []string
	if cfg.HS256Key != nil {
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	if cfg.RS256Key != nil {
		methods = append(methods, jwt.SigningMethodRS256.Alg())
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(methods),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(cfg.Leeway),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	if cfg.Now != nil {
		opts = append(opts, jwt.WithTimeFunc(cfg.Now))
	}
	return &jwtVerifier{cfg: cfg, parser: jwt.NewParser(opts...), methods: methods}, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// verify checks the token's signature and standard claims and maps it to a
// Viewer. Its errors say why, for the server's log; clients are only told
// that the token was refused.
func (j *jwtVerifier) verify(token string) (Viewer, error) {
	claims := jwt.MapClaims{}
	_, err := j.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		// WithValidMethods has already refused other algorithms ("none",
		// and HS256 signed with an RSA public key as its secret).
		switch t.Method.Alg() {
		case jwt.SigningMethodHS256.Alg():
			return j.cfg.HS256Key, nil
		case jwt.SigningMethodRS256.Alg():
			return j.cfg.RS256Key, nil
		}
		return nil, fmt.Errorf("unexpected algorithm %s", t.Method.Alg())
	})
	if err != nil {
		return Viewer{}, err
	}
	user, _ := claims[j.cfg.UserClaim].(string)
	if user == "" {
		return Viewer{}, fmt.Errorf("claim %q (the user) is missing or not a string", j.cfg.UserClaim)
	}
	roleName, _ := claims[j.cfg.RoleClaim].(string)
	role, err := ParseRole(roleName)
	if err != nil {
		return Viewer{}, fmt.Errorf("claim %q: %w", j.cfg.RoleClaim, err)
	}
	tenant, _ := claims[j.cfg.TenantClaim].(string)
	v := Viewer{User: user, Role: role, Source: SourceJWT, Tenant: tenant}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		v.Expires = exp.Add(j.cfg.Leeway)
	}
	return v, nil
}

// errExpired is jwt's own, re-exported so that Authenticate can tell an
// expired token (the client should refresh it) from a bad one.
var errExpired = jwt.ErrTokenExpired

// ReadHS256Key reads an HS256 secret from a file (trailing newlines are
// not part of it).
func ReadHS256Key(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("jwt HS256 key: %w", err)
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(b) < MinHS256KeyLen {
		return nil, fmt.Errorf("jwt HS256 key %s: %d bytes; at least %d are needed", path, len(b), MinHS256KeyLen)
	}
	return b, nil
}

// ReadRS256PublicKey reads the PEM public key RS256 tokens are verified with.
func ReadRS256PublicKey(path string) (*rsa.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("jwt RS256 key: %w", err)
	}
	k, err := jwt.ParseRSAPublicKeyFromPEM(b)
	if err != nil {
		return nil, fmt.Errorf("jwt RS256 key %s: %w", path, err)
	}
	return k, nil
}
