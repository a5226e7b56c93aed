package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/fakeclock"
	"github.com/taskgraph/taskgraph/internal/store"
)

// sysCtx acts as the process itself: these tests drive the store as the
// engine's internals do, without a user.
var sysCtx = auth.NewSystemContext(context.Background())

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

type testBundle struct {
	clock *fakeclock.Clock
	pub   *recorder
}

// recorder is a Publisher that keeps what it was given and, for every
// change, checks that the change is already visible to another connection:
// events are published after commit, never before.
type recorder struct {
	t       testing.TB
	client  func() *ent.Client
	mu      sync.Mutex
	changes []events.TaskChange
	logs    []*ent.TaskLog
}

func (r *recorder) PublishTasks(cs []events.TaskChange) {
	if c := r.client(); c != nil {
		for _, ch := range cs {
			got, err := c.Task.Get(sysCtx, ch.Task.ID)
			if err != nil || got.Version < ch.Task.Version {
				r.t.Errorf("event for task %d v%d published before its commit was visible (read: %v, err %v)", ch.Task.ID, ch.Task.Version, got, err)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, cs...)
}

func (r *recorder) PublishLogs(ls []*ent.TaskLog) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, ls...)
}

func (r *recorder) versions(taskID int) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int64
	for _, c := range r.changes {
		if c.Task.ID == taskID {
			out = append(out, c.Task.Version)
		}
	}
	return out
}

func setup(t *testing.T, dsn string) (*store.Store, *testBundle) {
	t.Helper()
	b := &testBundle{clock: fakeclock.New(epoch)}
	var s *store.Store
	b.pub = &recorder{t: t, client: func() *ent.Client {
		if s == nil {
			return nil
		}
		return s.Client()
	}}
	s, err := store.Open(sysCtx, store.Config{DSN: dsn, Publisher: b.pub, Clock: b.clock.Now})
	require.NoError(t, err)
	access.Install(s.Client())
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s, b
}

type taskOpts struct {
	typ, owner, key, hash string
	maxAttempts           int
	runAt                 time.Time
}

func newTask(t testing.TB, s *store.Store, o taskOpts) *ent.Task {
	t.Helper()
	tk, created, err := s.CreateTask(sysCtx, newTaskParams(o))
	require.NoError(t, err)
	require.True(t, created)
	return tk
}

func newTaskParams(o taskOpts) store.NewTask {
	n := store.NewTask{
		Type: "noop", Owner: "alice", Input: json.RawMessage(`{}`), InputHash: "h",
		TimeoutSeconds: 60, RetryPolicy: "default", MaxAttempts: 3, RunAt: o.runAt,
	}
	if o.typ != "" {
		n.Type = o.typ
	}
	if o.owner != "" {
		n.Owner = o.owner
	}
	if o.key != "" {
		// The engine derives the hash from the owner and the raw key.
		n.IdempotencyKey = &o.key
		h := "idem:" + n.Owner + ":" + o.key
		n.IdempotencyHash = &h
	}
	if o.hash != "" {
		n.InputHash = o.hash
	}
	if o.maxAttempts != 0 {
		n.MaxAttempts = o.maxAttempts
	}
	return n
}

// createAll creates tasks in bulk and requires every one created.
func createAll(t testing.TB, s *store.Store, batch []store.NewTask) []*ent.Task {
	t.Helper()
	res, err := s.CreateTasks(sysCtx, batch)
	require.NoError(t, err)
	out := make([]*ent.Task, len(res))
	for i, r := range res {
		require.NoError(t, r.Err)
		require.True(t, r.Created)
		out[i] = r.Task
	}
	return out
}

func claimOne(t testing.TB, s *store.Store) store.Claimed {
	t.Helper()
	cl, err := s.Claim(sysCtx, "w1", []string{"noop"}, 1)
	require.NoError(t, err)
	require.Len(t, cl, 1)
	return cl[0]
}

func finish(t testing.TB, s *store.Store, o store.Outcome) error {
	t.Helper()
	errs, err := s.Finish(sysCtx, []store.Outcome{o})
	require.NoError(t, err)
	return errs[0]
}

func requireTransitionError(t testing.TB, err error, from, to lifecycle.Status) {
	t.Helper()
	var te *lifecycle.TransitionError
	require.ErrorAs(t, err, &te)
	require.ErrorIs(t, err, lifecycle.ErrInvalidTransition)
	require.Equal(t, from, te.From, "from")
	require.Equal(t, to, te.To, "to")
}

