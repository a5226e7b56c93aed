package builtin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type received struct {
	header http.Header
	body   string
}

// receiver answers each request with the next status in statuses (after
// delay), recording what it got.
type receiver struct {
	mu       sync.Mutex
	statuses []int
	delay    time.Duration
	got      []received
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.got = append(r.got, received{header: req.Header.Clone(), body: string(body)})
	status := r.statuses[min(len(r.got)-1, len(r.statuses)-1)]
	r.mu.Unlock()
	select {
	case <-time.After(r.delay):
	case <-req.Context().Done():
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"ok":` + map[bool]string{true: "true", false: "false"}[status < 300] + `}`))
}

func waitTerminalOrRetry(t *testing.T, s *apptest.Server, id int) *ent.Task {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		tk, err := s.App.Store.TaskByID(auth.NewSystemContext(context.Background()), id)
		require.NoError(t, err)
		if tk.Status.Terminal() || tk.Status == lifecycle.RetryPending {
			return tk
		}
		require.True(t, time.Now().Before(deadline), "task %d stuck in %s", id, tk.Status)
		time.Sleep(10 * time.Millisecond)
	}
}

func firstInstance(t *testing.T, s *apptest.Server, taskID int) *ent.TaskInstance {
	t.Helper()
	in, err := s.App.Store.Client().TaskInstance.Query().Where(taskinstance.TaskID(taskID), taskinstance.InstanceNo(1)).Only(auth.NewSystemContext(context.Background()))
	require.NoError(t, err)
	return in
}

func TestWebhook(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		s := apptest.Start(t, d.DSN(t), app.Options{})
		push := func(t *testing.T, r *receiver, in map[string]any) *ent.Task {
			srv := httptest.NewServer(r)
			t.Cleanup(srv.Close)
			if _, ok := in["url"]; !ok {
				in["url"] = srv.URL + "/hook?token=s3cret"
			}
			raw, _ := json.Marshal(in)
			tk, err := s.App.Engine.Create(auth.NewContext(context.Background(), auth.Local), engine.CreateRequest{Type: "webhook", Input: raw})
			require.NoError(t, err)
			return waitTerminalOrRetry(t, s, tk.ID)
		}
		t.Run("TwoHundredSucceedsWithStatusAndLatency", func(t *testing.T) {
			t.Parallel()
			r := &receiver{statuses: []int{201}}
			tk := push(t, r, map[string]any{"body": map[string]any{"phone": "13812345678", "n": 1},
				"headers": map[string]any{"Authorization": "Bearer abc.def"}})
			require.Equal(t, lifecycle.Success, tk.Status)
			var res struct {
				Status    int   `json:"status"`
				LatencyMs int64 `json:"latencyMs"`
			}
			require.NoError(t, json.Unmarshal(tk.Result, &res))
			require.Equal(t, 201, res.Status)
			require.GreaterOrEqual(t, res.LatencyMs, int64(0))
			require.Len(t, r.got, 1)
			h := r.got[0].header
			require.Equal(t, tk.Code, h.Get("Idempotency-Key"), "receivers can drop a retried push")
			require.Equal(t, "Bearer abc.def", h.Get("Authorization"), "the handler gets the unmasked input")
			require.JSONEq(t, `{"phone":"13812345678","n":1}`, r.got[0].body)
			require.NotContains(t, string(tk.Input), "abc.def", "stored masked")
			require.NotContains(t, string(tk.Input), "13812345678", "stored masked")
		})
		t.Run("ServerErrorIsRetried", func(t *testing.T) {
			t.Parallel()
			tk := push(t, &receiver{statuses: []int{503}}, map[string]any{})
			require.Equal(t, lifecycle.RetryPending, tk.Status)
			in := firstInstance(t, s, tk.ID)
			require.Equal(t, lifecycle.KindRetryable, *in.ErrorKind)
			require.Contains(t, in.LastError, "503")
			require.NotContains(t, in.LastError, "s3cret", "no query string in errors")
		})
		t.Run("ClientErrorFailsAtOnce", func(t *testing.T) {
			t.Parallel()
			tk := push(t, &receiver{statuses: []int{404}}, map[string]any{})
			require.Equal(t, lifecycle.Failed, tk.Status)
			require.Equal(t, lifecycle.KindNonRetryable, *firstInstance(t, s, tk.ID).ErrorKind)
			var res struct{ Status int }
			require.NoError(t, json.Unmarshal(tk.Result, &res), "the response is kept with the failure")
			require.Equal(t, 404, res.Status)
		})
		t.Run("TooManyRequestsWaitsLonger", func(t *testing.T) {
			t.Parallel()
			tk := push(t, &receiver{statuses: []int{429}}, map[string]any{})
			require.Equal(t, lifecycle.RetryPending, tk.Status)
			require.Equal(t, lifecycle.KindResource, *firstInstance(t, s, tk.ID).ErrorKind)
		})
		t.Run("TimeoutIsRetried", func(t *testing.T) {
			t.Parallel()
			tk := push(t, &receiver{statuses: []int{200}, delay: 2 * time.Second}, map[string]any{"timeoutMs": 50})
			require.Equal(t, lifecycle.RetryPending, tk.Status)
			require.Equal(t, lifecycle.KindRetryable, *firstInstance(t, s, tk.ID).ErrorKind)
		})
		t.Run("ConnectionRefusedIsRetried", func(t *testing.T) {
			t.Parallel()
			tk := push(t, &receiver{statuses: []int{200}}, map[string]any{"url": "http://127.0.0.1:1/hook"})
			require.Equal(t, lifecycle.RetryPending, tk.Status)
			require.Contains(t, firstInstance(t, s, tk.ID).LastError, "connection refused")
		})
	})
	t.Run("InputIsValidated", func(t *testing.T) {
		t.Parallel()
		s := apptest.Start(t, dbtest.SQLite(t), app.Options{})
		for _, bad := range []string{
			`{}`, `{"url": "ftp://x"}`, `{"url": "http://"}`, `{"url": "http://x", "method": "DELETE"}`,
			`{"url": "http://x", "timeoutMs": 0}`, `{"url": "http://x", "headers": {"Bad Name": "v"}}`,
		} {
			_, err := s.App.Engine.Create(auth.NewContext(context.Background(), auth.Local), engine.CreateRequest{Type: "webhook", Input: json.RawMessage(bad)})
			require.ErrorIs(t, err, engine.ErrValidation, bad)
		}
	})
}

// rawReceiver is a misbehaving HTTP/1.1 receiver on loopback: answer(n,
// conn) writes the answer to the nth request it reads (counting across
// connections), or closes the connection when it returns false. It counts
// the requests it read, by Idempotency-Key.
type rawReceiver struct {
	ln     net.Listener
	answer func(n int, w io.Writer) bool
	mu     sync.Mutex
	n      int
	conns  int
	byKey  map[string]int
	wg     sync.WaitGroup
}

func newRawReceiver(t *testing.T, answer func(n int, w io.Writer) bool) *rawReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &rawReceiver{ln: ln, answer: answer, byKey: map[string]int{}}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns++
			r.mu.Unlock()
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					r.mu.Lock()
					r.n++
					n := r.n
					r.byKey[req.Header.Get("Idempotency-Key")]++
					r.mu.Unlock()
					if !r.answer(n, c) {
						if tc, ok := c.(*net.TCPConn); ok {
							_ = tc.SetLinger(0)
						}
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); r.wg.Wait() })
	return r
}

func (r *rawReceiver) url() string { return "http://" + r.ln.Addr().String() + "/hook" }

func (r *rawReceiver) received(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byKey[key]
}

func createWebhook(t *testing.T, s *apptest.Server, in map[string]any) *ent.Task {
	t.Helper()
	raw, _ := json.Marshal(in)
	tk, err := s.App.Engine.Create(auth.NewContext(context.Background(), auth.Local), engine.CreateRequest{Type: "webhook", Input: raw})
	require.NoError(t, err)
	return tk
}

// TestWebhookIsHonest: what a reply says is what the task records: a body cut short is not a success, a request is sent once per
// attempt, Retry-After reaches the retry policy.
func TestWebhookIsHonest(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, dbtest.SQLite(t), app.Options{})
	t.Run("ABodyCutShortOfItsLengthIsRetryable", func(t *testing.T) {
		t.Parallel()
		r := newRawReceiver(t, func(_ int, w io.Writer) bool {
			_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"ok\":")
			return false
		})
		tk := waitTerminalOrRetry(t, s, createWebhook(t, s, map[string]any{"url": r.url()}).ID)
		require.Equal(t, lifecycle.RetryPending, tk.Status, "not SUCCESS")
		in := firstInstance(t, s, tk.ID)
		require.Equal(t, lifecycle.KindRetryable, *in.ErrorKind)
		require.Contains(t, in.LastError, "cut short after 6 of 100 bytes")
	})
	t.Run("AChunkedBodyCutShortIsRetryable", func(t *testing.T) {
		t.Parallel()
		r := newRawReceiver(t, func(_ int, w io.Writer) bool {
			_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n{\"ok\":\r\n")
			return false
		})
		tk := waitTerminalOrRetry(t, s, createWebhook(t, s, map[string]any{"url": r.url()}).ID)
		require.Equal(t, lifecycle.RetryPending, tk.Status)
		require.Contains(t, firstInstance(t, s, tk.ID).LastError, "cut short")
	})
	t.Run("AResetAfterTheRequestDoesNotSendItTwice", func(t *testing.T) {
		t.Parallel()
		// The first push is answered on a keep-alive connection; the
		// second, sent on that same connection, is read and then the
		// connection is reset. Go's transport would send it again on a new
		// connection within the same attempt (it carries an
		// Idempotency-Key): the receiver would get it twice.
		r := newRawReceiver(t, func(n int, w io.Writer) bool {
			if n == 2 {
				return false
			}
			_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return true
		})
		first := waitTerminalOrRetry(t, s, createWebhook(t, s, map[string]any{"url": r.url()}).ID)
		require.Equal(t, lifecycle.Success, first.Status)
		second := waitTerminalOrRetry(t, s, createWebhook(t, s, map[string]any{"url": r.url()}).ID)
		require.Equal(t, lifecycle.RetryPending, second.Status)
		require.Equal(t, lifecycle.KindRetryable, *firstInstance(t, s, second.ID).ErrorKind)
		require.Equal(t, 1, r.received(second.Code), "one attempt, one request")
		r.mu.Lock()
		defer r.mu.Unlock()
		require.Equal(t, 1, r.conns, "both went over one keep-alive connection")
	})
	t.Run("TheReplyIsBoundedAndMasked", func(t *testing.T) {
		t.Parallel()
		var rx receiver
		rx.statuses = []int{200}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.URL.Path == "/long" {
				_, _ = io.WriteString(w, strings.Repeat("é", 3000))
				return
			}
			_, _ = io.WriteString(w, `{"token":"s3cr3t-t0ken","phone":"13812345678","ok":true}`)
		}))
		t.Cleanup(srv.Close)
		tk := waitTerminalOrRetry(t, s, createWebhook(t, s, map[string]any{"url": srv.URL + "/json"}).ID)
		require.Equal(t, lifecycle.Success, tk.Status)
		require.NotContains(t, string(tk.Result), "s3cr3t-t0ken")
		require.NotContains(t, string(tk.Result), "13812345678")
		var res struct {
			Response          map[string]any `json:"response"`
			ResponseTruncated bool           `json:"responseTruncated"`
		}
		require.NoError(t, json.Unmarshal(tk.Result, &res), "%s", tk.Result)
		require.Equal(t, true, res.Response["ok"], "a JSON reply is kept as JSON")
		require.False(t, res.ResponseTruncated)

		tk = waitTerminalOrRetry(t, s, createWebhook(t, s, map[string]any{"url": srv.URL + "/long"}).ID)
		var long struct {
			Response          string `json:"response"`
			ResponseBytes     int    `json:"responseBytes"`
			ResponseTruncated bool   `json:"responseTruncated"`
		}
		require.NoError(t, json.Unmarshal(tk.Result, &long), "%s", tk.Result)
		require.True(t, long.ResponseTruncated, "a cut reply says so")
		require.Equal(t, 6000, long.ResponseBytes)
		require.LessOrEqual(t, len(long.Response), 1024)
		require.True(t, utf8.ValidString(long.Response))
	})
	t.Run("RedirectsAreNotFollowed", func(t *testing.T) {
		t.Parallel()
		var hit atomic.Int32
		target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hit.Add(1) }))
		t.Cleanup(target.Close)
		redirector := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusFound))
		t.Cleanup(redirector.Close)
		tk := waitTerminalOrRetry(t, s, createWebhook(t, s, map[string]any{"url": redirector.URL}).ID)
		require.Equal(t, lifecycle.Failed, tk.Status)
		require.Contains(t, firstInstance(t, s, tk.ID).LastError, "redirects are not followed")
		require.Zero(t, hit.Load())
	})
}

// TestOutboundPolicy: with authentication on, a webhook may call public
// addresses only, unless --outbound-allow lists more (a hostile review, finding 1).
func TestOutboundPolicy(t *testing.T) {
	t.Parallel()
	receiver := func(t *testing.T) (*httptest.Server, *atomic.Int32) {
		var hit atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hit.Add(1) }))
		t.Cleanup(srv.Close)
		return srv, &hit
	}
	tokens, _ := apptest.Tokens(t, auth.Viewer{User: "op", Role: auth.RoleOperator})
	withAuth := func(c *app.Config) { c.Access.TokenFile = tokens }
	t.Run("ALoopbackDestinationFailsAtOnceNamingTheRule", func(t *testing.T) {
		t.Parallel()
		s := apptest.Start(t, dbtest.SQLite(t), app.Options{}, withAuth)
		srv, hit := receiver(t)
		port := srv.URL[strings.LastIndex(srv.URL, ":"):]
		for _, u := range []string{srv.URL + "/hook", "http://localhost" + port + "/hook", "http://[::ffff:127.0.0.1]" + port} {
			tk := waitTerminalOrRetry(t, s, createWebhook(t, s, map[string]any{"url": u}).ID)
			require.Equal(t, lifecycle.Failed, tk.Status, u)
			in := firstInstance(t, s, tk.ID)
			require.Equal(t, lifecycle.KindNonRetryable, *in.ErrorKind, u)
			require.Contains(t, in.LastError, "outbound policy refuses", u)
			require.Contains(t, in.LastError, "a loopback address", u)
		}
		require.Zero(t, hit.Load(), "nothing was sent")
	})
	t.Run("MetadataAndPrivateAddressesAreRefusedBeforeAnyPacket", func(t *testing.T) {
		t.Parallel()
		s := apptest.Start(t, dbtest.SQLite(t), app.Options{}, withAuth)
		for u, rule := range map[string]string{
			"http://169.254.169.254/latest/meta-data/iam/": "cloud-metadata",
			"http://[fd00:ec2::254]/latest/":               "cloud-metadata",
			"http://10.0.0.1:8500/v1/kv/":                  "private",
			"http://[fe80::1]/":                            "link-local",
			"http://0.0.0.0:8080/":                         "unspecified",
		} {
			tk := waitTerminalOrRetry(t, s, createWebhook(t, s, map[string]any{"url": u}).ID)
			require.Equal(t, lifecycle.Failed, tk.Status, u)
			require.Contains(t, firstInstance(t, s, tk.ID).LastError, "a "+rule+" address", u)
		}
	})
	t.Run("OutboundAllowListsMore", func(t *testing.T) {
		t.Parallel()
		s := apptest.Start(t, dbtest.SQLite(t), app.Options{}, withAuth, func(c *app.Config) {
			c.Network.OutboundAllow = []string{"127.0.0.1"}
		})
		srv, _ := receiver(t)
		tk := waitTerminalOrRetry(t, s, createWebhook(t, s, map[string]any{"url": srv.URL}).ID)
		require.Equal(t, lifecycle.Success, tk.Status)
	})
	t.Run("AnOpenServerMayCallLoopbackOnly", func(t *testing.T) {
		t.Parallel()
		s := apptest.Start(t, dbtest.SQLite(t), app.Options{})
		srv, _ := receiver(t)
		tk := waitTerminalOrRetry(t, s, createWebhook(t, s, map[string]any{"url": srv.URL}).ID)
		require.Equal(t, lifecycle.Success, tk.Status)
		tk = waitTerminalOrRetry(t, s, createWebhook(t, s, map[string]any{"url": "http://169.254.169.254/"}).ID)
		require.Equal(t, lifecycle.Failed, tk.Status)
	})
}

// TestWebhookRetryAfterEndToEnd: a receiver's Retry-After (seconds, or an
// HTTP-date read against its Date) sets when the next attempt runs — the
// next instance's RunAt is the previous one's FinishedAt plus the header,
// plus at most the policy's 10% jitter — and a longer one is capped at the
// policy's longest delay, as tasktype.Policies.NextAfter does.
func TestWebhookRetryAfterEndToEnd(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		s := apptest.Start(t, d.DSN(t), app.Options{})
		policy, ok := s.App.Policies.Get("default")
		require.True(t, ok)
		// push answers the first request with status and header (computed
		// when the request arrives), any later one with 200, and returns
		// the task's first two instances once the second is planned.
		push := func(t *testing.T, status int, header func() http.Header) (first, second *ent.TaskInstance) {
			t.Helper()
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if n.Add(1) == 1 {
					for k, v := range header() {
						w.Header()[k] = v
					}
					w.WriteHeader(status)
					return
				}
				w.WriteHeader(http.StatusOK)
			}))
			t.Cleanup(srv.Close)
			tk := waitTerminalOrRetry(t, s, createWebhook(t, s, map[string]any{"url": srv.URL + "/hook"}).ID)
			require.Equal(t, lifecycle.RetryPending, tk.Status)
			ins, err := s.App.Store.Client().TaskInstance.Query().Where(taskinstance.TaskID(tk.ID)).
				Order(ent.Asc(taskinstance.FieldInstanceNo)).All(auth.NewSystemContext(context.Background()))
			require.NoError(t, err)
			require.Len(t, ins, 2, "the next attempt is planned")
			require.NotNil(t, ins[0].FinishedAt)
			return ins[0], ins[1]
		}
		// within: the worker plans RunAt at the attempt's outcome, between
		// the instance's StartedAt and its FinishedAt (stamped when the
		// outcome is written, later): so RunAt - StartedAt is at least
		// want, and RunAt - FinishedAt at most want plus the policy's 10%
		// jitter. A few ms either way for the databases' timestamps.
		within := func(t *testing.T, first, second *ent.TaskInstance, want, jitter time.Duration) {
			t.Helper()
			require.NotNil(t, first.StartedAt)
			const slack = 5 * time.Millisecond
			fromStart, fromFinish := second.RunAt.Sub(*first.StartedAt), second.RunAt.Sub(*first.FinishedAt)
			require.True(t, fromStart >= want-slack, "Retry-After %s: the next attempt runs %s after the previous one started", want, fromStart)
			require.True(t, fromFinish <= want+jitter+slack, "Retry-After %s: the next attempt runs %s after the previous one finished", want, fromFinish)
		}
		seconds := func(v string) func() http.Header {
			return func() http.Header { return http.Header{"Retry-After": {v}} }
		}
		t.Run("TooManyRequestsWithSeconds", func(t *testing.T) {
			t.Parallel()
			first, second := push(t, http.StatusTooManyRequests, seconds("2"))
			require.Equal(t, lifecycle.KindResource, *first.ErrorKind)
			require.Contains(t, first.LastError, "Retry-After 2s")
			within(t, first, second, 2*time.Second, 200*time.Millisecond) // not the 1 min resource backoff
		})
		t.Run("ServiceUnavailableWithSeconds", func(t *testing.T) {
			t.Parallel()
			first, second := push(t, http.StatusServiceUnavailable, seconds("2"))
			require.Equal(t, lifecycle.KindRetryable, *first.ErrorKind)
			within(t, first, second, 2*time.Second, 200*time.Millisecond) // not the 5 s backoff
		})
		t.Run("ServiceUnavailableWithAnHTTPDate", func(t *testing.T) {
			t.Parallel()
			// The receiver's clock is an hour off: the date is read
			// against its own Date, not against ours.
			first, second := push(t, http.StatusServiceUnavailable, func() http.Header {
				now := time.Now().Add(time.Hour)
				return http.Header{
					"Date":        {now.UTC().Format(http.TimeFormat)},
					"Retry-After": {now.Add(3 * time.Second).UTC().Format(http.TimeFormat)},
				}
			})
			within(t, first, second, 3*time.Second, 300*time.Millisecond)
		})
		t.Run("ALongerOneIsCappedByThePolicy", func(t *testing.T) {
			t.Parallel()
			first, second := push(t, http.StatusTooManyRequests, seconds("86400"))
			require.Equal(t, 15*time.Minute, policy.MaxDelay())
			within(t, first, second, policy.MaxDelay(), 0) // capped: no jitter on top
		})
	})
}
