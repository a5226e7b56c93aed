package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Exit codes of Main and of every taskgraph command.
const (
	ExitOK      = 0 // done, or help was asked for
	ExitFailure = 1 // something went wrong while running
	ExitUsage   = 2 // the command line or the environment is wrong
)

// Main is a taskgraph server's main: it parses args and the environment,
// serves until SIGINT or SIGTERM, shuts down gracefully, and returns the
// exit code (ExitUsage for bad flags, ExitFailure for failures, ExitOK
// for -h, which prints the usage to stdout). opts lets a program that
// embeds taskgraph add its own task types, and lists the commands -h
// shows.
func Main(args []string, opts Options, stderr io.Writer) int {
	cfg, err := parseFlags(args, os.Getenv, os.Stdout, opts.Commands)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "taskgraph:", err)
		fmt.Fprintln(stderr, "taskgraph -h lists the flags and commands.")
		return ExitUsage
	}
	log := newLogger(cfg, stderr)
	slog.SetDefault(log)
	opts.Logger = log

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	a, err := New(ctx, cfg, opts)
	if err != nil {
		if ctx.Err() != nil {
			// SIGINT or SIGTERM while starting (a database that does not
			// answer, say): New gave up; nothing ran.
			fmt.Fprintln(stderr, "taskgraph: stopped before it started (a signal came while starting):", OneLine(err))
			return ExitFailure
		}
		fmt.Fprintln(stderr, "taskgraph:", OneLine(err))
		return ExitFailure
	}
	// Every role listens: /healthz, /readyz and /metrics are for all.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		fmt.Fprintln(stderr, "taskgraph:", OneLine(err))
		_ = a.Shutdown(context.Background())
		return ExitFailure
	}
	if a.Auth.Open() && !ln.Addr().(*net.TCPAddr).IP.IsLoopback() {
		// -addr named a loopback host that resolved elsewhere.
		fmt.Fprintln(stderr, "taskgraph: no authentication is configured and", ln.Addr(), "is not a loopback address")
		_ = ln.Close()
		_ = a.Shutdown(context.Background())
		return ExitFailure
	}
	if err := a.Start(ctx); err != nil {
		fmt.Fprintln(stderr, "taskgraph:", OneLine(err))
		return ExitFailure
	}
	a.Log.Info("taskgraph started", startAttrs(cfg, a, ln.Addr())...)
	if a.Auth.Open() {
		a.Log.Warn("AUTHENTICATION IS OFF: this server is open; anyone who can reach " + listenAddr(cfg.Addr, ln.Addr()) +
			" on this machine administers it. Configure --token-file or --jwt-* to serve other machines.")
	} else {
		a.Log.Info("authentication is on", "token_file", cfg.Access.TokenFile != "",
			"jwt", cfg.Access.JWTHS256KeyFile != "" || cfg.Access.JWTRS256KeyFile != "")
	}
	if cfg.Playground {
		a.Log.Warn("introspection and the playground are on (--playground)")
	}
	if cfg.Has(RoleAPI) && cfg.PublicURL() == "" {
		a.Log.Warn("download links are relative (/download/...): set -public-url to the address clients use")
	}

	serveErr := make(chan error, 2)
	go func() { serveErr <- a.Serve(ln) }()
	if cfg.Network.MetricsAddr != "" {
		mln, err := net.Listen("tcp", cfg.Network.MetricsAddr)
		if err != nil {
			fmt.Fprintln(stderr, "taskgraph: -metrics-addr:", OneLine(err))
			_ = a.Shutdown(context.Background())
			return 1
		}
		a.Log.Info("metrics served without authentication", "addr", "http://"+mln.Addr().String()+"/metrics")
		go func() { serveErr <- a.ServeMetrics(mln) }()
	}
	select {
	case <-ctx.Done():
		a.Log.Info("shutting down", "grace", cfg.ShutdownGrace)
	case err := <-serveErr:
		a.Log.Error("server stopped", "err", err)
	}
	stop()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace+30*time.Second)
	defer cancel()
	if err := a.Shutdown(shutdownCtx); err != nil {
		a.Log.Error("shutdown", "err", err)
		return ExitFailure
	}
	a.Log.Info("stopped")
	return ExitOK
}

// startAttrs is the start line: the address as given (with the port
// chosen when it was 0), the database (a SQLite file's absolute path; a
// PostgreSQL DSN without its password), the roles running and, with the
// worker role, how many handlers run at once.
func startAttrs(cfg Config, a *App, bound net.Addr) []any {
	attrs := []any{"addr", "http://" + listenAddr(cfg.Addr, bound), "db", a.Store.Dialect()}
	if a.Store.Postgres() {
		attrs = append(attrs, "database", redactDSN(cfg.DSN()))
	} else {
		attrs = append(attrs, "file", sqlitePath(cfg.DSN()))
	}
	roles := make([]string, len(cfg.Roles))
	for i, r := range cfg.Roles {
		roles[i] = string(r)
	}
	attrs = append(attrs, "roles", strings.Join(roles, ","))
	if cfg.Has(RoleWorker) {
		attrs = append(attrs, "workers", cfg.Workers)
	}
	return append(attrs, "gogc", gcPercentInEffect(), "gomemlimit", gcMemoryLimitInEffect())
}

// listenAddr is addr as given, with the port the listener got when addr
// asked for port 0.
func listenAddr(addr string, bound net.Addr) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return bound.String()
	}
	if port == "0" {
		if tcp, ok := bound.(*net.TCPAddr); ok {
			port = strconv.Itoa(tcp.Port)
		}
	}
	return net.JoinHostPort(host, port)
}

// sqlitePath is the absolute path of the SQLite file a DSN names.
func sqlitePath(dsn string) string {
	p := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite://"), "file:")
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// redactDSN hides a PostgreSQL password.
func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return passwordRE.ReplaceAllString(dsn, "password=xxxxx")
}

var passwordRE = regexp.MustCompile(`password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// OneLine keeps an error to one line, for start-up failures.
func OneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