func instances(t testing.TB, s *store.Store, taskID int) []*ent.TaskInstance {
	t.Helper()
	in, err := s.Client().TaskInstance.Query().Where(taskinstance.TaskID(taskID)).Order(ent.Asc(taskinstance.FieldInstanceNo)).All(sysCtx)
	require.NoError(t, err)
	return in
}

func reload(t testing.TB, s *store.Store, id int) *ent.Task {
	t.Helper()
	tk, err := s.TaskByID(sysCtx, id)
	require.NoError(t, err)
	return tk
}

// requireMirrored checks that a task's status is its latest instance's, and
// that at most one instance is live.
func requireMirrored(t testing.TB, s *store.Store, taskID int) {
	t.Helper()
	tk := reload(t, s, taskID)
	ins := instances(t, s, taskID)
	require.NotEmpty(t, ins)
	live := 0
	for _, in := range ins {
		if in.Status.Live() {
			live++
		}
	}
	require.LessOrEqual(t, live, 1, "live instances")
	switch tk.Status {
	case lifecycle.Failed, lifecycle.Cancelled, lifecycle.RetryPending, lifecycle.ReviewPending:
		require.NotNil(t, tk.AttentionStatus, "attention_status of a %s task", tk.Status)
		require.Equal(t, tk.Status, *tk.AttentionStatus, "attention_status follows status")
	default:
		require.Nil(t, tk.AttentionStatus, "attention_status of a %s task", tk.Status)
	}
	last := ins[len(ins)-1]
	if tk.Status == lifecycle.Cancelled && last.Status == lifecycle.Failed {
		return // failed execution of a task whose cancel was requested
	}
	require.Equal(t, tk.Status, last.Status, "task status mirrors its latest instance")
}

