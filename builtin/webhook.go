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
	"strings"
	"time"

	"taskgraph/worker"
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
	Status        int    `json:"status"`
	LatencyMs     int64  `json:"latencyMs"`
	ResponseBytes int    `json:"responseBytes"`
	Response      string `json:"response,omitempty"`
}

// Webhook pushes messages over HTTP.
type Webhook struct {
	// Client sends the requests. Default: a client with no redirects
	// followed beyond 5.
	Client *http.Client
}

// maxSnippet is how much of a response body the result keeps.
const maxSnippet = 1024

// Handle sends one request. Receivers get the task code in
// Idempotency-Key, the same on every attempt, so that they can drop
// duplicates of a retried push.
func (w *Webhook) Handle(ctx context.Context, job *worker.Job, in WebhookInput) error {
	client := w.Client
	if client == nil {
		client = http.DefaultClient
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
	reqCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, method, in.URL, bytes.NewReader(body))
	if err != nil {
		return worker.NonRetryable(fmt.Errorf("build request: %w", err))
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
		job.Warn("request failed", "method", method, "latencyMs", latency.Milliseconds(), "err", err)
		return worker.Retryable(fmt.Errorf("%s %s: %w", method, redactURL(in.URL), err))
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, maxSnippet))
	n := len(snippet)
	if more, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, 16<<20)); more > 0 {
		n += int(more)
	}
	res := WebhookResult{Status: resp.StatusCode, LatencyMs: latency.Milliseconds(), ResponseBytes: n, Response: string(snippet)}
	if err := job.SetResult(res); err != nil {
		return worker.NonRetryable(err)
	}
	job.Info(fmt.Sprintf("%s %s answered %d in %d ms", method, redactURL(in.URL), resp.StatusCode, res.LatencyMs))
	err = fmt.Errorf("%s %s answered %s", method, redactURL(in.URL), resp.Status)
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusTooManyRequests:
		return worker.Resource(err)
	case code == http.StatusRequestTimeout || code >= 500:
		return worker.Retryable(err)
	default:
		return worker.NonRetryable(err)
	}
}

// redactURL drops a URL's query and user info for logs and errors.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(bad url)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
