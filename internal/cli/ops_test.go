package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/cli"
	"github.com/taskgraph/taskgraph/internal/external"
)

type schedule struct {
	ID              string `json:"id"`
	Name            string `json:"name"`
	Cron            string `json:"cron"`
	IntervalSeconds *int   `json:"intervalSeconds"`
	Paused          bool   `json:"paused"`
	TaskType        string `json:"taskType"`
}

// TestScheduleCommands: what the console's Schedules page does, from the
// command line, with exit codes.
func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.cmd(t, "schedule", "create", "nightly", "noop", "--cron", "0 3 * * *", "--timezone", "UTC", "--input", `{}`, "--json")
	s := jsonOf[schedule](t, r)
	require.Equal(t, "nightly", s.Name)
	require.Equal(t, "0 3 * * *", s.Cron)
	require.False(t, s.Paused)

	r = b.cmd(t, "schedule", "create", "often", "noop", "--every", "3600", "--paused", "-q")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	often := strings.TrimSpace(r.stdout)

	r = b.cmd(t, "schedule", "list")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^`+s.ID+` +nightly +0 3 \* \* \* \(UTC\) +noop +active +\S+`, r.stdout)
	require.Regexp(t, `(?m)^`+often+` +often +every 3600s +noop +paused`, r.stdout)

	require.True(t, jsonOf[schedule](t, b.cmd(t, "schedule", "pause", s.ID, "--json")).Paused)
	require.False(t, jsonOf[schedule](t, b.cmd(t, "schedule", "resume", s.ID, "--json")).Paused)
	r = b.cmd(t, "schedule", "delete", often)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Equal(t, "schedule "+often+" deleted\n", r.stdout)
	r = b.cmd(t, "schedule", "list", "-q")
	require.Equal(t, s.ID+"\n", r.stdout)

	r = b.cmd(t, "schedule", "create", "bad", "noop")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "give --cron or --every")
	r = b.cmd(t, "schedule", "create", "bad", "noop", "--cron", "every tuesday")
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "(VALIDATION)")
	r = b.cmd(t, "schedule", "pause", "999999")
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "NOT_FOUND")
	r = b.cmd(t, "schedule", "frobnicate")
	require.Equal(t, cli.ExitUsage, r.code)
}

type node struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Draining bool   `json:"draining"`
	Leading  bool   `json:"leading"`
}

// TestNodeCommands: the nodes and a drain, from the command line.
func TestNodeCommands(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *app.Config) { c.NodeRefresh, c.NodeLease = 50*time.Millisecond, time.Minute })
	// The node's row is written by its registry's first refresh.
	deadline := time.Now().Add(30 * time.Second)
	r := b.cmd(t, "node", "list", "--json")
	for r.code == cli.ExitOK && r.stdout == "" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		r = b.cmd(t, "node", "list", "--json")
	}
	n := jsonOf[node](t, r)
	require.Equal(t, "LIVE", n.State)
	r = b.cmd(t, "node", "list")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^ID +STATE +HOST`, r.stdout)
	require.Contains(t, r.stdout, n.ID)

	require.True(t, jsonOf[node](t, b.cmd(t, "node", "drain", n.ID, "--json")).Draining)
	require.False(t, jsonOf[node](t, b.cmd(t, "node", "drain", n.ID, "--undo", "--json")).Draining)
	r = b.cmd(t, "node", "drain", "no-such-node")
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "NOT_FOUND")
	r = b.cmd(t, "node", "drain")
	require.Equal(t, cli.ExitUsage, r.code)
}

type typeControl struct {
	Type              string `json:"type"`
	MaxRunning        *int   `json:"maxRunning"`
	RateLimit         *int   `json:"rateLimit"`
	RatePeriodSeconds int    `json:"ratePeriodSeconds"`
	Paused            bool   `json:"paused"`
}

