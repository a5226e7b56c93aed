package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/taskgraph/taskgraph/internal/outbound"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// WebhookInput is the input of a webhook task.
type WebhookInput struct {
	URL     string            `json:"url" jsonschema:"format=uri,description=http(s) URL to call"`
	Method  string            `json:"method,omitempty" jsonschema:"enum=POST,enum=PUT,enum=PATCH,default=POST"`
	Headers map[string]string `json:"headers,omitempty" jsonschema:"description=Extra request headers (stored masked)"`
	Body    json.RawMessage   `json:"body,omitempty" jsonschema:"description=JSON body"`
	// TimeoutMs bounds one request. Default 10000.
	TimeoutMs int `json:"timeoutMs,omitempty" jsonschema:"minimum=1,maximum=120000,default=10000"`
}

// Validate checks what the schema cannot.
func (in *WebhookInput) Validate() error {
	u, err := url.Parse(in.URL)
	if err != nil {
		return fmt.Errorf("url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("url: scheme must be http or https, not %q", u.Scheme)
	}
	if u.Host == "" {
		return errors.New("url: no host")
	}
	for k := range in.Headers {
		if k == "" || strings.ContainsAny(k, " \r\n:") {
			return fmt.Errorf("headers: %q is not a header name", k)
		}
	}
	if len(in.Body) > 0 && !json.Valid(in.Body) {
		return errors.New("body: not valid JSON")
	}
	return nil
}

// WebhookResult is what a webhook execution records.
type WebhookResult struct {
	Status        int   `json:"status"`
	LatencyMs     int64 `json:"latencyMs"`
	ResponseBytes int64 `json:"responseBytes"`
	// Response is the start of the reply (at most maxSnippet bytes): the
	// JSON value itself when the whole reply is JSON that fits (so that it
	// is masked key by key, like task input), its text otherwise. Either
	// way it is masked before it is stored.
	Response any `json:"response,omitempty"`
	// ResponseTruncated says the reply was longer than Response.
	ResponseTruncated bool `json:"responseTruncated,omitempty"`
}

// Webhook pushes messages over HTTP.
type Webhook struct {
	// Client sends the requests. Default: an outbound client that reaches
	// public addresses only and follows no redirects (package outbound).
	Client *http.Client
}

// Bounds of what a reply may cost.
const (
	maxSnippet    = 1024     // of a reply kept in the result
	maxReplyRead  = 16 << 20 // read (and discarded) to see the reply whole
	maxURLInError = 200      // of a URL repeated in errors and logs
)

var defaultClient = outbound.NewClient(outbound.Config{})

// Handle sends one request. Receivers get the task code in
// Idempotency-Key, the same on every attempt, so that they can drop
// duplicates of a retried push. Within one attempt a request is sent once:
// the outbound client never re-sends it by itself (see outbound.NewClient).
func (w *Webhook) Handle(ctx context.Context, job *tasktype.Job, in WebhookInput) error {
	client := w.Client
	if client == nil {
		client = defaultClient
	}
	timeout := 10 * time.Second
	if in.TimeoutMs > 0 {
		timeout = time.Duration(in.TimeoutMs) * time.Millisecond
	}
	method := in.Method
	if method == "" {
		method = http.MethodPost
	}
	body := in.Body
	if len(body) == 0 {
		body = json.RawMessage(`{}`)
	}
	target := redactURL(in.URL)
	reqCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, method, in.URL, bytes.NewReader(body))
	if err != nil {
		return tasktype.NonRetryable(fmt.Errorf("build request: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "taskgraph-webhook/1")
	req.Header.Set("Idempotency-Key", job.Task.Code)
	req.Header.Set("X-Taskgraph-Attempt", fmt.Sprint(job.Attempt()))
	for k, v := range in.Headers {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := client.Do(req)
	latency := time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if outbound.IsDenied(err) {
			// Asking again reaches the same address: final.
			return tasktype.NonRetryable(fmt.Errorf("%s %s: %w", method, target, unwrapURLError(err)))
		}
		job.Warn("request failed", "method", method, "latencyMs", latency.Milliseconds(), "err", err)
		return tasktype.Retryable(fmt.Errorf("%s %s: %w", method, target, unwrapURLError(err)))
	}
	defer resp.Body.Close()
	reply, readErr := readReply(resp.Body)
	res := WebhookResult{Status: resp.StatusCode, LatencyMs: latency.Milliseconds(), ResponseBytes: reply.n,
		Response: reply.value(), ResponseTruncated: reply.truncated}
	if err := job.SetResult(res); err != nil {
		return tasktype.NonRetryable(err)
	}
	if readErr != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		// The receiver's answer is not known: whatever the status line
		// said, this attempt did not succeed.
		msg := fmt.Errorf("%s %s answered %s but the reply was cut short after %d bytes: %w", method, target, resp.Status, reply.n, readErr)
		if resp.ContentLength > 0 {
			msg = fmt.Errorf("%s %s answered %s but the reply was cut short after %d of %d bytes: %w", method, target, resp.Status, reply.n, resp.ContentLength, readErr)
		}
		job.Warn("reply cut short", "method", method, "status", resp.StatusCode, "bytes", reply.n, "err", readErr)
		return tasktype.Retryable(msg)
	}
	job.Info(fmt.Sprintf("%s %s answered %d in %d ms", method, target, resp.StatusCode, res.LatencyMs))
	err = fmt.Errorf("%s %s answered %s", method, target, resp.Status)
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return nil
	case code >= 300 && code < 400:
		return tasktype.NonRetryable(fmt.Errorf("%w (redirects are not followed)", err))
	case code == http.StatusTooManyRequests:
		return withRetryAfter(tasktype.Resource(err), resp)
	case code == http.StatusServiceUnavailable:
		return withRetryAfter(tasktype.Retryable(err), resp)
	case code == http.StatusRequestTimeout || code >= 500:
		return tasktype.Retryable(err)
	default:
		return tasktype.NonRetryable(err)
	}
}

// unwrapURLError drops the *url.Error around a client error: it repeats the
// whole URL, query string and all.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// reply is what was read of a response body.
type reply struct {
	snippet   []byte
	n         int64
	truncated bool
}

// readReply reads a body whole (up to maxReplyRead, then stops), keeping
// its start. The error is a read failure: a body cut short of its
// Content-Length or of its last chunk (io.ErrUnexpectedEOF), a reset.
func readReply(body io.Reader) (reply, error) {
	var r reply
	buf := make([]byte, maxSnippet+1)
	n, err := 0, error(nil)
	for n < len(buf) && err == nil {
		var k int
		k, err = body.Read(buf[n:])
		n += k
	}
	r.n = int64(n)
	switch {
	case err == io.EOF:
		r.snippet = buf[:n]
		return r, nil
	case err != nil:
		r.snippet = buf[:n]
		return r, err
	}
	r.snippet, r.truncated = buf[:maxSnippet], true
	more, err := io.Copy(io.Discard, io.LimitReader(body, maxReplyRead))
	r.n += more
	return r, err
}

// value is what the result keeps of the reply.
func (r reply) value() any {
	if len(r.snippet) == 0 {
		return nil
	}
	if !r.truncated && json.Valid(r.snippet) {
		return json.RawMessage(r.snippet)
	}
	s := r.snippet
	if r.truncated {
		// Cut at a character boundary.
		for i := 0; i < utf8.UTFMax && len(s) > 0 && !utf8.Valid(s); i++ {
			s = s[:len(s)-1]
		}
	}
	return strings.ToValidUTF8(string(s), "\uFFFD")
}

// withRetryAfter carries the reply's Retry-After (seconds, or an HTTP date
// read against the reply's own Date) to the retry policy.
func withRetryAfter(err error, resp *http.Response) error {
	if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), resp.Header.Get("Date"), time.Now()); ok {
		return tasktype.RetryAfter(fmt.Errorf("%w (Retry-After %s)", err, d.Round(time.Second)), d)
	}
	return err
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an
// HTTP-date. A date is measured from the reply's Date when it has one (the
// receiver's clock against itself), else from now.
func parseRetryAfter(v, date string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		const maxSecs = uint64(100 * 365 * 24 * 3600)
		return time.Duration(min(secs, maxSecs)) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if d, err := http.ParseTime(date); err == nil {
		now = d
	}
	return max(at.Sub(now), 0), true
}

// redactURL drops a URL's query and user info for logs and errors, and
// bounds its length.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(bad url)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	s := u.String()
	if len(s) > maxURLInError {
		cut := maxURLInError
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}
