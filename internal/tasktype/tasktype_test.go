package tasktype_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// testPolicies: quick to reason about, 10% jitter.
var testPolicies = []tasktype.RetryPolicy{
	{Name: tasktype.DefaultPolicyName, MaxAttempts: 3, Backoff: []time.Duration{5 * time.Second, 30 * time.Second}, ResourceBackoff: []time.Duration{time.Minute}, Jitter: 0.1},
	{Name: "none", MaxAttempts: 1},
}

type greeting struct {
	Name  string `json:"name"`
	Times int    `json:"times,omitempty"`
}

func (g *greeting) Validate() error {
	if g.Times < 0 {
		return errors.New("times must not be negative")
	}
	return nil
}

func TestRegister(t *testing.T) {
	t.Parallel()
	r := tasktype.NewRegistry()
	var got greeting
	typ := tasktype.Register(r, "greet", func(_ context.Context, _ *tasktype.Job, in greeting) error {
		got = in
		return nil
	}, tasktype.WithTimeout(time.Minute), tasktype.WithRetryPolicy("none"), tasktype.WithConcurrency(2))
	tasktype.Register(r, "alert.send", func(context.Context, *tasktype.Job, struct{}) error { return nil }, tasktype.Internal())

	require.Equal(t, time.Minute, typ.Timeout)
	require.Equal(t, "none", typ.RetryPolicy)
	require.Equal(t, 2, typ.Concurrency)
	require.Equal(t, tasktype.StallFlag, typ.StallAction, "the default stall action")
	require.Equal(t, []string{"alert.send", "greet"}, r.Names())
	require.Equal(t, []string{"greet"}, r.PublicNames(), "internal types are not public")
	found, ok := r.Lookup("greet")
	require.True(t, ok)
	require.Same(t, typ, found)
	_, ok = r.Lookup("nope")
	require.False(t, ok)

	in, err := typ.Decode(json.RawMessage(`{"name":"Ada","times":2}`))
	require.NoError(t, err)
	require.NoError(t, typ.Handle(context.Background(), nil, in))
	require.Equal(t, greeting{Name: "Ada", Times: 2}, got)

	for input, want := range map[string]string{
		`{"name":"Ada","colour":"red"}`: "colour",
		`{"name":1}`:                    "/name",
		`{"name":"Ada","times":-1}`:     "times must not be negative",
		`{"name":`:                      "not valid JSON",
	} {
		err := typ.Validate(json.RawMessage(input))
		var inErr *tasktype.InputError
		require.ErrorAs(t, err, &inErr, input)
		require.Equal(t, "greet", inErr.Type)
		require.Contains(t, err.Error(), want, input)
		require.Equal(t, lifecycle.KindNonRetryable, tasktype.Classify(err), "bad input is not retried")
	}

	// At run, an input accepted at create is decoded into the handler's
	// type again, without the schema: unknown and retyped fields are still
	// refused, the type's Validate is still called.
	in, err = typ.DecodeAccepted(json.RawMessage(`{"name":"Ada"}`))
	require.NoError(t, err)
	require.Equal(t, greeting{Name: "Ada"}, in)
	in, err = typ.DecodeAccepted(nil)
	require.NoError(t, err, "an empty input is the empty object")
	require.Equal(t, greeting{}, in)
	for input, want := range map[string]string{
		`{"name":"Ada","colour":"red"}`: "colour",
		`{"name":1}`:                    "name",
		`{"name":"Ada","times":-1}`:     "times must not be negative",
	} {
		_, err := typ.DecodeAccepted(json.RawMessage(input))
		var inErr *tasktype.InputError
		require.ErrorAs(t, err, &inErr, input)
		require.Contains(t, err.Error(), want, input)
	}

	require.PanicsWithValue(t, `tasktype: task type "greet" registered twice`, func() {
		tasktype.Register(r, "greet", func(context.Context, *tasktype.Job, greeting) error { return nil })
	})
	require.Panics(t, func() {
		tasktype.Register(r, "Bad Name", func(context.Context, *tasktype.Job, greeting) error { return nil })
	})
}

func TestClassify(t *testing.T) {
	t.Parallel()
	base := errors.New("trouble")
	for err, want := range map[error]lifecycle.ErrorKind{
		base:                        lifecycle.KindRetryable,
		tasktype.Retryable(base):    lifecycle.KindRetryable,
		tasktype.NonRetryable(base): lifecycle.KindNonRetryable,
		tasktype.Resource(base):     lifecycle.KindResource,
		fmt.Errorf("x: %w", tasktype.Resource(base)): lifecycle.KindResource,
	} {
		require.Equal(t, want, tasktype.Classify(err), err.Error())
	}
}

// writer is a JobWriter that keeps what it is given.
type writer struct {
	mu    sync.Mutex
	now   time.Time
	prog  []store.Progress
	lines []store.LogLine
}

func (w *writer) Progress(p store.Progress) { w.mu.Lock(); w.prog = append(w.prog, p); w.mu.Unlock() }
func (w *writer) Log(l store.LogLine)       { w.mu.Lock(); w.lines = append(w.lines, l); w.mu.Unlock() }
func (w *writer) Now() time.Time            { return w.now }