func TestLegalTransitions(t *testing.T) {
	t.Parallel()
	ctx := sysCtx
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("PendingToExecutingByClaim", func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, d.DSN(t))
			tk := newTask(t, s, taskOpts{})
			require.Equal(t, lifecycle.Pending, tk.Status)
			c := claimOne(t, s)
			require.Equal(t, tk.ID, c.Task.ID)
			require.Equal(t, lifecycle.Executing, c.Task.Status)
			require.Equal(t, lifecycle.Executing, c.Instance.Status)
			require.Equal(t, "w1", c.Instance.WorkerID)
			require.NotNil(t, c.Instance.StartedAt)
			requireMirrored(t, s, tk.ID)
		})
		t.Run("PendingToCancelled", func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, d.DSN(t))
			tk := newTask(t, s, taskOpts{})
			got, err := s.CancelTask(ctx, tk.ID, "not needed")
			require.NoError(t, err)
			require.Equal(t, lifecycle.Cancelled, got.Status)
			require.NotNil(t, got.FinishedAt)
			ins := instances(t, s, tk.ID)
			require.Equal(t, lifecycle.Cancelled, ins[0].Status)
			require.Equal(t, lifecycle.KindCancelled, *ins[0].ErrorKind)
			requireMirrored(t, s, tk.ID)
			cl, err := s.Claim(ctx, "w1", []string{"noop"}, 10)
			require.NoError(t, err)
			require.Empty(t, cl, "a cancelled task is never claimed")
		})
		t.Run("ExecutingToSuccess", func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, d.DSN(t))
			tk := newTask(t, s, taskOpts{})
			c := claimOne(t, s)
			require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Success, Result: json.RawMessage(`{"n":1}`)}))
			got := reload(t, s, tk.ID)
			require.Equal(t, lifecycle.Success, got.Status)
			require.JSONEq(t, `{"n":1}`, string(got.Result))
			require.Empty(t, lifecycle.AvailableActions(got.Status, got.CancelRequested))
			requireMirrored(t, s, tk.ID)
		})
		t.Run("ExecutingToFailed", func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, d.DSN(t))
			tk := newTask(t, s, taskOpts{})
			c := claimOne(t, s)
			require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Failed, Kind: lifecycle.KindNonRetryable, Error: "bad input"}))
			got := reload(t, s, tk.ID)
			require.Equal(t, lifecycle.Failed, got.Status)
			require.Equal(t, "bad input", got.LastError)
			require.Equal(t, []lifecycle.Action{lifecycle.ActionRetry, lifecycle.ActionReplayWithInput}, lifecycle.AvailableActions(got.Status, got.CancelRequested))
			requireMirrored(t, s, tk.ID)
		})
		t.Run("ExecutingToRetryPendingCreatesANewInstance", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t, d.DSN(t))
			tk := newTask(t, s, taskOpts{})
			c := claimOne(t, s)
			runAt := b.clock.Now().Add(5 * time.Second)
			require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Failed, Kind: lifecycle.KindRetryable, Error: "blip",
				Retry: &store.Retry{RunAt: runAt, Attempt: 2}, Log: "attempt 1 failed"}))
			got := reload(t, s, tk.ID)
			require.Equal(t, lifecycle.RetryPending, got.Status)
			ins := instances(t, s, tk.ID)
			require.Len(t, ins, 2)
			require.Equal(t, lifecycle.Failed, ins[0].Status, "the failed execution keeps its evidence")
			require.Equal(t, "blip", ins[0].LastError)
			require.Equal(t, lifecycle.RetryPending, ins[1].Status)
			require.Equal(t, 2, ins[1].InstanceNo)
			require.Equal(t, 2, ins[1].Attempt)
			require.True(t, ins[1].RunAt.Equal(runAt), "run_at %v", ins[1].RunAt)
			logs, err := s.Client().TaskLog.Query().Where(tasklog.TaskID(tk.ID)).All(ctx)
			require.NoError(t, err)
			require.Len(t, logs, 1)
			require.Equal(t, "attempt 1 failed", logs[0].Message)

			cl, err := s.Claim(ctx, "w1", []string{"noop"}, 1)
			require.NoError(t, err)
			require.Empty(t, cl, "not claimed before its backoff passed")
			b.clock.Advance(5 * time.Second)
			c2 := claimOne(t, s)
			require.Equal(t, ins[1].ID, c2.Instance.ID, "RETRY_PENDING -> EXECUTING")
			requireMirrored(t, s, tk.ID)
		})
		t.Run("ExecutingCancelIsARequestThenCancelled", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t, d.DSN(t))
			tk := newTask(t, s, taskOpts{})
			c := claimOne(t, s)
			got, err := s.CancelTask(ctx, tk.ID, "operator asked")
			require.NoError(t, err)
			require.Equal(t, lifecycle.Executing, got.Status)
			require.True(t, got.CancelRequested)
			require.Empty(t, lifecycle.AvailableActions(got.Status, got.CancelRequested), "no second cancel button")
			again, err := s.CancelTask(ctx, tk.ID, "twice")
			require.NoError(t, err, "asking again changes nothing")
			require.Equal(t, got.Version, again.Version)

			beat, err := s.Heartbeat(ctx, []store.Token{c.Token()})
			require.NoError(t, err)
			require.Equal(t, []store.CancelRequest{{Token: c.Token(), Reason: "operator asked"}}, beat.CancelRequested)

			// A retryable failure of a task whose cancel was requested is
			// not retried.
			require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Failed, Kind: lifecycle.KindRetryable, Error: "ctx cancelled",
				Retry: &store.Retry{RunAt: b.clock.Now(), Attempt: 2}}))
			got = reload(t, s, tk.ID)
			require.Equal(t, lifecycle.Cancelled, got.Status)
			require.Len(t, instances(t, s, tk.ID), 1)
			requireMirrored(t, s, tk.ID)
		})
		t.Run("FailedToRetryPendingByManualRetry", func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, d.DSN(t))
			tk := newTask(t, s, taskOpts{})
			c := claimOne(t, s)
			require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Failed, Kind: lifecycle.KindNonRetryable, Error: "boom"}))
			got, err := s.RetryTask(ctx, tk.ID)
			require.NoError(t, err)
			require.Equal(t, lifecycle.RetryPending, got.Status)
			require.Nil(t, got.FinishedAt)
			ins := instances(t, s, tk.ID)
			require.Len(t, ins, 2)
			require.Equal(t, 1, ins[1].Attempt, "a manual retry starts the attempts again")
			c2 := claimOne(t, s)
			require.Equal(t, ins[1].ID, c2.Instance.ID)
			requireMirrored(t, s, tk.ID)
		})
		t.Run("RetryPendingToCancelled", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t, d.DSN(t))
			tk := newTask(t, s, taskOpts{})
			c := claimOne(t, s)
			require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Failed, Kind: lifecycle.KindRetryable, Error: "x",
				Retry: &store.Retry{RunAt: b.clock.Now().Add(time.Minute), Attempt: 2}}))
			got, err := s.CancelTask(ctx, tk.ID, "")
			require.NoError(t, err)
			require.Equal(t, lifecycle.Cancelled, got.Status)
			ins := instances(t, s, tk.ID)
			require.Equal(t, []lifecycle.Status{lifecycle.Failed, lifecycle.Cancelled}, []lifecycle.Status{ins[0].Status, ins[1].Status})
			requireMirrored(t, s, tk.ID)
		})
		t.Run("ExecutingToCancelledByWorker", func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, d.DSN(t))
			tk := newTask(t, s, taskOpts{})
			c := claimOne(t, s)
			_, err := s.CancelTask(ctx, tk.ID, "stop")
			require.NoError(t, err)
			require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Cancelled, Kind: lifecycle.KindCancelled, Error: "cancelled while running"}))
			require.Equal(t, lifecycle.Cancelled, reload(t, s, tk.ID).Status)
			requireMirrored(t, s, tk.ID)
		})
	})
}

