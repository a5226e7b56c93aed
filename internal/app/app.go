// Package app assembles a taskgraph process from its configuration: the
// store, the events broker, the task types, the worker pool, the watchdog,
// the scheduler and the HTTP server, according to the roles it plays.
// server.go, the bench command and end-to-end tests all build processes
// through it.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql/playground"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/graph"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/alert"
	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/builtin"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/exporter"
	"github.com/taskgraph/taskgraph/internal/external"
	"github.com/taskgraph/taskgraph/internal/flow"
	"github.com/taskgraph/taskgraph/internal/importer"
	"github.com/taskgraph/taskgraph/internal/leader"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/metrics"
	"github.com/taskgraph/taskgraph/internal/migrate"
	"github.com/taskgraph/taskgraph/internal/nodes"
	"github.com/taskgraph/taskgraph/internal/outage"
	"github.com/taskgraph/taskgraph/internal/outbound"
	"github.com/taskgraph/taskgraph/internal/relay"
	"github.com/taskgraph/taskgraph/internal/retention"
	"github.com/taskgraph/taskgraph/internal/schedule"
	"github.com/taskgraph/taskgraph/internal/seal"
	"github.com/taskgraph/taskgraph/internal/service"
	"github.com/taskgraph/taskgraph/internal/spreadsheet"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
	"github.com/taskgraph/taskgraph/internal/telemetry"
	"github.com/taskgraph/taskgraph/web"
	"github.com/taskgraph/taskgraph/worker"
)

// Options are what tests and embedders add to a Config.
type Options struct {
	// Register adds task types besides the built-in ones.
	Register func(r *tasktype.Registry)
	// Engine options applied after the configured ones (tests: the page
	// of bulk actions over a filter).
	Engine []engine.Option
	// Policies replaces the built-in retry policies.
	Policies []tasktype.RetryPolicy
	// Clock replaces the store's clock, authoritative (not corrected to
	// the database's: tests' fake clocks).
	Clock func() time.Time
	// WallClock replaces the node's wall clock, which the store corrects
	// by its offset to the database's clock (tests skew it per node).
	WallClock func() time.Time
	// Pool and Watchdog override their configurations: each non-zero
	// field replaces the value derived from Config (Pool.Concurrency
	// replaces --workers, Pool.ShutdownGrace --shutdown-grace, lower or
	// higher); zero fields keep it.
	Pool     worker.Config
	Watchdog worker.WatchdogConfig
	// Websocket overrides websocket limits (zero fields keep theirs).
	Websocket graph.WebsocketConfig
	// EventBacklog overrides how many tasks a client subscription may
	// fall behind by beyond its buffer (0 keeps events.BacklogDefault).
	EventBacklog int
	// BodyGrace and MinBodyRate override how fast request bodies must
	// arrive (see readDeadlines; zero keeps the defaults).
	BodyGrace   time.Duration
	MinBodyRate int64
	Logger      *slog.Logger
	// Import overrides the importer's upload size, limits, chunk size and
	// chunk hook (tests); Janitor the janitor's configuration. Zero fields
	// keep the values derived from Config.
	Import  importer.Config
	Janitor artifact.JanitorConfig
	// ExternalSync overrides how often the node reads the declared
	// external task types again (0 keeps external.SyncInterval);
	// WorkerHeartbeat what the worker protocol tells workers to beat at
	// (0: a third of --heartbeat-timeout, at most 5 s).
	ExternalSync    time.Duration
	WorkerHeartbeat time.Duration
	// Scheduler overrides the schedule firer's configuration (zero fields
	// keep their defaults).
	Scheduler schedule.SchedulerConfig
	// ReviewDeadlines overrides the review deadlines' service (tests: a
	// short interval).
	ReviewDeadlines engine.DeadlinesConfig
	// Blob tunes the blob store's reads and writes (tests: small blocks).
	Blob artifact.BucketConfig
	// History overrides the task history's loops (zero fields keep their
	// defaults).
	History HistoryConfig
	// Commands are the program's other commands, listed by Main's -h.
	Commands []Command
	// TracerProvider, when set, is what the process traces with instead of
	// the provider the environment configures (telemetry.FromEnv: OTLP
	// when OTEL_EXPORTER_OTLP_ENDPOINT is set). The process does not shut
	// it down: its owner does.
	TracerProvider trace.TracerProvider
}