func TestJobWritesThroughItsWriterMaskedAndFenced(t *testing.T) {
	t.Parallel()
	m, err := mask.New(mask.Rules{})
	require.NoError(t, err)
	started := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	task := tasktype.JobTask{ID: 7, Owner: "ada", OwnerRole: "operator", OwnerSource: "token", Tenant: "acme"}
	inst := tasktype.JobInstance{ID: 70, Attempt: 2, StartedAt: started}
	tok := store.Token{InstanceID: 70, Version: 3}
	w := &writer{now: started.Add(time.Minute)}
	job, ctl := tasktype.NewJob(task, inst, tok, w, m)

	require.Equal(t, tok, job.Token())
	require.Equal(t, 2, job.Attempt())
	require.Equal(t, "acme", job.Owner().Tenant)
	require.True(t, ctl.MovedAt().IsZero())
	require.Equal(t, started, ctl.LastMoved(), "not moved yet: its start")

	job.Progress(3, 10)
	job.Info("calling 13800138000", "token", "sk_live_abcdefghijklmnop", "n", 3, "err", errors.New("boom"))
	require.Equal(t, []store.Progress{{Token: tok, TaskID: 7, Done: 3, Total: 10}}, w.prog)
	require.Len(t, w.lines, 1)
	l := w.lines[0]
	require.Equal(t, tok, l.Token, "every write carries the fencing token")
	require.Equal(t, tasklog.LevelINFO, l.Level)
	require.Equal(t, "calling 138****8000", l.Message, "the message is masked")
	require.NotEqual(t, "sk_live_abcdefghijklmnop", l.Fields["token"], "the values are masked")
	require.Equal(t, "boom", l.Fields["err"], "an error is written as its text")
	require.Equal(t, w.now, ctl.MovedAt(), "moved, by the writer's clock")
	require.Equal(t, w.now, ctl.LastMoved())

	require.NoError(t, job.SetResult(map[string]any{"password": "hunter2", "rows": 5}))
	job.SetResultStatus("PARTIAL_SUCCESS")
	require.NotContains(t, string(ctl.Result()), "hunter2", "the result is masked")
	require.Contains(t, string(ctl.Result()), `"rows":5`)
	require.Equal(t, "PARTIAL_SUCCESS", ctl.ResultStatus())

	ctl.SetMasker(m.WithValuesOf(json.RawMessage(`{"secret":"plainly-visible-value"}`)))
	job.Warn("echo plainly-visible-value")
	require.NotContains(t, w.lines[1].Message, "plainly-visible-value", "the input's masked values stay masked")
}

func TestPolicies(t *testing.T) {
	t.Parallel()
	ps, err := tasktype.NewPolicies(testPolicies...)
	require.NoError(t, err)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := ps.Next("default", 3, 1, lifecycle.KindInterrupted, now)
	require.True(t, d.Retry)
	require.Equal(t, 1, d.Attempt, "an interruption does not use up an attempt")
	require.Equal(t, now, d.RunAt)
	d = ps.Next("default", 3, 3, lifecycle.KindTimeout, now)
	require.False(t, d.Retry)
	d = ps.Next("default", 5, 3, lifecycle.KindTimeout, now)
	require.True(t, d.Retry, "the task's max attempts wins over the policy's")
	require.Equal(t, 4, d.Attempt)
	d = ps.Next("default", 3, 1, lifecycle.KindNonRetryable, now)
	require.False(t, d.Retry)
	_, err = tasktype.NewPolicies(tasktype.RetryPolicy{Name: "default", MaxAttempts: 0})
	require.Error(t, err)
	_, err = tasktype.NewPolicies(tasktype.RetryPolicy{Name: "default", MaxAttempts: 3})
	require.Error(t, err, "retries without a backoff")
	_, err = tasktype.NewPolicies(tasktype.RetryPolicy{Name: "x", MaxAttempts: 1})
	require.Error(t, err, "no default policy")
}

func TestRetryAfterIsHonouredUpToThePolicysLongestDelay(t *testing.T) {
	t.Parallel()
	ps, err := tasktype.NewPolicies(tasktype.DefaultPolicies()...)
	require.NoError(t, err)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	policy, _ := ps.Get("default")
	require.Equal(t, 15*time.Minute, policy.MaxDelay())

	err = tasktype.RetryAfter(tasktype.Resource(errors.New("429 Too Many Requests")), 2*time.Second)
	require.Equal(t, lifecycle.KindResource, tasktype.Classify(err), "the kind survives the wrapping")
	ra, ok := tasktype.RetryAfterOf(fmt.Errorf("push: %w", err))
	require.True(t, ok)
	require.Equal(t, 2*time.Second, ra)
	_, ok = tasktype.RetryAfterOf(tasktype.Resource(errors.New("x")))
	require.False(t, ok)

	for range 50 { // jitter only adds, by at most 10%
		d := ps.NextAfter("default", 3, 1, lifecycle.KindResource, ra, now)
		require.True(t, d.Retry)
		delay := d.RunAt.Sub(now)
		require.True(t, delay >= 2*time.Second && delay <= 2200*time.Millisecond, "a 429's Retry-After: 2 waits 2 s, not the 1 min resource backoff: %s", delay)
	}
	d := ps.NextAfter("default", 3, 1, lifecycle.KindRetryable, 24*time.Hour, now)
	require.Equal(t, 15*time.Minute, d.RunAt.Sub(now), "capped at the policy's longest delay")
	d = ps.NextAfter("default", 3, 1, lifecycle.KindRetryable, 0, now)
	require.Equal(t, now, d.RunAt, "Retry-After: 0 means now")
	d = ps.NextAfter("default", 3, 3, lifecycle.KindResource, time.Second, now)
	require.False(t, d.Retry, "it never adds an attempt")
	d = ps.NextAfter("default", 3, 1, lifecycle.KindNonRetryable, time.Second, now)
	require.False(t, d.Retry)
	d = ps.NextAfter("default", 3, 1, lifecycle.KindRetryable, -1, now)
	delay := d.RunAt.Sub(now)
	require.True(t, delay >= 4500*time.Millisecond && delay <= 5500*time.Millisecond, "no Retry-After: the schedule: %s", delay)
}
