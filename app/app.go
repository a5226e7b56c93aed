// Package app assembles a taskgraph process from its configuration: the
// store, the events broker, the task types, the worker pool, the watchdog
// and the HTTP server, according to the roles it plays. server.go, the bench
// command and end-to-end tests all build processes through it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql/playground"

	"taskgraph/audit"
	"taskgraph/auth"
	"taskgraph/builtin"
	"taskgraph/engine"
	"taskgraph/events"
	"taskgraph/graph"
	"taskgraph/seal"
	"taskgraph/store"
	"taskgraph/worker"
)

// Options are what tests and embedders add to a Config.
type Options struct {
	// Register adds task types besides the built-in ones.
	Register func(r *worker.Registry)
	// Policies replaces the built-in retry policies.
	Policies []worker.RetryPolicy
	// Clock replaces time.Now in the store.
	Clock func() time.Time
	// Pool and Watchdog override their configurations (zero fields keep
	// the values derived from Config).
	Pool     worker.Config
	Watchdog worker.WatchdogConfig
	// Websocket overrides websocket limits (zero fields keep theirs).
	Websocket graph.WebsocketConfig
	Logger    *slog.Logger
}

// App is one taskgraph process.
type App struct {
	Config   Config
	Log      *slog.Logger
	Store    *store.Store
	Broker   *events.Broker
	Registry *worker.Registry
	Policies *worker.Policies
	Engine   *engine.Engine
	Auth     *auth.Authenticator
	Audit    *audit.Recorder
	GraphQL  *graph.Server    // nil without the api role
	Pool     *worker.Pool     // nil without the worker role
	Watchdog *worker.Watchdog // nil without the watchdog role
	Handler  http.Handler

	opts       Options
	baseCtx    context.Context
	baseCancel context.CancelFunc
	servers    []*http.Server
	mu         sync.Mutex
	stopOnce   sync.Once
}

// New opens the database (migrating it) and builds every part the roles
// need. Nothing runs until Start.
func New(ctx context.Context, cfg Config, opts Options) (*App, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	key, err := secretKey(cfg)
	if err != nil {
		return nil, err
	}
	sealer, err := seal.New(key)
	if err != nil {
		return nil, err
	}
	ps := opts.Policies
	if ps == nil {
		ps = worker.DefaultPolicies()
	}
	policies, err := worker.NewPolicies(ps...)
	if err != nil {
		return nil, err
	}
	broker := events.NewBroker(events.Config{})
	st, err := store.Open(ctx, store.Config{DSN: cfg.DSN(), Publisher: broker, Clock: opts.Clock, Logger: log})
	if err != nil {
		return nil, err
	}
	registry := worker.NewRegistry()
	builtin.Register(registry, &builtin.Webhook{})
	if opts.Register != nil {
		opts.Register(registry)
	}
	masker, err := newMasker(cfg.Access)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	authn, err := newAuthenticator(cfg.Access, log)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	limiter, err := newLimiter(cfg.Access)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	recorder := audit.New(st.Client(), masker, graph.ErrorCode, log)
	a := &App{
		Config:   cfg,
		Log:      log,
		Store:    st,
		Broker:   broker,
		Registry: registry,
		Policies: policies,
		Engine:   engine.New(st, registry, policies, sealer, masker, engine.WithAudit(recorder), engine.WithRateLimit(limiter)),
		Auth:     authn,
		Audit:    recorder,
		opts:     opts,
	}
	a.baseCtx, a.baseCancel = context.WithCancel(context.WithoutCancel(ctx))

	if cfg.Has(RoleWorker) {
		pc := opts.Pool
		pc.Concurrency = max(pc.Concurrency, cfg.Workers)
		pc.ShutdownGrace = max(pc.ShutdownGrace, cfg.ShutdownGrace)
		pc.Logger = log
		a.Pool, err = worker.NewPool(pc, worker.Deps{Store: st, Registry: registry, Policies: policies, Broker: broker, Sealer: sealer, Masker: masker})
		if err != nil {
			_ = st.Close()
			return nil, err
		}
	}
	if cfg.Has(RoleWatchdog) {
		wc := opts.Watchdog
		if wc.HeartbeatTimeout == 0 {
			wc.HeartbeatTimeout = cfg.HeartbeatTimeout
		}
		wc.Logger = log
		a.Watchdog, err = worker.NewWatchdog(wc, st, policies, masker)
		if err != nil {
			_ = st.Close()
			return nil, err
		}
	}
	a.Handler = a.routes()
	return a, nil
}

func secretKey(cfg Config) ([]byte, error) {
	if cfg.SecretKey != "" {
		return seal.ParseKey(cfg.SecretKey)
	}
	return seal.LoadOrCreateKey(filepath.Join(cfg.DataDir, "secret.key"))
}

func (a *App) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", a.ready)
	if a.Config.Has(RoleAPI) {
		ac := a.Config.Access
		a.GraphQL = graph.NewServer(graph.ServerConfig{
			Resolver:        &graph.Resolver{Engine: a.Engine, Client: a.Store.Client(), Broker: a.Broker, Log: a.Log},
			Auth:            a.Auth,
			Introspection:   a.Config.Playground,
			AllowedOrigins:  ac.AllowedOrigins,
			ComplexityLimit: ac.ComplexityLimit,
			MaxDepth:        ac.MaxDepth,
			WS:              a.websocketConfig(),
			Log:             a.Log,
		})
		mux.Handle("/query", a.queryHandler(a.GraphQL))
		if a.Config.Playground {
			mux.Handle("GET /playground", playground.Handler("taskgraph", "/query"))
		}
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte(`<!doctype html><title>taskgraph</title><p>taskgraph is running. GraphQL: <a href="/query">/query</a>` +
				func() string {
					if a.Config.Playground {
						return `, playground: <a href="/playground">/playground</a>`
					}
					return ""
				}() + `.</p>`))
		})
	}
	return mux
}

func (a *App) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := a.Store.DB().PingContext(ctx); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("database unreachable\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// Start runs the worker pool and the watchdog of the roles.
func (a *App) Start(ctx context.Context) error {
	if a.Pool != nil {
		if err := a.Pool.Start(ctx); err != nil {
			return err
		}
	}
	if a.Watchdog != nil {
		a.Watchdog.Start(ctx)
	}
	return nil
}

// Serve answers HTTP on ln until Shutdown.
func (a *App) Serve(ln net.Listener) error {
	srv := &http.Server{
		Handler:           a.Handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return a.baseCtx },
	}
	a.mu.Lock()
	a.servers = append(a.servers, srv)
	a.mu.Unlock()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// Shutdown stops taking requests, lets running tasks finish within the
// shutdown grace period and releases the rest (DESIGN §3), ends
// subscriptions and closes the database.
func (a *App) Shutdown(ctx context.Context) error {
	var errs []error
	a.stopOnce.Do(func() {
		a.mu.Lock()
		servers := a.servers
		a.mu.Unlock()
		for _, srv := range servers {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := srv.Shutdown(sctx); err != nil {
				errs = append(errs, fmt.Errorf("http shutdown: %w", err))
			}
			cancel()
		}
		if a.Pool != nil {
			if err := a.Pool.Stop(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if a.Watchdog != nil {
			a.Watchdog.Stop()
		}
		// Ends websocket and SSE connections (hijacked or streaming, they
		// outlive http.Server.Shutdown) and their subscriptions.
		a.baseCancel()
		a.Broker.Close()
		if err := a.Store.Close(); err != nil {
			errs = append(errs, err)
		}
	})
	return errors.Join(errs...)
}
