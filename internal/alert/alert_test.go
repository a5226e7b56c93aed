package alert_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/alertchannel"
	"github.com/taskgraph/taskgraph/ent/alertincident"
	"github.com/taskgraph/taskgraph/ent/alertrule"
	"github.com/taskgraph/taskgraph/ent/clusternode"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/alert"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/fakeclock"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/outbound"
	"github.com/taskgraph/taskgraph/internal/seal"
	"github.com/taskgraph/taskgraph/internal/servicetest"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
	"github.com/taskgraph/taskgraph/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	sysCtx      = auth.NewSystemContext(context.Background())
	adminCtx    = auth.NewContext(context.Background(), auth.Viewer{User: "ada", Role: auth.RoleAdmin})
	platformCtx = auth.NewContext(context.Background(), auth.Viewer{User: "root", Role: auth.RolePlatform})
)

// Quick policies: deliveries retry after 50 ms.
var testPolicies = []tasktype.RetryPolicy{
	{Name: tasktype.DefaultPolicyName, MaxAttempts: 3, Backoff: []time.Duration{50 * time.Millisecond}},
	{Name: "none", MaxAttempts: 1},
	{Name: "patient", MaxAttempts: 5, Backoff: []time.Duration{50 * time.Millisecond}},
}

type bundle struct {
	store     *store.Store
	broker    *events.Broker
	registry  *tasktype.Registry
	engine    *engine.Engine
	svc       *alert.Service
	evaluator *alert.Evaluator
	clock     *fakeclock.Clock
}

type flakyInput struct {
	Fail bool `json:"fail,omitempty"`
}

func setup(t *testing.T, dsn string, fake bool, withPool bool) *bundle {
	t.Helper()
	b := &bundle{broker: events.NewBroker(events.Config{}), registry: tasktype.NewRegistry()}
	cfg := store.Config{DSN: dsn, Publisher: b.broker}
	if fake {
		b.clock = fakeclock.New(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
		cfg.Clock = b.clock.Now
	}
	s, err := store.Open(sysCtx, cfg)
	require.NoError(t, err)
	access.Install(s.Client())
	b.store = s
	policies, err := tasktype.NewPolicies(testPolicies...)
	require.NoError(t, err)
	sealer, err := seal.New(make([]byte, seal.KeySize))
	require.NoError(t, err)
	tasktype.Register(b.registry, "flaky", func(ctx context.Context, job *tasktype.Job, in flakyInput) error {
		if in.Fail {
			return tasktype.NonRetryable(errors.New("the flaky thing failed"))
		}
		return nil
	})
	tasktype.Register(b.registry, "other", func(context.Context, *tasktype.Job, flakyInput) error { return nil })
	d := &alert.Deliverer{Client: s.Client(), Sealer: sealer,
		HTTP: outbound.NewClient(outbound.Config{Policy: outbound.MustParsePolicy(outbound.RuleLoopback)})}
	d.Register(b.registry)
	b.engine = engine.New(s, b.registry, policies, sealer, mask.Default())
	b.svc, err = alert.New(alert.Config{Store: s, Engine: b.engine, Sealer: sealer, Node: "test"})
	require.NoError(t, err)
	b.evaluator, err = alert.NewEvaluator(alert.EvaluatorConfig{Types: b.registry.Names}, b.svc, b.broker)
	require.NoError(t, err)
	var pool *worker.Pool
	if withPool {
		pool, err = worker.NewPool(worker.Config{PollInterval: 20 * time.Millisecond, FlushInterval: 5 * time.Millisecond, Concurrency: 4},
			worker.Deps{Store: s, Registry: b.registry, Policies: policies, Broker: b.broker, Sealer: sealer, Masker: mask.Default()})
		require.NoError(t, err)
		require.NoError(t, pool.Start(sysCtx))
	}
	t.Cleanup(func() {
		if pool != nil {
			ctx, cancel := context.WithTimeout(sysCtx, 30*time.Second)
			defer cancel()
			require.NoError(t, pool.Stop(ctx))
		}
		b.evaluator.Stop()
		b.broker.Close()
		require.NoError(t, s.Close())
	})
	return b
}

func (b *bundle) create(t *testing.T, typ string, fail bool) *ent.Task {
	t.Helper()
	in, _ := json.Marshal(flakyInput{Fail: fail})
	tk, err := b.engine.Create(adminCtx, engine.CreateRequest{Type: typ, Input: in})
	require.NoError(t, err)
	return tk
}

// eventually runs a pass of the evaluator until cond holds (20 s at most).
func (b *bundle) eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := b.evaluator.Pass(sysCtx)
		require.NoError(t, err)
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *bundle) incidents(t *testing.T) []*ent.AlertIncident {
	t.Helper()
	incs, err := b.store.Client().AlertIncident.Query().Order(ent.Asc(alertincident.FieldID)).All(sysCtx)
	require.NoError(t, err)
	return incs
}

func (b *bundle) deliveries(t *testing.T, incidentID int) []*ent.Task {
	t.Helper()
	ts, err := b.svc.Deliveries(sysCtx, incidentID)
	require.NoError(t, err)
	return ts
}

func noticeOf(t *testing.T, tk *ent.Task) alert.Notice {
	t.Helper()
	var in alert.DeliverInput
	require.NoError(t, json.Unmarshal(tk.Input, &in))
	return in.Notice
}

func (b *bundle) waitStatus(t *testing.T, id int, s lifecycle.Status) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		tk, err := b.store.TaskByID(sysCtx, id)
		require.NoError(t, err)
		if tk.Status == s {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %d: timed out waiting for %s (is %s)", id, s, tk.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// receiver is a local endpoint that records what arrives, answering from a
// script of statuses (the last repeats).
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests []received
	statuses []int
	body     string // the success answer
	verify   func(r *http.Request, body []byte) error
}

