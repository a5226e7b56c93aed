package graph

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskgraph/auth"
	"taskgraph/graph/wsgorilla"
	"taskgraph/outage"
)

// ServerConfig configures the GraphQL handler. Zero limits take their
// defaults.
type ServerConfig struct {
	Resolver *Resolver
	// Auth authenticates the connection_init payload of websockets. HTTP
	// requests are authenticated before they reach the handler (see
	// auth.Authenticator.Middleware); nil means an open server.
	Auth *auth.Authenticator
	// Introspection enables schema introspection (the playground needs it).
	Introspection bool
	// AllowedOrigins are the foreign origins whose pages may open
	// websockets (see CheckOrigin); same-origin pages and clients that
	// send no Origin always may.
	AllowedOrigins []string
	// ComplexityLimit bounds a query's cost (see complexity). Default:
	// ComplexityLimitDefault.
	ComplexityLimit int
	// MaxDepth, MaxAliases and MaxFields bound a query's shape.
	MaxDepth, MaxAliases, MaxFields int
	// ParserTokenLimit bounds the tokens of a query document.
	ParserTokenLimit int
	// Websocket limits.
	WS WebsocketConfig
	// MaxUploadSize bounds an uploaded file (importFile); requests larger
	// than it (plus room for the other form fields) are refused. Default:
	// no uploads beyond gqlgen's default of 32 MiB.
	MaxUploadSize int64
	// Outages, when set, counts requests failed by an outage (logged once
	// per outage instead of once per request).
	Outages *outage.Monitor
	Log     *slog.Logger
}

// uploadSlack is room for the multipart request's other parts.
const uploadSlack = 1 << 20

// WebsocketConfig limits websocket connections.
type WebsocketConfig struct {
	// InitTimeout is how long a connection may take to send
	// connection_init. Default: 10s.
	InitTimeout time.Duration
	// PingInterval between ping frames; a peer silent for two is dropped.
	// Default: 15s.
	PingInterval time.Duration
	// MaxSubscriptions is how many operations one connection may run at
	// once. Default: 50.
	MaxSubscriptions int
	// MaxConnectionsPerUser is how many websockets one user may have open.
	// Default: 20.
	MaxConnectionsPerUser int
	// PayloadReadLimit bounds a message from the client. Default: 256 KiB
	// plus room for the query: 1 MiB.
	PayloadReadLimit int64
}

// Server is the GraphQL handler.
type Server struct {
	*handler.Server
	conns   *connections
	sockets *wsgorilla.Conns
	streams *streams
}

// GoAway ends the server's streams for a shutdown: every websocket is
// closed with 1001 (going away) — its client reconnects and subscribes
// again, elsewhere or later — and every SSE stream ends with a last
// UNAVAILABLE error saying the server is shutting down, then complete, and
// its request with it. New websockets are closed and new subscriptions
// refused the same way. It returns when the streams' resolvers are done,
// or when ctx ends.
func (s *Server) GoAway(ctx context.Context) {
	s.sockets.GoAway("server shutting down")
	s.streams.goAway(ctx)
}

// OpenWebsockets is how many websockets are open.
func (s *Server) OpenWebsockets() int { return s.sockets.Len() }

// ServeHTTP marks the requests of streaming transports (websockets, SSE):
// only they may subscribe. A subscription posted as a plain request would
// hold it open, waiting for a first event, for as long as the client likes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "" || (transport.SSE{}).Supports(r) {
		r = r.WithContext(context.WithValue(r.Context(), streamingKey{}, true))
	}
	s.Server.ServeHTTP(w, r)
}

type streamingKey struct{}

func onlyStreamsSubscribe(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	if op := graphql.GetOperationContext(ctx).Operation; op != nil && op.Operation == ast.Subscription && ctx.Value(streamingKey{}) == nil {
		return graphql.OneShot(&graphql.Response{Errors: gqlerror.List{{
			Message:    "subscriptions are served over websockets and SSE (Accept: text/event-stream), not plain requests",
			Extensions: map[string]any{"code": CodeValidation},
		}}})
	}
	return next(ctx)
}

