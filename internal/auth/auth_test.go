package auth_test

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/internal/auth"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestTokenFile(t *testing.T) {
	t.Parallel()
	t.Run("ParsesHashedLinesAndSkipsComments", func(t *testing.T) {
		t.Parallel()
		tok := auth.NewToken()
		m, err := auth.ParseTokenFile([]byte("# who\n\n" + auth.HashToken(tok) + "\talice  operator acme\n"))
		require.NoError(t, err)
		require.Equal(t, auth.Viewer{User: "alice", Role: auth.RoleOperator, Source: auth.SourceToken, Tenant: "acme"}, m[auth.HashToken(tok)])
	})
	t.Run("RefusesBadLinesNamingTheLine", func(t *testing.T) {
		t.Parallel()
		h := auth.HashToken("x")
		for _, tc := range []struct{ content, want string }{
			{"tg_plaintexttoken alice admin", "line 1: \"tg_plaintext...\" is not a SHA-256"},
			{"# c\n" + h + " alice boss", "line 2: role \"boss\""},
			{h + " alice", "line 1: want"},
			{h + " a admin\n" + h + " b admin", "line 2: the same token hash appears twice"},
		} {
			_, err := auth.ParseTokenFile([]byte(tc.content))
			require.ErrorContains(t, err, tc.want)
		}
	})
	t.Run("AChangedFileIsReadAgain", func(t *testing.T) {
		t.Parallel()
		a, b := auth.NewToken(), auth.NewToken()
		path := writeFile(t, auth.TokenLine(a, auth.Viewer{User: "a", Role: auth.RoleAdmin})+"\n")
		authn, err := auth.New(auth.Config{TokenFile: path})
		require.NoError(t, err)
		v, err := authn.Authenticate("Bearer " + a)
		require.NoError(t, err)
		require.Equal(t, "a", v.User)
		// Revoke a, add b.
		require.NoError(t, os.WriteFile(path, []byte(auth.TokenLine(b, auth.Viewer{User: "b", Role: auth.RoleViewer})+"\n# longer, so the size changes\n"), 0o600))
		_, err = authn.Authenticate("Bearer " + a)
		require.ErrorAs(t, err, new(*auth.UnauthenticatedError))
		v, err = authn.Authenticate("bearer " + b)
		require.NoError(t, err)
		require.Equal(t, auth.RoleViewer, v.Role)
		// A broken file keeps the tokens read last.
		require.NoError(t, os.WriteFile(path, []byte("garbage\n"), 0o600))
		_, err = authn.Authenticate("Bearer " + b)
		require.NoError(t, err)
	})
	t.Run("AMissingOrBrokenFileStopsTheStart", func(t *testing.T) {
		t.Parallel()
		_, err := auth.New(auth.Config{TokenFile: filepath.Join(t.TempDir(), "none")})
		require.Error(t, err)
		_, err = auth.New(auth.Config{TokenFile: writeFile(t, "nonsense here now\n")})
		require.ErrorContains(t, err, "line 1")
	})
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	tok := auth.NewToken()
	path := writeFile(t, auth.TokenLine(tok, auth.Viewer{User: "ops", Role: auth.RoleOperator}))
	authn, err := auth.New(auth.Config{TokenFile: path})
	require.NoError(t, err)
	require.False(t, authn.Open())
	for _, h := range []string{"", "Bearer", "Bearer ", "Basic " + tok, tok, "Bearer tg_unknown", "Bearer " + tok + "x"} {
		_, err := authn.Authenticate(h)
		var ue *auth.UnauthenticatedError
		require.ErrorAs(t, err, &ue, "%q", h)
		require.NotContains(t, err.Error(), tok, "a token is never echoed")
	}
	open, err := auth.New(auth.Config{})
	require.NoError(t, err)
	require.True(t, open.Open())
	v, err := open.Authenticate("")
	require.NoError(t, err)
	require.Equal(t, auth.Local, v)
}

