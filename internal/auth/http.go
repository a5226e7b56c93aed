package auth

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

type addrKey struct{}

// ClientAddr is the address of the client of the request behind ctx, as
// recorded by Middleware ("" outside a request).
func ClientAddr(ctx context.Context) string {
	s, _ := ctx.Value(addrKey{}).(string)
	return s
}

// WithClientAddr returns ctx recording addr as the client's address.
func WithClientAddr(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, addrKey{}, addr)
}

// Middleware authenticates every request before next sees it:
//
//   - open (no authentication configured): only requests addressed to a
//     loopback host name are served (a page on another site cannot reach
//     the server through DNS rebinding), acting as Local;
//   - otherwise a valid "Authorization: Bearer <token>" is required, and a
//     request without one is answered 401 with a GraphQL error body
//     (extensions.code UNAUTHENTICATED). A genuine websocket upgrade (see
//     IsWebsocketUpgrade) may come without it: its token then arrives in
//     connection_init. Any other request with an Upgrade header is a plain
//     request and needs credentials like one (an "Upgrade: x" with
//     "Accept: text/event-stream" is served by the SSE transport).
//
// Either way the client's address is recorded (ClientAddr).
func (a *Authenticator) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := WithClientAddr(r.Context(), a.clientAddr(r))
		if a.Open() {
			if !LoopbackHost(r.Host) {
				WriteError(w, http.StatusForbidden, "FORBIDDEN",
					"this server runs without authentication and only answers requests addressed to localhost")
				return
			}
			next.ServeHTTP(w, r.WithContext(NewContext(ctx, Local)))
			return
		}
		header := r.Header.Get("Authorization")
		if header == "" && IsWebsocketUpgrade(r) {
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		v, err := a.Authenticate(header)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="taskgraph"`)
			WriteError(w, http.StatusUnauthorized, "UNAUTHENTICATED", err.Error())
			return
		}
		next.ServeHTTP(w, r.WithContext(WithCredential(NewContext(ctx, v), header)))
	})
}

// IsWebsocketUpgrade reports whether r is a websocket opening handshake
// (RFC 6455 §4.1): a GET with "Connection: upgrade", "Upgrade: websocket",
// a Sec-WebSocket-Key and Sec-WebSocket-Version 13. Tokens in the headers
// are compared without regard to case.
func IsWebsocketUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet &&
		headerHasToken(r.Header, "Connection", "upgrade") &&
		headerHasToken(r.Header, "Upgrade", "websocket") &&
		r.Header.Get("Sec-WebSocket-Key") != "" &&
		strings.TrimSpace(r.Header.Get("Sec-WebSocket-Version")) == "13"
}

// headerHasToken reports whether a comma-separated header holds token.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// WriteError answers with a GraphQL-shaped error, which is what clients of
// /query parse.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]any{
		"errors": []any{map[string]any{"message": msg, "extensions": map[string]any{"code": code}}},
		"data":   nil,
	})
}

// clientAddr is the request's peer, or, when the peer is a trusted proxy,
// the right-most address in X-Forwarded-For that is not itself a trusted
// proxy (the left-most entries are whatever the client chose to send).
func (a *Authenticator) clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || !a.trustedProxy(peer) {
		return host
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // garbage from here on leftwards: stop at what we know
		}
		if !a.trustedProxy(hop) {
			return hop.String()
		}
		host = hop.String()
	}
	return host
}

func (a *Authenticator) trustedProxy(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range a.trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// LoopbackHost reports whether a host (or host:port) names this machine
// only: localhost, 127.0.0.0/8 or ::1.
func LoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