// App is one taskgraph process.
type App struct {
	// notes are /readyz's warnings found at start (readyNotes).
	notes  []string
	Config Config
	// Node names this process among those sharing the database (it is also
	// its worker id).
	Node      string
	Log       *slog.Logger
	Store     *store.Store
	Broker    *events.Broker
	Registry  *tasktype.Registry
	Policies  *tasktype.Policies
	Engine    *engine.Engine
	Auth      *auth.Authenticator
	Audit     *audit.Recorder
	GraphQL   *graph.Server     // nil without the api role
	Pool      *worker.Pool      // nil without the worker role
	Watchdog  *worker.Watchdog  // nil without the watchdog role
	Retention *retention.Purger // nil without the watchdog role
	// ReviewDeadlines runs passed review deadlines' outcomes (nil without
	// the watchdog role).
	ReviewDeadlines *engine.Deadlines
	// HistoryRollUp samples, rolls up and purges the task history (nil
	// without the watchdog role).
	HistoryRollUp *HistoryRollUp
	Relay         *relay.Listener // nil on SQLite
	Leader        *leader.Lock    // nil on SQLite (one node: it always leads)
	Metrics       *metrics.Metrics
	Handler       http.Handler
	// Outages counts the failures of database and disk outages, logs
	// each outage once, and says whether the node is ready (/readyz).
	Outages *outage.Monitor

	// Imports, exports, reports and their files.
	Artifacts *artifact.Store
	Links     *artifact.Links
	Importer  *importer.Importer
	Exporter  *exporter.Exporter
	Janitor   *artifact.Janitor // nil without the watchdog role

	// Alerts: rules, channels, incidents; the evaluator runs on nodes
	// with the api or watchdog role, one at a time (AlertLeader).
	Alerts        *alert.Service
	Evaluator     *alert.Evaluator // nil without the api and watchdog roles
	AlertLeader   *leader.Lock     // nil on SQLite
	AlertListener *alert.Listener  // other nodes' incident changes; nil on SQLite
	// Schedules serves the API's schedule requests; Scheduler fires them
	// (nil without the watchdog role), led by SchedulerLeader on
	// PostgreSQL (nil on SQLite: one node, it always leads).
	Schedules *schedule.Service
	// Flow reads and changes the cluster-wide caps, rates and pauses of
	// task types; Gate enforces them in every claim.
	Flow *flow.Service
	Gate *flow.Gate
	// External is the catalog of declared external task types (loaded at
	// start, synced on every node); Workers serves the worker protocol
	// (/worker/v1/) on the api role.
	External        *external.Catalog
	Workers         *external.Handler
	Scheduler       *schedule.Scheduler
	SchedulerLeader *leader.Lock
	// Nodes keeps this node's row in the cluster's registry (app/nodes.go).
	Nodes *nodes.Registry
	// extWorkers records the external workers whose claims it serves.
	extWorkers *nodes.Workers

	// services are the background loops of the roles, in the order
	// Start starts them (Shutdown stops them in reverse).
	services []service.Service

	opts    Options
	rootLog *slog.Logger // Log without the node attribute
	// tracer traces operations, creates, claims, executions, flushes and
	// recoveries; stopTracing flushes and stops the provider the process
	// made from the environment (nothing for one of Options').
	tracer      trace.Tracer
	stopTracing func(context.Context) error
	masker      *mask.Masker
	key         []byte // the secret key: links, sealed input
	sealer      *seal.Sealer
	// relayed is Relay, read by the store's writes as soon as it is set.
	relayed atomic.Pointer[relay.Listener]

	baseCtx    context.Context
	baseCancel context.CancelFunc
	servers    []*http.Server
	mu         sync.Mutex
	stopOnce   sync.Once
}

// New opens the database (migrating it) and builds every part the roles
// need. Nothing runs until Start. It is made of steps, each of which
// pushes what it opened (the database, the blob store, the listening
// connections) on a cleanup stack: when a later step fails, New closes
// them in reverse order and returns the error.
func New(ctx context.Context, cfg Config, opts Options) (_ *App, err error) {
	var undo cleanup
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	a, err := newApp(cfg, opts)
	if err != nil {
		return nil, err
	}
	steps := []func(context.Context, *cleanup) error{
		a.newTracing,       // OpenTelemetry: the environment's, or Options'
		a.newStore,         // the database, the gate of every claim
		a.newEngine,        // task types, authentication, audit, the engine
		a.newFiles,         // blob store, artifacts, importer, exporter
		a.newAPIServices,   // alerts, schedules, flow control (the API's)
		a.newRelay,         // other nodes' changes (PostgreSQL)
		a.newPool,          // the worker role
		a.newWatchdogRole,  // watchdog, retention, scheduler, artifact janitor
		a.newHistory,       // the task history's flush and roll-up
		a.newAlertServices, // alert evaluator and incident listener
		a.newNodes,         // this node's row in the node registry
	}
	for _, step := range steps {
		if err := step(ctx, &undo); err != nil {
			return nil, err
		}
	}
	a.registerMetrics()
	a.Handler = a.routes()
	return a, nil
}