func TestJWT(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef")
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	authn, err := auth.New(auth.Config{JWT: &auth.JWTConfig{
		HS256Key: secret, RS256Key: &rsaKey.PublicKey,
		Issuer: "https://idp.test", Audience: "taskgraph", Leeway: 30 * time.Second,
		Now: func() time.Time { return now },
	}})
	require.NoError(t, err)
	claims := func(mod func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "alice", "role": "operator", "tenant": "acme", "iss": "https://idp.test",
			"aud": []string{"taskgraph", "other"}, "exp": now.Add(time.Hour).Unix(), "iat": now.Add(-time.Minute).Unix()}
		if mod != nil {
			mod(c)
		}
		return c
	}
	hs := func(c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
		require.NoError(t, err)
		return s
	}
	rs := func(c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, c).SignedString(rsaKey)
		require.NoError(t, err)
		return s
	}
	t.Run("ValidTokensMapToAViewer", func(t *testing.T) {
		t.Parallel()
		for _, tok := range []string{hs(claims(nil)), rs(claims(nil))} {
			v, err := authn.Authenticate("Bearer " + tok)
			require.NoError(t, err)
			require.Equal(t, "alice", v.User)
			require.Equal(t, auth.RoleOperator, v.Role)
			require.Equal(t, "acme", v.Tenant)
			require.Equal(t, auth.SourceJWT, v.Source, "a JWT's alice is not the token file's")
			require.True(t, now.Add(time.Hour+30*time.Second).Equal(v.Expires), "expires with the leeway: %v", v.Expires)
		}
	})
	t.Run("WithinTheLeewayAnExpiredTokenStillPasses", func(t *testing.T) {
		t.Parallel()
		_, err := authn.Authenticate("Bearer " + hs(claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-10 * time.Second).Unix() })))
		require.NoError(t, err)
	})
	pemPub, err := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	require.NoError(t, err)
	pubAsSecret := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pemPub})
	confused, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(nil)).SignedString(pubAsSecret)
	require.NoError(t, err)
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims(nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	otherSecret, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(nil)).SignedString([]byte("another secret of thirty-two bytes!"))
	require.NoError(t, err)
	for name, tok := range map[string]string{
		"Expired":                  hs(claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Minute).Unix() })),
		"NoExpiry":                 hs(claims(func(c jwt.MapClaims) { delete(c, "exp") })),
		"IssuedInTheFuture":        hs(claims(func(c jwt.MapClaims) { c["iat"] = now.Add(time.Hour).Unix() })),
		"WrongIssuer":              hs(claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.test" })),
		"WrongAudience":            hs(claims(func(c jwt.MapClaims) { c["aud"] = "someone-else" })),
		"NoRole":                   hs(claims(func(c jwt.MapClaims) { delete(c, "role") })),
		"UnknownRole":              hs(claims(func(c jwt.MapClaims) { c["role"] = "system" })),
		"PlatformRole":             hs(claims(func(c jwt.MapClaims) { c["role"] = "platform" })),
		"NoSubject":                hs(claims(func(c jwt.MapClaims) { delete(c, "sub") })),
		"WrongSecret":              otherSecret,
		"AlgNone":                  none,
		"HS256KeyedWithRSAPubKey":  confused,
		"Truncated":                hs(claims(nil))[:40],
		"SignatureOfAnotherHeader": strings.Join(append(strings.Split(rs(claims(nil)), ".")[:2], strings.Split(hs(claims(nil)), ".")[2]), "."),
	} {
		t.Run("Refuses"+name, func(t *testing.T) {
			t.Parallel()
			_, err := authn.Authenticate("Bearer " + tok)
			var ue *auth.UnauthenticatedError
			require.ErrorAs(t, err, &ue)
			if name == "Expired" {
				require.Contains(t, err.Error(), "expired")
			}
		})
	}
	t.Run("RefusalsAreLoggedWithTheirReason", func(t *testing.T) {
		t.Parallel()
		var logs bytes.Buffer
		logged, err := auth.New(auth.Config{Log: slog.New(slog.NewTextHandler(&logs, nil)), JWT: &auth.JWTConfig{
			HS256Key: secret, Issuer: "https://idp.test", Now: func() time.Time { return now },
		}})
		require.NoError(t, err)
		for tok, reason := range map[string]string{
			hs(claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.test" })): "invalid issuer",
			hs(claims(func(c jwt.MapClaims) { delete(c, "role") })):              `claim \"role\": role \"\" is not admin, operator or viewer`,
			none: "signing method none is invalid",
		} {
			logs.Reset()
			_, err := logged.Authenticate("Bearer " + tok)
			require.Error(t, err)
			require.Contains(t, logs.String(), "level=INFO msg=\"jwt refused\"")
			require.Contains(t, logs.String(), reason)
		}
	})
	t.Run("AShortHS256KeyIsRefused", func(t *testing.T) {
		t.Parallel()
		_, err := auth.New(auth.Config{JWT: &auth.JWTConfig{HS256Key: []byte("short")}})
		require.ErrorContains(t, err, "at least 32")
	})
}

