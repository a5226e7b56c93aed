//go:build long

package reliability

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/serverbin"

	"github.com/gorilla/websocket"

	"github.com/taskgraph/taskgraph/internal/apptest"
)

// binary is the server, built once per test run.
func binary(t *testing.T) string { return serverbin.Build(t) }

// process is a taskgraph server running as a process of its own.
type process struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	exited chan struct{} // closed when the process has exited
	err    error         // how it exited, once exited is closed
}

// wait waits for the process to exit, for at most within.
func (p *process) wait(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(within):
		t.Fatalf("still running %s after SIGTERM\n%s", within, p.stderr)
		return nil
	}
}

func startProcess(t *testing.T, dir string, args ...string) *process {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &process{addr: ln.Addr().String(), stderr: &syncBuffer{}, exited: make(chan struct{})}
	ln.Close()
	p.cmd = exec.Command(binary(t), append([]string{"-addr", p.addr, "-data-dir", dir, "-log-format", "json"}, args...)...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	waitFor(t, "the server ready", 30*time.Second, func() (bool, error) {
		status, _, err := get(p.url() + "/readyz")
		return status == http.StatusOK, err
	})
	return p
}

func (p *process) url() string { return "http://" + p.addr }

func (p *process) server() *apptest.Server { return &apptest.Server{URL: p.url()} }

// logTime returns when the process logged msg (JSON logs).
func (p *process) logTime(t *testing.T, msg string) time.Time {
	t.Helper()
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		var l struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == msg {
			return l.Time
		}
	}
	t.Fatalf("the server never logged %q:\n%s", msg, p.stderr)
	return time.Time{}
}

// sseEnd and wsEnd record how a raw subscription ended.
type streamLog struct {
	mu       sync.Mutex
	messages []string // "next", "next:<code>", "complete", "close:<code>", "eof"
	live     chan struct{}
	once     sync.Once
}

func (l *streamLog) add(m string) {
	l.mu.Lock()
	l.messages = append(l.messages, m)
	l.mu.Unlock()
	if m == "next" {
		l.once.Do(func() { close(l.live) })
	}
}

func (l *streamLog) tail(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.messages[max(0, len(l.messages)-n):]...)
}

func errorCode(payload json.RawMessage) string {
	var r apptest.Response
	if json.Unmarshal(payload, &r) != nil || len(r.Errors) == 0 {
		return ""
	}
	return r.Errors[0].Code() + "/" + fmt.Sprint(r.Errors[0].Extensions["reason"])
}

func rawSSE(ctx context.Context, t *testing.T, url string, done chan<- struct{}) *streamLog {
	l := &streamLog{live: make(chan struct{})}
	resp, err := apptest.PostSSE(ctx, url+"/query", `subscription { taskUpdated { id status } }`, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(done)
		defer resp.Body.Close()
		err := apptest.ReadSSE(resp.Body, func(e apptest.SSEEvent) bool {
			if c := errorCode(e.Data); c != "" {
				l.add("next:" + c)
			} else {
				l.add(e.Event)
			}
			return true
		})
		if !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) && err != nil {
			l.add("broken: " + err.Error())
		}
	}()
	return l
}

func rawWS(t *testing.T, url string, done chan<- struct{}) *streamLog {
	l := &streamLog{live: make(chan struct{})}
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	conn, resp, err := d.Dial("ws"+strings.TrimPrefix(url, "http")+"/query", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Cleanup(func() { conn.Close() })
	_ = conn.WriteJSON(apptest.WSMessage{Type: "connection_init", Payload: json.RawMessage(`{}`)})
	payload, _ := json.Marshal(map[string]any{"query": `subscription { taskUpdated { id status } }`})
	go func() {
		defer close(done)
		for {
			var m apptest.WSMessage
			if err := conn.ReadJSON(&m); err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) {
					l.add(fmt.Sprintf("close:%d", ce.Code))
				} else {
					l.add("broken: " + err.Error())
				}
				return
			}
			switch m.Type {
			case "connection_ack":
				_ = conn.WriteJSON(apptest.WSMessage{Type: "subscribe", ID: "1", Payload: payload})
			case "ping":
				_ = conn.WriteJSON(apptest.WSMessage{Type: "pong"})
			case "next":
				if c := errorCode(m.Payload); c != "" {
					l.add("next:" + c)
				} else {
					l.add("next")
				}
			case "complete", "error":
				l.add(m.Type)
			}
		}
	}()
	return l
}

