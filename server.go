// Command taskgraph serves the task engine: GraphQL at /query, workers and
// the watchdog in one process, on an embedded SQLite file unless --db names
// a PostgreSQL database. "taskgraph bench" measures throughput,
// "taskgraph bench-import" imports and exports;
// "taskgraph watch" prints a task's changes as they are committed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"taskgraph/app"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "bench":
			os.Exit(runBench(os.Args[2:]))
		case "bench-import":
			os.Exit(runBenchImport(os.Args[2:]))
		case "watch":
			os.Exit(runWatch(os.Args[2:]))
		}
	}
	os.Exit(serve(os.Args[1:]))
}

func serve(args []string) int {
	cfg, err := app.ParseFlags(args, os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "taskgraph:", err)
		return 2
	}
	log := newLogger(cfg)
	slog.SetDefault(log)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	a, err := app.New(ctx, cfg, app.Options{Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "taskgraph:", oneLine(err))
		return 1
	}
	// Every role listens: /healthz and /readyz are for all of them.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "taskgraph:", oneLine(err))
		_ = a.Shutdown(context.Background())
		return 1
	}
	if err := a.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "taskgraph:", oneLine(err))
		return 1
	}
	log.Info("taskgraph started", "addr", "http://"+ln.Addr().String(), "db", a.Store.Dialect(), "roles", fmt.Sprint(cfg.Roles), "workers", cfg.Workers)
	log.Warn("authentication is off: whoever can reach " + ln.Addr().String() + " administers this server")

	serveErr := make(chan error, 1)
	go func() { serveErr <- a.Serve(ln) }()
	select {
	case <-ctx.Done():
		log.Info("shutting down", "grace", cfg.ShutdownGrace)
	case err := <-serveErr:
		log.Error("server stopped", "err", err)
	}
	stop()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace+30*time.Second)
	defer cancel()
	if err := a.Shutdown(shutdownCtx); err != nil {
		log.Error("shutdown", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}

func newLogger(cfg app.Config) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// oneLine keeps a start-up failure to one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