type received struct {
	query  url.Values
	header http.Header
	body   []byte
	err    error // what verify found wrong
}

func newReceiver(t *testing.T, statuses []int, okBody string, verify func(*http.Request, []byte) error) *receiver {
	rc := &receiver{statuses: statuses, body: okBody, verify: verify}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		n := len(rc.requests)
		rec := received{query: r.URL.Query(), header: r.Header.Clone(), body: body}
		if rc.verify != nil {
			rec.err = rc.verify(r, body)
		}
		rc.requests = append(rc.requests, rec)
		status := rc.statuses[min(n, len(rc.statuses)-1)]
		rc.mu.Unlock()
		if rec.err != nil {
			http.Error(w, rec.err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(status)
		if status == http.StatusOK {
			_, _ = io.WriteString(w, rc.body)
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) got() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.requests...)
}

func (b *bundle) channel(t *testing.T, name string, kind alertchannel.Kind, rawURL, secret string) *ent.AlertChannel {
	t.Helper()
	in := alert.ChannelInput{Name: name, Kind: kind, URL: &rawURL}
	if secret != "" {
		in.Secret = &secret
	}
	ch, err := b.svc.CreateChannel(adminCtx, in)
	require.NoError(t, err)
	return ch
}

func TestFailuresOpenOneIncidentAndOneRecoveryNotice(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		b := setup(t, dsn, false, true)
		var notices []alert.Notice
		var mu sync.Mutex
		rc := newReceiver(t, []int{http.StatusOK}, "", func(r *http.Request, body []byte) error {
			var n alert.Notice
			if err := json.Unmarshal(body, &n); err != nil {
				return err
			}
			mu.Lock()
			notices = append(notices, n)
			mu.Unlock()
			return nil
		})
		ch := b.channel(t, "ops", alertchannel.KindWEBHOOK, rc.URL+"/hook", "")
		rule, err := b.svc.CreateRule(adminCtx, alert.RuleInput{Name: "flaky keeps failing", Kind: alertrule.KindFAILURE_RATE, Enabled: true,
			TaskType: "flaky", Threshold: 5, WindowSeconds: 60, ChannelIDs: []int{ch.ID}})
		require.NoError(t, err)
		_, err = b.evaluator.Pass(sysCtx) // subscribes
		require.NoError(t, err)

		for range 4 {
			b.waitStatus(t, b.create(t, "flaky", true).ID, lifecycle.Failed)
		}
		_, err = b.evaluator.Pass(sysCtx)
		require.NoError(t, err)
		require.Empty(t, b.incidents(t), "4 failures in a minute are under the threshold")
		b.create(t, "other", false) // another type's success clears nothing
		b.waitStatus(t, b.create(t, "flaky", true).ID, lifecycle.Failed)
		b.eventually(t, "an incident with 5 occurrences", func() bool {
			incs := b.incidents(t)
			return len(incs) == 1 && incs[0].Occurrences == 5
		})
		inc := b.incidents(t)[0]
		require.Equal(t, alertincident.StatusOPEN, inc.Status)
		require.Equal(t, rule.ID, inc.RuleID)
		require.Equal(t, "type:flaky", inc.Subject)
		require.True(t, inc.Notified)

		// A success of the type: recovered, one notice.
		b.waitStatus(t, b.create(t, "flaky", false).ID, lifecycle.Success)
		b.eventually(t, "the incident recovered", func() bool {
			return b.incidents(t)[0].Status == alertincident.StatusRESOLVED
		})
		for range 3 {
			_, err := b.evaluator.Pass(sysCtx)
			require.NoError(t, err)
		}
		incs := b.incidents(t)
		require.Len(t, incs, 1, "one incident, not five")
		require.Equal(t, alertincident.ResolutionRECOVERED, *incs[0].Resolution)
		ds := b.deliveries(t, inc.ID)
		require.Len(t, ds, 2, "one opening and one recovery notice")
		events := map[string]int{}
		for _, d := range ds {
			events[noticeOf(t, d).Event]++
			b.waitStatus(t, d.ID, lifecycle.Success)
		}
		require.Equal(t, map[string]int{alert.EventOpened: 1, alert.EventRecovered: 1}, events)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, notices, 2)
		require.Equal(t, alert.EventOpened, notices[0].Event)
		require.Equal(t, 5, notices[0].Occurrences)
		require.Equal(t, alert.EventRecovered, notices[1].Event)
	})
}