// TestSIGTERMWithSubscribers sends SIGTERM to a working server with an SSE
// and a websocket subscriber connected. The server stops claiming at once,
// closes the websocket with 1001 (going away: its client reconnects and
// subscribes again) and ends the SSE stream with a last UNAVAILABLE
// (SHUTTING_DOWN) error and complete, lets running
// handlers finish within the grace period, releases the rest, and exits 0
// within the grace period and a small margin. Started again on the same
// data, it finishes every task exactly once.
func TestSIGTERMWithSubscribers(t *testing.T) {
	t.Parallel()
	const grace = 3 * time.Second
	dir := t.TempDir()
	p := startProcess(t, dir, "-workers", "2", "-shutdown-grace", grace.String())
	s := p.server()
	// The long task first: it is running when SIGTERM comes.
	if r := s.Do(t, `mutation { createTask(input: {type: "noop", title: "st-long", input: {sleepMs: 600000}}) { id } }`, nil); len(r.Errors) > 0 {
		t.Fatal(r.Errors)
	}
	for i := range 30 {
		r := s.Do(t, `mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`,
			map[string]any{"in": map[string]any{"type": "noop", "title": fmt.Sprintf("st-%d", i), "input": map[string]any{"sleepMs": 300}}})
		if len(r.Errors) > 0 {
			t.Fatal(r.Errors)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sseDone, wsDone := make(chan struct{}), make(chan struct{})
	sse, ws := rawSSE(ctx, t, p.url(), sseDone), rawWS(t, p.url(), wsDone)
	for _, l := range []*streamLog{sse, ws} {
		select {
		case <-l.live:
		case <-time.After(30 * time.Second):
			t.Fatal("a subscriber received nothing")
		}
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, grace+5*time.Second); err != nil {
		t.Fatalf("exit: %v\n%s", err, p.stderr)
	}
	for name, done := range map[string]chan struct{}{"sse": sseDone, "ws": wsDone} {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the %s stream did not end", name)
		}
	}
	if got, want := sse.tail(2), []string{"next:UNAVAILABLE/SHUTTING_DOWN", "complete"}; !equal(got, want) {
		t.Errorf("the SSE stream ended with %v, want %v", got, want)
	}
	if got, want := ws.tail(2), []string{"next", fmt.Sprintf("close:%d", websocket.CloseGoingAway)}; !equal(got, want) {
		t.Errorf("the websocket ended with %v, want %v", got, want)
	}

	db, err := sql.Open("sqlite", filepath.Join(dir, "taskgraph.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cnt := counter{t, db}
	stopped := p.logTime(t, "stopped claiming work")
	if n := cnt.n(`SELECT count(*) FROM task_instances WHERE julianday(started_at) > julianday(?)`, stopped.UTC().Format("2006-01-02 15:04:05.999999-07:00")); n != 0 {
		t.Errorf("%d executions started after the server stopped claiming", n)
	}
	if n := cnt.n(`SELECT count(*) FROM task_instances WHERE status = 'EXECUTING'`); n != 0 {
		t.Errorf("%d executions left EXECUTING", n)
	}
	if n := cnt.n(`SELECT count(*) FROM task_instances i JOIN tasks t ON t.id = i.task_id WHERE t.title = 'st-long' AND i.error_kind = 'INTERRUPTED'`); n != 1 {
		t.Errorf("the long task was interrupted %d times, want 1", n)
	}
	db.Close()

	// Again, on the same data: everything finishes, once.
	p = startProcess(t, dir, "-workers", "4", "-shutdown-grace", grace.String())
	s = p.server()
	var long struct {
		Tasks struct {
			Edges []struct{ Node struct{ ID string } }
		}
	}
	s.Query(t, `{ tasks(where: {title: "st-long"}) { edges { node { id } } } }`, nil, &long)
	s.Query(t, `mutation($id: ID!) { cancelTask(id: $id) { id } }`, map[string]any{"id": long.Tasks.Edges[0].Node.ID}, nil)
	db, err = sql.Open("sqlite", filepath.Join(dir, "taskgraph.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cnt = counter{t, db}
	waitFor(t, "every task finished", time.Minute, func() (bool, error) {
		n, err := cnt.try(`SELECT count(*) FROM tasks WHERE status NOT IN ('SUCCESS', 'FAILED', 'CANCELLED')`)
		return err == nil && n == 0, err
	})
	if n := cnt.n(`SELECT count(*) FROM tasks WHERE title LIKE 'st-%' AND title <> 'st-long' AND status = 'SUCCESS'`); n != 30 {
		t.Errorf("%d of 30 tasks SUCCESS", n)
	}
	if n := cnt.n(`SELECT count(*) FROM (SELECT task_id FROM task_instances WHERE status = 'SUCCESS' GROUP BY task_id HAVING count(*) > 1)`); n != 0 {
		t.Errorf("%d tasks succeeded twice", n)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(t, grace+5*time.Second); err != nil {
		t.Fatalf("exit: %v\n%s", err, p.stderr)
	}
	if strings.Contains(p.stderr.String(), `"level":"ERROR"`) {
		t.Errorf("errors logged:\n%s", grep(p.stderr.String(), `"level":"ERROR"`))
	}
}

func equal(a, b []string) bool {
	return strings.Join(a, "|") == strings.Join(b, "|")
}
