package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/fakeclock"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/seal"
	"github.com/taskgraph/taskgraph/internal/servicetest"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
	"github.com/taskgraph/taskgraph/internal/telemetry"
	"github.com/taskgraph/taskgraph/worker"
)

// sysCtx acts as the process itself: these tests drive the store as the
// engine's internals do, without a user.
var sysCtx = auth.NewSystemContext(context.Background())

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testBundle struct {
	store    *store.Store
	broker   *events.Broker
	registry *tasktype.Registry
	policies *tasktype.Policies
	sealer   *seal.Sealer
	clock    *fakeclock.Clock // nil: real time
}

// testPolicies: quick to reason about, 10% jitter.
var testPolicies = []tasktype.RetryPolicy{
	{Name: tasktype.DefaultPolicyName, MaxAttempts: 3, Backoff: []time.Duration{5 * time.Second, 30 * time.Second}, ResourceBackoff: []time.Duration{time.Minute}, Jitter: 0.1},
	{Name: "none", MaxAttempts: 1},
}

type setupOpts struct {
	fakeClock bool
	register  func(r *tasktype.Registry)
}

func setup(t *testing.T, dsn string, o setupOpts) *testBundle {
	t.Helper()
	b := &testBundle{broker: events.NewBroker(events.Config{}), registry: tasktype.NewRegistry()}
	cfg := store.Config{DSN: dsn, Publisher: b.broker}
	if o.fakeClock {
		b.clock = fakeclock.New(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
		cfg.Clock = b.clock.Now
	}
	s, err := store.Open(sysCtx, cfg)
	require.NoError(t, err)
	access.Install(s.Client())
	b.store = s
	b.policies, err = tasktype.NewPolicies(testPolicies...)
	require.NoError(t, err)
	b.sealer, err = seal.New(make([]byte, seal.KeySize))
	require.NoError(t, err)
	if o.register != nil {
		o.register(b.registry)
	}
	t.Cleanup(func() {
		b.broker.Close()
		require.NoError(t, s.Close())
	})
	return b
}

func (b *testBundle) pool(t *testing.T, cfg worker.Config, withBroker bool) *worker.Pool {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = 5 * time.Millisecond
	}
	deps := worker.Deps{Store: b.store, Registry: b.registry, Policies: b.policies, Sealer: b.sealer, Masker: mask.Default()}
	if withBroker {
		deps.Broker = b.broker
	}
	p, err := worker.NewPool(cfg, deps)
	require.NoError(t, err)
	require.NoError(t, p.Start(sysCtx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(sysCtx, 30*time.Second)
		defer cancel()
		require.NoError(t, p.Stop(ctx))
	})
	return p
}

func (b *testBundle) create(t *testing.T, typ string, mod func(*store.NewTask)) *ent.Task {
	t.Helper()
	n := store.NewTask{Type: typ, Owner: "alice", Input: json.RawMessage(`{}`), InputHash: "h",
		TimeoutSeconds: 60, RetryPolicy: tasktype.DefaultPolicyName, MaxAttempts: 3}
	if mod != nil {
		mod(&n)
	}
	tk, _, err := b.store.CreateTask(sysCtx, n)
	require.NoError(t, err)
	return tk
}

// watch subscribes to one task's committed changes.
func (b *testBundle) watch(taskID int) *events.Subscription[events.TaskChange] {
	return b.broker.SubscribeTasks(func(c events.TaskChange) bool { return c.Task.ID == taskID }, 1024)
}

// waitFor reads changes until one satisfies ok.
func waitFor(t *testing.T, sub *events.Subscription[events.TaskChange], what string, ok func(*ent.Task) bool) *ent.Task {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case c, open := <-sub.C:
			require.True(t, open, "subscription ended: %v", sub.Err())
			if ok(c.Task) {
				return c.Task
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func waitStatus(t *testing.T, sub *events.Subscription[events.TaskChange], s lifecycle.Status) *ent.Task {
	t.Helper()
	return waitFor(t, sub, string(s), func(tk *ent.Task) bool { return tk.Status == s })
}

// recv waits for a value on ch, failing the test after 30 s.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("waited 30 s for %s", what)
		var zero T
		return zero
	}
}

func (b *testBundle) instances(t *testing.T, taskID int) []*ent.TaskInstance {
	t.Helper()
	in, err := b.store.Client().TaskInstance.Query().Where(taskinstance.TaskID(taskID)).Order(ent.Asc(taskinstance.FieldInstanceNo)).All(sysCtx)
	require.NoError(t, err)
	return in
}