// fail makes a task fail as a worker would: claimed, then finished FAILED.
func (b *bundle) fail(t *testing.T, typ string) *ent.Task {
	t.Helper()
	tk := b.create(t, typ, true)
	cl, err := b.store.Claim(sysCtx, "w1", []string{typ}, 1)
	require.NoError(t, err)
	require.Len(t, cl, 1)
	errs, err := b.store.Finish(sysCtx, []store.Outcome{{Token: cl[0].Token(), Status: lifecycle.Failed, Kind: lifecycle.KindNonRetryable, Error: "boom", Task: cl[0].Task}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	return tk
}

func TestQuietPeriodHolds(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		b := setup(t, dsn, true, false)
		ch := b.channel(t, "ops", alertchannel.KindSLACK, "http://127.0.0.1:9/hook", "")
		_, err := b.svc.CreateRule(adminCtx, alert.RuleInput{Name: "any failure", Kind: alertrule.KindTASK_FAILED, Enabled: true,
			QuietSeconds: 600, ChannelIDs: []int{ch.ID}})
		require.NoError(t, err)
		_, err = b.evaluator.Pass(sysCtx)
		require.NoError(t, err)

		b.fail(t, "flaky")
		b.eventually(t, "the first incident", func() bool { return len(b.incidents(t)) == 1 })
		first := b.incidents(t)[0]
		require.True(t, first.Notified)
		require.Len(t, b.deliveries(t, first.ID), 1)

		// Another subject of the rule, within the quiet period: counted,
		// not announced.
		b.clock.Advance(5 * time.Minute)
		b.fail(t, "other")
		b.eventually(t, "the second incident", func() bool { return len(b.incidents(t)) == 2 })
		second := b.incidents(t)[1]
		require.Equal(t, "type:other", second.Subject)
		b.clock.Advance(4 * time.Minute)
		for range 3 {
			_, err := b.evaluator.Pass(sysCtx)
			require.NoError(t, err)
		}
		require.False(t, b.incidents(t)[1].Notified, "held back by the quiet period")
		require.Empty(t, b.deliveries(t, second.ID))
		// The first keeps counting, and says nothing more either.
		b.fail(t, "flaky")
		b.eventually(t, "a second occurrence", func() bool { return b.incidents(t)[0].Occurrences == 2 })
		require.Len(t, b.deliveries(t, first.ID), 1)

		// The quiet period ends: the held-back incident is announced, once.
		b.clock.Advance(time.Minute + time.Second)
		for range 3 {
			_, err := b.evaluator.Pass(sysCtx)
			require.NoError(t, err)
		}
		require.True(t, b.incidents(t)[1].Notified)
		ds := b.deliveries(t, second.ID)
		require.Len(t, ds, 1)
		require.Equal(t, alert.EventOpened, noticeOf(t, ds[0]).Event)
	})
}

func TestSilences(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		b := setup(t, dsn, true, false)
		ch := b.channel(t, "ops", alertchannel.KindSLACK, "http://127.0.0.1:9/hook", "")
		rule, err := b.svc.CreateRule(adminCtx, alert.RuleInput{Name: "any failure", Kind: alertrule.KindTASK_FAILED, Enabled: true, ChannelIDs: []int{ch.ID}})
		require.NoError(t, err)
		until := b.clock.Now().Add(time.Hour)
		_, err = b.svc.SilenceRule(adminCtx, rule.ID, &until)
		require.NoError(t, err)
		_, err = b.evaluator.Pass(sysCtx)
		require.NoError(t, err)
		b.fail(t, "flaky")
		b.eventually(t, "the incident", func() bool { return len(b.incidents(t)) == 1 })
		inc := b.incidents(t)[0]
		require.False(t, inc.Notified, "the rule is silenced")
		// A viewer may not lift it; an operator may.
		_, err = b.svc.SilenceRule(auth.NewContext(context.Background(), auth.Viewer{User: "v", Role: auth.RoleViewer}), rule.ID, nil)
		var fe *auth.ForbiddenError
		require.ErrorAs(t, err, &fe)
		_, err = b.svc.SilenceRule(auth.NewContext(context.Background(), auth.Viewer{User: "o", Role: auth.RoleOperator}), rule.ID, nil)
		require.NoError(t, err)
		_, err = b.evaluator.Pass(sysCtx)
		require.NoError(t, err)
		require.True(t, b.incidents(t)[0].Notified, "announced once the silence is lifted")
		// A manual resolve sends no recovery notice.
		_, err = b.svc.ResolveIncident(adminCtx, inc.ID)
		require.NoError(t, err)
		_, err = b.evaluator.Pass(sysCtx)
		require.NoError(t, err)
		require.Len(t, b.deliveries(t, inc.ID), 1)
	})
}

func TestRulesAreValidatedRoleCheckedAndTenantScoped(t *testing.T) {
	t.Parallel()
	b := setup(t, dbtest.SQLite(t), false, false)
	operator := auth.NewContext(context.Background(), auth.Viewer{User: "o", Role: auth.RoleOperator})
	_, err := b.svc.CreateRule(operator, alert.RuleInput{Name: "x", Kind: alertrule.KindTASK_FAILED})
	var fe *auth.ForbiddenError
	require.ErrorAs(t, err, &fe, "operators do not edit rules")
	var ve *engine.ValidationError
	_, err = b.svc.CreateRule(adminCtx, alert.RuleInput{Name: "rate", Kind: alertrule.KindFAILURE_RATE})
	require.ErrorAs(t, err, &ve, "a rate needs a threshold and a window")
	_, err = b.svc.CreateRule(adminCtx, alert.RuleInput{Name: "loop", Kind: alertrule.KindTASK_FAILED, TaskType: alert.DeliverType})
	require.ErrorAs(t, err, &ve, "deliveries are not watched")
	_, err = b.svc.CreateRule(adminCtx, alert.RuleInput{Name: "nope", Kind: alertrule.KindTASK_FAILED, TaskType: "nope"})
	require.ErrorAs(t, err, &ve)
	_, err = b.svc.CreateRule(adminCtx, alert.RuleInput{Name: "x", Kind: alertrule.KindTASK_FAILED, ChannelIDs: []int{12345}})
	require.ErrorAs(t, err, &ve, "unknown channel")

	acme := auth.NewContext(context.Background(), auth.Viewer{User: "a", Role: auth.RoleAdmin, Tenant: "acme"})
	_, err = b.svc.CreateRule(acme, alert.RuleInput{Name: "cluster", Kind: alertrule.KindNO_LEADER})
	require.ErrorAs(t, err, &ve, "cluster rules are a platform administrator's")
	mine, err := b.svc.CreateRule(adminCtx, alert.RuleInput{Name: "mine", Kind: alertrule.KindTASK_FAILED})
	require.NoError(t, err)
	theirs, err := b.svc.CreateRule(acme, alert.RuleInput{Name: "mine", Kind: alertrule.KindTASK_FAILED})
	require.NoError(t, err, "names are per tenant")
	rules, err := b.svc.Rules(acme)
	require.NoError(t, err)
	require.Len(t, rules, 1)
	require.Equal(t, theirs.ID, rules[0].ID)
	_, err = b.svc.SilenceRule(acme, mine.ID, nil)
	require.True(t, ent.IsNotFound(err), "another tenant's rule does not exist: %v", err)
	ch := b.channel(t, "ops", alertchannel.KindWEBHOOK, "http://127.0.0.1:9/?token=secret", "s3cret")
	require.Equal(t, "http://127.0.0.1:9/", ch.URLDisplay, "the token is not shown")
	// Nobody but the evaluator creates deliveries (they would send any
	// text through any channel): for users the type does not exist.
	in, _ := json.Marshal(alert.DeliverInput{Channel: ch.ID, Notice: alert.Notice{Event: alert.EventTest}})
	_, err = b.engine.Create(adminCtx, engine.CreateRequest{Type: alert.DeliverType, Input: in})
	require.ErrorAs(t, err, &ve)
	require.Contains(t, err.Error(), "unknown task type")
	_, err = b.svc.CreateRule(acme, alert.RuleInput{Name: "x", Kind: alertrule.KindTASK_FAILED, ChannelIDs: []int{ch.ID}})
	require.ErrorAs(t, err, &ve, "another tenant's channel")
}

