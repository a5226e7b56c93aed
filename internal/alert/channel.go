package alert

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/taskgraph/taskgraph/ent/alertchannel"
)

// Notice is what a delivery says: one event of one incident (or a test).
type Notice struct {
	// Event is OPENED, RECOVERED or TEST.
	Event       string    `json:"event"`
	IncidentID  int       `json:"incidentId,omitempty"`
	Rule        string    `json:"rule"`
	Kind        string    `json:"kind"`
	Subject     string    `json:"subject"`
	Summary     string    `json:"summary"`
	Occurrences int       `json:"occurrences"`
	OpenedAt    time.Time `json:"openedAt"`
	ResolvedAt  time.Time `json:"resolvedAt,omitzero"`
	// TaskID is the last task the incident saw, if any.
	TaskID int `json:"taskId,omitempty"`
	// Link is the incident in the console, when the server knows its
	// public URL.
	Link string `json:"link,omitempty"`
}

// Events of a notice.
const (
	EventOpened    = "OPENED"
	EventRecovered = "RECOVERED"
	EventTest      = "TEST"
)

// Title is the notice's first line.
func (n Notice) Title() string {
	switch n.Event {
	case EventRecovered:
		return fmt.Sprintf("[taskgraph] RECOVERED: %s (%s)", n.Rule, n.Subject)
	case EventTest:
		return "[taskgraph] TEST: " + n.Rule
	}
	return fmt.Sprintf("[taskgraph] FIRING: %s (%s)", n.Rule, n.Subject)
}

// Lines are the notice's body, one fact a line.
func (n Notice) Lines() []string {
	out := []string{n.Summary}
	if n.Event != EventTest {
		out = append(out, fmt.Sprintf("%d occurrence(s) since %s", n.Occurrences, n.OpenedAt.UTC().Format(time.RFC3339)))
	}
	if !n.ResolvedAt.IsZero() {
		out = append(out, "recovered at "+n.ResolvedAt.UTC().Format(time.RFC3339))
	}
	if n.TaskID != 0 {
		out = append(out, fmt.Sprintf("last task: %d", n.TaskID))
	}
	if n.Link != "" {
		out = append(out, n.Link)
	}
	return out
}

// Text is the notice as plain text.
func (n Notice) Text() string {
	return n.Title() + "\n" + strings.Join(n.Lines(), "\n")
}

// markdown is the notice in the Markdown subset the chat bots render.
func (n Notice) markdown(heading string) string {
	var b strings.Builder
	b.WriteString(heading + " " + n.Title() + "\n\n")
	for _, l := range n.Lines() {
		b.WriteString("> " + l + "\n\n")
	}
	return b.String()
}