func (b *testBundle) logs(t *testing.T, taskID int) []*ent.TaskLog {
	t.Helper()
	l, err := b.store.Client().TaskLog.Query().Where(tasklog.TaskID(taskID)).Order(ent.Asc(tasklog.FieldID)).All(sysCtx)
	require.NoError(t, err)
	return l
}

func (b *testBundle) noneExecuting(t *testing.T) {
	t.Helper()
	n, err := b.store.Client().TaskInstance.Query().Where(taskinstance.StatusEQ(lifecycle.Executing)).Count(sysCtx)
	require.NoError(t, err)
	require.Zero(t, n, "instances left EXECUTING")
}

type empty struct{}

func TestEightWorkersExecuteEveryTaskExactlyOnce(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		var runs sync.Map // task id -> *atomic.Int32
		b := setup(t, dsn, setupOpts{register: func(r *tasktype.Registry) {
			tasktype.Register(r, "count", func(ctx context.Context, job *tasktype.Job, _ empty) error {
				n, _ := runs.LoadOrStore(job.Task.ID, new(atomic.Int32))
				n.(*atomic.Int32).Add(1)
				return nil
			})
		}})
		// 32 handlers in 8 pools competing for 400 tasks claim in
		// overlapping batches all along; 1,000 took 40 s on SQLite under
		// -race and 5,000 minutes, and proved nothing more.
		const total = 400
		done := b.broker.SubscribeTasks(func(c events.TaskChange) bool { return c.Task.Status.Terminal() }, total+100)
		defer done.Close()
		for w := range 8 {
			b.pool(t, worker.Config{ID: fmt.Sprintf("worker-%d", w), Concurrency: 4}, true)
		}
		batch := make([]store.NewTask, total)
		for i := range batch {
			batch[i] = store.NewTask{Type: "count", Owner: "alice", Input: json.RawMessage(`{}`), InputHash: "h", TimeoutSeconds: 60, RetryPolicy: "none", MaxAttempts: 1}
		}
		_, err := b.store.CreateTasks(sysCtx, batch)
		require.NoError(t, err)
		timeout := time.After(3 * time.Minute)
		for finished := 0; finished < total; {
			select {
			case c, ok := <-done.C:
				require.True(t, ok, "subscription ended: %v", done.Err())
				require.Equal(t, lifecycle.Success, c.Task.Status)
				finished++
			case <-timeout:
				t.Fatalf("timed out")
			}
		}
		executed := 0
		runs.Range(func(k, v any) bool {
			executed++
			require.EqualValues(t, 1, v.(*atomic.Int32).Load(), "task %v executions", k)
			return true
		})
		require.Equal(t, total, executed)
		ctx := sysCtx
		nInst, err := b.store.Client().TaskInstance.Query().Where(taskinstance.StatusEQ(lifecycle.Success)).Count(ctx)
		require.NoError(t, err)
		require.Equal(t, total, nInst, "one SUCCESS instance per task")
		workers, err := b.store.Client().TaskInstance.Query().GroupBy(taskinstance.FieldWorkerID).Strings(ctx)
		require.NoError(t, err)
		require.Greater(t, len(workers), 1, "work was shared")
	})
}