// newTracing sets up tracing: Options.TracerProvider, or the one the
// environment configures (off unless an OTLP endpoint is set).
func (a *App) newTracing(ctx context.Context, undo *cleanup) error {
	tp := a.opts.TracerProvider
	a.stopTracing = func(context.Context) error { return nil }
	if tp == nil {
		var err error
		if tp, a.stopTracing, err = telemetry.FromEnv(ctx); err != nil {
			return fmt.Errorf("tracing: %w", err)
		}
		undo.push(func() { _ = a.stopTracing(context.Background()) })
	}
	a.tracer = telemetry.Tracer(tp)
	return nil
}

// cleanup is the stack of what New opened so far.
type cleanup []func()

func (c *cleanup) push(f func()) { *c = append(*c, f) }

// run closes everything pushed, the latest first.
func (c cleanup) run() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

// newApp reads the parts of the configuration that open nothing: the
// masker (also of the log), the secret key and its sealer, the retry
// policies, the node's name, metrics, the broker and the outage monitor.
func newApp(cfg Config, opts Options) (*App, error) {
	log := cmp.Or(opts.Logger, slog.Default())
	if err := checkDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	masker, err := newMasker(cfg.Access)
	if err != nil {
		return nil, err
	}
	// Whatever the process logs — errors quoting a request, titles, a
	// handler's panic — is masked like what it stores.
	log = slog.New(mask.NewHandler(log.Handler(), masker))
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
		ps = tasktype.DefaultPolicies()
	}
	policies, err := tasktype.NewPolicies(ps...)
	if err != nil {
		return nil, err
	}
	node := cmp.Or(opts.Pool.ID, worker.DefaultWorkerID())
	m := metrics.New()
	return &App{
		Config:   cfg,
		Node:     node,
		Log:      log.With("node", node),
		Policies: policies,
		Metrics:  m,
		// Clients that fall behind (a burst, a resync after an outage)
		// get the latest change of each task from a backlog rather than
		// being dropped.
		Broker:  events.NewBroker(events.Config{Observe: m.ObserveChange, Backlog: cmp.Or(opts.EventBacklog, events.BacklogDefault)}),
		Outages: outage.NewMonitor(outage.MonitorConfig{Logger: log.With("node", node)}),
		opts:    opts,
		rootLog: log,
		masker:  masker,
		key:     key,
		sealer:  sealer,
	}, nil
}

// newStore opens the database (initialising an empty one, migrating an
// older one with --migrate; see store.Open).
func (a *App) newStore(ctx context.Context, undo *cleanup) error {
	cfg := a.Config
	onWrite := func(err error) {
		a.Outages.Wrote(err)
		if l := a.relayed.Load(); l != nil && store.CommitUncertain(err) {
			// The change may have committed unpublished: replay it.
			l.Missed()
		}
	}
	storeCfg := store.Config{DSN: cfg.DSN(), Publisher: a.Broker, Clock: a.opts.Clock, WallClock: a.opts.WallClock, Logger: a.rootLog, OnWrite: onWrite, Migrate: cfg.Migrate}
	// Caps, rates and pauses of task types hold in every claim.
	storeCfg.Gate = flow.NewGate()
	if store.IsPostgres(cfg.DSN()) { // the store is not open yet: ask its DSN
		storeCfg.BeforeCommit = relay.Notifier{Node: a.Node}.BeforeCommit
	}
	st, err := store.Open(ctx, storeCfg)
	if err != nil {
		return schemaHint(err, cfg)
	}
	undo.push(func() { _ = st.Close() })
	// Every read through the store's client (and its transactions) sees
	// only what the viewer of its context may see; one without a viewer
	// reads nothing.
	access.Install(st.Client())
	a.Store = st
	// Ready, but the operator should know (docs/operations.md, Autovacuum).
	if off, err := st.AutovacuumOff(ctx); err != nil {
		a.Log.Warn("could not read the autovacuum settings", "err", err)
	} else if off != "" {
		a.Log.Warn(off)
		a.notes = append(a.notes, "warning: "+off)
	}
	return nil
}

// schemaHint adds to a refusal of the database's schema version
// (migrate.VersionError) what to run about it.
func schemaHint(err error, cfg Config) error {
	var ve *migrate.VersionError
	if !errors.As(err, &ve) {
		return err
	}
	where := "--data-dir " + shellWord(cfg.DataDir)
	if cfg.DB != "" {
		where = "--db " + shellWord(redactDSN(cfg.DB))
	}
	if ve.Newer() {
		return fmt.Errorf("%w; run that taskgraph (or with it: taskgraph migrate down --to %d %s)", err, ve.Latest, where)
	}
	return fmt.Errorf("%w; run `taskgraph migrate up %s` (taskgraph migrate status says what it applies), or start the node with --migrate", err, where)
}

