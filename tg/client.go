package tg

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/auth"
)

// Role is a part a Client plays. A Client plays all three unless its
// Config names some.
type Role string

// The roles.
const (
	// RoleAPI serves GraphQL, the console and downloads (Handler).
	RoleAPI Role = "api"
	// RoleWorker runs tasks: the handlers registered with Register.
	RoleWorker Role = "worker"
	// RoleWatchdog recovers executions whose worker died, purges old
	// history, removes expired files and fires schedules (one node leads
	// among those sharing a database).
	RoleWatchdog Role = "watchdog"
)

// Config configures a Client. Its zero value is the server's defaults: an
// embedded SQLite file in ./data, every role, the server's number of
// workers. A field left zero takes the server's default, or the value
// Settings gives.
type Config struct {
	// Database is a PostgreSQL URL (postgres://user@host:5432/name) or
	// key=value DSN (host=... dbname=...), or a SQLite file path.
	// Default: taskgraph.db in DataDir. Nodes sharing a PostgreSQL
	// database make one cluster.
	Database string
	// DataDir holds the SQLite file, the secret key when SecretKey is
	// empty, and the files of imports and exports unless the setting
	// blob-url puts them elsewhere. Default: ./data.
	DataDir string
	// Roles are what this Client does. Default: all.
	Roles []Role
	// Workers is how many handlers run at once (RoleWorker). Default: the
	// server's.
	Workers int
	// SecretKey is 64 hex characters that encrypt the unmasked input of
	// tasks (and sign download links). Default: a key file made in
	// DataDir. Nodes sharing a database must share it.
	SecretKey string
	// ShutdownGrace is how long running handlers may finish in Stop
	// before they are interrupted. Default: the server's.
	ShutdownGrace time.Duration
	// Logger receives the Client's log, masked like everything it stores.
	// Default: slog.Default().
	Logger *slog.Logger
	// TracerProvider, when set, is the OpenTelemetry provider the Client
	// traces with (its operations, creates, claims, executions): the
	// program's own, so that one trace goes from the program's request to
	// the handler, whose context carries the execution's span. The Client
	// does not shut it down. Nil: the provider the environment configures
	// (OTEL_EXPORTER_OTLP_ENDPOINT and the other OTEL_ variables; off when
	// no endpoint is set).
	TracerProvider trace.TracerProvider
	// Settings are the server's other settings by flag name, without the
	// dashes, as its command line takes them: {"retention": "720h",
	// "token-file": "/etc/taskgraph/tokens", "blob-url": "s3://..."}.
	// `taskgraph -h` lists them, and docs/configuration.md. A field above
	// wins over the setting of the same flag.
	Settings map[string]string
}

// ConfigFromEnv reads a Config from a command line (args, without the
// program's name) and the environment (getenv, os.Getenv say), as the
// taskgraph server reads its own: the same flags and TASKGRAPH_ variables,
// the same checks, so that a program embedding taskgraph and the server
// share one configuration.
func ConfigFromEnv(args []string, getenv func(string) string) (Config, error) {
	given, err := app.GivenSettings(args, getenv)
	if err != nil {
		return Config{}, &ConfigError{Err: err}
	}
	c := Config{Settings: given}
	take := func(name string) (string, bool) {
		v, ok := given[name]
		delete(given, name)
		return v, ok
	}
	if v, ok := take("db"); ok {
		c.Database = v
	}
	if v, ok := take("data-dir"); ok {
		c.DataDir = v
	}
	if v, ok := take("secret-key"); ok {
		c.SecretKey = v
	}
	if v, ok := take("role"); ok && v != "all" {
		for _, r := range strings.Split(v, ",") {
			c.Roles = append(c.Roles, Role(strings.TrimSpace(r)))
		}
	}
	if v, ok := take("workers"); ok {
		c.Workers, _ = strconv.Atoi(v) // checked by GivenSettings
	}
	if v, ok := take("shutdown-grace"); ok {
		c.ShutdownGrace, _ = app.ParseDuration(v)
	}
	return c, nil
}

// ConfigError is a Config that cannot be used: a setting that is not one,
// or a value out of its bounds. It says which and why.
type ConfigError struct{ Err error }

// Error says which setting is wrong, and why.
func (e *ConfigError) Error() string { return "taskgraph: configuration: " + e.Err.Error() }

// Unwrap returns the problem.
func (e *ConfigError) Unwrap() error { return e.Err }

// settings merges c's fields into its Settings.
func (c Config) settings() map[string]string {
	s := make(map[string]string, len(c.Settings)+6)
	for k, v := range c.Settings {
		s[k] = v
	}
	set := func(name, v string) {
		if v != "" {
			s[name] = v
		}
	}
	// The Client listens on nothing of its own (Handler is mounted by the
	// program): without the setting public-url, links it hands out
	// (downloads) are relative to the address a client asked, not to the
	// server's default address.
	if _, ok := s["addr"]; !ok {
		s["addr"] = "127.0.0.1:0"
	}
	set("db", c.Database)
	set("data-dir", c.DataDir)
	set("secret-key", c.SecretKey)
	if len(c.Roles) > 0 {
		roles := make([]string, len(c.Roles))
		for i, r := range c.Roles {
			roles[i] = string(r)
		}
		set("role", strings.Join(roles, ","))
	}
	if c.Workers != 0 {
		set("workers", strconv.Itoa(c.Workers))
	}
	if c.ShutdownGrace != 0 {
		set("shutdown-grace", c.ShutdownGrace.String())
	}
	return s
}