func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		failWith := func(kind string) func(context.Context, *tasktype.Job, empty) error {
			return func(context.Context, *tasktype.Job, empty) error {
				err := errors.New(kind + " trouble")
				switch kind {
				case "retryable":
					return tasktype.Retryable(err)
				case "final":
					return tasktype.NonRetryable(err)
				case "resource":
					return tasktype.Resource(err)
				case "throttled":
					// A server said 429, Retry-After: 2.
					return tasktype.RetryAfter(tasktype.Resource(err), 2*time.Second)
				}
				return err
			}
		}
		register := func(r *tasktype.Registry) {
			for _, k := range []string{"retryable", "final", "resource", "throttled"} {
				tasktype.Register(r, k, failWith(k))
			}
		}

		t.Run("RetryableErrorFollowsTheBackoffThenFails", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), setupOpts{fakeClock: true, register: register})
			p := b.pool(t, worker.Config{Concurrency: 2}, true)
			tk := b.create(t, "retryable", nil)
			sub := b.watch(tk.ID)
			defer sub.Close()
			backoffs := []time.Duration{5 * time.Second, 30 * time.Second}
			for attempt := 1; attempt <= 2; attempt++ {
				waitStatus(t, sub, lifecycle.RetryPending)
				ins := b.instances(t, tk.ID)
				require.Len(t, ins, attempt+1)
				failed, next := ins[attempt-1], ins[attempt]
				require.Equal(t, lifecycle.Failed, failed.Status)
				require.Equal(t, lifecycle.KindRetryable, *failed.ErrorKind)
				require.Equal(t, attempt+1, next.Attempt)
				delay := next.RunAt.Sub(*failed.FinishedAt)
				lo, hi := time.Duration(float64(backoffs[attempt-1])*0.9), time.Duration(float64(backoffs[attempt-1])*1.1)
				require.True(t, delay >= lo && delay <= hi, "attempt %d: delay %s not within %s..%s", attempt, delay, lo, hi)
				b.clock.Advance(hi + time.Second)
				p.Wake()
			}
			final := waitStatus(t, sub, lifecycle.Failed)
			require.Equal(t, "retryable trouble", final.LastError)
			ins := b.instances(t, tk.ID)
			require.Len(t, ins, 3, "max attempts")
			logs := b.logs(t, tk.ID)
			require.Len(t, logs, 3)
			require.Contains(t, logs[2].Message, "no attempts left")
		})
		t.Run("NonRetryableErrorFailsAtOnce", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), setupOpts{fakeClock: true, register: register})
			b.pool(t, worker.Config{}, true)
			tk := b.create(t, "final", nil)
			sub := b.watch(tk.ID)
			defer sub.Close()
			waitStatus(t, sub, lifecycle.Failed)
			ins := b.instances(t, tk.ID)
			require.Len(t, ins, 1)
			require.Equal(t, lifecycle.KindNonRetryable, *ins[0].ErrorKind)
		})
		t.Run("ResourceErrorWaitsLonger", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), setupOpts{fakeClock: true, register: register})
			b.pool(t, worker.Config{}, true)
			tk := b.create(t, "resource", nil)
			sub := b.watch(tk.ID)
			defer sub.Close()
			waitStatus(t, sub, lifecycle.RetryPending)
			ins := b.instances(t, tk.ID)
			require.Equal(t, lifecycle.KindResource, *ins[0].ErrorKind)
			delay := ins[1].RunAt.Sub(*ins[0].FinishedAt)
			require.GreaterOrEqual(t, delay, 54*time.Second, "resource backoff, not the 5 s one")
		})
		t.Run("RetryAfterReplacesTheBackoff", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), setupOpts{fakeClock: true, register: register})
			b.pool(t, worker.Config{}, true)
			tk := b.create(t, "throttled", nil)
			sub := b.watch(tk.ID)
			defer sub.Close()
			waitStatus(t, sub, lifecycle.RetryPending)
			ins := b.instances(t, tk.ID)
			require.Equal(t, lifecycle.KindResource, *ins[0].ErrorKind)
			delay := ins[1].RunAt.Sub(*ins[0].FinishedAt)
			require.True(t, delay >= 2*time.Second && delay < 5*time.Second, "the server's 2 s, not the resource backoff: %s", delay)
		})
	})
}