// platform is a chat bot's receiving end: how it checks a request and what
// it answers.
type platform struct {
	kind   alertchannel.Kind
	path   string // with the bot's token in the query
	okBody string
	verify func(secret string) func(*http.Request, []byte) error
}

var platforms = []platform{
	{kind: alertchannel.KindWEBHOOK, path: "/hooks/ops", okBody: `{}`, verify: func(secret string) func(*http.Request, []byte) error {
		return func(r *http.Request, body []byte) error {
			ts := r.Header.Get("X-Taskgraph-Timestamp")
			if err := fresh(ts, time.Second); err != nil {
				return err
			}
			if got, want := r.Header.Get("X-Taskgraph-Signature"), "sha256="+alert.WebhookSign(secret, ts, body); got != want {
				return fmt.Errorf("signature %q, want %q", got, want)
			}
			var n struct {
				alert.Notice
				Title, Text string
			}
			if err := json.Unmarshal(body, &n); err != nil || n.Event != alert.EventTest || n.Text == "" || n.Title == "" {
				return fmt.Errorf("body %s", body)
			}
			return nil
		}
	}},
	{kind: alertchannel.KindDINGTALK, path: "/robot/send?access_token=tok", okBody: `{"errcode":0,"errmsg":"ok"}`, verify: func(secret string) func(*http.Request, []byte) error {
		return func(r *http.Request, body []byte) error {
			q := r.URL.Query()
			if q.Get("access_token") != "tok" {
				return errors.New("access_token lost")
			}
			ts := q.Get("timestamp")
			if err := fresh(ts, time.Millisecond); err != nil {
				return err
			}
			// The query is URL-decoded by the server: compare the Base64.
			if got, want := q.Get("sign"), alert.DingTalkSign(secret, ts); got != want {
				return fmt.Errorf("sign %q, want %q", got, want)
			}
			var m struct {
				MsgType  string `json:"msgtype"`
				Markdown struct{ Title, Text string }
			}
			if err := json.Unmarshal(body, &m); err != nil || m.MsgType != "markdown" || m.Markdown.Title == "" || !strings.Contains(m.Markdown.Text, "TEST") {
				return fmt.Errorf("body %s", body)
			}
			return nil
		}
	}},
	{kind: alertchannel.KindFEISHU, path: "/open-apis/bot/v2/hook/abc", okBody: `{"code":0,"msg":"success"}`, verify: func(secret string) func(*http.Request, []byte) error {
		return func(r *http.Request, body []byte) error {
			var m struct {
				MsgType   string `json:"msg_type"`
				Timestamp string `json:"timestamp"`
				Sign      string `json:"sign"`
				Content   struct{ Text string }
			}
			if err := json.Unmarshal(body, &m); err != nil || m.MsgType != "text" || !strings.Contains(m.Content.Text, "TEST") {
				return fmt.Errorf("body %s", body)
			}
			if err := fresh(m.Timestamp, time.Second); err != nil {
				return err
			}
			if want := alert.FeishuSign(secret, m.Timestamp); m.Sign != want {
				return fmt.Errorf("sign %q, want %q", m.Sign, want)
			}
			return nil
		}
	}},
	{kind: alertchannel.KindWECOM, path: "/cgi-bin/webhook/send?key=k1", okBody: `{"errcode":0,"errmsg":"ok"}`, verify: func(string) func(*http.Request, []byte) error {
		return func(r *http.Request, body []byte) error {
			var m struct {
				MsgType  string `json:"msgtype"`
				Markdown struct{ Content string }
			}
			if r.URL.Query().Get("key") != "k1" || json.Unmarshal(body, &m) != nil || m.MsgType != "markdown" || !strings.Contains(m.Markdown.Content, "TEST") {
				return fmt.Errorf("body %s", body)
			}
			return nil
		}
	}},
	{kind: alertchannel.KindSLACK, path: "/services/T0/B0/X", okBody: `ok`, verify: func(string) func(*http.Request, []byte) error {
		return func(r *http.Request, body []byte) error {
			var m struct{ Text string }
			if json.Unmarshal(body, &m) != nil || !strings.Contains(m.Text, "TEST") || r.Header.Get("Content-Type") != "application/json; charset=utf-8" {
				return fmt.Errorf("body %s", body)
			}
			return nil
		}
	}},
}

