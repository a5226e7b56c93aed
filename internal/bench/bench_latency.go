package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
)

// RunLatency measures the time from a commit to a websocket subscriber
// receiving it: S subscribers on node A, tasks created at a steady rate and
// run by the workers (on node A, or with -nodes > 1 on the other nodes, so
// that every change crosses the relay).
func RunLatency(args []string) int {
	fs := flag.NewFlagSet("taskgraph bench-latency", flag.ContinueOnError)
	db := fs.String("db", os.Getenv("TASKGRAPH_DB"), "database (default: a new SQLite file); -nodes > 1 needs PostgreSQL")
	subs := fs.Int("subscribers", 1000, "websocket subscribers on node A")
	nodes := fs.Int("nodes", 1, "nodes: A serves the subscribers; with more than one, the others run the tasks")
	rate := fs.Int("rate", 100, "tasks created per second")
	duration := fs.Duration("duration", 20*time.Second, "how long to create tasks")
	watch := fs.String("watch", "own", `"own": each subscriber watches its own tasks (by biz id); "all": every subscriber watches every task`)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *watch != "own" && *watch != "all" {
		fmt.Fprintln(os.Stderr, "bench-latency: -watch is own or all")
		return 2
	}
	dir, dsn, cleanup, err := benchDB(*db)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-latency"+":", err)
		return 1
	}
	defer cleanup()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var apps []*app.App
	defer func() {
		for _, a := range apps {
			_ = a.Shutdown(context.Background())
		}
	}()
	for i := range *nodes {
		roles := []app.Role{app.RoleAPI, app.RoleWorker, app.RoleWatchdog}
		if *nodes > 1 {
			roles = []app.Role{app.RoleWorker, app.RoleWatchdog}
			if i == 0 {
				roles = []app.Role{app.RoleAPI}
			}
		}
		cfg := app.Config{DB: dsn, DataDir: dir, Workers: 64, Roles: roles, ShutdownGrace: 5 * time.Second,
			HeartbeatTimeout: 30 * time.Second, SecretKey: "00000000000000000000000000000000000000000000000000000000000000aa"}
		// Every subscriber is the same (local) user here: lift the per-user
		// websocket cap and the mutation rate limit, which would otherwise
		// be what is measured.
		cfg.Access.WSMaxConnections = *subs + 10
		cfg.Access.WSMaxSubs = 10
		cfg.Access.RateLimit = 0
		cfg.Access.RateBurst = 1
		a, err := app.New(ctx, cfg, app.Options{Logger: quiet})
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-latency:", app.OneLine(err))
			return 1
		}
		apps = append(apps, a)
		if err := a.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench-latency:", app.OneLine(err))
			return 1
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-latency:", err)
		return 1
	}
	go func() { _ = apps[0].Serve(ln) }()
	url := "ws://" + ln.Addr().String() + "/query"

	var mu sync.Mutex
	var lat []time.Duration
	received := 0
	got := map[string]int{} // "id status" -> times received
	var wg sync.WaitGroup
	conns := make([]*websocket.Conn, *subs)
	for i := range *subs {
		d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}}
		c, resp, err := d.Dial(url, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-latency: dial:", err)
			return 1
		}
		resp.Body.Close()
		conns[i] = c
		where := map[string]any{"type": "noop"}
		if *watch == "own" {
			where = map[string]any{"bizID": fmt.Sprintf("lat-%d", i)}
		}
		_ = c.WriteJSON(map[string]any{"type": "connection_init", "payload": map[string]any{}})
		_ = c.WriteJSON(map[string]any{"type": "subscribe", "id": "1", "payload": map[string]any{
			"query":     `subscription($w: TaskWhereInput) { taskUpdated(where: $w) { id status version updatedAt } }`,
			"variables": map[string]any{"w": where},
		}})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var m struct {
					Type    string `json:"type"`
					Payload struct {
						Data struct {
							TaskUpdated struct {
								ID        string    `json:"id"`
								Status    string    `json:"status"`
								Version   int       `json:"version"`
								UpdatedAt time.Time `json:"updatedAt"`
							} `json:"taskUpdated"`
						} `json:"data"`
					} `json:"payload"`
				}
				if err := c.ReadJSON(&m); err != nil {
					return
				}
				switch m.Type {
				case "ping":
					_ = c.WriteJSON(map[string]any{"type": "pong"})
				case "next":
					tu := m.Payload.Data.TaskUpdated
					d := time.Since(tu.UpdatedAt)
					mu.Lock()
					lat = append(lat, d)
					received++
					got[tu.ID+" "+tu.Status]++
					mu.Unlock()
				}
			}
		}()
	}
	// Let every subscription register.
	deadline := time.Now().Add(30 * time.Second)
	for apps[0].Broker.Stats().TaskSubscribers < *subs {
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "bench-latency: only %d of %d subscriptions registered\n", apps[0].Broker.Stats().TaskSubscribers, *subs)
			return 1
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("bench-latency: %s, %d nodes, %d websocket subscribers on node A watching %s tasks, %d tasks/s for %s\n",
		apps[0].Store.Dialect(), *nodes, *subs, *watch, *rate, *duration)

	tick := time.NewTicker(time.Second / time.Duration(*rate))
	end := time.Now().Add(*duration)
	created := 0
	var ids []int
	for time.Now().Before(end) {
		<-tick.C
		in := engine.CreateRequest{Type: "noop", BizID: fmt.Sprintf("lat-%d", created%*subs)}
		// As the open server's own clients are: the local administrator.
		tk, err := apps[0].Engine.Create(auth.NewContext(ctx, auth.Local), in)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-latency: create:", err)
			return 1
		}
		ids = append(ids, tk.ID)
		created++
	}
	tick.Stop()
	// Three changes per task (PENDING, EXECUTING, SUCCESS) to each watcher.
	want := 3 * created
	if *watch == "all" {
		want *= *subs
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := received
		mu.Unlock()
		if n >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(10 * time.Microsecond)
	}
	fmt.Printf("received %d of %d changes; commit-to-subscriber latency p50 %s  p90 %s  p99 %s  max %s\n",
		received, want, q(0.50), q(0.90), q(0.99), q(1))
	if received < want {
		if *watch == "own" {
			for _, id := range ids {
				for _, st := range []string{"PENDING", "EXECUTING", "SUCCESS"} {
					if got[fmt.Sprint(id)+" "+st] == 0 {
						fmt.Printf("missing: task %d %s\n", id, st)
					}
				}
			}
		}
		return 1
	}
	return 0
}
