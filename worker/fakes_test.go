package worker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/tasktype"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/seal"
	"github.com/taskgraph/taskgraph/internal/store"
)

// Fakes of the seams (seams.go), for tests of the pool's and the
// flusher's loops without a database.

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// errOutage is a failure after which the same write may succeed (the
// database is unreachable): the flusher puts its batch back.
var errOutage = syscall.ECONNREFUSED

// fakeCompleter records what it is asked to write. record and finish, when
// set, answer instead of accepting everything.
type fakeCompleter struct {
	record func(logs []store.LogLine, progress []store.Progress) ([]store.Token, error)
	finish func(batch []store.Outcome) ([]error, error)

	mu       sync.Mutex
	batches  [][]store.Outcome // every Finish call
	written  []store.Outcome   // outcomes accepted
	logs     []store.LogLine   // log lines accepted
	progress []store.Progress  // progress accepted
}

func (c *fakeCompleter) RecordWork(_ context.Context, logs []store.LogLine, progress []store.Progress) ([]store.Token, error) {
	var rejected []store.Token
	if c.record != nil {
		var err error
		if rejected, err = c.record(logs, progress); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logs = append(c.logs, logs...)
	c.progress = append(c.progress, progress...)
	return rejected, nil
}

func (c *fakeCompleter) Finish(_ context.Context, batch []store.Outcome) ([]error, error) {
	c.mu.Lock()
	c.batches = append(c.batches, append([]store.Outcome(nil), batch...))
	c.mu.Unlock()
	errs := make([]error, len(batch))
	if c.finish != nil {
		var err error
		if errs, err = c.finish(batch); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, o := range batch {
		if errs[i] == nil {
			c.written = append(c.written, o)
		}
	}
	return errs, nil
}

// writtenIDs returns the instance ids of the outcomes written, in order.
func (c *fakeCompleter) writtenIDs() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]int, len(c.written))
	for i, o := range c.written {
		ids[i] = o.Token.InstanceID
	}
	return ids
}

func (c *fakeCompleter) finishCalls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.batches)
}

// fakeStore is a Store: claims are answered by claim (nil: nothing
// waits) and sent to claims; heartbeats report everything alive; work is
// written to its fakeCompleter.
type fakeStore struct {
	fakeCompleter
	claim  func(n int, types []string, limit int) ([]store.Claimed, error)
	claims chan int // the number of each claim

	claimMu    sync.Mutex
	calls      int
	asked      []claimCall
	admissions []time.Time // what NextAdmission answers, in turn; then zero
}

func newFakeStore() *fakeStore { return &fakeStore{claims: make(chan int, 1024)} }

// claimCall is what one claim asked for.
type claimCall struct {
	types []string
	caps  []int
	limit int
}

func (s *fakeStore) ClaimEach(_ context.Context, _ string, types []string, caps []int, limit int) ([]store.Claimed, error) {
	if len(caps) != len(types) {
		panic("fakeStore: a cap per type")
	}
	s.claimMu.Lock()
	s.calls++
	n := s.calls
	s.asked = append(s.asked, claimCall{types: slices.Clone(types), caps: slices.Clone(caps), limit: limit})
	s.claimMu.Unlock()
	s.claims <- n
	if s.claim == nil {
		return nil, nil
	}
	return s.claim(n, types, limit)
}

// claimsAsked returns what each claim so far asked for.
func (s *fakeStore) claimsAsked() []claimCall {
	s.claimMu.Lock()
	defer s.claimMu.Unlock()
	return slices.Clone(s.asked)
}

func (s *fakeStore) claimCount() int {
	s.claimMu.Lock()
	defer s.claimMu.Unlock()
	return s.calls
}

func (s *fakeStore) HeldAtCap() bool { return false }

func (s *fakeStore) NextAdmission() time.Time {
	s.claimMu.Lock()
	defer s.claimMu.Unlock()
	if len(s.admissions) == 0 {
		return time.Time{}
	}
	at := s.admissions[0]
	s.admissions = s.admissions[1:]
	return at
}

func (s *fakeStore) Pulse(context.Context, []store.Pulse) (store.Beat, error) {
	return store.Beat{}, nil
}

func (s *fakeStore) Now() time.Time { return time.Now().UTC() }

// claimed makes a claimed execution of typ: instance id, task id+1000.
func claimed(id int, typ string) store.Claimed {
	return store.Claimed{
		Task: &ent.Task{ID: id + 1000, Type: typ, Input: json.RawMessage(`{}`), TimeoutSeconds: 60,
			RetryPolicy: tasktype.DefaultPolicyName, MaxAttempts: 1, Status: lifecycle.Executing},
		Instance: &ent.TaskInstance{ID: id, TaskID: id + 1000, Attempt: 1, Version: 1, Status: lifecycle.Executing},
	}
}

// success is a successful outcome of instance id.
func success(id int) store.Outcome {
	c := claimed(id, "noop")
	return store.Outcome{Token: c.Token(), Status: lifecycle.Success, Task: c.Task}
}

// fakePool starts a pool on s that polls only once an hour (so that every
// claim in a test has a cause the test chose) and stops it at cleanup.
func fakePool(t *testing.T, s *fakeStore, cfg Config, reg *tasktype.Registry) *Pool {
	t.Helper()
	policies, err := tasktype.NewPolicies(tasktype.DefaultPolicies()...)
	require.NoError(t, err)
	sealer, err := seal.New(make([]byte, seal.KeySize))
	require.NoError(t, err)
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Hour
	}
	cfg.HeartbeatInterval = time.Hour
	cfg.FlushInterval = time.Millisecond
	cfg.Logger = discard
	p, err := NewPool(cfg, Deps{Store: s, Registry: reg, Policies: policies, Sealer: sealer, Masker: mask.Default()})
	require.NoError(t, err)
	p.fetchIdle = newTestSignal()
	require.NoError(t, p.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, p.Stop(ctx))
	})
	return p
}

// await receives from ch, failing the test if nothing comes for long (a
// hang, not a measure).
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