func TestIllegalTransitions(t *testing.T) {
	t.Parallel()
	ctx := sysCtx
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, b := setup(t, dsn)
		// One task in each state.
		executing := newTask(t, s, taskOpts{})
		success := newTask(t, s, taskOpts{})
		failed := newTask(t, s, taskOpts{})
		retryPending := newTask(t, s, taskOpts{})
		cancelled := newTask(t, s, taskOpts{})
		_, err := s.CancelTask(ctx, cancelled.ID, "")
		require.NoError(t, err)
		claimed, err := s.Claim(ctx, "w1", []string{"noop"}, 5)
		require.NoError(t, err)
		require.Len(t, claimed, 4)
		pending := newTask(t, s, taskOpts{})
		tokens := map[int]store.Token{}
		for _, c := range claimed {
			tokens[c.Task.ID] = c.Token()
		}
		require.NoError(t, finish(t, s, store.Outcome{Token: tokens[success.ID], Status: lifecycle.Success}))
		require.NoError(t, finish(t, s, store.Outcome{Token: tokens[failed.ID], Status: lifecycle.Failed, Kind: lifecycle.KindNonRetryable, Error: "x"}))
		require.NoError(t, finish(t, s, store.Outcome{Token: tokens[retryPending.ID], Status: lifecycle.Failed, Kind: lifecycle.KindRetryable, Error: "x",
			Retry: &store.Retry{RunAt: b.clock.Now().Add(time.Hour), Attempt: 2}}))
		require.Equal(t, lifecycle.Pending, reload(t, s, pending.ID).Status)
		require.Equal(t, lifecycle.Executing, reload(t, s, executing.ID).Status)

		for _, tc := range []struct {
			name string
			task *ent.Task
			from lifecycle.Status
		}{
			{"SuccessCannotBeCancelled", success, lifecycle.Success},
			{"FailedCannotBeCancelled", failed, lifecycle.Failed},
			{"CancelledCannotBeCancelled", cancelled, lifecycle.Cancelled},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := reload(t, s, tc.task.ID)
				_, err := s.CancelTask(ctx, tc.task.ID, "")
				requireTransitionError(t, err, tc.from, lifecycle.Cancelled)
				require.Equal(t, before.Version, reload(t, s, tc.task.ID).Version, "nothing changed")
			})
		}
		for _, tc := range []struct {
			name string
			task *ent.Task
			from lifecycle.Status
		}{
			{"PendingCannotBeRetried", pending, lifecycle.Pending},
			{"ExecutingCannotBeRetried", executing, lifecycle.Executing},
			{"SuccessCannotBeRetried", success, lifecycle.Success},
			{"RetryPendingCannotBeRetriedAgain", retryPending, lifecycle.RetryPending},
			{"CancelledCannotBeRetried", cancelled, lifecycle.Cancelled},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := reload(t, s, tc.task.ID)
				_, err := s.RetryTask(ctx, tc.task.ID)
				requireTransitionError(t, err, tc.from, lifecycle.RetryPending)
				require.Equal(t, before.Version, reload(t, s, tc.task.ID).Version, "nothing changed")
				require.Len(t, instances(t, s, tc.task.ID), len(instances(t, s, before.ID)))
			})
		}
		t.Run("FinishedExecutionCannotFinishAgain", func(t *testing.T) {
			err := finish(t, s, store.Outcome{Token: tokens[success.ID], Status: lifecycle.Failed, Kind: lifecycle.KindRetryable, Error: "late"})
			requireTransitionError(t, err, lifecycle.Success, lifecycle.Failed)
			require.Equal(t, lifecycle.Success, reload(t, s, success.ID).Status)
		})
		t.Run("WaitingInstanceCannotFinish", func(t *testing.T) {
			in := instances(t, s, pending.ID)[0]
			err := finish(t, s, store.Outcome{Token: store.Token{InstanceID: in.ID, Version: in.Version}, Status: lifecycle.Success})
			requireTransitionError(t, err, lifecycle.Pending, lifecycle.Success)
			require.Equal(t, lifecycle.Pending, reload(t, s, pending.ID).Status)
		})
		t.Run("UnknownTaskIsNotFound", func(t *testing.T) {
			_, err := s.CancelTask(ctx, 987654, "")
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = s.RetryTask(ctx, 987654)
			require.ErrorIs(t, err, store.ErrNotFound)
		})
		t.Run("SecondLiveInstanceIsRefusedByTheDatabase", func(t *testing.T) {
			// As if the store itself tried (the status guard lets the
			// store's context through): the unique index still refuses.
			in := instances(t, s, pending.ID)[0]
			_, err := s.Client().TaskInstance.Create().
				SetTaskID(pending.ID).SetInstanceNo(in.InstanceNo + 1).SetAttempt(1).
				SetStatus(lifecycle.RetryPending).SetTaskType("noop").SetPriority(5).SetRunAt(epoch).
				Save(lifecycle.Guarded(ctx))
			require.True(t, ent.IsConstraintError(err), "want a constraint error, got %v", err)
		})
	})
}

