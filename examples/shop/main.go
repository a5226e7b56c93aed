// Command shop is a program that puts its own work on taskgraph: it saves
// an order and creates the order's confirmation task in one transaction of
// its own, so that the task exists, runs and is published only if the order
// is saved. It serves the console's API from its own mux, beside a route of
// its own, and follows every task change through it as a subscriber would.
//
//	go run ./examples/shop                    # on a SQLite file in a temporary directory
//	go run ./examples/shop -db postgres://... # on PostgreSQL
//
// It saves one order and rolls another back, then prints what happened:
// the committed order's task ran once with its typed result, the
// rolled-back one left no row in any table and no event.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/taskgraph/taskgraph/tg"
	"github.com/taskgraph/taskgraph/tg/tgtype"
)

// Order is the confirmation task's input.
type Order struct {
	ID   int    `json:"id" jsonschema:"minimum=1"`
	Item string `json:"item" jsonschema:"minLength=1"`
}

// Confirmation is its result.
type Confirmation struct {
	OrderID int    `json:"orderId"`
	Note    string `json:"note"`
}

func main() {
	db := flag.String("db", "", "database: a PostgreSQL URL, or a SQLite file (default: one in a temporary directory)")
	flag.Parse()
	if err := run(context.Background(), *db, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, db string, out io.Writer) error {
	dir, err := os.MkdirTemp("", "shop-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c, err := tg.New(ctx, tg.Config{Database: db, DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	runs := map[int]int{}
	confirm, err := tg.Register(c, "order.confirm", func(ctx context.Context, job *tg.Job, o Order) (Confirmation, error) {
		mu.Lock()
		runs[o.ID]++
		mu.Unlock()
		job.Info("confirming", "order", o.ID)
		return Confirmation{OrderID: o.ID, Note: "confirmed: " + o.Item}, nil
	}, tg.WithDescription("Confirms an order."))
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer c.Stop(context.Background())

	postgres := strings.HasPrefix(db, "postgres")
	if _, err := c.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)`); err != nil {
		return err
	}
	insert := `INSERT INTO orders (id, item) VALUES (?, ?)`
	if postgres {
		insert = `INSERT INTO orders (id, item) VALUES ($1, $2)`
	}

	// The program's own mux: its route, and the node's API and console.
	mux := http.NewServeMux()
	mux.Handle("/", c.Handler())
	mux.HandleFunc("GET /orders/count", func(w http.ResponseWriter, r *http.Request) {
		var n int
		_ = c.DB().QueryRowContext(r.Context(), `SELECT COUNT(*) FROM orders`).Scan(&n)
		fmt.Fprint(w, n)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	// A subscriber, opened before anything is created.
	seen, err := subscribe(ctx, base)
	if err != nil {
		return err
	}
	tables := func() (map[string]int, error) { return rowsPerTable(ctx, c, postgres) }
	before, err := tables()
	if err != nil {
		return err
	}

	place := func(o Order, commit bool) (*tgtype.Task, error) {
		tx, err := c.DB().BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		if _, err := tx.ExecContext(ctx, insert, o.ID, o.Item); err != nil {
			return nil, err
		}
		task, err := confirm.CreateTx(ctx, tx, o, tg.BizID(fmt.Sprint(o.ID)), tg.IdempotencyKey(fmt.Sprintf("order-%d", o.ID)))
		if err != nil {
			return nil, err
		}
		if commit {
			return task, tx.Commit()
		}
		return task, tx.Rollback()
	}

	gone, err := place(Order{ID: 1, Item: "a lamp"}, false)
	if err != nil {
		return err
	}
	after, err := tables()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "rolled back: order 1, task %s; rows added to any table: %d\n", gone.Code, added(before, after))

	kept, err := place(Order{ID: 2, Item: "a chair"}, true)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done, err := c.Wait(wctx, kept.ID)
	if err != nil {
		return err
	}
	res, err := confirm.Result(done)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "committed: order 2, task %s %s, result %q\n", done.Code, done.Status, res.Note)

	if err := seen.waitFor(wctx, kept.Code, "SUCCESS"); err != nil {
		return err
	}
	mu.Lock()
	fmt.Fprintf(out, "executions: order 1: %d, order 2: %d\n", runs[1], runs[2])
	mu.Unlock()
	fmt.Fprintf(out, "subscriber: order 2's task %s; order 1's task: %d events\n", strings.Join(seen.states(kept.Code), " -> "), len(seen.states(gone.Code)))
	resp, err := http.Get(base + "/orders/count")
	if err != nil {
		return err
	}
	n, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Fprintf(out, "orders saved: %s\n", n)
	return nil
}

// rowsPerTable counts the rows of every table of the database.
func rowsPerTable(ctx context.Context, c *tg.Client, postgres bool) (map[string]int, error) {
	q := `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`
	if postgres {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`
	}
	rows, err := c.DB().QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, n := range names {
		var count int
		if err := c.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM `+n).Scan(&count); err != nil {
			return nil, err
		}
		out[n] = count
	}
	return out, nil
}

// added is how many rows after has that before had not, over every table
// but the node registry's (a node refreshes its own row on its own).
func added(before, after map[string]int) int {
	n := 0
	for t, c := range after {
		if t != "cluster_nodes" && c > before[t] {
			n += c - before[t]
		}
	}
	return n
}

// watcher is a subscription to every task change, over SSE, as any client
// of the API opens one.
type watcher struct {
	mu   sync.Mutex
	seen map[string][]string
	more chan struct{}
}

func subscribe(ctx context.Context, base string) (*watcher, error) {
	body, _ := json.Marshal(map[string]string{"query": `subscription { taskUpdated { code status } }`})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/query", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("subscribe: %s", resp.Status)
	}
	w := &watcher{seen: map[string][]string{}, more: make(chan struct{}, 1)}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev struct {
				Data struct{ TaskUpdated struct{ Code, Status string } }
			}
			if json.Unmarshal([]byte(data), &ev) != nil || ev.Data.TaskUpdated.Code == "" {
				continue
			}
			w.mu.Lock()
			w.seen[ev.Data.TaskUpdated.Code] = append(w.seen[ev.Data.TaskUpdated.Code], ev.Data.TaskUpdated.Status)
			w.mu.Unlock()
			select {
			case w.more <- struct{}{}:
			default:
			}
		}
	}()
	// SSE says nothing until the first change: the subscription is open
	// once the node counts it (its metrics say so).
	for {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return nil, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "\ntaskgraph_subscribers 1\n") {
			return w, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (w *watcher) states(code string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.seen[code]...)
}

func (w *watcher) waitFor(ctx context.Context, code, status string) error {
	for {
		if st := w.states(code); len(st) > 0 && st[len(st)-1] == status {
			return nil
		}
		select {
		case <-w.more:
		case <-ctx.Done():
			return errors.New("the subscriber never saw " + code + " reach " + status)
		}
	}
}
