package app

import (
	"cmp"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"os"

	"github.com/taskgraph/taskgraph/graph"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/ratelimit"
)

// maxBodyBytes bounds a JSON request to /query: the largest task input
// (engine.MaxInputBytes) and a query fit with room to spare. Multipart
// requests (uploads) are bounded by their own transport, which holds their
// operations part to the same cap.
const maxBodyBytes = graph.MaxJSONSizeDefault

func newAuthenticator(c AccessConfig, log *slog.Logger) (*auth.Authenticator, error) {
	cfg := auth.Config{TokenFile: c.TokenFile, TrustedProxies: c.TrustedProxies, PlatformAdmins: c.PlatformAdmins, Log: log}
	if c.JWTHS256KeyFile != "" || c.JWTRS256KeyFile != "" {
		j := &auth.JWTConfig{
			Issuer: c.JWTIssuer, Audience: c.JWTAudience, Leeway: c.JWTLeeway,
			UserClaim: c.JWTUserClaim, RoleClaim: c.JWTRoleClaim, TenantClaim: c.JWTTenantClaim,
		}
		var err error
		if c.JWTHS256KeyFile != "" {
			if j.HS256Key, err = auth.ReadHS256Key(c.JWTHS256KeyFile); err != nil {
				return nil, fmt.Errorf("--jwt-hs256-key-file: %w", err)
			}
			// ReadHS256Key drops a trailing newline (echo adds one); say
			// so, since the issuer must sign with the key without it.
			if fi, err := os.Stat(c.JWTHS256KeyFile); err == nil && fi.Size() != int64(len(j.HS256Key)) {
				log.Warn("the HS256 key file ends with a line break, which is not part of the key: tokens must be signed with the key without it",
					"file", c.JWTHS256KeyFile, "key_bytes", len(j.HS256Key), "file_bytes", fi.Size())
			}
		}
		if c.JWTRS256KeyFile != "" {
			if j.RS256Key, err = auth.ReadRS256PublicKey(c.JWTRS256KeyFile); err != nil {
				return nil, fmt.Errorf("--jwt-rs256-key-file: %w", err)
			}
		}
		cfg.JWT = j
	}
	return auth.New(cfg)
}

func newMasker(c AccessConfig) (*mask.Masker, error) {
	var rules mask.Rules
	if c.MaskFile != "" {
		var err error
		if rules, err = mask.LoadRules(c.MaskFile); err != nil {
			return nil, err
		}
	}
	rules.Keys = append(rules.Keys, c.MaskKeys...)
	return mask.New(rules)
}

func newLimiter(c AccessConfig) (*ratelimit.Limiter, error) {
	return ratelimit.New(ratelimit.Config{PerSecond: c.RateLimit, Burst: c.RateBurst})
}

// queryHandler is /query: authentication (or, on an open server, the
// loopback Host check), the Origin check for every request that has one
// (a foreign page may not use the browser's access: no CSRF, no
// cross-site websocket), a body limit, then GraphQL.
func (a *App) queryHandler(gql http.Handler) http.Handler {
	checkOrigin := graph.CheckOrigin(a.Config.Access.AllowedOrigins)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !checkOrigin(r) {
			auth.WriteError(w, http.StatusForbidden, graph.CodeForbidden, fmt.Sprintf("origin %s may not use this API (see -allowed-origins)", r.Header.Get("Origin")))
			return
		}
		if v, _ := auth.FromContext(r.Context()); v.Role == auth.RoleWorker {
			auth.WriteError(w, http.StatusForbidden, graph.CodeForbidden, "a worker's credentials serve the worker protocol (/worker/v1/) only, not GraphQL")
			return
		}
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "multipart/form-data" {
			r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		}
		gql.ServeHTTP(w, r)
	})
	return a.Auth.Middleware(inner)
}

func (a *App) websocketConfig() graph.WebsocketConfig {
	ws := a.opts.Websocket
	ws.MaxSubscriptions = cmp.Or(ws.MaxSubscriptions, a.Config.Access.WSMaxSubs)
	ws.MaxConnectionsPerUser = cmp.Or(ws.MaxConnectionsPerUser, a.Config.Access.WSMaxConnections)
	return ws
}