func TestExecution(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("PanicIsAnErrorNotACrash", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), setupOpts{register: func(r *tasktype.Registry) {
				tasktype.Register(r, "panics", func(context.Context, *tasktype.Job, empty) error { panic("nil map somewhere") })
				tasktype.Register(r, "fine", func(context.Context, *tasktype.Job, empty) error { return nil })
			}})
			b.pool(t, worker.Config{}, true)
			bad := b.create(t, "panics", func(n *store.NewTask) { n.RetryPolicy, n.MaxAttempts = "none", 1 })
			sub := b.watch(bad.ID)
			defer sub.Close()
			failed := waitStatus(t, sub, lifecycle.Failed)
			require.Contains(t, failed.LastError, "panic: nil map somewhere")
			good := b.create(t, "fine", nil)
			sub2 := b.watch(good.ID)
			defer sub2.Close()
			waitStatus(t, sub2, lifecycle.Success)
		})
		t.Run("CancelStopsARunningHandlerThroughItsContext", func(t *testing.T) {
			t.Parallel()
			for _, viaBroker := range []bool{true, false} {
				started := make(chan struct{}, 1)
				b := setup(t, d.DSN(t), setupOpts{register: func(r *tasktype.Registry) {
					tasktype.Register(r, "blocks", func(ctx context.Context, _ *tasktype.Job, _ empty) error {
						started <- struct{}{}
						<-ctx.Done()
						return ctx.Err()
					})
				}})
				cfg := worker.Config{HeartbeatInterval: time.Hour}
				if !viaBroker {
					cfg.HeartbeatInterval = 20 * time.Millisecond // the request arrives with a heartbeat
				}
				b.pool(t, cfg, viaBroker)
				tk := b.create(t, "blocks", nil)
				sub := b.watch(tk.ID)
				recv(t, started, "the handler to start")
				_, err := b.store.CancelTask(sysCtx, tk.ID, "no longer needed")
				require.NoError(t, err)
				got := waitStatus(t, sub, lifecycle.Cancelled)
				sub.Close()
				require.Contains(t, got.LastError, "no longer needed")
				ins := b.instances(t, tk.ID)
				require.Len(t, ins, 1, "a cancelled task is not retried")
				require.Equal(t, lifecycle.KindCancelled, *ins[0].ErrorKind)
			}
		})
		t.Run("TimeoutFailsTheExecution", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), setupOpts{register: func(r *tasktype.Registry) {
				tasktype.Register(r, "slow", func(ctx context.Context, _ *tasktype.Job, _ empty) error {
					<-ctx.Done()
					return ctx.Err()
				})
			}})
			b.pool(t, worker.Config{}, true)
			tk := b.create(t, "slow", func(n *store.NewTask) { n.TimeoutSeconds, n.RetryPolicy, n.MaxAttempts = 1, "none", 1 })
			sub := b.watch(tk.ID)
			defer sub.Close()
			got := waitStatus(t, sub, lifecycle.Failed)
			require.Contains(t, got.LastError, "timed out after 1s")
			require.Equal(t, lifecycle.KindTimeout, *b.instances(t, tk.ID)[0].ErrorKind)
		})
		t.Run("ProgressLogsAndResultAreRecorded", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), setupOpts{register: func(r *tasktype.Registry) {
				tasktype.Register(r, "steps", func(ctx context.Context, job *tasktype.Job, _ empty) error {
					for i := int64(1); i <= 3; i++ {
						job.Info(fmt.Sprintf("step %d", i), "phone", "13812345678")
						job.Progress(i, 3)
					}
					return job.SetResult(map[string]any{"steps": 3, "contact": "alice@example.com"})
				})
			}})
			b.pool(t, worker.Config{}, true)
			tk := b.create(t, "steps", nil)
			sub := b.watch(tk.ID)
			defer sub.Close()
			got := waitStatus(t, sub, lifecycle.Success)
			require.JSONEq(t, `{"steps":3,"contact":"a***@example.com"}`, string(got.Result), "results are masked")
			final, err := b.store.TaskByID(sysCtx, tk.ID)
			require.NoError(t, err)
			require.EqualValues(t, 3, final.ProgressDone)
			require.EqualValues(t, 3, final.ProgressTotal)
			logs := b.logs(t, tk.ID)
			require.Len(t, logs, 3)
			for i, l := range logs {
				require.Equal(t, fmt.Sprintf("step %d", i+1), l.Message)
				require.Equal(t, "138****5678", l.Fields["phone"], "log fields are masked")
			}
		})
		t.Run("SealedInputReachesTheHandlerUnmasked", func(t *testing.T) {
			t.Parallel()
			got := make(chan string, 1)
			b := setup(t, d.DSN(t), setupOpts{register: func(r *tasktype.Registry) {
				type in struct {
					Phone string `json:"phone"`
				}
				tasktype.Register(r, "sms", func(ctx context.Context, job *tasktype.Job, v in) error {
					got <- v.Phone
					return nil
				})
			}})
			b.pool(t, worker.Config{}, true)
			b.create(t, "sms", func(n *store.NewTask) {
				n.Input = json.RawMessage(`{"phone":"138****5678"}`)
				n.InputSealed = b.sealer.Seal([]byte(`{"phone":"13812345678"}`))
			})
			select {
			case p := <-got:
				require.Equal(t, "13812345678", p)
			case <-time.After(20 * time.Second):
				t.Fatal("handler not run")
			}
		})
	})
}

