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

	"taskgraph/artifact"
	"taskgraph/builtin"
	"taskgraph/engine"
	"taskgraph/events"
	"taskgraph/exporter"
	"taskgraph/graph"
	"taskgraph/importer"
	"taskgraph/mask"
	"taskgraph/seal"
	"taskgraph/spreadsheet"
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
	Logger   *slog.Logger
	// Import overrides the importer's upload size, limits, chunk size and
	// chunk hook (tests); Janitor the janitor's configuration. Zero fields
	// keep the values derived from Config.
	Import  importer.Config
	Janitor artifact.JanitorConfig
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
	Pool     *worker.Pool     // nil without the worker role
	Watchdog *worker.Watchdog // nil without the watchdog role
	Handler  http.Handler

	// Imports, exports, reports and their files.
	Artifacts *artifact.Store
	Links     *artifact.Links
	Importer  *importer.Importer
	Exporter  *exporter.Exporter
	Janitor   *artifact.Janitor // nil without the watchdog role

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
	masker := mask.Default()
	eng := engine.New(st, registry, policies, sealer, masker)
	files, err := newFiles(cfg, opts, key, st, eng, registry, masker, log)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	a := &App{
		Config:   cfg,
		Log:      log,
		Store:    st,
		Broker:   broker,
		Registry: registry,
		Policies: policies,
		Engine:   eng,
	}
	a.Artifacts, a.Links, a.Importer, a.Exporter = files.artifacts, files.links, files.importer, files.exporter
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
	if cfg.Has(RoleWatchdog) {
		jc := opts.Janitor
		if jc.Interval == 0 {
			jc.Interval = cfg.JanitorInterval
		}
		jc.Logger = log
		if a.Janitor, err = artifact.NewJanitor(jc, a.Artifacts); err != nil {
			_ = st.Close()
			return nil, err
		}
	}
	a.Handler = a.routes()
	return a, nil
}

// files is what imports, exports and reports need.
type files struct {
	artifacts *artifact.Store
	links     *artifact.Links
	importer  *importer.Importer
	exporter  *exporter.Exporter
}

// newFiles builds the artifact store under the data directory, the
// importer (with the contacts target) and the exporter, and registers the
// import, export and report task types.
func newFiles(cfg Config, opts Options, key []byte, st *store.Store, eng *engine.Engine, reg *worker.Registry, masker *mask.Masker, log *slog.Logger) (*files, error) {
	dir, err := artifact.NewDir(filepath.Join(cfg.DataDir, "artifacts"))
	if err != nil {
		return nil, err
	}
	arts, err := artifact.New(artifact.Config{Client: st.Client(), Blobs: dir, TTL: cfg.ArtifactTTL, Clock: opts.Clock, Tx: st.Tx})
	if err != nil {
		return nil, err
	}
	links := artifact.NewLinks(key, arts, 0, func(ctx context.Context) string { return engine.ViewerOf(ctx).User }, log)
	postgres := st.Dialect() == "postgres"
	targets := importer.NewRegistry()
	targets.Add(importer.Contacts(st.DB(), st.Tx, postgres, st.Now))
	ic := opts.Import
	ic.Engine, ic.Artifacts, ic.Targets, ic.Masker, ic.Logger = eng, arts, targets, masker, log
	if ic.MaxUploadSize == 0 {
		ic.MaxUploadSize = cfg.MaxUploadSize
	}
	if ic.Limits == (spreadsheet.Limits{}) {
		ic.Limits = spreadsheet.Limits{MaxRows: cfg.ImportMaxRows, UnzipSizeLimit: cfg.ImportUnzipLimit}
	}
	imp, err := importer.New(ic)
	if err != nil {
		return nil, err
	}
	imp.Register(reg)
	exp, err := exporter.New(exporter.Config{Client: st.Client(), Artifacts: arts, Postgres: postgres, Logger: log})
	if err != nil {
		return nil, err
	}
	exp.Register(reg)
	return &files{artifacts: arts, links: links, importer: imp, exporter: exp}, nil
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
		gql := graph.NewServer(graph.ServerConfig{
			Resolver: &graph.Resolver{Engine: a.Engine, Client: a.Store.Client(), Broker: a.Broker, Log: a.Log,
				Importer: a.Importer, Artifacts: a.Artifacts, Links: a.Links},
			Introspection: a.Config.Playground,
			CheckOrigin:   sameOrigin,
			MaxUploadSize: a.Importer.MaxUploadSize(),
			Log:           a.Log,
		})
		mux.Handle("/query", graph.LimitUploads(a.Importer.MaxUploadSize(), graph.WithBaseURL(gql)))
		mux.Handle("GET /download/{token}", a.Links)
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

// sameOrigin accepts websockets from pages served by this server and from
// clients that send no Origin (scripts, CLIs).
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	return origin == "http://"+r.Host || origin == "https://"+r.Host
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
	if a.Janitor != nil {
		a.Janitor.Start(ctx)
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
		if a.Janitor != nil {
			a.Janitor.Stop()
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