// shellWord quotes s for a shell when it needs it.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// newEngine registers the task types (built-in, alert deliveries, the
// embedder's) and builds authentication, rate limits, the audit recorder
// and the engine on them.
func (a *App) newEngine(context.Context, *cleanup) error {
	cfg, st := a.Config, a.Store
	a.Registry = tasktype.NewRegistry()
	policy, err := cfg.outboundPolicy()
	if err != nil {
		return err
	}
	outboundClient := outbound.NewClient(outbound.Config{Policy: policy})
	builtin.Register(a.Registry, &builtin.Webhook{Client: outboundClient})
	(&alert.Deliverer{Client: st.Client(), Sealer: a.sealer, HTTP: outboundClient, Now: st.Now}).Register(a.Registry)
	if a.opts.Register != nil {
		a.opts.Register(a.Registry)
	}
	if a.Auth, err = newAuthenticator(cfg.Access, a.rootLog); err != nil {
		return err
	}
	limiter, err := newLimiter(cfg.Access)
	if err != nil {
		return err
	}
	a.Audit = audit.New(st.Tx, a.masker, graph.ErrorCode, a.rootLog, a.Outages)
	a.Audit.UseClock(st.Now)
	a.Engine = engine.New(st, a.Registry, a.Policies, a.sealer, a.masker, append([]engine.Option{engine.WithAudit(a.Audit), engine.WithRateLimit(limiter), engine.WithTracer(a.tracer)}, a.opts.Engine...)...)
	// Bulk actions over a filter decode their filters as the API does.
	a.Engine.SetTaskWhere(graph.TaskWhereDecoder(&graph.Resolver{Engine: a.Engine, Client: st.Client()}))
	a.Engine.RegisterBulk(a.Registry)
	return nil
}

// newFiles opens the blob store (--blob-url, or the artifacts directory in
// the data directory) and builds the artifact store on it, the importer
// (with the contacts target) and the exporter, and registers the import,
// export and report task types. Whether the blob store is the
// deployment's is said once in the log either way; one that is not, or
// does not answer, makes the node unready rather than stopping it.
func (a *App) newFiles(ctx context.Context, undo *cleanup) error {
	cfg, opts, st, log := a.Config, a.opts, a.Store, a.Log
	blobURL, err := cfg.Blobs()
	if err != nil {
		return err
	}
	bucket, err := artifact.OpenBucket(ctx, blobURL, opts.Blob)
	if err != nil {
		return err
	}
	undo.push(func() { _ = bucket.Close() })
	a.Artifacts, err = artifact.New(artifact.Config{Client: st.Client(), Blobs: bucket, TTL: cfg.ArtifactTTL, Clock: st.Now, Tx: st.Tx, Node: a.Node, Logger: log,
		Stored: st.CountStored})
	if err != nil {
		return err
	}
	rec := a.Audit
	a.Links = artifact.NewLinks(a.key, a.Artifacts, artifact.LinksConfig{
		// A link works while its viewer may still see the file (and its
		// task): same identity, or an admin of the same tenant.
		Authorize: func(ctx context.Context, art *ent.Artifact) error {
			v, err := auth.Require(ctx)
			if err != nil {
				return err
			}
			// The link's user must still hold the credentials it was
			// made for (not revoked, not downgraded).
			if a.Auth != nil {
				if err := a.Auth.Holds(v); err != nil {
					return err
				}
			}
			_, err = access.Artifact(ctx, st.Client(), v, art.ID)
			return err
		},
		// A download is recorded before the file is sent; one that cannot
		// be recorded is not served.
		Downloaded: func(ctx context.Context, a *ent.Artifact, err error) error {
			var ids []int
			if a.TaskID != nil {
				ids = []int{*a.TaskID}
			}
			return rec.Record(ctx, audit.Entry{Action: audit.Download, TaskIDs: ids, Err: err,
				Details: map[string]any{"artifact": a.ID, "kind": a.Kind, "file": a.Filename}})
		},
		Outages: a.Outages,
		Logger:  log,
	})
	postgres := st.Postgres()
	targets := importer.NewRegistry()
	targets.Add(importer.Contacts(st.DB(), st.Tx, postgres, st.Now))
	ic := opts.Import
	ic.Engine, ic.Artifacts, ic.Targets, ic.Masker, ic.Logger = a.Engine, a.Artifacts, targets, a.masker, log
	if ic.MaxUploadSize == 0 {
		ic.MaxUploadSize = cfg.MaxUploadSize
	}
	if ic.Limits == (spreadsheet.Limits{}) {
		ic.Limits = spreadsheet.Limits{MaxRows: cfg.ImportMaxRows, UnzipSizeLimit: cfg.ImportUnzipLimit}
	}
	if a.Importer, err = importer.New(ic); err != nil {
		return err
	}
	a.Importer.Register(a.Registry)
	a.Exporter, err = exporter.New(exporter.Config{Client: st.Client(), Artifacts: a.Artifacts, Postgres: postgres, Masker: a.masker, Logger: log})
	if err != nil {
		return err
	}
	a.Exporter.Register(a.Registry)
	if err := a.Artifacts.Verify(ctx); err != nil {
		var me *artifact.MisconfiguredError
		if !errors.As(err, &me) && !artifact.IsStoreFailure(err) {
			return err
		}
	}
	return nil
}

