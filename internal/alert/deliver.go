package alert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/outbound"
	"github.com/taskgraph/taskgraph/internal/seal"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// DeliverType is the task type of notices: each notice to each channel is
// a task, with retries, history and a Retry button like any other work.
// Rules never match tasks of this type, so a failing delivery cannot raise
// an alert that is delivered through the failing channel (no loop).
const DeliverType = "alert.deliver"

// DeliverInput is the input of an alert.deliver task.
type DeliverInput struct {
	Channel int    `json:"channel" jsonschema:"minimum=1"`
	Notice  Notice `json:"notice"`
}

// Deliverer sends notices (the alert.deliver task type).
type Deliverer struct {
	Client *ent.Client
	Sealer *seal.Sealer
	// HTTP sends the requests: an outbound client, whose destination
	// policy decides which addresses channels may reach.
	HTTP *http.Client
	// Now is the clock signatures are made with. Default: time.Now.
	Now func() time.Time
}

// Register adds the alert.deliver task type to r.
func (d *Deliverer) Register(r *tasktype.Registry) {
	tasktype.Register(r, DeliverType, d.Handle,
		tasktype.WithDescription("Delivers an alert notice to a channel (webhook, DingTalk, Feishu/Lark, WeCom, Slack). Created by the alert evaluator; retried like any task."),
		tasktype.WithRetryPolicy("patient"),
		tasktype.WithTimeout(time.Minute),
		// Only the evaluator creates deliveries: a user who could would
		// send any text through any tenant's channel.
		tasktype.Internal())
}

// Handle sends one notice to one channel. 2xx (with the platform's own
// success code, for the bots that answer 200 either way) succeeds; 5xx,
// 408, timeouts and connection errors are retried; 429 and the platforms'
// rate-limit codes wait longer; other answers fail at once (a bad token or
// signature will not get better by itself).
func (d *Deliverer) Handle(ctx context.Context, job *tasktype.Job, in DeliverInput) error {
	sys := auth.NewSystemContext(ctx)
	ch, err := d.Client.AlertChannel.Get(sys, in.Channel)
	if ent.IsNotFound(err) {
		return tasktype.NonRetryable(fmt.Errorf("alert channel %d no longer exists", in.Channel))
	}
	if err != nil {
		return fmt.Errorf("read alert channel %d: %w", in.Channel, err)
	}
	rawURL, err := d.Sealer.Open(ch.URLSealed)
	if err != nil {
		return tasktype.NonRetryable(fmt.Errorf("alert channel %d: open its url: %w", ch.ID, err))
	}
	var secret []byte
	if len(ch.SecretSealed) > 0 {
		if secret, err = d.Sealer.Open(ch.SecretSealed); err != nil {
			return tasktype.NonRetryable(fmt.Errorf("alert channel %d: open its secret: %w", ch.ID, err))
		}
	}
	now := time.Now()
	if d.Now != nil {
		now = d.Now()
	}
	req, err := request(ch.Kind, string(rawURL), string(secret), in.Notice, now, job.Task.Code)
	if err != nil {
		return tasktype.NonRetryable(err)
	}
	reqCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	client := d.HTTP
	if client == nil {
		client = outbound.NewClient(outbound.Config{})
	}
	target := fmt.Sprintf("%s channel %q (%s)", ch.Kind, ch.Name, ch.URLDisplay)
	start := time.Now()
	resp, err := client.Do(req.WithContext(reqCtx))
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if outbound.IsDenied(err) {
			return tasktype.NonRetryable(fmt.Errorf("%s: %w", target, err))
		}
		return tasktype.Retryable(fmt.Errorf("%s: %w", target, stripURL(err)))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = job.SetResult(map[string]any{"status": resp.StatusCode, "latencyMs": time.Since(start).Milliseconds(), "response": strings.ToValidUTF8(string(body), "?")})
	job.Info(fmt.Sprintf("%s answered %d", target, resp.StatusCode))
	failed := fmt.Errorf("%s answered %s: %s", target, resp.Status, strings.TrimSpace(string(body)))
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		if pc, msg := platformError(ch.Kind, body); pc != 0 {
			err := fmt.Errorf("%s refused the notice: code %d: %s", target, pc, msg)
			if rateLimited[ch.Kind][pc] {
				return tasktype.Resource(err)
			}
			return tasktype.NonRetryable(err)
		}
		return nil
	case code == http.StatusTooManyRequests:
		return tasktype.Resource(failed)
	case code == http.StatusRequestTimeout || code >= 500:
		return tasktype.Retryable(failed)
	default:
		return tasktype.NonRetryable(failed)
	}
}

// stripURL drops the *url.Error around a client error: it repeats the URL,
// token and all.
func stripURL(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) && strings.HasPrefix(err.Error(), "Post ") {
		return ue.Unwrap()
	}
	return err
}
