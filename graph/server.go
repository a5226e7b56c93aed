package graph

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskgraph/taskgraph/graph/wsgorilla"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/outage"
	"github.com/taskgraph/taskgraph/internal/telemetry"
)

// ServerConfig configures the GraphQL handler. Zero limits take their
// defaults.
type ServerConfig struct {
	Resolver *Resolver
	// Tracer, when set, traces each operation (a span named by its type
	// and name, the parent of what it does: a create's span, whose trace
	// the task keeps).
	Tracer trace.Tracer
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
	// MaxJSONSize bounds a JSON request, and the operations and map parts
	// of a multipart one. Default: MaxJSONSizeDefault.
	MaxJSONSize int64
	Log         *slog.Logger
}

// MaxJSONSizeDefault is the largest JSON request: the largest task input
// (engine.MaxInputBytes) and a query fit with room to spare.
const MaxJSONSizeDefault = 2 << 20

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
	auth    *auth.Authenticator
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

// ServeHTTP prepares requests for gqlgen's transports:
//
//   - only a genuine websocket handshake goes to the websocket transport
//     (gqlgen's takes any request with an Upgrade header); the Upgrade
//     header of any other request (h2c, a probe) is dropped, so that it is
//     served as the plain request it is;
//   - an SSE stream counts as a connection of its user, within the same
//     limit as websockets, and ends as soon as its credentials are revoked;
//   - a JSON body that is not a GraphQL request is refused here, without
//     echoing it back (gqlgen's error repeats the whole body);
//   - the requests of streaming transports (websockets, SSE) are marked:
//     only they may subscribe. A subscription posted as a plain request
//     would hold it open, waiting for a first event, for as long as the
//     client likes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if auth.IsWebsocketUpgrade(r) {
		ctx, _ := wsgorilla.WithCloser(r.Context())
		s.Server.ServeHTTP(w, r.WithContext(context.WithValue(ctx, streamingKey{}, true)))
		return
	}
	if r.Header.Get("Upgrade") != "" {
		r = r.Clone(r.Context())
		r.Header.Del("Upgrade")
	}
	if a := r.Header.Get("Accept"); !strings.Contains(a, "text/event-stream") && strings.Contains(strings.ToLower(a), "text/event-stream") {
		// gqlgen's SSE transport looks for it in lower case only.
		r = r.Clone(r.Context())
		r.Header.Set("Accept", strings.ToLower(a))
	}
	if !decodableJSON(w, r) {
		return
	}
	if !(transport.SSE{}).Supports(r) {
		s.Server.ServeHTTP(w, r)
		return
	}
	v, ok := auth.FromContext(r.Context())
	if !ok {
		auth.WriteError(w, http.StatusUnauthorized, CodeUnauthenticated, "unauthenticated: no credentials")
		return
	}
	slot, err := s.conns.acquire(v.Identity())
	if err != nil {
		writeLimit(w, err.Error(), "connections", s.conns.max)
		return
	}
	defer slot.once.Do(slot.release)
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	if s.auth != nil {
		stop := s.auth.Watch(auth.Credential(ctx), v, cancel)
		defer stop()
	}
	s.Server.ServeHTTP(w, r.WithContext(context.WithValue(ctx, streamingKey{}, true)))
}

// writeLimit answers a plain request refused by a limit.
func writeLimit(w http.ResponseWriter, msg, limit string, max int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"errors": []any{map[string]any{"message": msg, "extensions": map[string]any{"code": CodeLimitExceeded, "limit": limit, "max": max}}},
		"data":   nil,
	})
}

// decodableJSON reads the body of a JSON POST (bounded by the caller) and
// refuses it, saying why but not repeating it, unless it decodes as a
// GraphQL request the way gqlgen's transports decode it. The body is put
// back for them.
func decodableJSON(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost {
		return true
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return true
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		status, msg := http.StatusBadRequest, "the request body could not be read"
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			status, msg = http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over %d bytes", tooLarge.Limit)
		}
		auth.WriteError(w, status, CodeValidation, msg)
		return false
	}
	if err := decodeParams(body); err != nil {
		auth.WriteError(w, http.StatusBadRequest, CodeValidation, "the request body is not a GraphQL request in JSON: "+jsonProblem(err))
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return true
}