// newAPIServices builds what the API serves besides tasks: alert rules,
// channels and incidents, schedules, flow control; and the base context of
// the HTTP servers.
func (a *App) newAPIServices(ctx context.Context, undo *cleanup) error {
	var err error
	a.Alerts, err = alert.New(alert.Config{Store: a.Store, Engine: a.Engine, Sealer: a.sealer, Hub: alert.NewHub(), Node: a.Node, PublicURL: a.Config.PublicURL(), Logger: a.rootLog})
	if err != nil {
		return err
	}
	a.Schedules = schedule.NewService(a.Engine, a.sealer, a.Node, a.Log)
	a.Schedules.SetMinInterval(a.Config.MinScheduleInterval)
	a.Flow = flow.NewService(a.Engine, flow.Tenanted(len(a.Config.Access.PlatformAdmins) > 0), flow.OnRelease(a.wakeWorkers))
	a.External = external.NewCatalog(a.Store, a.Engine)
	if _, err := a.External.Sync(ctx); err != nil {
		// A node starts without the types it cannot read or build; the
		// syncer tries again.
		a.Log.Error("loading external task types", "err", err)
	}
	syncer, err := a.External.NewSyncer(a.opts.ExternalSync, a.Log)
	if err != nil {
		return err
	}
	a.services = append(a.services, syncer)
	a.baseCtx, a.baseCancel = context.WithCancel(context.WithoutCancel(ctx))
	undo.push(a.baseCancel)
	return nil
}

// newRelay, on PostgreSQL, makes the watchdog's leader lock and listens
// for other nodes' changes (the alert evaluator of the api and watchdog
// roles needs their task outcomes too).
func (a *App) newRelay(ctx context.Context, undo *cleanup) error {
	st, cfg := a.Store, a.Config
	if !st.Postgres() {
		return nil
	}
	a.Leader = leader.New(st.DB(), leader.WatchdogRole)
	if !cfg.Has(RoleAPI) && !cfg.Has(RoleWorker) && !cfg.Has(RoleWatchdog) {
		return nil
	}
	l, err := relay.Listen(ctx, relay.Config{
		DSN: cfg.DSN(), DB: st.DB(), Node: a.Node, Client: st.Client(), Broker: a.Broker, Logger: a.rootLog,
		HeldAtCap: st.HeldAtCap,
		OnResync: func() {
			if a.Pool != nil {
				a.Pool.Wake()
			}
		},
		OnWake: func() {
			if a.Pool != nil {
				a.Pool.Wake()
			}
		},
	})
	if err != nil {
		return fmt.Errorf("listen for other nodes' changes: %w", err)
	}
	undo.push(l.Close)
	a.Relay = l
	a.relayed.Store(l)
	return nil
}

// wakeWorkers makes every node's worker pool look for work now: this
// node's directly, the others' through a notification (PostgreSQL; on
// SQLite one process is the deployment, apart from a second one on the
// same file, which finds the work at its next poll). Called after a flow
// control change that may release waiting tasks.
func (a *App) wakeWorkers(ctx context.Context) {
	if a.Pool != nil {
		a.Pool.Wake()
	}
	if a.Store.Postgres() {
		if err := relay.NotifyWake(context.WithoutCancel(ctx), a.Store.DB(), a.Node); err != nil {
			a.Log.Warn("could not wake the other nodes' workers; they find the released work at their next poll", "err", err)
		}
	}
}

// newPool builds the worker pool of the worker role. Options.Pool's
// non-zero fields override the configuration's.
func (a *App) newPool(context.Context, *cleanup) error {
	cfg := a.Config
	if !cfg.Has(RoleWorker) {
		return nil
	}
	pc := a.opts.Pool
	pc.ID = a.Node
	pc.Concurrency = cmp.Or(pc.Concurrency, cfg.Workers)
	pc.ShutdownGrace = cmp.Or(pc.ShutdownGrace, cfg.ShutdownGrace)
	if pc.HeartbeatInterval == 0 {
		// Several heartbeats per lease, so that one late beat does not
		// get a live execution recovered.
		pc.HeartbeatInterval = min(worker.HeartbeatIntervalDefault, cfg.HeartbeatTimeout/3)
	}
	pc.Logger = a.Log
	var err error
	a.Pool, err = worker.NewPool(pc, worker.Deps{Store: a.Store, Registry: a.Registry, Policies: a.Policies, Broker: a.Broker,
		Sealer: a.sealer, Masker: a.masker, Recorder: a.Metrics, Outages: a.Outages, Tracer: a.tracer})
	return err
}

