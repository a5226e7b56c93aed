package apptest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// SSEEvent is one server-sent event: its type ("next", "complete") and
// data (a GraphQL response for "next").
type SSEEvent struct {
	Event string
	Data  json.RawMessage
}

// Response decodes a "next" event's data.
func (e SSEEvent) Response() (Response, error) {
	var r Response
	err := json.Unmarshal(e.Data, &r)
	return r, err
}

// ReadSSE calls fn with each event of an event stream until fn returns
// false or the stream ends (io.EOF: it ended cleanly; comments such as
// keep-alives are skipped).
func ReadSSE(r io.Reader, fn func(SSEEvent) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var ev SSEEvent
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.Event == "" && data.Len() == 0 {
				continue
			}
			ev.Data = append(json.RawMessage(nil), data.Bytes()...)
			if !fn(ev) {
				return nil
			}
			ev, data = SSEEvent{}, bytes.Buffer{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event:"):
			ev.Event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.EOF
}

// PostSSE opens an SSE subscription to url (a /query endpoint) and returns
// the streaming response.
func PostSSE(ctx context.Context, url, query string, vars map[string]any) (*http.Response, error) {
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
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
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("sse: %s: %s", resp.Status, b)
	}
	return resp, nil
}

// SSE is a subscription over SSE, read by the test's goroutine.
type SSE struct {
	t      testing.TB
	events chan SSEEvent
	end    chan error
	cancel context.CancelFunc
}

// SubscribeSSE starts a subscription over SSE; it ends with the test.
func (s *Server) SubscribeSSE(t testing.TB, query string, vars map[string]any) *SSE {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := PostSSE(ctx, s.URL+"/query", query, vars)
	if err != nil {
		cancel()
		t.Fatalf("apptest: %v", err)
	}
	st := &SSE{t: t, events: make(chan SSEEvent, 1024), end: make(chan error, 1), cancel: cancel}
	go func() {
		defer resp.Body.Close()
		err := ReadSSE(resp.Body, func(e SSEEvent) bool {
			select {
			case st.events <- e:
				return true
			case <-ctx.Done():
				return false
			}
		})
		close(st.events)
		st.end <- err
	}()
	t.Cleanup(cancel)
	return st
}

// Next returns the next event, or ok false when the stream ended.
func (st *SSE) Next() (e SSEEvent, ok bool) {
	st.t.Helper()
	select {
	case e, ok = <-st.events:
		return e, ok
	case <-time.After(30 * time.Second):
		st.t.Fatalf("apptest: no SSE event in 30s")
	}
	return e, false
}

// Ended returns how the stream ended (io.EOF: cleanly), once it has.
func (st *SSE) Ended() error {
	st.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case _, ok := <-st.events:
			if ok {
				continue
			}
			return <-st.end
		case <-deadline:
			st.t.Fatalf("apptest: the SSE stream did not end")
			return nil
		}
	}
}
