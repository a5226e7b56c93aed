package external

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
)

// Client is a small Go client of the worker protocol (tests, the bench's
// external-worker mode).
type Client struct {
	// URL is the server's base URL (http://host:port).
	URL   string
	Token string
	HTTP  *http.Client
	// Requests counts the calls made (atomically: a Client may be shared).
	Requests int64
}

// Error is a refusal of the server: its HTTP status and the body's error.
type Error struct {
	Status int
	ErrorDetail
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// Call posts in to the protocol's call (claim, heartbeat, log, progress,
// complete) and decodes the answer into out; a refusal is an *Error.
func (c *Client) Call(ctx context.Context, call string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return c.CallRaw(ctx, call, body, out)
}

// CallRaw is Call with the body as given (tests send malformed ones).
func (c *Client) CallRaw(ctx context.Context, call string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.URL, "/")+Prefix+call, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	c.Requests++
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var eb ErrorBody
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		return &Error{Status: resp.StatusCode, ErrorDetail: eb.Error}
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Claim claims work.
func (c *Client) Claim(ctx context.Context, req ClaimRequest) (ClaimResponse, error) {
	var out ClaimResponse
	err := c.Call(ctx, "claim", req, &out)
	return out, err
}

// Complete ends an execution.
func (c *Client) Complete(ctx context.Context, req CompleteRequest) (CompleteResponse, error) {
	var out CompleteResponse
	err := c.Call(ctx, "complete", req, &out)
	return out, err
}

// Heartbeat beats for executions.
func (c *Client) Heartbeat(ctx context.Context, tokens ...string) (HeartbeatResponse, error) {
	req := HeartbeatRequest{}
	for _, t := range tokens {
		req.Tasks = append(req.Tasks, HeartbeatItem{Token: t})
	}
	var out HeartbeatResponse
	err := c.Call(ctx, "heartbeat", req, &out)
	return out, err
}

// CompleteMany ends several executions in one call.
func (c *Client) CompleteMany(ctx context.Context, reqs []CompleteRequest) (CompleteManyResponse, error) {
	var out CompleteManyResponse
	err := c.Call(ctx, "complete-many", CompleteManyRequest{Outcomes: reqs}, &out)
	return out, err
}

// Burn is what a Drive did: the tasks it completed, and the calls it made.
type Burn struct {
	Completed, Requests int64
}

// Drive runs a worker of the protocol that completes every task of types
// it claims SUCCESS at once (a noop handler: what the bench's
// external-worker mode measures is the protocol), claiming up to max at
// a time (waiting up to wait when there is none) and completing each
// batch in one complete-many, until done returns true, ctx ends, or a
// claim answers draining. It returns what it did; a refusal stops it.
func (c *Client) Drive(ctx context.Context, workerID string, types []string, max int, wait float64, done func() bool) (b Burn, err error) {
	start := c.Requests
	defer func() { b.Requests = c.Requests - start }()
	for !done() && ctx.Err() == nil {
		var got ClaimResponse
		got, err = c.Claim(ctx, ClaimRequest{WorkerID: workerID, Language: "go", Version: runtime.Version(), Types: types, Max: max, WaitSeconds: wait})
		if err != nil {
			return b, err
		}
		if len(got.Tasks) > 0 {
			outcomes := make([]CompleteRequest, len(got.Tasks))
			for i, t := range got.Tasks {
				outcomes[i] = CompleteRequest{Token: t.Token, Status: "SUCCESS", Result: json.RawMessage(`{"ok":true}`)}
			}
			var res CompleteManyResponse
			res, err = c.CompleteMany(ctx, outcomes)
			if err != nil {
				return b, err
			}
			for _, r := range res.Results {
				if r.Error != nil {
					return b, fmt.Errorf("complete %s: %s: %s", r.Token, r.Error.Code, r.Error.Message)
				}
			}
			b.Completed += int64(len(got.Tasks))
		}
		if got.Draining {
			return b, nil
		}
	}
	return b, nil
}