// newWatchdogRole builds the services of the watchdog role, each of which
// passes only on the node that leads: the watchdog, the retention purge
// and the artifact janitor (led by the watchdog's lock), and the scheduler
// (its own lock: it and the watchdog may lead on different nodes). On
// SQLite there is one node: it always leads.
func (a *App) newWatchdogRole(context.Context, *cleanup) error {
	cfg, st := a.Config, a.Store
	if !cfg.Has(RoleWatchdog) {
		return nil
	}
	var leading func(context.Context) (bool, error)
	if a.Leader != nil {
		leading = a.Leader.Lead
	}
	wc := a.opts.Watchdog
	wc.HeartbeatTimeout = cmp.Or(wc.HeartbeatTimeout, cfg.HeartbeatTimeout)
	if wc.Leader == nil {
		wc.Leader = leading
	}
	wc.OnAction = a.Metrics.WatchdogActed
	if wc.Quiet == nil {
		wc.Quiet = a.quiet("watchdog")
	}
	wc.Logger = a.Log
	if wc.Tracer == nil {
		wc.Tracer = a.tracer
	}
	if a.Pool != nil && wc.Holds == nil {
		// What this node's own pool holds the outcome of is finished on
		// a live node: it is not judged by its heartbeats.
		wc.Holds = a.Pool.Holds
	}
	if wc.StallAfter == nil {
		wc.StallAfter = func(typ string) time.Duration {
			if t, ok := a.Registry.Lookup(typ); ok {
				return t.StallAfter
			}
			return 0
		}
	}
	var err error
	if a.Watchdog, err = worker.NewWatchdog(wc, st, a.Policies, a.masker); err != nil {
		return err
	}
	a.Retention, err = retention.New(retention.Config{Age: cfg.Retention, Leader: leading, Quiet: a.quiet("retention"), Logger: a.Log}, st)
	if err != nil {
		return err
	}
	jc := a.opts.Janitor
	jc.Interval = cmp.Or(jc.Interval, cfg.JanitorInterval)
	if jc.Leader == nil {
		jc.Leader = leading
	}
	if jc.Quiet == nil {
		jc.Quiet = a.quiet("janitor")
	}
	jc.Logger = a.rootLog
	if a.Janitor, err = artifact.NewJanitor(jc, a.Artifacts); err != nil {
		return err
	}
	sc := a.opts.Scheduler
	if sc.Leader == nil && a.Leader != nil {
		a.SchedulerLeader = leader.New(st.DB(), leader.SchedulerRole)
		sc.Leader = a.SchedulerLeader.Lead
	}
	if sc.Quiet == nil {
		sc.Quiet = a.quiet("scheduler")
	}
	sc.Logger = a.Log
	if a.Scheduler, err = schedule.NewScheduler(sc, a.Schedules); err != nil {
		return err
	}
	dc := a.opts.ReviewDeadlines
	if dc.Leader == nil {
		dc.Leader = leading
	}
	if dc.Quiet == nil {
		dc.Quiet = a.quiet("review-deadlines")
	}
	dc.Logger = a.Log
	if a.ReviewDeadlines, err = engine.NewDeadlines(dc, a.Engine); err != nil {
		return err
	}
	a.services = append(a.services, a.Watchdog, a.Retention, a.Janitor, a.Scheduler, a.ReviewDeadlines)
	return nil
}

// quiet keeps a service's failed passes out of the log during an outage:
// the outage monitor counts them, and reports the outage once.
func (a *App) quiet(source string) func(error) bool {
	return func(err error) bool { return a.Outages.Failed(source, err) != nil }
}

// registerMetrics lets the metrics read what the node counts.
func (a *App) registerMetrics() {
	st := a.Store
	a.Metrics.RegisterAlerts(st.Client())
	src := metrics.Sources{Client: st.Client(), Broker: a.Broker, Inconsistent: st.Inconsistencies}
	if a.Relay != nil {
		src.Relay = func() (int64, int64) { s := a.Relay.Stats(); return s.Received, s.Resyncs }
	}
	if a.Leader != nil && a.Watchdog != nil {
		src.Leading = a.Leader.Leading
	}
	a.Metrics.Register(src)
}

func secretKey(cfg Config) ([]byte, error) {
	if cfg.SecretKey != "" {
		k, err := seal.ParseKey(cfg.SecretKey)
		if err != nil {
			return nil, fmt.Errorf("--secret-key: not 64 hex characters (openssl rand -hex 32 makes one)")
		}
		return k, nil
	}
	path := filepath.Join(cfg.DataDir, "secret.key")
	k, err := seal.LoadOrCreateKey(path)
	if err != nil {
		return nil, fmt.Errorf("the secret key file %s (made on first start in --data-dir; or give --secret-key): %w", path, err)
	}
	return k, nil
}