// TestStatusGuard tries to change status through ent, around the store:
// the schema's hooks refuse it.
func TestStatusGuard(t *testing.T) {
	t.Parallel()
	ctx := sysCtx
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, _ := setup(t, dsn)
		tk := newTask(t, s, taskOpts{})
		in := instances(t, s, tk.ID)[0]
		c := s.Client()

		_, err := c.Task.UpdateOneID(tk.ID).SetStatus(lifecycle.Success).Save(ctx)
		require.ErrorContains(t, err, "only be changed by package store")
		_, err = c.TaskInstance.UpdateOneID(in.ID).SetStatus(lifecycle.Executing).Save(ctx)
		require.ErrorContains(t, err, "only be changed by package store")
		_, err = c.Task.Update().Where(task.ID(tk.ID)).SetStatus(lifecycle.Cancelled).Save(ctx)
		require.ErrorContains(t, err, "only be changed by package store")
		_, err = c.Task.Create().SetCode("X-1").SetType("noop").SetStatus(lifecycle.Executing).
			SetOwner("a").SetInput([]byte(`{}`)).SetInputHash("h").SetTimeoutSeconds(1).
			SetRetryPolicy("none").SetMaxAttempts(1).SetRunAt(epoch).Save(ctx)
		require.ErrorContains(t, err, "only be changed by package store")

		// Even the store's own context cannot leave the table, nor change
		// status in bulk.
		guarded := lifecycle.Guarded(ctx)
		_, err = c.Task.UpdateOneID(tk.ID).SetStatus(lifecycle.Success).Save(guarded)
		requireTransitionError(t, err, lifecycle.Pending, lifecycle.Success)
		_, err = c.Task.Update().Where(task.ID(tk.ID)).SetStatus(lifecycle.Cancelled).Save(guarded)
		require.ErrorContains(t, err, "bulk")
		_, err = c.Task.Create().SetCode("X-2").SetType("noop").SetStatus(lifecycle.Executing).
			SetOwner("a").SetInput([]byte(`{}`)).SetInputHash("h").SetTimeoutSeconds(1).
			SetRetryPolicy("none").SetMaxAttempts(1).SetRunAt(epoch).Save(guarded)
		require.ErrorIs(t, err, lifecycle.ErrInvalidTransition)

		// Fields other than status stay writable through ent.
		_, err = c.Task.UpdateOneID(tk.ID).SetProgressTotal(7).Save(ctx)
		require.NoError(t, err)
		require.Equal(t, lifecycle.Pending, reload(t, s, tk.ID).Status)
		requireMirrored(t, s, tk.ID)
	})
}

func TestEvents(t *testing.T) {
	t.Parallel()
	ctx := sysCtx
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("EveryCommittedChangeIsPublishedOnceInVersionOrder", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t, d.DSN(t))
			tk := newTask(t, s, taskOpts{})
			c := claimOne(t, s)
			_, err := s.RecordWork(ctx, nil, []store.Progress{{Token: c.Token(), TaskID: tk.ID, Done: 1, Total: 2}})
			require.NoError(t, err)
			_, err = s.CancelTask(ctx, tk.ID, "")
			require.NoError(t, err)
			require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Cancelled, Kind: lifecycle.KindCancelled, Error: "x"}))
			final := reload(t, s, tk.ID)
			require.Equal(t, []int64{1, 2, 3, 4, 5}, b.pub.versions(tk.ID), "create, claim, progress, cancel request, cancelled")
			require.EqualValues(t, 5, final.Version)
		})
		t.Run("RefusedChangesPublishNothing", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t, d.DSN(t))
			tk := newTask(t, s, taskOpts{})
			c := claimOne(t, s)
			require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Success}))
			n := len(b.pub.versions(tk.ID))
			_, err := s.CancelTask(ctx, tk.ID, "")
			require.Error(t, err)
			require.Error(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Success}))
			_, err = s.RetryTask(ctx, tk.ID)
			require.Error(t, err)
			require.Len(t, b.pub.versions(tk.ID), n)
		})
	})
}