// request builds the HTTP request of a channel of kind for a notice: the
// body in the platform's format, signed where the platform requires it,
// with the signature computed now (the platforms refuse stale ones).
func request(kind alertchannel.Kind, rawURL, secret string, n Notice, now time.Time, idempotencyKey string) (*http.Request, error) {
	var body any
	target := rawURL
	header := http.Header{}
	switch kind {
	case alertchannel.KindWEBHOOK:
		// The generic webhook: the notice itself, and a text for
		// receivers that only show one.
		body = struct {
			Notice
			Title string `json:"title"`
			Text  string `json:"text"`
		}{n, n.Title(), n.Text()}
	case alertchannel.KindDINGTALK:
		// DingTalk custom robot: markdown message; with a secret ("加签"),
		// timestamp (ms) and sign = Base64(HmacSHA256(key=secret,
		// timestamp+"\n"+secret)) go in the query string.
		body = map[string]any{"msgtype": "markdown", "markdown": map[string]string{"title": n.Title(), "text": n.markdown("###")}}
		if secret != "" {
			ts := strconv.FormatInt(now.UnixMilli(), 10)
			u, err := url.Parse(rawURL)
			if err != nil {
				return nil, fmt.Errorf("channel url: %w", err)
			}
			q := u.Query()
			q.Set("timestamp", ts)
			q.Set("sign", DingTalkSign(secret, ts))
			u.RawQuery = q.Encode()
			target = u.String()
		}
	case alertchannel.KindFEISHU:
		// Feishu/Lark custom bot: text message; with a secret, timestamp
		// (s) and sign = Base64(HmacSHA256(key=timestamp+"\n"+secret, ""))
		// go in the body.
		m := map[string]any{"msg_type": "text", "content": map[string]string{"text": n.Text()}}
		if secret != "" {
			ts := strconv.FormatInt(now.Unix(), 10)
			m["timestamp"] = ts
			m["sign"] = FeishuSign(secret, ts)
		}
		body = m
	case alertchannel.KindWECOM:
		// WeCom group robot: markdown; the key in the URL authenticates
		// (the platform has no signature).
		body = map[string]any{"msgtype": "markdown", "markdown": map[string]string{"content": n.markdown("###")}}
	case alertchannel.KindSLACK:
		// Slack incoming webhooks (and the Mattermost, Rocket.Chat...
		// that accept their format): text; the URL is the secret.
		body = map[string]any{"text": n.Text()}
	default:
		return nil, fmt.Errorf("unknown channel kind %q", kind)
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode notice: %w", err)
	}
	if kind == alertchannel.KindWEBHOOK && secret != "" {
		// Like Stripe's and Slack's own: HMAC-SHA256 over
		// "<timestamp>.<body>", so a receiver can refuse replays.
		ts := strconv.FormatInt(now.Unix(), 10)
		header.Set("X-Taskgraph-Timestamp", ts)
		header.Set("X-Taskgraph-Signature", "sha256="+WebhookSign(secret, ts, payload))
	}
	req, err := http.NewRequest(http.MethodPost, target, bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header = header
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "taskgraph-alerts/1")
	if idempotencyKey != "" && kind == alertchannel.KindWEBHOOK {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	return req, nil
}

// DingTalkSign is DingTalk's robot signature of timestamp (milliseconds).
func DingTalkSign(secret, timestamp string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(timestamp + "\n" + secret))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// FeishuSign is Feishu/Lark's custom bot signature of timestamp (seconds).
func FeishuSign(secret, timestamp string) string {
	m := hmac.New(sha256.New, []byte(timestamp+"\n"+secret))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// WebhookSign is the generic webhook's signature (hex) of a body sent at
// timestamp (seconds).
func WebhookSign(secret, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(timestamp + "."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// platformError reads the answer of a chat bot that says 200 and puts
// its verdict in the body: DingTalk and WeCom {"errcode": n}, Feishu
// {"code": n} (older {"StatusCode": n}). It returns the code and message,
// code 0 for success or for a body without one.
func platformError(kind alertchannel.Kind, body []byte) (int, string) {
	var r struct {
		ErrCode    *int   `json:"errcode"`
		ErrMsg     string `json:"errmsg"`
		Code       *int   `json:"code"`
		Msg        string `json:"msg"`
		StatusCode *int   `json:"StatusCode"`
	}
	if json.Unmarshal(body, &r) != nil {
		return 0, ""
	}
	switch kind {
	case alertchannel.KindDINGTALK, alertchannel.KindWECOM:
		if r.ErrCode != nil {
			return *r.ErrCode, r.ErrMsg
		}
	case alertchannel.KindFEISHU:
		if r.Code != nil {
			return *r.Code, r.Msg
		}
		if r.StatusCode != nil {
			return *r.StatusCode, r.Msg
		}
	}
	return 0, ""
}

// rateLimited lists the platforms' "too many messages" codes: worth a
// later attempt, not a configuration error.
var rateLimited = map[alertchannel.Kind]map[int]bool{
	alertchannel.KindDINGTALK: {130101: true, 410100: true},
	alertchannel.KindWECOM:    {45009: true},
	alertchannel.KindFEISHU:   {9499: true, 11232: true},
}

// redact drops a URL's query and user info (where the chat bots keep their
// tokens) for display.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(bad url)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