// OpenConnections is how many websockets the identity has open.
func (s *Server) OpenConnections(id auth.Identity) int { return s.conns.open(id) }

// NewServer returns the GraphQL handler with every transport: HTTP GET and
// POST, SSE, and websockets speaking graphql-transport-ws and graphql-ws.
func NewServer(cfg ServerConfig) *Server {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	ws := cfg.WS
	ws.InitTimeout = cmp.Or(ws.InitTimeout, 10*time.Second)
	ws.PingInterval = cmp.Or(ws.PingInterval, 15*time.Second)
	ws.MaxSubscriptions = cmp.Or(ws.MaxSubscriptions, 50)
	ws.MaxConnectionsPerUser = cmp.Or(ws.MaxConnectionsPerUser, 20)
	ws.PayloadReadLimit = cmp.Or(ws.PayloadReadLimit, 1<<20)
	conns := &connections{max: ws.MaxConnectionsPerUser, byUser: map[string]int{}}
	sockets := wsgorilla.NewConns()
	cfg.Resolver.streams = newStreams()

	schemaCfg := Config{Resolvers: cfg.Resolver, Complexity: complexity()}
	srv := handler.New(NewExecutableSchema(schemaCfg))
	// SSE must come before POST: both answer POST, SSE only when the
	// client accepts text/event-stream.
	srv.AddTransport(transport.SSE{})
	srv.AddTransport(transport.Websocket{
		Implementation: wsgorilla.Implementation{
			Upgrader: websocket.Upgrader{
				CheckOrigin:       CheckOrigin(cfg.AllowedOrigins),
				HandshakeTimeout:  10 * time.Second,
				EnableCompression: false,
			},
			PingInterval:  ws.PingInterval,
			MaxOperations: ws.MaxSubscriptions,
			Conns:         sockets,
		},
		InitFunc:              wsInit(cfg.Auth, conns),
		CloseFunc:             wsClose,
		InitTimeout:           ws.InitTimeout,
		KeepAlivePingInterval: 10 * time.Second, // "ka" for graphql-ws clients
		PayloadReadLimit:      &ws.PayloadReadLimit,
	})
	if cfg.MaxUploadSize > 0 {
		// Parts over MaxMemory are spooled to temporary files by
		// net/http, never held whole in memory.
		srv.AddTransport(transport.MultipartForm{MaxUploadSize: cfg.MaxUploadSize + uploadSlack, MaxMemory: 4 << 20})
	}
	srv.AddTransport(transport.Options{})
	srv.AddTransport(transport.GET{})
	srv.AddTransport(transport.POST{})

	srv.SetQueryCache(lru.New[*ast.QueryDocument](1000))
	srv.SetParserTokenLimit(cmp.Or(cfg.ParserTokenLimit, ParserTokenLimitDefault))
	// "Did you mean ...?" would describe the schema to whoever cannot
	// introspect it.
	srv.SetDisableSuggestion(true)
	if cfg.Introspection {
		srv.Use(extension.Introspection{})
	}
	srv.Use(extension.AutomaticPersistedQuery{Cache: lru.New[string](100)})
	// The shape limit runs before the complexity limit (extensions run
	// in the order they are added).
	srv.Use(shapeLimit{
		maxDepth:      cmp.Or(cfg.MaxDepth, MaxDepthDefault),
		maxAliases:    cmp.Or(cfg.MaxAliases, MaxAliasesDefault),
		maxFields:     cmp.Or(cfg.MaxFields, MaxFieldsDefault),
		introspection: cfg.Introspection,
	})
	srv.Use(extension.FixedComplexityLimit(cmp.Or(cfg.ComplexityLimit, ComplexityLimitDefault)))
	srv.AroundOperations(onlyStreamsSubscribe)
	srv.AroundOperations(streamEnds)
	srv.AroundFields(InternalErrors)
	srv.SetErrorPresenter(ErrorPresenter(log, cfg.Outages))
	srv.SetRecoverFunc(RecoverFunc(log))
	return &Server{Server: srv, conns: conns, sockets: sockets, streams: cfg.Resolver.streams}
}
