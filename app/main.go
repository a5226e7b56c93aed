package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Main is a taskgraph server's main: it parses args and the environment,
// serves until SIGINT or SIGTERM, shuts down gracefully, and returns the
// exit code (2 for bad flags, 1 for failures). opts lets a program that
// embeds taskgraph add its own task types.
func Main(args []string, opts Options, stderr io.Writer) int {
	cfg, err := ParseFlags(args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "taskgraph:", err)
		return 2
	}
	log := newLogger(cfg, stderr)
	slog.SetDefault(log)
	opts.Logger = log

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	a, err := New(ctx, cfg, opts)
	if err != nil {
		fmt.Fprintln(stderr, "taskgraph:", OneLine(err))
		return 1
	}
	// Every role listens: /healthz, /readyz and /metrics are for all.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		fmt.Fprintln(stderr, "taskgraph:", OneLine(err))
		_ = a.Shutdown(context.Background())
		return 1
	}
	if a.Auth.Open() && !ln.Addr().(*net.TCPAddr).IP.IsLoopback() {
		// -addr named a loopback host that resolved elsewhere.
		fmt.Fprintln(stderr, "taskgraph: no authentication is configured and", ln.Addr(), "is not a loopback address")
		_ = ln.Close()
		_ = a.Shutdown(context.Background())
		return 1
	}
	if err := a.Start(ctx); err != nil {
		fmt.Fprintln(stderr, "taskgraph:", OneLine(err))
		return 1
	}
	a.Log.Info("taskgraph started", "addr", "http://"+ln.Addr().String(), "db", a.Store.Dialect(), "roles", fmt.Sprint(cfg.Roles), "workers", cfg.Workers)
	if a.Auth.Open() {
		a.Log.Warn("AUTHENTICATION IS OFF: this server is open; anyone who can reach " + ln.Addr().String() +
			" on this machine administers it. Configure -token-file or -jwt-* to serve other machines.")
	} else {
		a.Log.Info("authentication is on", "token_file", cfg.Access.TokenFile != "",
			"jwt", cfg.Access.JWTHS256KeyFile != "" || cfg.Access.JWTRS256KeyFile != "")
	}
	if cfg.Playground {
		a.Log.Warn("introspection and the playground are on (-playground)")
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
		return 1
	}
	a.Log.Info("stopped")
	return 0
}

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