// fresh checks a timestamp (in units) is within a minute of now.
func fresh(ts string, unit time.Duration) error {
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("timestamp %q: %w", ts, err)
	}
	if d := time.Since(time.Unix(0, n*int64(unit))); d < -time.Minute || d > time.Minute {
		return fmt.Errorf("timestamp %q is %s off", ts, d)
	}
	return nil
}

func TestChannelsDeliverSignedNoticesAndRetry(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		b := setup(t, d.DSN(t), false, true)
		for _, p := range platforms {
			t.Run(string(p.kind), func(t *testing.T) {
				secret := "SEC0123456789abcdef"
				// The first request gets a 500: the delivery task retries.
				rc := newReceiver(t, []int{http.StatusInternalServerError, http.StatusOK}, p.okBody, p.verify(secret))
				ch := b.channel(t, "ch-"+string(p.kind), p.kind, rc.URL+p.path, secret)
				tk, err := b.svc.TestChannel(adminCtx, ch.ID)
				require.NoError(t, err)
				require.Equal(t, alert.DeliverType, tk.Type)
				b.waitStatus(t, tk.ID, lifecycle.Success)
				got := rc.got()
				require.Len(t, got, 2)
				for _, r := range got {
					require.NoError(t, r.err, "format and signature")
				}
				// History: the failed attempt is kept, with its error.
				ins, err := b.store.Client().TaskInstance.Query().Where(taskinstance.TaskID(tk.ID)).Order(ent.Asc(taskinstance.FieldInstanceNo)).All(sysCtx)
				require.NoError(t, err)
				require.Len(t, ins, 2)
				require.Equal(t, lifecycle.Failed, ins[0].Status)
				require.Equal(t, lifecycle.KindRetryable, *ins[0].ErrorKind)
				require.Contains(t, ins[0].LastError, "500")
				require.Equal(t, lifecycle.Success, ins[1].Status)
				// The token in the URL and the secret are in no task row.
				row, err := b.store.Client().Task.Query().Where(task.ID(tk.ID)).Only(sysCtx)
				require.NoError(t, err)
				require.NotContains(t, string(row.Input), secret)
				require.NotContains(t, string(row.Input), "tok")
			})
		}
		t.Run("RefusedByThePlatform", func(t *testing.T) {
			// DingTalk answers 200 with an error code for a bad signature:
			// final, not retried.
			rc := newReceiver(t, []int{http.StatusOK}, `{"errcode":310000,"errmsg":"sign not match"}`, nil)
			ch := b.channel(t, "bad-sign", alertchannel.KindDINGTALK, rc.URL+"/robot/send?access_token=x", "wrong")
			tk, err := b.svc.TestChannel(adminCtx, ch.ID)
			require.NoError(t, err)
			b.waitStatus(t, tk.ID, lifecycle.Failed)
			got, err := b.store.TaskByID(sysCtx, tk.ID)
			require.NoError(t, err)
			require.Contains(t, got.LastError, "310000")
			require.Len(t, rc.got(), 1)
		})
	})
}