// decodeParams returns the error gqlgen's transports meet decoding body
// into a graphql.RawParams (with UseNumber), without building the
// variables: they are checked to be an object (or null), which always
// decodes into a map once the JSON is valid. A body that fails this or
// whose variables are not is decoded in full, for the error in the words
// the full decode has for it.
// (Building a createTasks' thousand items to throw them away cost as much
// as gqlgen's own decode of them.)
func decodeParams(body []byte) error {
	var params struct {
		Query         string         `json:"query"`
		OperationName string         `json:"operationName"`
		Variables     objectOrNull   `json:"variables"`
		Extensions    map[string]any `json:"extensions"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	err := dec.Decode(&params)
	if err != nil || params.Variables.other {
		var full graphql.RawParams
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		err = dec.Decode(&full)
	}
	return err
}

// objectOrNull takes a JSON value without decoding it, noting whether it
// is other than an object or null (what a map[string]any refuses).
type objectOrNull struct{ other bool }

func (o *objectOrNull) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '{' && string(b) != "null" {
		o.other = true
	}
	return nil
}

// jsonProblem says what is wrong with a body without quoting it.
func jsonProblem(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("invalid JSON at byte %d", syntax.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("%s must be %s, not a JSON %s", cmp.Or(typ.Field, "the body"), typ.Type, typ.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends early"
	}
	return "it does not decode"
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
		srv.AddTransport(multipartForm{maxUpload: cfg.MaxUploadSize + uploadSlack, maxJSON: cmp.Or(cfg.MaxJSONSize, MaxJSONSizeDefault), maxMemory: 4 << 20,
			precheck: cfg.Resolver.precheckImport})
	}
	srv.AddTransport(transport.Options{})
	srv.AddTransport(transport.GET{})
	srv.AddTransport(transport.POST{})

	cache := lru.New[*ast.QueryDocument](1000)
	srv.SetQueryCache(cache)
	tokenLimit := cmp.Or(cfg.ParserTokenLimit, ParserTokenLimitDefault)
	srv.SetParserTokenLimit(tokenLimit)
	// "Did you mean ...?" would describe the schema to whoever cannot
	// introspect it.
	srv.SetDisableSuggestion(true)
	if cfg.Introspection {
		srv.Use(extension.Introspection{})
	}
	srv.Use(extension.AutomaticPersistedQuery{Cache: lru.New[string](100)})
	// After persisted queries (parameter mutators run in the order they
	// are added), before gqlgen parses and validates the document.
	srv.Use(documentLimit{
		cache:         cache,
		tokenLimit:    tokenLimit,
		maxDepth:      cmp.Or(cfg.MaxDepth, MaxDepthDefault),
		maxAliases:    cmp.Or(cfg.MaxAliases, MaxAliasesDefault),
		maxFields:     cmp.Or(cfg.MaxFields, MaxFieldsDefault),
		maxSelections: MaxSelectionsDefault,
		maxMergeCost:  MaxMergeCostDefault,
		maxVariables:  MaxVariablesDefault,
		maxArguments:  MaxArgumentsDefault,
		introspection: cfg.Introspection,
	})
	srv.Use(extension.FixedComplexityLimit(cmp.Or(cfg.ComplexityLimit, ComplexityLimitDefault)))
	if cfg.Tracer != nil {
		srv.AroundOperations(traceOperations(cfg.Tracer))
	}
	srv.AroundOperations(wsRecheck)
	srv.AroundOperations(onlyStreamsSubscribe)
	srv.AroundOperations(streamEnds)
	srv.AroundFields(InternalErrors)
	srv.SetErrorPresenter(ErrorPresenter(log, cfg.Outages))
	srv.SetRecoverFunc(RecoverFunc(log))
	return &Server{Server: srv, conns: conns, sockets: sockets, streams: cfg.Resolver.streams, auth: cfg.Auth}
}

// traceOperations starts a span for each operation, a child of the trace
// its request carried (telemetry.Incoming), named "query Name",
// "mutation Name" or "subscription Name". A query's or mutation's span
// ends with its response, marked failed when it has errors; a
// subscription's covers its start (its events are the tasks' own spans).
func traceOperations(t trace.Tracer) graphql.OperationMiddleware {
	return func(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
		oc := graphql.GetOperationContext(ctx)
		typ, name := "operation", oc.OperationName
		if oc.Operation != nil {
			typ = string(oc.Operation.Operation)
			name = cmp.Or(name, oc.Operation.Name)
		}
		ctx, span := t.Start(ctx, strings.TrimSpace(typ+" "+name), trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(telemetry.AttrOpType.String(typ), telemetry.AttrOperation.String(name)))
		handler := next(ctx)
		if typ == string(ast.Subscription) {
			span.End()
			return handler
		}
		var once sync.Once
		return func(ctx context.Context) *graphql.Response {
			resp := handler(ctx)
			once.Do(func() {
				if resp != nil && len(resp.Errors) > 0 {
					span.SetStatus(codes.Error, resp.Errors[0].Message)
				}
				span.End()
			})
			return resp
		}
	}
}