// checkDataDir makes the data directory, and checks that this process can
// write there, before anything else fails on it with less helpful words.
func checkDataDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	fix := "make it writable by the user running taskgraph, or choose another with --data-dir (TASKGRAPH_DATA_DIR)"
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("data directory %s: cannot create it (%v); %s", abs, unwrapPath(err), fix)
	}
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return fmt.Errorf("data directory %s: cannot write there (%v); %s", abs, unwrapPath(err), fix)
	}
	name := f.Name()
	_ = f.Close()
	_ = os.Remove(name)
	return nil
}

// unwrapPath keeps the reason of a *fs.PathError (its path is said
// already).
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func (a *App) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", a.ready)
	if a.Config.Network.MetricsAddr == "" {
		// Authenticated like the API: what a scraper sees depends on who
		// it is (package metrics). With -metrics-addr it is served there
		// instead.
		mux.Handle("GET /metrics", a.Auth.Middleware(a.Metrics.Handler()))
	}
	if a.Config.Has(RoleAPI) {
		ac := a.Config.Access
		a.GraphQL = graph.NewServer(graph.ServerConfig{
			Tracer: a.tracer,
			Resolver: &graph.Resolver{Engine: a.Engine, Client: a.Store.Client(), Broker: a.Broker, Log: a.Log,
				Importer: a.Importer, Artifacts: a.Artifacts, Links: a.Links, PublicURL: a.Config.PublicURL(),
				ScheduleService: a.Schedules, Flow: a.Flow, External: a.External, Alerts: a.Alerts, Nodes: a.nodesAPI()},
			Auth:            a.Auth,
			Introspection:   a.Config.Playground,
			AllowedOrigins:  ac.AllowedOrigins,
			ComplexityLimit: ac.ComplexityLimit,
			MaxDepth:        ac.MaxDepth,
			WS:              a.websocketConfig(),
			MaxUploadSize:   a.Importer.MaxUploadSize(),
			Outages:         a.Outages,
			Log:             a.Log,
		})
		mux.Handle("/query", a.queryHandler(graph.LimitUploads(a.Importer.MaxUploadSize(), graph.UnavailableUploads(a.GraphQL))))
		mux.Handle("GET /download/{token}", a.Links)
		a.Workers = external.NewHandler(external.Config{Store: a.Store, Registry: a.Registry, Policies: a.Policies,
			Sealer: a.sealer, Masker: a.masker, Broker: a.Broker, Auth: a.Auth, Logger: a.Log, Workers: a.workers(),
			HeartbeatInterval: cmp.Or(a.opts.WorkerHeartbeat, min(worker.HeartbeatIntervalDefault, a.Config.HeartbeatTimeout/3))})
		mux.Handle(external.Prefix, a.Workers) // it authenticates each call itself
		if a.Config.Playground {
			mux.Handle("GET /playground", playground.Handler("taskgraph", "/query"))
		}
		// The admin console (web/): the bundle embedded in the binary,
		// served under web.Base; "/" leads there.
		mux.Handle("GET "+web.Base, web.Handler())
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, web.Base, http.StatusFound)
		})
	}
	// A request's trace context (traceparent) is its operation's parent.
	return readDeadlines(telemetry.Incoming(mux), a.opts.BodyGrace, a.opts.MinBodyRate)
}

// MetricsHandler serves /metrics, /healthz and /readyz without
// authentication, for the listener of -metrics-addr.
func (a *App) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", a.ready)
	// Whoever reaches this listener is trusted with everything the node
	// counts (the operator chose its address): it reads as the system.
	metrics := a.Metrics.Handler()
	mux.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		metrics.ServeHTTP(w, r.WithContext(auth.NewSystemContext(r.Context())))
	}))
	return readDeadlines(mux, a.opts.BodyGrace, a.opts.MinBodyRate)
}

// ready answers /readyz: 503 while the database does not answer, while
// its writes keep failing with an outage (or failed on a full disk), or
// while the data directory's disk is full.
func (a *App) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	unready := func(why string) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(why + "\n"))
	}
	if err := a.Store.DB().PingContext(ctx); err != nil {
		unready("database unreachable")
		return
	}
	if err := a.Outages.Ready(); err != nil {
		unready(err.Error())
		return
	}
	if a.Nodes != nil && a.Nodes.Draining() {
		// An admin drained it (console: Nodes): it claims nothing, and a
		// load balancer should send its traffic elsewhere too.
		unready("draining: an admin took this node out of service (drainClusterNode)")
		return
	}
	if free, err := freeBytes(a.Config.DataDir); err == nil && free < minFreeBytes {
		unready(fmt.Sprintf("disk full: %d bytes free in %s", free, a.Config.DataDir))
		return
	}
	// Whoever probes readiness runs the server: the reason is theirs.
	if err := a.Artifacts.Ready(ctx); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("blob store: " + err.Error() + "\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
	// Still ready, with what the operator should know (autovacuum off).
	for _, n := range a.readyNotes() {
		_, _ = w.Write([]byte(n + "\n"))
	}
}

