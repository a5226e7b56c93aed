package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"

	"github.com/Khan/genqlient/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// client talks to one taskgraph server: queries and mutations with
// genqlient's HTTP client, subscriptions over SSE (sse below), both with
// the bearer token.
type client struct {
	server string // http(s)://host:port, no trailing slash
	token  string
	http   *http.Client
	gql    graphql.Client
}

func newClient(server, token string) (*client, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageErrorf("--server: %q is not an http(s) URL such as http://127.0.0.1:8080", server)
	}
	c := &client{server: strings.TrimSuffix(server, "/"), token: token, http: &http.Client{}}
	c.gql = graphql.NewClient(c.server+"/query", doerFunc(c.do))
	return c, nil
}

// resolve makes a link the server handed out whole: a relative one
// (/download/..., from a server that does not know the address it is
// reached by: --addr 0.0.0.0 without --public-url) is on the server asked,
// under --server's path as /query is.
func (c *client) resolve(link string) (string, error) {
	u, err := url.Parse(link)
	if err != nil {
		return "", fmt.Errorf("the server answered a link that is not a URL (%q): %w", link, err)
	}
	if u.IsAbs() {
		return link, nil
	}
	if !strings.HasPrefix(link, "/") {
		link = "/" + link
	}
	return c.server + link, nil
}

type doerFunc func(*http.Request) (*http.Response, error)

func (f doerFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// do sends r with the token.
func (c *client) do(r *http.Request) (*http.Response, error) {
	if c.token != "" {
		r.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(r)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the server at %s (is it running? --server or TASKGRAPH_SERVER names it): %w", c.server, err)
	}
	return resp, nil
}

// apiError is an error the server answered with: its GraphQL code
// (NOT_FOUND, UNAUTHENTICATED...) and message.
type apiError struct {
	Code    string
	Message string
}

func (e *apiError) Error() string {
	if e.Code == "" {
		return e.Message
	}
	return e.Message + " (" + e.Code + ")"
}

// explain turns what genqlient returns into an *apiError where the server
// said why; other errors are returned as they are.
func explain(err error) error {
	if err == nil {
		return nil
	}
	var list gqlerror.List
	if errors.As(err, &list) && len(list) > 0 {
		e := list[0]
		code, _ := e.Extensions["code"].(string)
		return &apiError{Code: code, Message: e.Message}
	}
	var he *graphql.HTTPError
	if errors.As(err, &he) {
		if len(he.Response.Errors) > 0 {
			e := he.Response.Errors[0]
			code, _ := e.Extensions["code"].(string)
			return &apiError{Code: code, Message: e.Message}
		}
		return &apiError{Message: fmt.Sprintf("the server answered HTTP %d", he.StatusCode)}
	}
	return err
}

// httpFailure is a response that is not a GraphQL answer: its errors if
// the body has them, or its status and body.
func httpFailure(status int, body []byte) error {
	var r graphql.Response
	if json.Unmarshal(body, &r) == nil && len(r.Errors) > 0 {
		return explain(&graphql.HTTPError{Response: r, StatusCode: status})
	}
	return &apiError{Message: fmt.Sprintf("the server answered HTTP %d: %s", status, strings.TrimSpace(string(body)))}
}

// sse is genqlient's WebSocketClient over Server-Sent Events: one POST
// per subscription, answered with an event stream (gqlgen's SSE
// transport). Scripts behind proxies get through with plain HTTP, and no
// ping to answer.
type sse struct {
	c      *client
	ctx    context.Context
	errs   chan error
	mu     sync.Mutex
	cancel map[string]context.CancelFunc
	n      int
}

var _ graphql.WebSocketClient = (*sse)(nil)

func (c *client) subscriptions(ctx context.Context) *sse {
	return &sse{c: c, ctx: ctx, errs: make(chan error, 1), cancel: map[string]context.CancelFunc{}}
}

func (s *sse) Start(context.Context) (chan error, error) { return s.errs, nil }

func (s *sse) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, cancel := range s.cancel {
		cancel()
		delete(s.cancel, id)
	}
	return nil
}

func (s *sse) Unsubscribe(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cancel, ok := s.cancel[id]; ok {
		cancel()
		delete(s.cancel, id)
	}
	return nil
}

// Subscribe starts the stream; every "next" event is passed to forward,
// which sends it on ch; the end of the stream closes ch. An error ends the
// stream and is sent on the Start channel (if there is room).
func (s *sse) Subscribe(req *graphql.Request, ch any, forward graphql.ForwardDataFunction) (string, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithCancel(s.ctx)
	s.mu.Lock()
	s.n++
	id := fmt.Sprint(s.n)
	s.cancel[id] = cancel
	s.mu.Unlock()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, s.c.server+"/query", bytes.NewReader(body))
	if err != nil {
		cancel()
		return "", err
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "text/event-stream")
	resp, err := s.c.do(r)
	if err != nil {
		cancel()
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		cancel()
		return "", httpFailure(resp.StatusCode, b)
	}
	go func() {
		defer resp.Body.Close()
		defer reflect.ValueOf(ch).Close()
		if err := readEvents(resp.Body, func(data []byte) error { return forward(ch, data) }); err != nil && ctx.Err() == nil {
			select {
			case s.errs <- err:
			default:
			}
		}
	}()
	return id, nil
}

// readEvents calls next with the data of each "next" event until the
// "complete" event or the end of the stream.
func readEvents(r io.Reader, next func([]byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var event string
	var data []byte
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if event == "complete" {
				return nil
			}
			if event == "next" && len(data) > 0 {
				if err := next(data); err != nil {
					return err
				}
			}
			event, data = "", nil
		case strings.HasPrefix(line, ":"): // a comment (keep-alive)
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")...)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("the event stream broke off: %w", err)
	}
	return errors.New("the server ended the event stream")
}

// taskRef is the id of the task ref names: an id (digits) as it is, or a
// task's code as the console shows it (NOOP-20261202-AB12CD34), in any
// case, looked up.
func (c *cmd) taskRef(cl *client, ref string) (string, error) {
	if ref == "" || strings.Trim(ref, "0123456789") == "" {
		return ref, nil
	}
	resp, err := TaskIdByCode(c.env.Ctx, cl.gql, strings.ToUpper(ref))
	var ae *apiError
	if err != nil && (!errors.As(explain(err), &ae) || ae.Code != "NOT_FOUND") {
		return "", err
	}
	if err != nil || resp.TaskByCode == nil {
		return "", &apiError{Code: "NOT_FOUND", Message: "task " + ref + " not found (neither an id nor a task's code)"}
	}
	return resp.TaskByCode.Id, nil
}