func TestRuleKinds(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		rule := func(t *testing.T, b *bundle, in alert.RuleInput) *ent.AlertRule {
			in.Enabled = true
			r, err := b.svc.CreateRule(platformCtx, in)
			require.NoError(t, err)
			return r
		}
		open := func(t *testing.T, b *bundle) []*ent.AlertIncident {
			var out []*ent.AlertIncident
			for _, inc := range b.incidents(t) {
				if inc.Status == alertincident.StatusOPEN {
					out = append(out, inc)
				}
			}
			return out
		}
		pass := func(t *testing.T, b *bundle) {
			_, err := b.evaluator.Pass(sysCtx)
			require.NoError(t, err)
		}
		t.Run("BacklogOfAType", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), true, false)
			rule(t, b, alert.RuleInput{Name: "backlog", Kind: alertrule.KindBACKLOG, WindowSeconds: 600})
			for p := range 3 { // three priorities: the oldest is found among them
				in, _ := json.Marshal(flakyInput{})
				_, err := b.engine.Create(adminCtx, engine.CreateRequest{Type: "flaky", Input: in, Priority: &[]int{p * 10}[0]})
				require.NoError(t, err)
				b.clock.Advance(time.Minute)
			}
			pass(t, b)
			require.Empty(t, open(t, b), "3 minutes old")
			b.clock.Advance(7 * time.Minute) // the first has waited 10 minutes
			pass(t, b)
			incs := open(t, b)
			require.Len(t, incs, 1)
			require.Equal(t, "type:flaky", incs[0].Subject)
			require.Contains(t, incs[0].Summary, "has waited 10m0s")
			// Claim the oldest two: the third is 8 minutes old.
			cl, err := b.store.Claim(sysCtx, "w", []string{"flaky"}, 2)
			require.NoError(t, err)
			require.Len(t, cl, 2)
			pass(t, b)
			require.Empty(t, open(t, b), "back under the limit")
		})
		t.Run("StalledExecutions", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), true, false)
			rule(t, b, alert.RuleInput{Name: "stalls", Kind: alertrule.KindSTALLED})
			b.create(t, "flaky", false)
			cl, err := b.store.Claim(sysCtx, "w", []string{"flaky"}, 1)
			require.NoError(t, err)
			mark := func(stalled bool) {
				applied, err := b.store.MarkStalled(sysCtx, []store.StallMark{{Token: cl[0].Token(), Stalled: stalled, MovedBefore: b.clock.Now()}})
				require.NoError(t, err)
				require.True(t, applied[0])
			}
			b.clock.Advance(time.Minute)
			mark(true)
			pass(t, b)
			pass(t, b)
			incs := open(t, b)
			require.Len(t, incs, 1)
			require.Equal(t, 1, incs[0].Occurrences, "one stalled execution, counted once")
			mark(false)
			pass(t, b)
			require.Empty(t, open(t, b))
		})
		t.Run("NoWatchdogLeader", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), true, false)
			rule(t, b, alert.RuleInput{Name: "leader", Kind: alertrule.KindNO_LEADER, WindowSeconds: 60})
			var mu sync.Mutex
			led := false
			ev, err := alert.NewEvaluator(alert.EvaluatorConfig{WatchdogLeader: func(context.Context) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				return led, nil
			}}, b.svc, b.broker)
			require.NoError(t, err)
			run := func() {
				_, err := ev.Pass(sysCtx)
				require.NoError(t, err)
			}
			run()
			b.clock.Advance(59 * time.Second)
			run()
			require.Empty(t, open(t, b))
			b.clock.Advance(time.Second)
			run()
			require.Len(t, open(t, b), 1)
			mu.Lock()
			led = true
			mu.Unlock()
			run()
			require.Empty(t, open(t, b))
		})
		t.Run("ClockSkew", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), true, false)
			rule(t, b, alert.RuleInput{Name: "clocks", Kind: alertrule.KindCLOCK_SKEW, Threshold: 10})
			now := b.store.Now()
			node := func(name string, offsetMs int64) {
				require.NoError(t, b.store.Client().ClusterNode.Create().SetName(name).SetHost("h").SetPid(1).SetVersion("v").
					SetRoles([]string{"worker"}).SetStartedAt(now).SetLastSeenAt(now).SetExpiresAt(now.Add(time.Hour)).
					SetClockOffsetMs(offsetMs).Exec(sysCtx))
			}
			node("ahead", -120_000)
			node("fine", 2_000)
			pass(t, b)
			incs := open(t, b)
			require.Len(t, incs, 1)
			require.Equal(t, "ahead", incs[0].Subject)
			require.Contains(t, incs[0].Summary, "2m0s off the database's")
			require.NoError(t, b.store.Client().ClusterNode.Update().Where(clusternode.Name("ahead")).SetClockOffsetMs(0).Exec(sysCtx))
			pass(t, b)
			require.Empty(t, open(t, b))
		})
		t.Run("TimeoutsAndAGoneNode", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), true, false)
			rule(t, b, alert.RuleInput{Name: "timeouts", Kind: alertrule.KindTIMEOUT})
			rule(t, b, alert.RuleInput{Name: "nodes", Kind: alertrule.KindNODE_GONE})
			pass(t, b)
			b.create(t, "flaky", false)
			_, err := b.store.Claim(sysCtx, "node-7", []string{"flaky"}, 1)
			require.NoError(t, err)
			b.clock.Advance(time.Minute) // no heartbeat: the node died
			policies, err := tasktype.NewPolicies(testPolicies...)
			require.NoError(t, err)
			w, err := worker.NewWatchdog(worker.WatchdogConfig{}, b.store, policies, mask.Default())
			require.NoError(t, err)
			res, err := w.Pass(sysCtx)
			require.NoError(t, err)
			require.Equal(t, 1, res.StaleHeartbeats)
			b.eventually(t, "two incidents", func() bool { return len(open(t, b)) == 2 })
			subjects := []string{open(t, b)[0].Subject, open(t, b)[1].Subject}
			require.ElementsMatch(t, []string{"type:flaky", "worker:node-7"}, subjects)
		})
	})
}

func TestRulesWatchTheirTenantsTasks(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		b := setup(t, dsn, true, false)
		acme := auth.NewContext(context.Background(), auth.Viewer{User: "a", Role: auth.RoleAdmin, Tenant: "acme", Source: auth.SourceToken})
		_, err := b.svc.CreateRule(acme, alert.RuleInput{Name: "acme failures", Kind: alertrule.KindTASK_FAILED, Enabled: true})
		require.NoError(t, err)
		_, err = b.evaluator.Pass(sysCtx)
		require.NoError(t, err)
		failAs := func(ctx context.Context) {
			in, _ := json.Marshal(flakyInput{Fail: true})
			tk, err := b.engine.Create(ctx, engine.CreateRequest{Type: "flaky", Input: in})
			require.NoError(t, err)
			cl, err := b.store.Claim(sysCtx, "w1", []string{"flaky"}, 1)
			require.NoError(t, err)
			require.Len(t, cl, 1)
			require.Equal(t, tk.ID, cl[0].Task.ID)
			errs, err := b.store.Finish(sysCtx, []store.Outcome{{Token: cl[0].Token(), Status: lifecycle.Failed, Kind: lifecycle.KindNonRetryable, Error: "boom", Task: cl[0].Task}})
			require.NoError(t, err)
			require.NoError(t, errs[0])
		}
		failAs(adminCtx) // the default tenant's task: not acme's business
		for range 3 {
			_, err := b.evaluator.Pass(sysCtx)
			require.NoError(t, err)
		}
		require.Empty(t, b.incidents(t))
		failAs(acme)
		b.eventually(t, "acme's incident", func() bool { return len(b.incidents(t)) == 1 })
		require.Equal(t, "acme", b.incidents(t)[0].Tenant)
		mine, err := b.svc.Incidents(acme, alert.IncidentFilter{})
		require.NoError(t, err)
		require.Len(t, mine, 1)
		theirs, err := b.svc.Incidents(adminCtx, alert.IncidentFilter{})
		require.NoError(t, err)
		require.Empty(t, theirs, "another tenant's incident is not seen")
	})
}

