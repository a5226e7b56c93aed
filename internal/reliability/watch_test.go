//go:build long

package reliability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/taskgraph/taskgraph/internal/apptest"
)

// seenTask is a task's state as a watcher last saw it.
type seenTask struct {
	Status  string
	Version int
}

// watcher is a client watching the tasks whose title has a prefix,
// behaving as a client should: a stream ended with RESYNC_REQUIRED is
// resubscribed and what it watches re-read; a stream ended by anything
// else, or without a reason, is a problem.
type watcher struct {
	name, url, prefix string

	mu   sync.Mutex
	seen map[string]seenTask
	// reread holds the versions learnt by re-reading after a resync: the
	// new stream may repeat them, and the client skips those.
	fromReread map[string]int
	problems   []string
	resyncs    int
	started    chan struct{}
	once       sync.Once
	done       chan struct{}
}

const watchQuery = `subscription($p: String!) { taskUpdated(where: {titleHasPrefix: $p}) { id title status version } }`

type watchedTask struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	Status  string `json:"status"`
	Version int    `json:"version"`
}

// streamResult is how one subscription stream ended.
type streamResult struct {
	code string // extensions.code of its last error ("" none)
	err  error  // a transport failure
}

// startWatcher runs a watcher of server s over sse or websockets until ctx
// ends (then wait for it with stop).
func startWatcher(ctx context.Context, name string, s *apptest.Server, overSSE bool, prefix string) *watcher {
	w := &watcher{name: name, url: s.URL, prefix: prefix, seen: map[string]seenTask{}, fromReread: map[string]int{}, started: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			var res streamResult
			if overSSE {
				res = w.streamSSE(ctx)
			} else {
				res = w.streamWS(ctx)
			}
			if ctx.Err() != nil {
				return
			}
			switch {
			case res.err != nil:
				w.problem("stream failed: %v", res.err)
				time.Sleep(100 * time.Millisecond) // then subscribe again
			case res.code == "RESYNC_REQUIRED":
				w.mu.Lock()
				w.resyncs++
				w.mu.Unlock()
			case res.code != "":
				w.problem("stream ended with %s", res.code)
			default:
				w.problem("stream completed without a reason")
			}
		}
	}()
	return w
}

// stop waits for the watchers to stop (their context cancelled).
func stop(watchers []*watcher) {
	for _, w := range watchers {
		<-w.done
	}
}

func (w *watcher) problem(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.problems) < 50 {
		w.problems = append(w.problems, fmt.Sprintf(format, args...))
	}
}

// saw records a task change from the stream: each version once, in order.
func (w *watcher) saw(tk watchedTask) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !strings.HasPrefix(tk.Title, w.prefix) {
		w.problems = append(w.problems, fmt.Sprintf("task %s (%q) does not match the filter", tk.ID, tk.Title))
		return
	}
	if tk.Version <= w.fromReread[tk.ID] {
		return // known from the re-read
	}
	if prev, ok := w.seen[tk.ID]; ok && tk.Version <= prev.Version {
		w.problems = append(w.problems, fmt.Sprintf("task %s: version %d (%s) after version %d: a duplicate or out of order", tk.ID, tk.Version, tk.Status, prev.Version))
		return
	}
	w.seen[tk.ID] = seenTask{tk.Status, tk.Version}
}

// reread catches up after a resync: what it reads replaces only older
// states.
func (w *watcher) reread(ctx context.Context) error {
	after := any(nil)
	for {
		var out struct {
			Data struct {
				Tasks struct {
					Edges    []struct{ Node watchedTask }
					PageInfo struct {
						HasNextPage bool
						EndCursor   string
					}
				}
			}
			Errors []apptest.Error
		}
		if err := postJSON(ctx, w.url+"/query", `query($p: String!, $after: Cursor) { tasks(first: 500, after: $after, where: {titleHasPrefix: $p}) {
			edges { node { id title status version } } pageInfo { hasNextPage endCursor } } }`, map[string]any{"p": w.prefix, "after": after}, &out); err != nil {
			return err
		}
		if len(out.Errors) > 0 {
			return fmt.Errorf("re-read: %+v", out.Errors)
		}
		w.mu.Lock()
		for _, e := range out.Data.Tasks.Edges {
			if prev, ok := w.seen[e.Node.ID]; !ok || e.Node.Version > prev.Version {
				w.seen[e.Node.ID] = seenTask{e.Node.Status, e.Node.Version}
				w.fromReread[e.Node.ID] = e.Node.Version
			}
		}
		w.mu.Unlock()
		if !out.Data.Tasks.PageInfo.HasNextPage {
			return nil
		}
		after = out.Data.Tasks.PageInfo.EndCursor
	}
}