func TestFencing(t *testing.T) {
	t.Parallel()
	ctx := sysCtx
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, b := setup(t, dsn)
		tk := newTask(t, s, taskOpts{})
		c := claimOne(t, s)
		// The watchdog declares the worker dead and schedules a retry.
		b.clock.Advance(time.Minute)
		require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Failed, Kind: lifecycle.KindTimeout,
			Error: "heartbeat stale", StaleBefore: b.clock.Now().Add(-30 * time.Second),
			Retry: &store.Retry{RunAt: b.clock.Now(), Attempt: 2}, Log: "watchdog: heartbeat stale"}))

		t.Run("ZombieCannotComplete", func(t *testing.T) {
			err := finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Success})
			requireTransitionError(t, err, lifecycle.Failed, lifecycle.Success)
			require.Equal(t, lifecycle.RetryPending, reload(t, s, tk.ID).Status)
		})
		t.Run("ZombieCannotLogOrReportProgress", func(t *testing.T) {
			rejected, err := s.RecordWork(ctx,
				[]store.LogLine{{Token: c.Token(), TaskID: tk.ID, Level: tasklog.LevelINFO, Message: "still here"}},
				[]store.Progress{{Token: c.Token(), TaskID: tk.ID, Done: 9, Total: 10}})
			require.NoError(t, err)
			require.Equal(t, []store.Token{c.Token()}, rejected)
			n, err := s.Client().TaskLog.Query().Where(tasklog.TaskID(tk.ID), tasklog.Message("still here")).Count(ctx)
			require.NoError(t, err)
			require.Zero(t, n)
			require.Zero(t, reload(t, s, tk.ID).ProgressDone)
		})
		t.Run("ZombieHeartbeatSaysLost", func(t *testing.T) {
			beat, err := s.Heartbeat(ctx, []store.Token{c.Token()})
			require.NoError(t, err)
			require.Equal(t, []store.Token{c.Token()}, beat.Lost)
		})
		t.Run("StaleGuardRefusesAWorkerThatJustBeat", func(t *testing.T) {
			c2 := claimOne(t, s)
			_, err := s.Heartbeat(ctx, []store.Token{c2.Token()})
			require.NoError(t, err)
			err = finish(t, s, store.Outcome{Token: c2.Token(), Status: lifecycle.Failed, Kind: lifecycle.KindTimeout, Error: "stale",
				StaleBefore: b.clock.Now().Add(-30 * time.Second)})
			requireTransitionError(t, err, lifecycle.Executing, lifecycle.Failed)
			require.NoError(t, finish(t, s, store.Outcome{Token: c2.Token(), Status: lifecycle.Success}))
		})
		t.Run("RecoveryIsVisibleInInstancesAndLogs", func(t *testing.T) {
			ins := instances(t, s, tk.ID)
			require.Len(t, ins, 2)
			require.Equal(t, lifecycle.KindTimeout, *ins[0].ErrorKind)
			require.Equal(t, "heartbeat stale", ins[0].LastError)
			logs, err := s.Client().TaskLog.Query().Where(tasklog.TaskID(tk.ID)).All(ctx)
			require.NoError(t, err)
			require.Len(t, logs, 1)
			require.Equal(t, "watchdog: heartbeat stale", logs[0].Message)
			require.Equal(t, ins[0].ID, *logs[0].InstanceID)
		})
	})
}