func TestShutdown(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("RunningHandlersFinishWithinTheGrace", func(t *testing.T) {
			t.Parallel()
			started := make(chan struct{}, 1)
			b := setup(t, d.DSN(t), setupOpts{register: func(r *tasktype.Registry) {
				tasktype.Register(r, "short", func(ctx context.Context, _ *tasktype.Job, _ empty) error {
					started <- struct{}{}
					time.Sleep(300 * time.Millisecond) // the work itself
					return nil
				})
			}})
			p, err := worker.NewPool(worker.Config{ShutdownGrace: 10 * time.Second, PollInterval: 10 * time.Millisecond},
				worker.Deps{Store: b.store, Registry: b.registry, Policies: b.policies, Broker: b.broker, Sealer: b.sealer, Masker: mask.Default()})
			require.NoError(t, err)
			require.NoError(t, p.Start(sysCtx))
			tk := b.create(t, "short", nil)
			recv(t, started, "the handler to start")
			require.NoError(t, p.Stop(sysCtx))
			got, err := b.store.TaskByID(sysCtx, tk.ID)
			require.NoError(t, err)
			require.Equal(t, lifecycle.Success, got.Status)
			b.noneExecuting(t)
		})
		t.Run("HandlersStillRunningAreInterruptedAndReleased", func(t *testing.T) {
			t.Parallel()
			started := make(chan struct{}, 2)
			release := make(chan struct{})
			b := setup(t, d.DSN(t), setupOpts{register: func(r *tasktype.Registry) {
				tasktype.Register(r, "cooperative", func(ctx context.Context, _ *tasktype.Job, _ empty) error {
					started <- struct{}{}
					<-ctx.Done()
					return ctx.Err()
				})
				tasktype.Register(r, "stubborn", func(ctx context.Context, _ *tasktype.Job, _ empty) error {
					started <- struct{}{}
					<-release // ignores its context
					return nil
				})
			}})
			defer close(release)
			p, err := worker.NewPool(worker.Config{ShutdownGrace: 100 * time.Millisecond, PollInterval: 10 * time.Millisecond},
				worker.Deps{Store: b.store, Registry: b.registry, Policies: b.policies, Broker: b.broker, Sealer: b.sealer, Masker: mask.Default()})
			require.NoError(t, err)
			require.NoError(t, p.Start(sysCtx))
			coop := b.create(t, "cooperative", nil)
			stub := b.create(t, "stubborn", nil)
			recv(t, started, "the handler to start")
			recv(t, started, "the second handler to start")
			require.NoError(t, p.Stop(sysCtx))
			b.noneExecuting(t)
			for _, tk := range []*ent.Task{coop, stub} {
				got, err := b.store.TaskByID(sysCtx, tk.ID)
				require.NoError(t, err)
				require.Equal(t, lifecycle.RetryPending, got.Status)
				ins := b.instances(t, tk.ID)
				require.Len(t, ins, 2)
				require.Equal(t, lifecycle.KindInterrupted, *ins[0].ErrorKind)
				require.Equal(t, ins[0].Attempt, ins[1].Attempt, "an interruption does not use up an attempt")
				require.False(t, ins[1].RunAt.After(time.Now()), "released to run again at once")
			}
		})
	})
}