// next handles one GraphQL response of the stream; it returns the code of
// its error when the response is the stream's last word.
func (w *watcher) next(payload json.RawMessage) (code string, last bool) {
	var r struct {
		Data struct {
			TaskUpdated *watchedTask `json:"taskUpdated"`
		} `json:"data"`
		Errors []apptest.Error `json:"errors"`
	}
	if err := json.Unmarshal(payload, &r); err != nil {
		w.problem("bad payload %s: %v", payload, err)
		return "", false
	}
	if len(r.Errors) > 0 {
		return r.Errors[0].Code(), true
	}
	if r.Data.TaskUpdated != nil {
		w.saw(*r.Data.TaskUpdated)
	}
	return "", false
}

// subscribed reads the current state once the stream is open (at first,
// and again after a resync): what changed before is not streamed.
func (w *watcher) subscribed(ctx context.Context) {
	if err := w.reread(ctx); err != nil && ctx.Err() == nil {
		w.problem("re-read: %v", err)
	}
	w.once.Do(func() { close(w.started) })
}

func (w *watcher) streamSSE(ctx context.Context) streamResult {
	resp, err := apptest.PostSSE(ctx, w.url+"/query", watchQuery, map[string]any{"p": w.prefix})
	if err != nil {
		return streamResult{err: err}
	}
	defer resp.Body.Close()
	w.subscribed(ctx)
	var res streamResult
	completed := false
	err = apptest.ReadSSE(resp.Body, func(e apptest.SSEEvent) bool {
		switch e.Event {
		case "next":
			if code, last := w.next(e.Data); last {
				res.code = code
			}
		case "complete":
			completed = true
			return false
		}
		return true
	})
	if !completed && ctx.Err() == nil {
		return streamResult{err: fmt.Errorf("the SSE stream ended without complete: %v", err)}
	}
	return res
}

func (w *watcher) streamWS(ctx context.Context) streamResult {
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	conn, resp, err := d.DialContext(ctx, "ws"+strings.TrimPrefix(w.url, "http")+"/query", nil)
	if err != nil {
		return streamResult{err: err}
	}
	resp.Body.Close()
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	send := func(m apptest.WSMessage) error { return conn.WriteJSON(m) }
	if err := send(apptest.WSMessage{Type: "connection_init", Payload: json.RawMessage(`{}`)}); err != nil {
		return streamResult{err: err}
	}
	payload, _ := json.Marshal(map[string]any{"query": watchQuery, "variables": map[string]any{"p": w.prefix}})
	acked := false
	var res streamResult
	for {
		var m apptest.WSMessage
		if err := conn.ReadJSON(&m); err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return streamResult{err: fmt.Errorf("closed with %d %s", ce.Code, ce.Text)}
			}
			return streamResult{err: err}
		}
		switch m.Type {
		case "connection_ack":
			if !acked {
				acked = true
				if err := send(apptest.WSMessage{Type: "subscribe", ID: "w", Payload: payload}); err != nil {
					return streamResult{err: err}
				}
				w.subscribed(ctx)
			}
		case "ping":
			_ = send(apptest.WSMessage{Type: "pong"})
		case "next":
			if code, last := w.next(m.Payload); last {
				res.code = code
			}
		case "complete":
			return res
		case "error":
			return streamResult{err: fmt.Errorf("operation error: %s", m.Payload)}
		}
	}
}

// waitWatchers waits until every watcher has seen every task in final at
// its final version, and fails with what is missing if that does not happen
// in time (or if a watcher saw something wrong).
func waitWatchers(t *testing.T, watchers []*watcher, final map[string]seenTask, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var behind []string
		for _, w := range watchers {
			w.mu.Lock()
			missing := 0
			var sample []string
			for id, f := range final {
				if got := w.seen[id]; got != f {
					missing++
					if len(sample) < 5 {
						sample = append(sample, fmt.Sprintf("%s: saw %+v, final %+v", id, got, f))
					}
				}
			}
			if len(w.problems) > 0 {
				t.Fatalf("watcher %s: %s", w.name, strings.Join(w.problems, "; "))
			}
			if missing > 0 {
				sort.Strings(sample)
				behind = append(behind, fmt.Sprintf("%s misses %d of %d final states (%s)", w.name, missing, len(final), strings.Join(sample, "; ")))
			}
			w.mu.Unlock()
		}
		if len(behind) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("watchers did not see every final state:\n%s", strings.Join(behind, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitStarted waits until each watcher's first subscription is open.
func waitStarted(t *testing.T, watchers ...*watcher) {
	t.Helper()
	for _, w := range watchers {
		select {
		case <-w.started:
		case <-time.After(30 * time.Second):
			t.Fatalf("watcher %s never subscribed", w.name)
		}
	}
}