func TestConcurrency(t *testing.T) {
	t.Parallel()
	ctx := sysCtx
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("TwoHundredParallelRetriesCreateOneInstance", func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, d.DSN(t))
			tk := newTask(t, s, taskOpts{})
			c := claimOne(t, s)
			require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Failed, Kind: lifecycle.KindNonRetryable, Error: "original error"}))
			var ok, refused atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, err := s.RetryTask(ctx, tk.ID)
					switch {
					case err == nil:
						ok.Add(1)
					case errors.Is(err, lifecycle.ErrInvalidTransition):
						refused.Add(1)
					default:
						t.Errorf("unexpected error: %v", err)
					}
				}()
			}
			close(start)
			wg.Wait()
			require.EqualValues(t, 1, ok.Load())
			require.EqualValues(t, 199, refused.Load())
			ins := instances(t, s, tk.ID)
			require.Len(t, ins, 2)
			require.Equal(t, lifecycle.Failed, ins[0].Status)
			require.Equal(t, "original error", ins[0].LastError, "the old instance keeps its error")
			require.Equal(t, lifecycle.RetryPending, ins[1].Status)
		})
		t.Run("ConcurrentClaimsNeverOverlap", func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, d.DSN(t))
			const n = 1000
			batch := make([]store.NewTask, n)
			for i := range batch {
				batch[i] = newTaskParams(taskOpts{})
			}
			createAll(t, s, batch)
			var mu sync.Mutex
			seen := map[int]string{}
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := fmt.Sprintf("w%d", w)
					for {
						cl, err := s.Claim(ctx, id, []string{"noop"}, 25)
						if err != nil {
							t.Errorf("claim: %v", err)
							return
						}
						if len(cl) == 0 {
							return
						}
						mu.Lock()
						for _, c := range cl {
							if prev, dup := seen[c.Instance.ID]; dup {
								t.Errorf("instance %d claimed by %s and %s", c.Instance.ID, prev, id)
							}
							seen[c.Instance.ID] = id
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			require.Len(t, seen, n)
		})
		t.Run("CancelRacingCompletionEndsInOneTerminalState", func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, d.DSN(t))
			for range 40 {
				tk := newTask(t, s, taskOpts{})
				c := claimOne(t, s)
				_, err := s.CancelTask(ctx, tk.ID, "race")
				require.NoError(t, err)
				// The worker saw the request and reports CANCELLED while
				// the watchdog finishes the same cancel: one wins.
				var wg sync.WaitGroup
				errs := make([]error, 2)
				failures := make([]error, 2) // of Finish itself; checked here, not in the goroutines
				outcomes := []store.Outcome{
					{Token: c.Token(), Status: lifecycle.Success},
					{Token: c.Token(), Status: lifecycle.Cancelled, Kind: lifecycle.KindCancelled, Error: "watchdog finished cancel"},
				}
				for i := range outcomes {
					wg.Add(1)
					go func() {
						defer wg.Done()
						e, err := s.Finish(ctx, outcomes[i:i+1])
						if failures[i] = err; err == nil {
							errs[i] = e[0]
						}
					}()
				}
				wg.Wait()
				require.NoError(t, errors.Join(failures...))
				won := 0
				for _, e := range errs {
					if e == nil {
						won++
					} else {
						require.ErrorIs(t, e, lifecycle.ErrInvalidTransition)
					}
				}
				require.Equal(t, 1, won, "exactly one outcome applies: %v", errs)
				got := reload(t, s, tk.ID)
				require.True(t, got.Status.Terminal())
				requireMirrored(t, s, tk.ID)
			}
		})
		t.Run("CancelRacingClaimNeverRunsACancelledTask", func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, d.DSN(t))
			for range 40 {
				tk := newTask(t, s, taskOpts{})
				var wg sync.WaitGroup
				var claimed []store.Claimed
				var cancelled *ent.Task
				var claimErr, cancelErr error
				wg.Add(2)
				go func() {
					defer wg.Done()
					claimed, claimErr = s.Claim(ctx, "w1", []string{"noop"}, 1)
				}()
				go func() {
					defer wg.Done()
					cancelled, cancelErr = s.CancelTask(ctx, tk.ID, "race")
				}()
				wg.Wait()
				require.NoError(t, claimErr)
				require.NoError(t, cancelErr)
				if len(claimed) == 1 {
					require.Equal(t, lifecycle.Executing, cancelled.Status, "cancel after the claim is a request")
					require.True(t, cancelled.CancelRequested)
					require.NoError(t, finish(t, s, store.Outcome{Token: claimed[0].Token(), Status: lifecycle.Cancelled, Kind: lifecycle.KindCancelled}))
				} else {
					require.Equal(t, lifecycle.Cancelled, cancelled.Status)
				}
				require.Equal(t, lifecycle.Cancelled, reload(t, s, tk.ID).Status)
				requireMirrored(t, s, tk.ID)
			}
		})
	})
}