func TestWatchdog(t *testing.T) {
	t.Parallel()
	ctx := sysCtx
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		watchdog := func(t *testing.T, b *testBundle, cfg worker.WatchdogConfig) *worker.Watchdog {
			w, err := worker.NewWatchdog(cfg, b.store, b.policies, mask.Default())
			require.NoError(t, err)
			return w
		}
		claim := func(t *testing.T, b *testBundle, typ string) store.Claimed {
			cl, err := b.store.Claim(ctx, "dead-worker", []string{typ}, 1)
			require.NoError(t, err)
			require.Len(t, cl, 1)
			return cl[0]
		}
		t.Run("RecoversAnExecutionWhoseWorkerDied", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), setupOpts{fakeClock: true})
			tk := b.create(t, "noop", nil)
			claim(t, b, "noop")
			w := watchdog(t, b, worker.WatchdogConfig{HeartbeatTimeout: 30 * time.Second})
			res, err := w.Pass(ctx)
			require.NoError(t, err)
			require.Zero(t, res.StaleHeartbeats, "a fresh execution is left alone")
			b.clock.Advance(31 * time.Second)
			res, err = w.Pass(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.StaleHeartbeats)
			got, err := b.store.TaskByID(ctx, tk.ID)
			require.NoError(t, err)
			require.Equal(t, lifecycle.RetryPending, got.Status)
			ins := b.instances(t, tk.ID)
			require.Equal(t, lifecycle.KindTimeout, *ins[0].ErrorKind)
			require.Contains(t, ins[0].LastError, "dead-worker stopped sending heartbeats")
			logs := b.logs(t, tk.ID)
			require.Len(t, logs, 1)
			require.Contains(t, logs[0].Message, "watchdog")
		})
		t.Run("TracesARecoveryInTheTraceThatCreatedTheTask", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), setupOpts{fakeClock: true})
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			creator := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			tk := b.create(t, "noop", func(n *store.NewTask) { n.TraceParent = creator })
			claim(t, b, "noop")
			w := watchdog(t, b, worker.WatchdogConfig{HeartbeatTimeout: 30 * time.Second, Tracer: telemetry.Tracer(tp)})
			b.clock.Advance(31 * time.Second)
			res, err := w.Pass(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.StaleHeartbeats)
			spans := rec.Ended()
			require.Len(t, spans, 1)
			s := spans[0]
			require.Equal(t, telemetry.SpanRecover, s.Name())
			require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", s.SpanContext().TraceID().String())
			require.Equal(t, "00f067aa0ba902b7", s.Parent().SpanID().String(), "a child of the span that created the task")
			got := map[string]string{}
			for _, kv := range s.Attributes() {
				got[string(kv.Key)] = kv.Value.Emit()
			}
			require.Equal(t, strconv.Itoa(tk.ID), got[string(telemetry.AttrTaskID)])
			require.Equal(t, "stale_heartbeat", got[string(telemetry.AttrAction)])
			require.Equal(t, "TIMEOUT", got[string(telemetry.AttrErrorKind)])
		})
		t.Run("LeavesWhatItsOwnNodesPoolHoldsToThePool", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), setupOpts{fakeClock: true})
			tk := b.create(t, "noop", nil)
			c := claim(t, b, "noop")
			held := func(id int) bool { return id == c.Instance.ID }
			w := watchdog(t, b, worker.WatchdogConfig{HeartbeatTimeout: 30 * time.Second, Holds: held})
			b.clock.Advance(31 * time.Second)
			res, err := w.Pass(ctx)
			require.NoError(t, err)
			require.Zero(t, res.StaleHeartbeats, "its worker is this node: alive, whatever its heartbeats say")
			got, err := b.store.TaskByID(ctx, tk.ID)
			require.NoError(t, err)
			require.Equal(t, lifecycle.Executing, got.Status)
			// Its timeout still ends it.
			b.clock.Advance(time.Minute)
			res, err = w.Pass(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.TimedOut)
		})
		t.Run("FailsWhenNoAttemptIsLeft", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), setupOpts{fakeClock: true})
			tk := b.create(t, "noop", func(n *store.NewTask) { n.MaxAttempts = 1 })
			claim(t, b, "noop")
			b.clock.Advance(time.Minute)
			_, err := watchdog(t, b, worker.WatchdogConfig{}).Pass(ctx)
			require.NoError(t, err)
			got, err := b.store.TaskByID(ctx, tk.ID)
			require.NoError(t, err)
			require.Equal(t, lifecycle.Failed, got.Status)
		})
		t.Run("TimesOutAnExecutionThatOverranItsTimeout", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), setupOpts{fakeClock: true})
			tk := b.create(t, "noop", func(n *store.NewTask) { n.TimeoutSeconds = 10 })
			c := claim(t, b, "noop")
			b.clock.Advance(16 * time.Second)
			_, err := b.store.Heartbeat(ctx, []store.Token{c.Token()}) // alive, but overrunning
			require.NoError(t, err)
			res, err := watchdog(t, b, worker.WatchdogConfig{TimeoutGrace: 5 * time.Second}).Pass(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.TimedOut)
			ins := b.instances(t, tk.ID)
			require.Contains(t, ins[0].LastError, "exceeded the timeout of 10s")
		})
		t.Run("FinishesACancelWhoseWorkerIsGone", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), setupOpts{fakeClock: true})
			tk := b.create(t, "noop", nil)
			claim(t, b, "noop")
			_, err := b.store.CancelTask(ctx, tk.ID, "stop it")
			require.NoError(t, err)
			b.clock.Advance(time.Minute)
			res, err := watchdog(t, b, worker.WatchdogConfig{}).Pass(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.CancelsFinished)
			got, err := b.store.TaskByID(ctx, tk.ID)
			require.NoError(t, err)
			require.Equal(t, lifecycle.Cancelled, got.Status)
		})
		t.Run("DoesNothingWhileAnotherLeads", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), setupOpts{fakeClock: true})
			tk := b.create(t, "noop", nil)
			claim(t, b, "noop")
			b.clock.Advance(time.Minute)
			w := watchdog(t, b, worker.WatchdogConfig{Leader: func(context.Context) (bool, error) { return false, nil }})
			require.False(t, w.RunOnce(ctx), "the loop skips the pass")
			got, err := b.store.TaskByID(ctx, tk.ID)
			require.NoError(t, err)
			require.Equal(t, lifecycle.Executing, got.Status, "the stale execution is left to the leader")
		})
		t.Run("StartStopStress", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d.DSN(t), setupOpts{})
			w := watchdog(t, b, worker.WatchdogConfig{Interval: time.Millisecond})
			servicetest.StressStartStop(t, w)
			require.False(t, w.Running())
		})
		t.Run("AZombieWorkerCannotCompleteWhatWasRecovered", func(t *testing.T) {
			t.Parallel()
			started := make(chan struct{}, 1)
			release := make(chan struct{})
			b := setup(t, d.DSN(t), setupOpts{fakeClock: true, register: func(r *tasktype.Registry) {
				tasktype.Register(r, "hangs", func(ctx context.Context, job *tasktype.Job, _ empty) error {
					started <- struct{}{}
					<-release // stuck, ignoring everything, then "succeeds"
					job.Info("finished late")
					return nil
				})
			}})
			p, err := worker.NewPool(worker.Config{HeartbeatInterval: time.Hour, PollInterval: 10 * time.Millisecond, ShutdownGrace: 10 * time.Second},
				worker.Deps{Store: b.store, Registry: b.registry, Policies: b.policies, Sealer: b.sealer, Masker: mask.Default()})
			require.NoError(t, err)
			require.NoError(t, p.Start(ctx))
			tk := b.create(t, "hangs", nil)
			recv(t, started, "the handler to start")
			b.clock.Advance(31 * time.Second)
			res, err := watchdog(t, b, worker.WatchdogConfig{}).Pass(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.StaleHeartbeats)
			close(release)
			require.NoError(t, p.Stop(ctx)) // writes whatever the zombie had
			got, err := b.store.TaskByID(ctx, tk.ID)
			require.NoError(t, err)
			require.Equal(t, lifecycle.RetryPending, got.Status, "the zombie's success was refused")
			ins := b.instances(t, tk.ID)
			require.Equal(t, lifecycle.Failed, ins[0].Status)
			require.Equal(t, lifecycle.KindTimeout, *ins[0].ErrorKind)
			for _, l := range b.logs(t, tk.ID) {
				require.NotEqual(t, "finished late", l.Message, "the zombie's log line was refused")
			}
		})
	})
}

