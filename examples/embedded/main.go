// Command embedded is a program of its own with taskgraph inside: a typed
// handler of its own, its own HTTP routes, and the taskgraph console and
// API mounted in the same mux. It stops gracefully on SIGINT or SIGTERM
// (running handlers finish within the shutdown grace, the rest run again
// later).
//
//	go run ./examples/embedded                 # http://127.0.0.1:8090/ is the console
//	curl -s 'http://127.0.0.1:8090/greet?name=Ada'
//
// Every flag and TASKGRAPH_ variable of the taskgraph server configures it
// too (go run ./examples/embedded -db postgres://... -workers 8): it reads
// them the server's way, with tg.ConfigFromEnv.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/taskgraph/taskgraph/tg"
)

// Greeting is the input of the greet task type.
type Greeting struct {
	Name string `json:"name" jsonschema:"minLength=1,maxLength=100"`
}

// Greeted is its result.
type Greeted struct {
	Text string `json:"text"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	addr := "127.0.0.1:8090"
	if v := os.Getenv("EMBEDDED_ADDR"); v != "" {
		addr = v
	}
	if err := run(ctx, addr, args, os.Getenv, nil); err != nil {
		fmt.Fprintln(os.Stderr, "embedded:", err)
		os.Exit(1)
	}
}

// run serves on addr until ctx ends; ready, when set, receives the address
// it listens on.
func run(ctx context.Context, addr string, args []string, getenv func(string) string, ready chan<- string) error {
	cfg, err := tg.ConfigFromEnv(args, getenv)
	if err != nil {
		return err
	}
	cfg.Logger = slog.Default()
	c, err := tg.New(ctx, cfg)
	if err != nil {
		return err
	}
	greet, err := tg.Register(c, "greet", func(ctx context.Context, job *tg.Job, in Greeting) (Greeted, error) {
		job.Progress(1, 1)
		return Greeted{Text: "hello, " + in.Name}, nil
	}, tg.WithDescription("Greets someone by name."))
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", c.Handler()) // GraphQL at /query, the console under /console/, downloads, health
	mux.HandleFunc("GET /greet", func(w http.ResponseWriter, r *http.Request) {
		task, err := greet.Create(r.Context(), Greeting{Name: r.URL.Query().Get("name")})
		var ve *tg.ValidationError
		switch {
		case errors.As(err, &ve):
			http.Error(w, ve.Error(), http.StatusBadRequest)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, task.ID, task.Code)
	})
	mux.HandleFunc("GET /greet/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.Atoi(r.PathValue("id"))
		if err != nil {
			http.Error(w, "not a task id", http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		task, err := c.Wait(ctx, id)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		out, err := greet.Result(task)
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		fmt.Fprintln(w, out.Text)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = c.Stop(context.Background())
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if ready != nil {
		ready <- ln.Addr().String()
	}
	slog.Info("serving", "url", "http://"+ln.Addr().String()+"/")
	select {
	case <-ctx.Done():
	case err := <-served:
		_ = c.Stop(context.Background())
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return c.Stop(sctx)
}