func TestEvaluatorLoop(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("OutcomesWakeIt", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), false, false)
			_, err := b.svc.CreateRule(adminCtx, alert.RuleInput{Name: "failures", Kind: alertrule.KindTASK_FAILED, Enabled: true, TaskType: "flaky"})
			require.NoError(t, err)
			// An hour between passes: only the rule change (Wake) and the
			// failure's outcome make passes.
			ev, err := alert.NewEvaluator(alert.EvaluatorConfig{Interval: time.Hour, Types: b.registry.Names}, b.svc, b.broker)
			require.NoError(t, err)
			t.Cleanup(ev.Stop)
			require.NoError(t, ev.Start(sysCtx))
			ev.Wake()
			deadline := time.Now().Add(20 * time.Second)
			for !ev.Listening() {
				require.True(t, time.Now().Before(deadline), "the woken pass subscribes to task outcomes")
				time.Sleep(5 * time.Millisecond)
			}
			b.fail(t, "flaky")
			for len(b.incidents(t)) == 0 {
				require.True(t, time.Now().Before(deadline), "the failure wakes a pass that opens an incident")
				time.Sleep(10 * time.Millisecond)
			}
			ev.Stop()
			require.False(t, ev.Listening(), "a stopped evaluator receives nothing")
		})
		t.Run("OnlyTheLeaderEvaluatesAndListens", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), false, false)
			_, err := b.svc.CreateRule(adminCtx, alert.RuleInput{Name: "failures", Kind: alertrule.KindTASK_FAILED, Enabled: true, TaskType: "flaky"})
			require.NoError(t, err)
			var leads atomic.Bool
			leads.Store(true)
			ev, err := alert.NewEvaluator(alert.EvaluatorConfig{Types: b.registry.Names, Leader: func(context.Context) (bool, error) { return leads.Load(), nil }}, b.svc, b.broker)
			require.NoError(t, err)
			t.Cleanup(ev.Stop)
			require.True(t, ev.RunOnce(sysCtx))
			require.True(t, ev.Listening())
			leads.Store(false)
			require.False(t, ev.RunOnce(sysCtx))
			require.False(t, ev.Listening(), "another node leads: no subscription here")
			b.fail(t, "flaky")
			require.False(t, ev.RunOnce(sysCtx))
			require.Empty(t, b.incidents(t))
		})
		t.Run("StartStopStress", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), false, false)
			_, err := b.svc.CreateRule(adminCtx, alert.RuleInput{Name: "failures", Kind: alertrule.KindTASK_FAILED, Enabled: true})
			require.NoError(t, err)
			ev, err := alert.NewEvaluator(alert.EvaluatorConfig{Interval: time.Millisecond, Types: b.registry.Names}, b.svc, b.broker)
			require.NoError(t, err)
			servicetest.StressStartStop(t, ev)
			require.False(t, ev.Running())
			require.False(t, ev.Listening())
		})
	})
}

// TestAFailingDeliveryOpensNoIncident: a rule on every type's failures, and
// a channel whose endpoint always answers 500. The delivery of the notice
// fails for good, and that failure opens no incident of its own (which
// would send a notice through the same channel, which would fail, ...).
func TestAFailingDeliveryOpensNoIncident(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		b := setup(t, dsn, false, true)
		rc := newReceiver(t, []int{http.StatusInternalServerError}, "", nil)
		ch := b.channel(t, "down", alertchannel.KindWEBHOOK, rc.URL+"/hook", "")
		_, err := b.svc.CreateRule(adminCtx, alert.RuleInput{Name: "any failure", Kind: alertrule.KindTASK_FAILED, Enabled: true, ChannelIDs: []int{ch.ID}})
		require.NoError(t, err)
		_, err = b.evaluator.Pass(sysCtx) // subscribes
		require.NoError(t, err)

		b.waitStatus(t, b.create(t, "flaky", true).ID, lifecycle.Failed)
		b.eventually(t, "the incident and its delivery", func() bool {
			incs := b.incidents(t)
			return len(incs) == 1 && len(b.deliveries(t, incs[0].ID)) == 1
		})
		inc := b.incidents(t)[0]
		delivery := b.deliveries(t, inc.ID)[0]
		require.Equal(t, alert.DeliverType, delivery.Type)
		b.waitStatus(t, delivery.ID, lifecycle.Failed)
		require.Len(t, rc.got(), 5, "every attempt of the patient policy was answered 500")

		// Another failure of the watched type after the delivery's: once
		// it is counted, the delivery's failure has been seen too.
		b.waitStatus(t, b.create(t, "flaky", true).ID, lifecycle.Failed)
		b.eventually(t, "the second occurrence", func() bool { return b.incidents(t)[0].Occurrences == 2 })
		incs := b.incidents(t)
		require.Len(t, incs, 1, "no incident for the failed delivery")
		require.Equal(t, "type:flaky", incs[0].Subject)
		require.Len(t, b.deliveries(t, inc.ID), 1, "and no second notice")
	})
}

