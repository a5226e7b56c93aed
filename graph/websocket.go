package graph

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/taskgraph/taskgraph/graph/wsgorilla"
	"github.com/taskgraph/taskgraph/internal/auth"
)

// Close codes of graphql-transport-ws used when a connection is refused.
const (
	closeForbidden       = 4403 // connection_init without valid credentials
	closeTooManyRequests = 4429 // the user has too many connections open
)

// CheckOrigin accepts requests that carry no Origin (scripts, CLIs: they
// are not a browser acting for someone else), requests from a page served
// by this server (the Origin's host is the request's Host), and requests
// from the origins in allowed ("https://console.example.com"; compared
// without regard to case). Everything else is cross-site: a foreign page
// trying to use a browser's access (cross-site websocket hijacking, CSRF).
func CheckOrigin(allowed []string) func(r *http.Request) bool {
	set := make(map[string]bool, len(allowed))
	for _, o := range allowed {
		set[strings.ToLower(strings.TrimSuffix(o, "/"))] = true
	}
	return func(r *http.Request) bool {
		origin := r.Header.Get("Origin")
		if origin == "" {
			return true
		}
		if set[strings.ToLower(origin)] {
			return true
		}
		u, err := url.Parse(origin)
		return err == nil && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, r.Host)
	}
}

// connections counts each user's open websocket connections, by identity
// (auth.Identity.Key): the same name in another tenant is another user.
type connections struct {
	max    int
	mu     sync.Mutex
	byUser map[string]int
}

// slot is one counted connection; release is idempotent.
type slot struct {
	once    sync.Once
	release func()
}

type slotKey struct{}

func (c *connections) acquire(id auth.Identity) (*slot, error) {
	user := id.Key()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.max > 0 && c.byUser[user] >= c.max {
		return nil, fmt.Errorf("too many connections: user %s already has %d open (the limit)", id.User, c.max)
	}
	c.byUser[user]++
	return &slot{release: func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.byUser[user]--; c.byUser[user] <= 0 {
			delete(c.byUser, user)
		}
	}}, nil
}

// open returns how many connections the identity has open (tests).
func (c *connections) open(id auth.Identity) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byUser[id.Key()]
}

// wsInit authenticates a websocket at connection_init: the payload's
// Authorization ("Bearer <token>"), else the viewer the upgrade request
// authenticated with (its header, or Local on an open server). It counts
// the connection against the user's limit, and watches its credentials:
// when they are revoked (the token removed from the token file, its line
// changed, the JWT expired) the socket is closed with 4403 and the reason.
// Each operation on the socket checks them first as well (wsRecheck).
func wsInit(authn *auth.Authenticator, conns *connections) transport.WebsocketInitFunc {
	return func(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		refuse := func(code int, err error) (context.Context, *transport.InitPayload, error) {
			ctx = transport.WithWebsocketCloseCode(ctx, code)
			ctx = transport.AppendCloseReason(ctx, err.Error())
			return ctx, nil, err
		}
		v, ok := auth.FromContext(ctx)
		credential := auth.Credential(ctx)
		if h := payload.Authorization(); h != "" && authn != nil {
			var err error
			if v, err = authn.Authenticate(h); err != nil {
				return refuse(closeForbidden, err)
			}
			ok, credential = true, h
		}
		if !ok {
			return refuse(closeForbidden, &auth.UnauthenticatedError{Reason: `no credentials; send {"Authorization": "Bearer <token>"} in connection_init`})
		}
		s, err := conns.acquire(v.Identity())
		if err != nil {
			return refuse(closeTooManyRequests, err)
		}
		ctx = auth.NewContext(ctx, v)
		ctx, cancel := context.WithCancelCause(ctx)
		closer := wsgorilla.CloserFrom(ctx)
		revoke := func(err error) {
			// The client reconnects with fresh credentials.
			if closer != nil {
				closer.Close(closeForbidden, err.Error())
			}
			cancel(err)
		}
		stopWatch := func() {}
		if authn != nil {
			stopWatch = authn.Watch(credential, v, revoke)
		}
		release := s.release
		s.release = func() { stopWatch(); cancel(nil); release() }
		ctx = context.WithValue(ctx, wsSessionKey{}, &wsSession{authn: authn, credential: credential, viewer: v, revoke: revoke})
		return context.WithValue(ctx, slotKey{}, s), nil, nil
	}
}

// wsSession is what an operation on a websocket checks first.
type wsSession struct {
	authn      *auth.Authenticator
	credential string
	viewer     auth.Viewer
	revoke     func(error)
}

type wsSessionKey struct{}

// wsRecheck checks a websocket's credentials before each operation it
// runs, so that a revoked token runs nothing more even before the token
// file's change is noticed; and refuses an operation with no viewer at all
// (every request gets one from the authentication middleware or
// connection_init: one without is a way round them).
func wsRecheck(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	refuse := func(msg string) graphql.ResponseHandler {
		return graphql.OneShot(&graphql.Response{Errors: gqlerror.List{{Message: msg, Extensions: map[string]any{"code": CodeUnauthenticated}}}})
	}
	if _, ok := auth.FromContext(ctx); !ok {
		return refuse("unauthenticated: no credentials")
	}
	if s, ok := ctx.Value(wsSessionKey{}).(*wsSession); ok && s.authn != nil {
		if err := s.authn.Check(s.credential, s.viewer); err != nil {
			s.revoke(err)
			return refuse(err.Error())
		}
	}
	return next(ctx)
}

// wsClose releases the connection's slot.
func wsClose(ctx context.Context, _ int) {
	if s, ok := ctx.Value(slotKey{}).(*slot); ok {
		s.once.Do(s.release)
	}
}