func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	ctx := sysCtx
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, _ := setup(t, dsn)
		first := newTask(t, s, taskOpts{key: "import-42", hash: "A"})
		t.Run("SameKeySamePayloadReturnsTheTask", func(t *testing.T) {
			again, created, err := s.CreateTask(ctx, newTaskParams(taskOpts{key: "import-42", hash: "A"}))
			require.NoError(t, err)
			require.False(t, created)
			require.Equal(t, first.ID, again.ID)
		})
		t.Run("SameKeyOtherPayloadIsAConflict", func(t *testing.T) {
			_, _, err := s.CreateTask(ctx, newTaskParams(taskOpts{key: "import-42", hash: "B"}))
			var ce *store.ConflictError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, first.ID, ce.TaskID)
		})
		t.Run("KeysAreScopedToTheOwner", func(t *testing.T) {
			other, created, err := s.CreateTask(ctx, newTaskParams(taskOpts{key: "import-42", hash: "B", owner: "bob"}))
			require.NoError(t, err)
			require.True(t, created)
			require.NotEqual(t, first.ID, other.ID)
		})
		t.Run("TheHashNotTheShownKeyIsUnique", func(t *testing.T) {
			// Two raw keys may mask to the same shown key.
			shown := "tel-139****5678"
			n1, n2 := newTaskParams(taskOpts{owner: "carol"}), newTaskParams(taskOpts{owner: "carol"})
			h1, h2 := "hash of tel-13912345678", "hash of tel-13900005678"
			n1.IdempotencyKey, n1.IdempotencyHash = &shown, &h1
			n2.IdempotencyKey, n2.IdempotencyHash = &shown, &h2
			a, created, err := s.CreateTask(ctx, n1)
			require.NoError(t, err)
			require.True(t, created)
			b, created, err := s.CreateTask(ctx, n2)
			require.NoError(t, err)
			require.True(t, created)
			require.NotEqual(t, a.ID, b.ID)
			again, created, err := s.CreateTask(ctx, n2)
			require.NoError(t, err)
			require.False(t, created)
			require.Equal(t, b.ID, again.ID)
		})
		t.Run("AKeyWithoutItsHashIsRefused", func(t *testing.T) {
			n := newTaskParams(taskOpts{key: "k"})
			n.IdempotencyHash = nil
			_, _, err := s.CreateTask(ctx, n)
			require.ErrorContains(t, err, "needs its hash")
		})
		t.Run("ConcurrentResubmissionsCreateOneTask", func(t *testing.T) {
			var wg sync.WaitGroup
			ids := make([]int, 50)
			errs := make([]error, len(ids))
			for i := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var tk *ent.Task
					if tk, _, errs[i] = s.CreateTask(ctx, newTaskParams(taskOpts{key: "burst", hash: "C"})); errs[i] == nil {
						ids[i] = tk.ID
					}
				}()
			}
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
			for _, id := range ids {
				require.Equal(t, ids[0], id)
			}
		})
	})
}

// slowRecorder is a Publisher that takes its time with each publication,
// as a broker fanning out to many subscribers may: it widens the window in
// which a later commit could overtake an earlier one on its way out.
type slowRecorder struct {
	mu       sync.Mutex
	versions map[int][]int64
}

func (r *slowRecorder) PublishTasks(cs []events.TaskChange) {
	time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		r.versions[c.Task.ID] = append(r.versions[c.Task.ID], c.Task.Version)
	}
}

func (r *slowRecorder) PublishLogs([]*ent.TaskLog) {}

// TestChangesOfOneTaskArePublishedInCommitOrder has many goroutines commit
// changes of one task (progress of its execution, each a new version) as
// fast as they can, through a slow publisher: every change is published,
// in the order the commits happened (version order), never overtaken by a
// later one committed by another goroutine.
func TestChangesOfOneTaskArePublishedInCommitOrder(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		pub := &slowRecorder{versions: map[int][]int64{}}
		s, err := store.Open(sysCtx, store.Config{DSN: dsn, Publisher: pub})
		require.NoError(t, err)
		access.Install(s.Client())
		t.Cleanup(func() { _ = s.Close() })
		tk := newTask(t, s, taskOpts{})
		c := claimOne(t, s)
		const goroutines, each = 8, 40
		var wg sync.WaitGroup
		errs := make(chan error, goroutines)
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					p := store.Progress{Token: c.Token(), TaskID: tk.ID, Done: int64(g*each + i), Total: goroutines * each}
					if _, err := s.RecordWork(sysCtx, nil, []store.Progress{p}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		pub.mu.Lock()
		defer pub.mu.Unlock()
		got := pub.versions[tk.ID]
		require.Len(t, got, 2+goroutines*each, "created, claimed, and every progress change")
		for i := 1; i < len(got); i++ {
			require.Equal(t, got[i-1]+1, got[i], "published out of commit order: %v", got)
		}
	})
}