// failAs makes a task of ctx's viewer fail for good with kind, as a worker
// would: claimed, then finished FAILED.
func (b *bundle) failAs(t *testing.T, ctx context.Context, kind lifecycle.ErrorKind) *ent.Task {
	t.Helper()
	in, _ := json.Marshal(flakyInput{Fail: true})
	tk, err := b.engine.Create(ctx, engine.CreateRequest{Type: "flaky", Input: in})
	require.NoError(t, err)
	cl, err := b.store.Claim(sysCtx, "w1", []string{"flaky"}, 1)
	require.NoError(t, err)
	require.Len(t, cl, 1)
	require.Equal(t, tk.ID, cl[0].Task.ID)
	errs, err := b.store.Finish(sysCtx, []store.Outcome{{Token: cl[0].Token(), Status: lifecycle.Failed, Kind: kind, Error: "boom", Task: cl[0].Task}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	return tk
}

// TestRuleFilters: a TASK_FAILED rule with an owner or an error kind
// watches only the failures that match it. The failure that does not match
// comes first: when the matching one has been counted, it has been seen.
func TestRuleFilters(t *testing.T) {
	t.Parallel()
	bob := auth.NewContext(context.Background(), auth.Viewer{User: "bob", Role: auth.RoleOperator})
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		watch := func(t *testing.T, b *bundle, in alert.RuleInput) {
			in.Kind, in.Enabled = alertrule.KindTASK_FAILED, true
			_, err := b.svc.CreateRule(adminCtx, in)
			require.NoError(t, err)
			_, err = b.evaluator.Pass(sysCtx) // subscribes
			require.NoError(t, err)
		}
		only := func(t *testing.T, b *bundle, tk *ent.Task) {
			b.eventually(t, "an incident", func() bool { return len(b.incidents(t)) > 0 })
			incs := b.incidents(t)
			require.Len(t, incs, 1)
			require.Equal(t, 1, incs[0].Occurrences, "the failure that does not match is not counted")
			require.Contains(t, incs[0].Summary, tk.Code)
		}
		t.Run("ByOwner", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), true, false)
			watch(t, b, alert.RuleInput{Name: "bob's failures", Owner: "bob"})
			b.failAs(t, adminCtx, lifecycle.KindNonRetryable) // ada's
			only(t, b, b.failAs(t, bob, lifecycle.KindNonRetryable))
		})
		t.Run("ByErrorKind", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), true, false)
			watch(t, b, alert.RuleInput{Name: "timeouts that end a task", ErrorKind: string(lifecycle.KindTimeout)})
			b.failAs(t, adminCtx, lifecycle.KindNonRetryable)
			tk := b.failAs(t, adminCtx, lifecycle.KindTimeout)
			only(t, b, tk)
			require.Contains(t, b.incidents(t)[0].Summary, string(lifecycle.KindTimeout))
		})
	})
}

// TestOldestWaitingProbeReadsTheIndex: the BACKLOG rule's probe (the
// evaluator's own statement) reads the waiting executions' index on
// PostgreSQL, never the table: a few thousand instances of two types, three
// priorities, a quarter of them done. No enable_seqscan = off anywhere.
//
// Right after the bulk load, before any ANALYZE, the plan has no Seq Scan
// but its first probe (MIN(priority)) is planned as an aggregate over the
// type's whole range of the index (2,250 entries here), not as a one-entry
// LIMIT: "never the backlog itself" holds once the table has statistics
// (autovacuum's ANALYZE), which is what the second plan asserts — each
// index scan then reads at most one entry per loop. (SQLite's plans are the
// store's plan tests' business.)
func TestOldestWaitingProbeReadsTheIndex(t *testing.T) {
	t.Parallel()
	b := setup(t, dbtest.PostgresOnly(t), true, false)
	ctx := context.Background()
	now := b.store.Now()
	tx, err := b.store.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	for _, typ := range []string{"flaky", "other"} {
		_, err = tx.ExecContext(ctx, `INSERT INTO tasks (code, type, biz_id, title, status, priority, owner, owner_role, input, input_hash,
	timeout_seconds, retry_policy, max_attempts, progress_done, progress_total, version, cancel_requested, run_at, updated_at, created_at)
	SELECT $1 || '-' || n, $1, '', '', CASE WHEN n % 4 = 0 THEN 'SUCCESS' ELSE 'PENDING' END, (n % 3) * 10, 'alice', '', '{}', 'h', 60, 'default', 3, 0, 0, 1, false,
		$2::timestamptz + n * interval '1 second', $2, $2
	FROM generate_series(1, 3000) AS g(n)`, typ, now)
		require.NoError(t, err)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO task_instances (task_id, instance_no, status, attempt, task_type, priority, run_at, version, created_at)
	SELECT id, 1, status, 1, type, priority, run_at, 1, created_at FROM tasks`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())

	explain := func() string {
		rows, err := b.store.DB().QueryContext(ctx, "EXPLAIN (ANALYZE, COSTS OFF) "+alert.OldestWaitingQuery(true), "flaky", "flaky", "flaky")
		require.NoError(t, err)
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var l string
			require.NoError(t, rows.Scan(&l))
			lines = append(lines, l)
		}
		require.NoError(t, rows.Err())
		return strings.Join(lines, "\n")
	}
	scans := regexp.MustCompile(`Index (?:Only )?Scan using (\S+) .*rows=(\d+) loops`)
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			_, err = b.store.DB().ExecContext(ctx, "ANALYZE tasks, task_instances")
			require.NoError(t, err)
		}
		plan := explain()
		require.NotContains(t, plan, "Seq Scan", plan)
		found := scans.FindAllStringSubmatch(plan, -1)
		require.Len(t, found, 3, "one index scan per probe:\n%s", plan)
		for _, m := range found {
			require.Equal(t, "taskinstance_claimable", m[1], plan)
			if analyzed {
				require.Equal(t, "1", m[2], "each probe reads one entry:\n%s", plan)
			}
		}
	}
}