func TestPlatformAdmins(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef")
	root, ops, acmeRoot := auth.NewToken(), auth.NewToken(), auth.NewToken()
	path := writeFile(t, strings.Join([]string{
		auth.TokenLine(root, auth.Viewer{User: "root", Role: auth.RoleAdmin}),
		auth.TokenLine(ops, auth.Viewer{User: "ops", Role: auth.RoleOperator}),
		auth.TokenLine(acmeRoot, auth.Viewer{User: "root", Role: auth.RoleAdmin, Tenant: "acme"}),
	}, "\n"))
	var ids []auth.Identity
	for _, s := range []string{"token:root", "token:ops", "jwt:acme:boss"} {
		id, err := auth.ParseIdentity(s)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	authn, err := auth.New(auth.Config{TokenFile: path, PlatformAdmins: ids,
		JWT: &auth.JWTConfig{HS256Key: secret}})
	require.NoError(t, err)
	jwtAs := func(sub, role, tenant string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "role": role, "tenant": tenant,
			"exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
		require.NoError(t, err)
		return s
	}
	for _, tc := range []struct {
		name, token string
		want        auth.Role
	}{
		{"AListedAdminIsPromoted", root, auth.RolePlatform},
		{"AListedOperatorStaysAnOperator", ops, auth.RoleOperator},
		{"TheSameNameInAnotherTenantIsNotListed", acmeRoot, auth.RoleAdmin},
		{"AListedJWTAdminIsPromoted", jwtAs("boss", "admin", "acme"), auth.RolePlatform},
		{"TheSameSubjectInAnotherTenantIsNotListed", jwtAs("boss", "admin", "other"), auth.RoleAdmin},
		{"AJWTNamedLikeAListedTokenUserIsNotListed", jwtAs("root", "admin", ""), auth.RoleAdmin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, err := authn.Authenticate("Bearer " + tc.token)
			require.NoError(t, err)
			require.Equal(t, tc.want, v.Role)
		})
	}
	t.Run("IdentitiesParseAndRoundTrip", func(t *testing.T) {
		t.Parallel()
		for s, want := range map[string]auth.Identity{
			"token:root":              {Source: "token", User: "root"},
			"jwt:acme:alice":          {Source: "jwt", Tenant: "acme", User: "alice"},
			"jwt:acme:urn:user:alice": {Source: "jwt", Tenant: "acme", User: "urn:user:alice"},
		} {
			id, err := auth.ParseIdentity(s)
			require.NoError(t, err, s)
			require.Equal(t, want, id)
			if want.Tenant != "" || !strings.Contains(want.User, ":") {
				require.Equal(t, s, id.String())
			}
		}
		for _, bad := range []string{"root", "ldap:root", "token:", "jwt:acme:", ""} {
			_, err := auth.ParseIdentity(bad)
			require.Error(t, err, bad)
		}
	})
	t.Run("IdentityKeysNeverCollide", func(t *testing.T) {
		t.Parallel()
		a := auth.Identity{Source: "jwt", Tenant: "a", User: "b:c"}
		b := auth.Identity{Source: "jwt", Tenant: "a:b", User: "c"}
		c := auth.Identity{Source: "jwt:a", Tenant: "b", User: "c"}
		require.NotEqual(t, a.Key(), b.Key())
		require.NotEqual(t, b.Key(), c.Key())
		require.NotEqual(t, a.Key(), c.Key())
	})
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	tok := auth.NewToken()
	path := writeFile(t, auth.TokenLine(tok, auth.Viewer{User: "ops", Role: auth.RoleOperator}))
	closed, err := auth.New(auth.Config{TokenFile: path, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	require.NoError(t, err)
	open, err := auth.New(auth.Config{})
	require.NoError(t, err)
	type seen struct {
		viewer auth.Viewer
		ok     bool
		addr   string
	}
	serve := func(a *auth.Authenticator, r *http.Request) (*httptest.ResponseRecorder, seen) {
		var s seen
		rec := httptest.NewRecorder()
		a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.viewer, s.ok = auth.FromContext(r.Context())
			s.addr = auth.ClientAddr(r.Context())
		})).ServeHTTP(rec, r)
		return rec, s
	}
	t.Run("NoTokenIs401WithAGraphQLError", func(t *testing.T) {
		t.Parallel()
		rec, s := serve(closed, httptest.NewRequest(http.MethodPost, "/query", nil))
		require.False(t, s.ok, "the handler never ran")
		require.Equal(t, http.StatusUnauthorized, rec.Code)
		require.Contains(t, rec.Header().Get("WWW-Authenticate"), "Bearer")
		var body struct {
			Errors []struct {
				Message    string
				Extensions map[string]any
			}
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		require.Equal(t, "UNAUTHENTICATED", body.Errors[0].Extensions["code"])
	})
	t.Run("AValidTokenReachesTheHandlerAsItsViewer", func(t *testing.T) {
		t.Parallel()
		r := httptest.NewRequest(http.MethodPost, "/query", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		r.RemoteAddr = "192.0.2.7:5555"
		r.Header.Set("X-Forwarded-For", "203.0.113.9") // not from a trusted proxy: ignored
		_, s := serve(closed, r)
		require.Equal(t, "ops", s.viewer.User)
		require.Equal(t, "192.0.2.7", s.addr)
	})
	t.Run("AWebsocketUpgradeMayAuthenticateLater", func(t *testing.T) {
		t.Parallel()
		r := httptest.NewRequest(http.MethodGet, "/query", nil)
		r.Header.Set("Upgrade", "WebSocket")
		r.Header.Set("Connection", "keep-alive, Upgrade")
		r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		r.Header.Set("Sec-WebSocket-Version", "13")
		rec, s := serve(closed, r)
		require.Equal(t, http.StatusOK, rec.Code)
		require.False(t, s.ok, "no viewer until connection_init")
	})
	t.Run("AnythingButAGenuineWebsocketHandshakeNeedsCredentials", func(t *testing.T) {
		t.Parallel()
		genuine := func() *http.Request {
			r := httptest.NewRequest(http.MethodGet, "/query", nil)
			r.Header.Set("Upgrade", "websocket")
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
			r.Header.Set("Sec-WebSocket-Version", "13")
			return r
		}
		for name, spoil := range map[string]func(r *http.Request){
			"UpgradeX":     func(r *http.Request) { r.Header.Set("Upgrade", "x") },
			"Post":         func(r *http.Request) { r.Method = http.MethodPost },
			"NoConnection": func(r *http.Request) { r.Header.Del("Connection") },
			"NoKey":        func(r *http.Request) { r.Header.Del("Sec-WebSocket-Key") },
			"OldVersion":   func(r *http.Request) { r.Header.Set("Sec-WebSocket-Version", "8") },
			"SSE": func(r *http.Request) {
				r.Method = http.MethodPost
				r.Header = http.Header{"Upgrade": {"x"}, "Accept": {"text/event-stream"}, "Content-Type": {"application/json"}}
			},
		} {
			r := genuine()
			spoil(r)
			rec, s := serve(closed, r)
			require.Equal(t, http.StatusUnauthorized, rec.Code, name)
			require.False(t, s.ok, name)
		}
	})
	t.Run("XForwardedForIsBelievedFromATrustedProxyOnly", func(t *testing.T) {
		t.Parallel()
		r := httptest.NewRequest(http.MethodPost, "/query", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		r.RemoteAddr = "10.1.2.3:443"
		r.Header.Add("X-Forwarded-For", "1.1.1.1, 203.0.113.9")
		r.Header.Add("X-Forwarded-For", "10.9.9.9")
		_, s := serve(closed, r)
		require.Equal(t, "203.0.113.9", s.addr, "the right-most address that is not a trusted proxy; 1.1.1.1 is the client's say-so")
	})
	t.Run("AnOpenServerAnswersLoopbackHostsOnlyAsLocal", func(t *testing.T) {
		t.Parallel()
		for _, host := range []string{"127.0.0.1:8080", "localhost:8080", "[::1]:8080", "localhost"} {
			r := httptest.NewRequest(http.MethodPost, "/query", nil)
			r.Host = host
			rec, s := serve(open, r)
			require.Equal(t, http.StatusOK, rec.Code, host)
			require.Equal(t, auth.Local, s.viewer)
		}
		// A DNS-rebinding page reaches 127.0.0.1 under its own name.
		r := httptest.NewRequest(http.MethodPost, "/query", nil)
		r.Host = "attacker.example:8080"
		rec, s := serve(open, r)
		require.Equal(t, http.StatusForbidden, rec.Code)
		require.False(t, s.ok)
	})
}

func TestLoopbackHost(t *testing.T) {
	t.Parallel()
	for h, want := range map[string]bool{
		"127.0.0.1": true, "127.1.2.3:80": true, "[::1]:1": true, "localhost:9": true, "LOCALHOST": true, "app.localhost": true,
		"": false, ":8080": false, "0.0.0.0:8080": false, "[::]:80": false, "10.0.0.1:80": false, "example.com": false, "localhost.evil.com": false,
	} {
		require.Equal(t, want, auth.LoopbackHost(h), h)
	}
}

// FuzzAuthenticate feeds random Authorization values and token files: no
// panic, and nothing but a viewer from the file or an
// *UnauthenticatedError.
func FuzzAuthenticate(f *testing.F) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	tok := auth.NewToken()
	path := filepath.Join(f.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(auth.TokenLine(tok, auth.Viewer{User: "u", Role: auth.RoleViewer})), 0o600); err != nil {
		f.Fatal(err)
	}
	authn, err := auth.New(auth.Config{TokenFile: path, JWT: &auth.JWTConfig{HS256Key: secret}})
	if err != nil {
		f.Fatal(err)
	}
	good, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "x", "role": "admin", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
	for _, s := range []string{"Bearer " + tok, "Bearer " + good, "bearer a.b.c", "Basic x", "", "Bearer eyJhbGciOiJub25lIn0.e30."} {
		f.Add(s, []byte(auth.HashToken("x")+" user operator\n# c\n"))
	}
	f.Fuzz(func(t *testing.T, header string, file []byte) {
		v, err := authn.Authenticate(header)
		if err != nil {
			var ue *auth.UnauthenticatedError
			if !errors.As(err, &ue) {
				t.Fatalf("%T: %v", err, err)
			}
		} else if v.User == "" || (v.Role != auth.RoleViewer && v.Role != auth.RoleAdmin) {
			t.Fatalf("unexpected viewer %+v", v)
		}
		if m, err := auth.ParseTokenFile(file); err == nil {
			for h, v := range m {
				if len(h) != 64 || v.User == "" {
					t.Fatalf("bad entry %q %+v", h, v)
				}
			}
		}
	})
}

func TestSessionsAreCheckedAgain(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*auth.Authenticator, string, map[string]string) {
		toks := map[string]string{"a": auth.NewToken(), "b": auth.NewToken()}
		path := writeFile(t, auth.TokenLine(toks["a"], auth.Viewer{User: "a", Role: auth.RoleOperator})+"\n"+
			auth.TokenLine(toks["b"], auth.Viewer{User: "b", Role: auth.RoleOperator})+"\n")
		authn, err := auth.New(auth.Config{TokenFile: path, ReloadInterval: 10 * time.Millisecond})
		require.NoError(t, err)
		return authn, path, toks
	}
	watch := func(t *testing.T, authn *auth.Authenticator, tok string) (<-chan error, func()) {
		v, err := authn.Authenticate("Bearer " + tok)
		require.NoError(t, err)
		revoked := make(chan error, 1)
		stop := authn.Watch("Bearer "+tok, v, func(err error) { revoked <- err })
		return revoked, stop
	}
	within := func(t *testing.T, ch <-chan error) error {
		select {
		case err := <-ch:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("not revoked")
			return nil
		}
	}
	t.Run("ARemovedTokenIsRevokedWithoutAnyRequest", func(t *testing.T) {
		t.Parallel()
		authn, path, toks := setup(t)
		revokedA, stopA := watch(t, authn, toks["a"])
		defer stopA()
		revokedB, stopB := watch(t, authn, toks["b"])
		defer stopB()
		replaceFile(t, path, auth.TokenLine(toks["b"], auth.Viewer{User: "b", Role: auth.RoleOperator})+"\n")
		err := within(t, revokedA)
		require.ErrorAs(t, err, new(*auth.UnauthenticatedError))
		require.Contains(t, err.Error(), "no longer valid")
		select {
		case err := <-revokedB:
			t.Fatalf("b was not revoked: %v", err)
		default:
		}
	})
	t.Run("AChangedRoleIsRevoked", func(t *testing.T) {
		t.Parallel()
		authn, path, toks := setup(t)
		revoked, stop := watch(t, authn, toks["a"])
		defer stop()
		replaceFile(t, path, auth.TokenLine(toks["a"], auth.Viewer{User: "a", Role: auth.RoleViewer})+"\n")
		require.Contains(t, within(t, revoked).Error(), "changed")
		require.NoError(t, authn.Check("Bearer "+toks["a"], auth.Viewer{User: "a", Role: auth.RoleViewer, Source: auth.SourceToken}))
	})
	t.Run("AnExpiringJWTIsRevokedWhenItExpires", func(t *testing.T) {
		t.Parallel()
		secret := []byte("0123456789abcdef0123456789abcdef")
		authn, err := auth.New(auth.Config{JWT: &auth.JWTConfig{HS256Key: secret}})
		require.NoError(t, err)
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "j", "role": "viewer", "exp": time.Now().Add(time.Second).Unix()}).SignedString(secret)
		require.NoError(t, err)
		revoked, stop := watch(t, authn, tok)
		defer stop()
		require.Contains(t, within(t, revoked).Error(), "expired")
	})
	t.Run("ACredentialMadeForAViewerHoldsWhileItsTokenDoes", func(t *testing.T) {
		t.Parallel()
		authn, path, toks := setup(t)
		a, err := authn.Authenticate("Bearer " + toks["a"])
		require.NoError(t, err)
		require.NoError(t, authn.Holds(a))
		// Downgraded: a's line now says viewer.
		replaceFile(t, path, auth.TokenLine(toks["a"], auth.Viewer{User: "a", Role: auth.RoleViewer})+"\n"+
			auth.TokenLine(toks["b"], auth.Viewer{User: "b", Role: auth.RoleOperator})+"\n")
		require.ErrorAs(t, authn.Holds(a), new(*auth.UnauthenticatedError))
		// Revoked: no line names b.
		b := auth.Viewer{User: "b", Role: auth.RoleOperator, Source: auth.SourceToken}
		require.NoError(t, authn.Holds(b))
		replaceFile(t, path, auth.TokenLine(toks["a"], auth.Viewer{User: "a", Role: auth.RoleViewer})+"\n")
		require.ErrorAs(t, authn.Holds(b), new(*auth.UnauthenticatedError))
		require.ErrorAs(t, authn.Holds(auth.Viewer{User: "a", Role: auth.RoleViewer, Source: auth.SourceToken, Tenant: "acme"}), new(*auth.UnauthenticatedError),
			"another tenant's a")
		require.NoError(t, authn.Holds(auth.Viewer{User: "a", Role: auth.RoleViewer, Source: auth.SourceToken}))
	})
	t.Run("AnOpenServerRevokesNothing", func(t *testing.T) {
		t.Parallel()
		open, err := auth.New(auth.Config{})
		require.NoError(t, err)
		stop := open.Watch("", auth.Local, func(error) { t.Error("revoked") })
		stop()
		require.NoError(t, open.Check("", auth.Local))
	})
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// replaceFile replaces the token file at once, as an operator's editor
// does (a reload never reads it half written).
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

func TestWorkerTokens(t *testing.T) {
	tok := auth.NewToken()
	v := auth.Viewer{User: "py", Role: auth.RoleWorker, Types: []string{"py.a", "py.b"}}
	got, err := auth.ParseTokenFile([]byte(auth.TokenLine(tok, v) + "\n"))
	require.NoError(t, err)
	w := got[auth.HashToken(tok)]
	require.Equal(t, auth.RoleWorker, w.Role)
	require.Equal(t, []string{"py.a", "py.b"}, w.Types)
	require.True(t, w.RunsType("py.b"))
	require.False(t, w.RunsType("py.c"))
	require.False(t, w.CanMutate())
	require.False(t, w.IsAdmin())
	require.False(t, auth.Viewer{User: "ada", Role: auth.RoleAdmin}.RunsType("py.a"), "an admin is not a worker")
	for _, bad := range []string{"worker:", "worker:a,,b", "workers"} {
		_, _, err := auth.ParseScopedRole(bad)
		require.Error(t, err, bad)
	}
}