// Client is a taskgraph node inside a program: it stores tasks in its
// database, runs the handlers registered on it, recovers what a dead node
// left, and serves the API and the console through Handler. Several
// Clients (in one program or many) on one PostgreSQL database are one
// cluster.
//
// Register the task types and import targets before Start; create tasks
// any time after New.
type Client struct {
	app *app.App

	mu      sync.Mutex
	started bool
	stopped bool
}

// New opens the database (an empty one is initialised), and builds a
// Client from cfg. Nothing runs until Start.
func New(ctx context.Context, cfg Config) (*Client, error) {
	ac, err := app.ParseSettings(cfg.settings(), nil)
	if err != nil {
		return nil, &ConfigError{Err: err}
	}
	a, err := app.New(ctx, ac, app.Options{Logger: cfg.Logger, TracerProvider: cfg.TracerProvider})
	if err != nil {
		return nil, fmt.Errorf("taskgraph: %w", err)
	}
	return &Client{app: a}, nil
}

// ErrStarted is returned by what must happen before Start (registering a
// type or an import target) when the Client has started.
var ErrStarted = errors.New("taskgraph: the client has started: register before Start")

// ErrStopped is returned by Start after Stop.
var ErrStopped = errors.New("taskgraph: the client was stopped")

// Start runs the roles: the workers claim tasks, the watchdog and the
// other background services pass. ctx bounds the start, not the run:
// Stop ends it.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.stopped:
		return ErrStopped
	case c.started:
		return nil
	}
	if err := c.app.Start(ctx); err != nil {
		return fmt.Errorf("taskgraph: start: %w", err)
	}
	c.started = true
	return nil
}

// Stop stops as the server does on SIGTERM: it stops claiming, ends the
// subscriptions of Handler's clients, lets running handlers finish within
// the shutdown grace period and releases the others (INTERRUPTED, their
// attempt not used up, to run again on any node), stops the background
// services, and closes the database. A Client that never started is
// closed alike. ctx bounds the whole stop.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	return c.app.Shutdown(ctx)
}

// Handler is the node's HTTP face, to mount in the program's own mux:
// GraphQL at /query (with its subscriptions), the console under /console/ (and
// / leading there), downloads at /download/, and /healthz, /readyz and
// /metrics. It authenticates as the server does (the settings token-file
// and jwt-*): without either, whoever reaches it is an admin, so mount it
// on a loopback address or behind the program's own authentication.
// Without RoleAPI only the health, readiness and metrics endpoints are
// served. Download links are relative (/download/...) unless the setting
// public-url says where clients reach the program.
func (c *Client) Handler() http.Handler { return c.app.Handler }

// DB is the Client's connection pool. A transaction for CreateTx and
// CreateManyTx is begun on it (on PostgreSQL, one on any connection to the
// same database and schema does too).
func (c *Client) DB() *sql.DB { return c.app.Store.DB() }

// Tx runs fn in a transaction of the Client's database and commits it
// when fn returns nil (rolls it back, and returns fn's error, otherwise):
// a transaction for the program's own writes and CreateTx, that takes
// turns with the node's own writes. On SQLite, which has one writer at a
// time, prefer it to beginning one on DB(): many concurrent transactions
// begun there wait for each other in SQLite's busy handler, and one may
// give up with SQLITE_BUSY. fn runs again, in a new transaction, after a
// serialization failure, a deadlock or a busy database: it must do all of
// its writes through tx.
func (c *Client) Tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return c.app.Store.SQL(ctx, fn)
}

// beforeStart runs f while the Client has not started (registrations).
func (c *Client) beforeStart(f func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started || c.stopped {
		return ErrStarted
	}
	return f()
}

// Owner is a user of the API on whose behalf the Client creates and reads
// tasks (OnBehalfOf): the source of their credentials ("token" for the
// token file, "jwt" for JWTs, "local" for everyone on a server without
// authentication), their tenant ("" without tenants) and their name. They then see those tasks in the console and the API as
// their own.
type Owner struct {
	Source string
	Tenant string
	User   string
}

// OnBehalfOf returns a context under which the Client's calls act for
// owner: the tasks created are theirs, and reads see only what they may.
// Without it a call acts as the program itself, which owns what it
// creates and sees every task.
func OnBehalfOf(ctx context.Context, owner Owner) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

type ownerKey struct{}

// viewer is the context the engine acts under for a call with ctx: its
// owner's, as an operator (who creates tasks and sees their own), or the
// program's.
func viewer(ctx context.Context) (context.Context, error) {
	o, ok := ctx.Value(ownerKey{}).(Owner)
	if !ok {
		return auth.NewSystemContext(ctx), nil
	}
	var v ValidationError
	if o.User == "" {
		v.Problems = append(v.Problems, Problem{Field: "owner.User", Message: "names no user"})
	}
	switch o.Source {
	case auth.SourceToken, auth.SourceJWT, auth.SourceLocal:
	default:
		v.Problems = append(v.Problems, Problem{Field: "owner.Source", Message: fmt.Sprintf("%q is not token, jwt or local (where the user's credentials come from)", o.Source)})
	}
	if len(v.Problems) > 0 {
		return nil, &v
	}
	return auth.NewContext(ctx, auth.Viewer{User: o.User, Tenant: o.Tenant, Source: o.Source, Role: auth.RoleOperator}), nil
}