// TestTypeCommands: the console's Types page from the command line; a cap
// and a rate set one after the other both hold.
func TestTypeCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.cmd(t, "type", "list")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^TYPE +STATE +CAP +RATE`, r.stdout)
	require.Regexp(t, `(?m)^noop +running +- +- +0 +0$`, r.stdout)

	tc := jsonOf[typeControl](t, b.cmd(t, "type", "cap", "noop", "3", "--json"))
	require.Equal(t, 3, *tc.MaxRunning)
	tc = jsonOf[typeControl](t, b.cmd(t, "type", "rate", "noop", "10", "--per", "60", "--json"))
	require.Equal(t, 10, *tc.RateLimit)
	require.Equal(t, 60, tc.RatePeriodSeconds)
	require.NotNil(t, tc.MaxRunning, "the cap stays")
	require.Equal(t, 3, *tc.MaxRunning)
	tc = jsonOf[typeControl](t, b.cmd(t, "type", "cap", "noop", "none", "--json"))
	require.Nil(t, tc.MaxRunning)
	require.NotNil(t, tc.RateLimit, "the rate stays")

	require.True(t, jsonOf[typeControl](t, b.cmd(t, "type", "pause", "noop", "--json")).Paused)
	r = b.cmd(t, "type", "list")
	require.Regexp(t, `(?m)^noop +paused +- +10 per 60s`, r.stdout)
	require.False(t, jsonOf[typeControl](t, b.cmd(t, "type", "resume", "noop", "--json")).Paused)

	r = b.cmd(t, "type", "cap", "noop", "lots")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, `"lots" is neither a whole number nor none`)
	r = b.cmd(t, "type", "pause", "rocket")
	require.Equal(t, cli.ExitFailure, r.code, r.stdout)
	r = b.cmd(t, "type", "pause", "noop", "--until", "tomorrow")
	require.Equal(t, cli.ExitUsage, r.code)
}

// TestAlertCommands: the console's Alerts page (channels and rules) from
// the command line.
func TestAlertCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ch struct {
		ID, Name, Kind string
		HasSecret      bool `json:"hasSecret"`
	}
	r := b.cmd(t, "alert", "channel", "create", "ops", "webhook", "--url", "https://hooks.example.com/T0/secret-part", "--json")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ch))
	require.Equal(t, "WEBHOOK", ch.Kind)

	r = b.cmd(t, "alert", "rule", "create", "failures", "task_failed", "--type", "noop", "--channel", ch.ID, "-q")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	rule := strings.TrimSpace(r.stdout)

	r = b.cmd(t, "alert", "rules")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^`+rule+` +failures +TASK_FAILED +noop +\d+ +\d+s +true +ops$`, r.stdout)
	r = b.cmd(t, "alert", "channels")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^`+ch.ID+` +ops +WEBHOOK +\S+`, r.stdout)

	r = b.cmd(t, "alert", "rule", "create", "x", "SOMETIMES")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "is not one of TASK_FAILED, ")
	r = b.cmd(t, "alert", "rule", "delete", rule)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Equal(t, "rule "+rule+" deleted\n", r.stdout)
	r = b.cmd(t, "alert", "channel", "delete", ch.ID, "--json")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	r = b.cmd(t, "alert", "channels", "-q")
	require.Empty(t, r.stdout)
	r = b.cmd(t, "alert", "rule", "delete", "999999")
	require.Equal(t, cli.ExitFailure, r.code)
}

// TestBulkCommands: a preview over a filter, a confirmation that must
// match it, and the action followed to its end.
func TestBulkCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 3 {
		r := b.cmd(t, "task", "create", "noop", "--input", `{"sleepMs": 600000}`, "--run-at", time.Now().Add(30*24*time.Hour).UTC().Format(time.RFC3339), "-q")
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
	}
	r := b.cmd(t, "bulk", "preview", "cancel", "--type", "noop", "--status", "PENDING")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "3 matched: cancel would take 3, 0 refused by their state")
	require.Regexp(t, `(?m)^PENDING +3 +true$`, r.stdout)
	require.Contains(t, r.stdout, "taskgraph bulk cancel --confirm 3")
	r = b.cmd(t, "bulk", "preview", "retry", "--type", "noop", "--json")
	var p struct{ Matched, Accepted, Refused int }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &p), r.stdout)
	require.Equal(t, 3, p.Refused, "a PENDING task cannot be retried")

	r = b.cmd(t, "bulk", "cancel", "--type", "noop")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "missing --confirm N")
	r = b.cmd(t, "bulk", "cancel", "--type", "noop", "--confirm", "2")
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "(CONFLICT)")
	r = b.cmd(t, "task", "list", "--status", "CANCELLED", "-q")
	require.Empty(t, r.stdout, "a refused confirmation does nothing")

	r = b.cmd(t, "bulk", "cancel", "--type", "noop", "--confirm", "3", "--reason", "cleanup", "--wait", "-q")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	r = b.cmd(t, "task", "list", "--status", "CANCELLED", "--type", "noop", "-q")
	require.Len(t, strings.Fields(r.stdout), 3)
}

type extWorker struct {
	ID       string   `json:"id"`
	Name     string   `json:"name"`
	State    string   `json:"state"`
	Language string   `json:"language"`
	Types    []string `json:"types"`
	Draining bool     `json:"draining"`
}

// TestWorkerCommands: the external workers and a worker's drain, from the
// command line; a drained worker's claim takes nothing and says so.
func TestWorkerCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.srv.Do(t, `mutation { declareTaskType(input: {name: "ext.cli", timeoutSeconds: 60}) { name } }`, nil)
	require.Empty(t, r.Errors)
	ctx := context.Background()
	w := &external.Client{URL: b.srv.URL}
	claim := func() external.ClaimResponse {
		got, err := w.Claim(ctx, external.ClaimRequest{WorkerID: "cli-w", Language: "go", Version: "1", Types: []string{"ext.cli"}, Max: 1})
		require.NoError(t, err)
		return got
	}
	require.False(t, claim().Draining)
	ew := jsonOf[extWorker](t, b.cmd(t, "node", "workers", "--json"))
	require.Equal(t, "cli-w", ew.Name)
	require.Equal(t, "LIVE", ew.State)
	require.Equal(t, "go", ew.Language)
	require.Equal(t, []string{"ext.cli"}, ew.Types)
	r2 := b.cmd(t, "node", "workers")
	require.Equal(t, cli.ExitOK, r2.code, r2.stderr)
	require.Regexp(t, `(?m)^ID +NAME +STATE`, r2.stdout)
	require.Contains(t, r2.stdout, "cli-w")

	d := jsonOf[extWorker](t, b.cmd(t, "node", "drain-worker", ew.ID, "--json"))
	require.True(t, d.Draining)
	require.Equal(t, "DRAINING", d.State)
	require.True(t, claim().Draining, "its next claim says so")
	require.False(t, jsonOf[extWorker](t, b.cmd(t, "node", "drain-worker", ew.ID, "--undo", "--json")).Draining)
	require.False(t, claim().Draining)
	r2 = b.cmd(t, "node", "drain-worker", "999")
	require.Equal(t, cli.ExitFailure, r2.code)
	require.Contains(t, r2.stderr, "NOT_FOUND")
	require.Equal(t, cli.ExitUsage, b.cmd(t, "node", "drain-worker").code)
}