// eventually polls cond until it holds, for at most 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStalledExecutions(t *testing.T) {
	t.Parallel()
	ctx := sysCtx
	const stallAfter = time.Minute
	const tick = time.Second // the watchdog's interval
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		instance := func(t *testing.T, b *testBundle, taskID int) *ent.TaskInstance {
			ins := b.instances(t, taskID)
			return ins[len(ins)-1]
		}
		// beatAfter waits for a heartbeat stamped at or after the clock's
		// time: the watchdog must see the execution alive.
		beatAfter := func(t *testing.T, b *testBundle, taskID int) {
			now := b.clock.Now()
			eventually(t, "a heartbeat", func() bool {
				in := instance(t, b, taskID)
				return in.HeartbeatAt != nil && !in.HeartbeatAt.Before(now)
			})
		}
		t.Run("FlaggedWithinStallAfterAndUnflaggedWhenItMoves", func(t *testing.T) {
			t.Parallel()
			step := make(chan struct{})
			moved := make(chan struct{}, 2)
			b := setup(t, d.DSN(t), setupOpts{fakeClock: true, register: func(r *tasktype.Registry) {
				tasktype.Register(r, "hangs", func(ctx context.Context, job *tasktype.Job, _ empty) error {
					job.Progress(1, 3)
					moved <- struct{}{}
					select { // heartbeats go on; progress does not
					case <-step:
					case <-ctx.Done():
						return ctx.Err()
					}
					job.Info("unstuck")
					moved <- struct{}{}
					<-ctx.Done()
					return ctx.Err()
				}, tasktype.WithStallDetection(stallAfter, tasktype.StallFlag))
			}})
			b.pool(t, worker.Config{HeartbeatInterval: 10 * time.Millisecond}, true)
			w, err := worker.NewWatchdog(worker.WatchdogConfig{Interval: tick, StallAfter: func(typ string) time.Duration {
				if tt, ok := b.registry.Lookup(typ); ok {
					return tt.StallAfter
				}
				return 0
			}}, b.store, b.policies, mask.Default())
			require.NoError(t, err)
			tk := b.create(t, "hangs", nil)
			sub := b.broker.SubscribeTasks(func(c events.TaskChange) bool { return c.Task.ID == tk.ID && c.Kind == events.StallChanged }, 16)
			defer sub.Close()
			receive(t, moved, "the handler to move")
			movedAt := b.clock.Now()
			eventually(t, "progress_at carried by a heartbeat", func() bool {
				in := instance(t, b, tk.ID)
				return in.ProgressAt != nil && in.ProgressAt.Equal(movedAt)
			})

			// One tick before stallAfter has passed: not stalled.
			b.clock.Advance(stallAfter - tick)
			beatAfter(t, b, tk.ID)
			res, err := w.Pass(ctx)
			require.NoError(t, err)
			require.Zero(t, res.Stalled)
			require.Zero(t, res.StaleHeartbeats, "its heartbeats go on")
			require.Nil(t, instance(t, b, tk.ID).StalledAt)

			// The next pass, at stallAfter: flagged.
			b.clock.Advance(tick)
			beatAfter(t, b, tk.ID)
			res, err = w.Pass(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Stalled)
			in := instance(t, b, tk.ID)
			require.NotNil(t, in.StalledAt)
			require.Equal(t, lifecycle.Executing, in.Status, "flag only: it runs on")
			select {
			case c := <-sub.C:
				require.Equal(t, lifecycle.Executing, c.Task.Status)
			case <-time.After(20 * time.Second):
				t.Fatal("the stall was not published")
			}
			res, err = w.Pass(ctx)
			require.NoError(t, err)
			require.Zero(t, res.Stalled, "flagged once")

			// It moves: the next heartbeat carries it, the next pass clears it.
			b.clock.Advance(tick)
			close(step)
			receive(t, moved, "the handler to move")
			movedAgain := b.clock.Now()
			eventually(t, "the move carried by a heartbeat", func() bool {
				in := instance(t, b, tk.ID)
				return in.ProgressAt != nil && !in.ProgressAt.Before(movedAgain)
			})
			res, err = w.Pass(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Unstalled)
			require.Nil(t, instance(t, b, tk.ID).StalledAt)
			select {
			case <-sub.C:
			case <-time.After(20 * time.Second):
				t.Fatal("the un-flag was not published")
			}
			var msgs []string
			for _, l := range b.logs(t, tk.ID) {
				msgs = append(msgs, l.Message)
			}
			require.Contains(t, fmt.Sprint(msgs), "watchdog: stalled")
			require.Contains(t, fmt.Sprint(msgs), "no longer stalled")
		})
		t.Run("CancelActionStopsItAsStalledAndTheRetryRunsAfterIt", func(t *testing.T) {
			t.Parallel()
			var running, most atomic.Int32
			started := make(chan int, 4)
			b := setup(t, d.DSN(t), setupOpts{fakeClock: true, register: func(r *tasktype.Registry) {
				tasktype.Register(r, "hangs", func(ctx context.Context, job *tasktype.Job, _ empty) error {
					n := running.Add(1)
					defer running.Add(-1)
					for {
						m := most.Load()
						if n <= m || most.CompareAndSwap(m, n) {
							break
						}
					}
					started <- job.Attempt()
					<-ctx.Done() // hung, but it honours its context
					time.Sleep(50 * time.Millisecond)
					return ctx.Err()
				}, tasktype.WithStallDetection(stallAfter, tasktype.StallCancel))
			}})
			p := b.pool(t, worker.Config{HeartbeatInterval: 10 * time.Millisecond}, true)
			w, err := worker.NewWatchdog(worker.WatchdogConfig{StallAfter: func(string) time.Duration { return time.Hour }}, b.store, b.policies, mask.Default())
			require.NoError(t, err)
			tk := b.create(t, "hangs", nil)
			// The task's own stallAfter replaces its type's (an hour).
			require.NoError(t, b.store.SetStallOverride(ctx, tk.ID, stallAfter))
			sub := b.watch(tk.ID)
			defer sub.Close()
			require.Equal(t, 1, receive(t, started, "the first attempt to start"))
			b.clock.Advance(stallAfter)
			beatAfter(t, b, tk.ID)
			res, err := w.Pass(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Stalled)
			waitStatus(t, sub, lifecycle.RetryPending)
			ins := b.instances(t, tk.ID)
			require.Len(t, ins, 2)
			require.Equal(t, lifecycle.Failed, ins[0].Status)
			require.Equal(t, lifecycle.KindStalled, *ins[0].ErrorKind)
			require.Contains(t, ins[0].LastError, "stalled: no progress")
			require.Equal(t, 2, ins[1].Attempt, "a stall uses up an attempt")
			b.clock.Advance(time.Minute) // past the backoff
			p.Wake()
			require.Equal(t, 2, receive(t, started, "the retry to start"))
			require.EqualValues(t, 1, most.Load(), "never two executions at once")
		})
	})
}

// receive takes the next value from ch, failing the test when none comes
// within 20 s.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
