package graph

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2/ast"

	"taskgraph/graph/wsgorilla"
)

// ServerConfig configures the GraphQL handler.
type ServerConfig struct {
	Resolver *Resolver
	// Introspection enables schema introspection (the playground needs it).
	Introspection bool
	// CheckOrigin decides which websocket origins are accepted.
	// Default: same origin only (gorilla's default).
	CheckOrigin func(r *http.Request) bool
	// ComplexityLimit bounds a query's cost. Default: 2000.
	ComplexityLimit int
	// MaxUploadSize bounds an uploaded file (importFile); requests larger
	// than it (plus room for the other form fields) are refused. Default:
	// no uploads beyond gqlgen's default of 32 MiB.
	MaxUploadSize int64
	Log           *slog.Logger
}

// uploadSlack is room for the multipart request's other parts.
const uploadSlack = 1 << 20

// NewServer returns the GraphQL handler with every transport: HTTP GET and
// POST, SSE, and websockets speaking graphql-transport-ws and graphql-ws.
func NewServer(cfg ServerConfig) *handler.Server {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	srv := handler.New(NewExecutableSchema(Config{Resolvers: cfg.Resolver}))
	// SSE must come before POST: both answer POST, SSE only when the
	// client accepts text/event-stream.
	srv.AddTransport(transport.SSE{})
	srv.AddTransport(transport.Websocket{
		Implementation: wsgorilla.Implementation{Upgrader: websocket.Upgrader{
			CheckOrigin:       cfg.CheckOrigin,
			HandshakeTimeout:  10 * time.Second,
			EnableCompression: false,
		}},
		KeepAlivePingInterval: 10 * time.Second,
		InitTimeout:           10 * time.Second,
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
	if cfg.Introspection {
		srv.Use(extension.Introspection{})
	}
	srv.Use(extension.AutomaticPersistedQuery{Cache: lru.New[string](100)})
	limit := cfg.ComplexityLimit
	if limit == 0 {
		limit = 2000
	}
	srv.Use(extension.FixedComplexityLimit(limit))
	srv.SetErrorPresenter(ErrorPresenter(log))
	srv.SetRecoverFunc(RecoverFunc(log))
	return srv
}