// readyNotes are the lines /readyz adds below "ready": conditions that do
// not take the node out of rotation but cost something over time.
func (a *App) readyNotes() []string {
	notes := a.notes
	if a.Nodes != nil {
		if offset, past := a.Nodes.Skew(); past {
			notes = append(slices.Clip(notes), fmt.Sprintf("warning: clock skew: this node's wall clock is %s off the database's (threshold %s); the node runs on the database's clock, fix its time sync",
				offset.Round(time.Millisecond), a.Nodes.Config().SkewThreshold))
		}
	}
	return notes
}

// minFreeBytes is the free space under which the data directory's disk is
// full for /readyz (SQLite, artifacts and uploads live there).
const minFreeBytes = 1 << 20

// Start runs the worker pool, then the background services of the roles
// in their order: watchdog, retention, artifact janitor, scheduler (the
// watchdog role), alert evaluator (the api and watchdog roles). Each is a
// service.Loop (ARCHITECTURE.md, "Background services").
func (a *App) Start(ctx context.Context) error {
	if a.Pool != nil {
		if err := a.Pool.Start(ctx); err != nil {
			return err
		}
	}
	for _, s := range a.services {
		if err := s.Start(ctx); err != nil {
			return err
		}
	}
	return a.startNodes(ctx)
}

// Serve answers HTTP on ln until Shutdown.
func (a *App) Serve(ln net.Listener) error { return a.serve(ln, a.Handler) }

// ServeMetrics answers MetricsHandler on ln until Shutdown.
func (a *App) ServeMetrics(ln net.Listener) error { return a.serve(ln, a.MetricsHandler()) }

func (a *App) serve(ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
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

// Shutdown stops the process in order (ARCHITECTURE.md, "Shutdown"): it
// stops claiming work; ends every subscription with a last UNAVAILABLE
// ("shutting down") error, which ends SSE streams, and closes websockets
// with 1001 (going away); stops taking requests and lets those running,
// and running task handlers, finish within the shutdown grace period, then
// cuts off the requests and releases the executions left (INTERRUPTED ->
// RETRY_PENDING); stops the background services (in the reverse order of
// Start), which pass only on a leading node, before giving up the leader
// locks, so that none of them takes a lock again; and closes the relay,
// the broker, the blob store and the database. Requests cut off at the
// end of the grace period are logged, not an error.
func (a *App) Shutdown(ctx context.Context) error {
	var errs []error
	a.stopOnce.Do(func() {
		grace := a.Config.ShutdownGrace
		if a.Pool != nil {
			// First: no new work starts from here on.
			a.Pool.StopClaiming()
			a.Log.Info("stopped claiming work")
		}
		if a.GraphQL != nil {
			// Streams never finish on their own: end them now, so that
			// their clients reconnect elsewhere and their requests do not
			// hold the shutdown for the whole grace period.
			gctx, cancel := context.WithTimeout(ctx, min(grace, 2*time.Second))
			a.GraphQL.GoAway(gctx)
			cancel()
		}
		a.mu.Lock()
		servers := a.servers
		a.mu.Unlock()
		var wg sync.WaitGroup
		for _, srv := range servers {
			wg.Go(func() {
				sctx, cancel := context.WithTimeout(ctx, grace)
				defer cancel()
				if err := srv.Shutdown(sctx); err != nil {
					a.Log.Warn("requests still running after the shutdown grace period were cut off", "grace", grace, "err", err)
					_ = srv.Close()
				}
			})
		}
		if a.Pool != nil {
			if err := a.Pool.Stop(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		wg.Wait()
		a.stopNodes(ctx)
		// Everything that runs only on the leading node stops before the
		// locks are given up, so that none of it takes a lock again.
		for _, s := range slices.Backward(a.services) {
			s.Stop()
		}
		// Another node's watchdog, scheduler, evaluator takes over at its
		// next pass.
		for _, l := range []*leader.Lock{a.AlertLeader, a.Leader, a.SchedulerLeader} {
			if l != nil {
				l.Release(ctx)
			}
		}
		if a.AlertListener != nil {
			a.AlertListener.Close()
		}
		if a.Relay != nil {
			a.Relay.Close()
		}
		// Ends what is left of websocket and SSE connections (hijacked or
		// streaming, they outlive http.Server.Shutdown) and subscriptions.
		a.baseCancel()
		a.Broker.Close()
		if err := a.Artifacts.Blobs().Close(); err != nil {
			errs = append(errs, fmt.Errorf("close the blob store: %w", err))
		}
		if err := a.Store.Close(); err != nil {
			errs = append(errs, err)
		}
		// Last: the spans of everything above go out.
		if err := a.stopTracing(ctx); err != nil {
			a.Log.Warn("spans not exported at shutdown", "err", err)
		}
	})
	return errors.Join(errs...)
}
