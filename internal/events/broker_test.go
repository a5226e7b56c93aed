package events

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
)

// waitTimeout bounds every wait for something that must happen; it is a
// failure deadline, never a pause.
const waitTimeout = 5 * time.Second

func change(id int, version int64) TaskChange {
	return TaskChange{Kind: Transitioned, Task: &ent.Task{ID: id, Version: version, Status: lifecycle.Executing}}
}

func setup(t *testing.T, cfg Config) *Broker {
	t.Helper()
	b := NewBroker(cfg)
	t.Cleanup(b.Close)
	return b
}

// recv returns the next value of s, failing the test if none comes in time
// or if the subscription ends.
func recv[T any](t *testing.T, s *Subscription[T]) T {
	t.Helper()
	select {
	case v, ok := <-s.C:
		require.True(t, ok, "subscription ended: %v", s.Err())
		return v
	case <-time.After(waitTimeout):
		require.FailNow(t, "nothing received in time")
	}
	panic("unreachable")
}

// pending returns what is buffered in s right now, without waiting.
// Delivery of in-order changes happens inside Publish*, so after a publish
// returns the buffer holds everything it delivered.
func pending[T any](s *Subscription[T]) []T {
	var out []T
	for {
		select {
		case v, ok := <-s.C:
			if !ok {
				return out
			}
			out = append(out, v)
		default:
			return out
		}
	}
}

// ended waits for s to end and returns why.
func ended[T any](t *testing.T, s *Subscription[T]) error {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case _, ok := <-s.C:
			if !ok {
				return s.Err()
			}
		case <-deadline:
			require.FailNow(t, "subscription did not end")
		}
	}
}

func versions(cs []TaskChange) []int64 {
	out := make([]int64, len(cs))
	for i, c := range cs {
		out[i] = c.Task.Version
	}
	return out
}

func TestBroker(t *testing.T) {
	t.Parallel()

	t.Run("FansOutToMatchingSubscribersOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{})
		all := b.SubscribeTasks(nil, 10)
		even := b.SubscribeTasks(func(c TaskChange) bool { return c.Task.ID%2 == 0 }, 10)
		none := b.SubscribeTasks(func(TaskChange) bool { return false }, 10)

		b.PublishTasks([]TaskChange{change(1, 1), change(2, 1), change(3, 1), change(4, 1)})

		ids := func(cs []TaskChange) []int {
			out := make([]int, len(cs))
			for i, c := range cs {
				out[i] = c.Task.ID
			}
			return out
		}
		require.Equal(t, []int{1, 2, 3, 4}, ids(pending(all)))
		require.Equal(t, []int{2, 4}, ids(pending(even)))
		require.Empty(t, pending(none))
		require.Equal(t, int64(4), b.Stats().Published)
	})

	t.Run("ReordersVersionsOfATask", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{HoldBack: time.Minute})
		s := b.SubscribeTasks(nil, 10)

		b.PublishTasks([]TaskChange{change(7, 1)})
		b.PublishTasks([]TaskChange{change(7, 3)})
		require.Equal(t, []int64{1}, versions(pending(s)), "version 3 must wait for 2")
		b.PublishTasks([]TaskChange{change(7, 2)})
		require.Equal(t, []int64{2, 3}, versions(pending(s)))
	})

	t.Run("ReordersWithinOneBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{HoldBack: time.Minute})
		s := b.SubscribeTasks(nil, 10)

		b.PublishTasks([]TaskChange{change(7, 1), change(8, 1), change(7, 3), change(8, 2), change(7, 2)})
		var seven, eight []int64
		for _, c := range pending(s) {
			if c.Task.ID == 7 {
				seven = append(seven, c.Task.Version)
			} else {
				eight = append(eight, c.Task.Version)
			}
		}
		require.Equal(t, []int64{1, 2, 3}, seven)
		require.Equal(t, []int64{1, 2}, eight)
	})

	t.Run("DropsDuplicateAndOlderVersions", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{HoldBack: time.Minute})
		s := b.SubscribeTasks(nil, 10)

		b.PublishTasks([]TaskChange{change(7, 4), change(7, 5)})
		b.PublishTasks([]TaskChange{change(7, 5), change(7, 3), change(7, 4), change(7, 1)})
		b.PublishTasks([]TaskChange{change(7, 6)})
		require.Equal(t, []int64{4, 5, 6}, versions(pending(s)))
	})

	t.Run("ReleasesAGapThatNeverFillsAfterHoldBack", func(t *testing.T) {
		t.Parallel()
		const holdBack = 20 * time.Millisecond
		b := setup(t, Config{HoldBack: holdBack})
		s := b.SubscribeTasks(nil, 10)

		b.PublishTasks([]TaskChange{change(7, 1)})
		require.Equal(t, []int64{1}, versions(pending(s)))

		start := time.Now()
		b.PublishTasks([]TaskChange{change(7, 4), change(7, 3)})
		require.Empty(t, pending(s), "3 and 4 wait for 2")

		require.Equal(t, int64(3), recv(t, s).Task.Version)
		require.GreaterOrEqual(t, time.Since(start), holdBack)
		require.Equal(t, int64(4), recv(t, s).Task.Version)

		// The missing version, come too late, is dropped; the next one flows.
		b.PublishTasks([]TaskChange{change(7, 2), change(7, 5)})
		require.Equal(t, []int64{5}, versions(pending(s)))
	})

	t.Run("DropsSlowSubscriber", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{})
		slow := b.SubscribeTasks(nil, 2)
		fast := b.SubscribeTasks(nil, 100)

		// Publish must return although nobody reads slow: run it with a
		// deadline so that a blocking broker fails instead of hanging.
		done := make(chan struct{})
		go func() {
			defer close(done)
			for id := 1; id <= 10; id++ {
				b.PublishTasks([]TaskChange{change(id, 1)})
			}
		}()
		select {
		case <-done:
		case <-time.After(waitTimeout):
			require.FailNow(t, "PublishTasks blocked on a slow subscriber")
		}

		got := pending(slow)
		require.Len(t, got, 2, "slow keeps what fitted in its buffer")
		require.ErrorIs(t, ended(t, slow), ErrLagged)
		require.Len(t, pending(fast), 10)

		b.PublishTasks([]TaskChange{change(11, 1)})
		require.Len(t, pending(fast), 1, "the others keep receiving")
		st := b.Stats()
		require.Equal(t, 1, st.TaskSubscribers)
		require.Equal(t, int64(1), st.Dropped)
	})

	t.Run("DropsSlowLogSubscriber", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{})
		slow := b.SubscribeLogs(1, 1)
		fast := b.SubscribeLogs(1, 10)

		b.PublishLogs([]*ent.TaskLog{{ID: 1, TaskID: 1}, {ID: 2, TaskID: 1}, {ID: 3, TaskID: 1}})
		require.Len(t, pending(slow), 1)
		require.ErrorIs(t, ended(t, slow), ErrLagged)
		require.Len(t, pending(fast), 3)
		require.Equal(t, 1, b.Stats().LogSubscribers)
	})

	t.Run("LogSubscriptionReceivesOnlyItsTask", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{})
		one := b.SubscribeLogs(1, 10)
		two := b.SubscribeLogs(2, 10)
		tasks := b.SubscribeTasks(nil, 10)

		b.PublishLogs([]*ent.TaskLog{
			{ID: 10, TaskID: 1, Message: "a"},
			{ID: 11, TaskID: 2, Message: "b"},
			{ID: 12, TaskID: 3, Message: "c"},
			{ID: 13, TaskID: 1, Message: "d"},
		})
		msgs := func(ls []*ent.TaskLog) []string {
			out := make([]string, len(ls))
			for i, l := range ls {
				out[i] = l.Message
			}
			return out
		}
		require.Equal(t, []string{"a", "d"}, msgs(pending(one)))
		require.Equal(t, []string{"b"}, msgs(pending(two)))
		require.Empty(t, pending(tasks), "log lines are not task changes")
	})

	t.Run("CloseEndsEverySubscription", func(t *testing.T) {
		t.Parallel()
		b := NewBroker(Config{HoldBack: time.Minute})
		tasks := b.SubscribeTasks(nil, 10)
		logs := b.SubscribeLogs(1, 10)
		// Leave a change held, with its timer running: Close must stop it
		// (the leak check in TestMain would see its goroutine otherwise).
		b.PublishTasks([]TaskChange{change(7, 1), change(7, 3)})

		b.Close()
		b.Close()
		require.Equal(t, []int64{1}, versions(pending(tasks)))
		require.ErrorIs(t, ended(t, tasks), ErrClosed)
		require.ErrorIs(t, ended(t, logs), ErrClosed)

		// After Close: publishing is a no-op, subscribing ends at once.
		b.PublishTasks([]TaskChange{change(7, 2)})
		b.PublishLogs([]*ent.TaskLog{{TaskID: 1}})
		require.ErrorIs(t, ended(t, b.SubscribeTasks(nil, 1)), ErrClosed)
		require.ErrorIs(t, ended(t, b.SubscribeLogs(1, 1)), ErrClosed)
		// Closing a subscription of a closed broker keeps its reason.
		tasks.Close()
		require.ErrorIs(t, tasks.Err(), ErrClosed)
		require.Equal(t, Stats{Published: 1}, b.Stats())
	})

	t.Run("SubscriptionCloseIsIdempotentAndStopsDelivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{})
		s := b.SubscribeTasks(nil, 10)
		l := b.SubscribeLogs(1, 10)
		other := b.SubscribeTasks(nil, 10)

		s.Close()
		s.Close()
		l.Close()
		l.Close()
		require.NoError(t, ended(t, s))
		require.NoError(t, ended(t, l))

		// A send on the closed channel would panic: delivery must skip it.
		b.PublishTasks([]TaskChange{change(1, 1)})
		b.PublishLogs([]*ent.TaskLog{{TaskID: 1}})
		require.Len(t, pending(other), 1)
		st := b.Stats()
		require.Equal(t, 1, st.TaskSubscribers)
		require.Equal(t, 0, st.LogSubscribers)
	})

	t.Run("ConcurrentPublishersKeepVersionOrder", func(t *testing.T) {
		t.Parallel()
		const (
			publishers  = 8
			tasks       = 50
			perTask     = 40 // versions 1..40; publisher p sends v ≡ p (mod 8)
			subscribers = 4
		)
		b := setup(t, Config{HoldBack: 20 * time.Millisecond})
		subs := make([]*Subscription[TaskChange], subscribers)
		for i := range subs {
			subs[i] = b.SubscribeTasks(nil, tasks*perTask)
		}

		// Subscribers come and go while changes flow.
		var churn sync.WaitGroup
		stop := make(chan struct{})
		churn.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := b.SubscribeTasks(func(c TaskChange) bool { return c.Task.ID%3 == 0 }, 4)
				pending(s)
				s.Close()
			}
		})

		var wg sync.WaitGroup
		for p := range publishers {
			wg.Go(func() {
				for v := int64(p + 1); v <= perTask; v += publishers {
					for id := 1; id <= tasks; id++ {
						b.PublishTasks([]TaskChange{change(id, v)})
					}
				}
			})
		}

		results := make([]map[int][]int64, subscribers)
		var readers sync.WaitGroup
		for i, s := range subs {
			readers.Go(func() {
				seen := make(map[int][]int64)
				complete := 0
				deadline := time.After(waitTimeout)
				for complete < tasks {
					select {
					case c, ok := <-s.C:
						if !ok {
							t.Errorf("subscriber %d ended: %v", i, s.Err())
							return
						}
						seen[c.Task.ID] = append(seen[c.Task.ID], c.Task.Version)
						if c.Task.Version == perTask {
							complete++
						}
					case <-deadline:
						t.Errorf("subscriber %d: %d of %d tasks reached their last version", i, complete, tasks)
						return
					}
				}
				results[i] = seen
			})
		}
		wg.Wait()
		readers.Wait()
		close(stop)
		churn.Wait()

		for i, seen := range results {
			require.Len(t, seen, tasks, "subscriber %d", i)
			for id, vs := range seen {
				for j := 1; j < len(vs); j++ {
					require.Less(t, vs[j-1], vs[j], "subscriber %d, task %d: %v", i, id, vs)
				}
				require.Equal(t, int64(perTask), vs[len(vs)-1], "subscriber %d, task %d: the newest version is never dropped", i, id)
			}
		}
	})
}

func TestSequencer(t *testing.T) {
	t.Parallel()

	collect := func(out *[]TaskChange) func(TaskChange) {
		return func(c TaskChange) { *out = append(*out, c) }
	}

	t.Run("ForgetsTasksDeliveredBeforeTheWindow", func(t *testing.T) {
		t.Parallel()
		var q sequencer
		q.init()
		q.maxStates = MaxOrderStatesDefault
		var got []TaskChange
		noTimeout := func(int, uint64) { t.Error("no change should be held") }
		for id := range 1000 {
			q.push(change(id, 1), time.Minute, collect(&got), noTimeout)
		}
		require.Len(t, q.states, 1000)
		// Half of them were delivered long ago; the next push prunes.
		for id := range 500 {
			q.states[id].at = time.Now().Add(-seqGeneration - time.Second)
		}
		q.pruned = time.Now().Add(-seqGeneration)
		q.push(change(5000, 1), time.Minute, collect(&got), noTimeout)
		require.Len(t, q.states, 501)
		// A forgotten task is new again: its next change is delivered.
		q.push(change(1, 7), time.Minute, collect(&got), noTimeout)
		require.Equal(t, int64(7), got[len(got)-1].Task.Version)
	})

	t.Run("RemembersWhatItDeliveredSinceTheReplayFloor", func(t *testing.T) {
		t.Parallel()
		var q sequencer
		q.init()
		q.maxStates = MaxOrderStatesDefault
		floor := time.Now().Add(-time.Hour)
		q.floor = func() time.Time { return floor }
		var got []TaskChange
		noTimeout := func(int, uint64) { t.Error("no change should be held") }
		q.push(change(1, 3), time.Minute, collect(&got), noTimeout)
		q.states[1].at = time.Now().Add(-30 * time.Minute)
		q.pruned = time.Now().Add(-seqGeneration)
		latest := change(1, 3)
		latest.Latest, latest.Relayed = true, true
		q.push(latest, time.Minute, collect(&got), noTimeout)
		require.Equal(t, []int64{3}, versions(got), "re-published after an outage, version 3 is not delivered twice")
		// Once the floor moves past it, it is forgotten.
		floor = time.Now()
		q.pruned = time.Now().Add(-seqGeneration)
		q.push(change(2, 1), time.Minute, collect(&got), noTimeout)
		require.NotContains(t, q.states, 1)
	})

	t.Run("KeepsAtMostMaxStates", func(t *testing.T) {
		t.Parallel()
		var q sequencer
		q.init()
		q.maxStates = 100
		var got []TaskChange
		noTimeout := func(int, uint64) { t.Error("no change should be held") }
		for id := range 1000 {
			q.push(change(id, 1), time.Minute, collect(&got), noTimeout)
			require.LessOrEqual(t, len(q.states), 101)
		}
		require.Contains(t, q.states, 999, "the newest are kept")
	})

	t.Run("NeverForgetsHeldChanges", func(t *testing.T) {
		t.Parallel()
		var q sequencer
		q.init()
		q.maxStates = MaxOrderStatesDefault
		var got []TaskChange
		var fired []uint64
		onTimeout := func(_ int, timer uint64) { fired = append(fired, timer) }
		q.push(change(1, 1), time.Hour, collect(&got), onTimeout)
		q.push(change(1, 3), time.Hour, collect(&got), onTimeout) // held
		t.Cleanup(func() { q.reset() })
		q.states[1].at = time.Now().Add(-time.Hour)
		q.pruned = time.Now().Add(-seqGeneration)
		q.push(change(99, 1), time.Hour, collect(&got), onTimeout)
		q.push(change(1, 2), time.Hour, collect(&got), onTimeout)
		require.Equal(t, []int64{1, 1, 2, 3}, versions(got))
		require.Empty(t, fired)
	})

	t.Run("ALatestChangeReleasesHeldPredecessorsAndSkipsTheGap", func(t *testing.T) {
		t.Parallel()
		var q sequencer
		q.init()
		q.maxStates = MaxOrderStatesDefault
		t.Cleanup(func() { q.reset() })
		var got []TaskChange
		onTimeout := func(int, uint64) {}
		q.push(change(1, 1), time.Hour, collect(&got), onTimeout)
		q.push(change(1, 3), time.Hour, collect(&got), onTimeout) // held, waiting for 2
		q.push(change(1, 9), time.Hour, collect(&got), onTimeout) // held
		latest := change(1, 6)
		latest.Latest = true
		q.push(latest, time.Hour, collect(&got), onTimeout)
		require.Equal(t, []int64{1, 3, 6}, versions(got), "9 still waits for 7")
		q.push(change(1, 7), time.Hour, collect(&got), onTimeout)
		q.push(change(1, 8), time.Hour, collect(&got), onTimeout)
		require.Equal(t, []int64{1, 3, 6, 7, 8, 9}, versions(got))
	})

	t.Run("IgnoresATimerThatFiredForEarlierHeldChanges", func(t *testing.T) {
		t.Parallel()
		// A hold-back timer may fire while a publisher holds the broker's
		// lock and fills the gap; its callback then runs after changes held
		// later by a new timer. It must not release those early.
		var q sequencer
		q.init()
		q.maxStates = MaxOrderStatesDefault
		t.Cleanup(func() { q.reset() })
		var got []TaskChange
		var fired []uint64
		onTimeout := func(_ int, timer uint64) { fired = append(fired, timer) }
		q.push(change(1, 1), time.Hour, collect(&got), onTimeout)
		q.push(change(1, 3), time.Hour, collect(&got), onTimeout) // held, timer A
		stale := q.states[1].timerID
		q.push(change(1, 2), time.Hour, collect(&got), onTimeout) // fills the gap
		q.push(change(1, 5), time.Hour, collect(&got), onTimeout) // held, timer B

		q.release(1, stale, collect(&got)) // timer A's late callback
		require.Equal(t, []int64{1, 2, 3}, versions(got), "5 waits for 4 until its own timer fires")

		q.push(change(1, 4), time.Hour, collect(&got), onTimeout)
		require.Equal(t, []int64{1, 2, 3, 4, 5}, versions(got))
		require.Empty(t, fired)
	})
}

func TestSubscribeTask(t *testing.T) {
	t.Parallel()
	t.Run("ReceivesOnlyItsTaskInOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{})
		one := b.SubscribeTask(1, nil, 8)
		defer one.Close()
		b.PublishTasks([]TaskChange{change(2, 1), change(1, 1), change(1, 3), change(2, 2), change(1, 2)})
		require.Equal(t, int64(1), recv(t, one).Task.Version)
		require.Equal(t, int64(2), recv(t, one).Task.Version)
		require.Equal(t, int64(3), recv(t, one).Task.Version)
		require.Empty(t, pending(one))
		require.Equal(t, 1, b.Stats().TaskSubscribers)
		require.True(t, b.WantsFullChanges())
	})
	t.Run("AppliesItsFilterAndIgnoresPartialChanges", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{})
		s := b.SubscribeTask(1, func(c TaskChange) bool { return c.Kind != Progressed }, 8)
		defer s.Close()
		p := change(1, 1)
		p.Kind = Progressed
		partial := change(1, 2)
		partial.Partial = true
		b.PublishTasks([]TaskChange{p, partial, change(1, 3)})
		require.Equal(t, int64(3), recv(t, s).Task.Version)
		require.Empty(t, pending(s))
	})
	t.Run("EndsOnCloseAndOnLag", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{})
		slow := b.SubscribeTask(1, nil, 1)
		b.PublishTasks([]TaskChange{change(1, 1), change(1, 2)})
		require.ErrorIs(t, ended(t, slow), ErrLagged)
		closed := b.SubscribeTask(1, nil, 8)
		b.Close()
		require.ErrorIs(t, ended(t, closed), ErrClosed)
	})
}

func TestRelayedChangesWaitForLocalPredecessors(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{HoldBack: time.Minute})
	s := b.SubscribeTasks(nil, 8)
	defer s.Close()
	// Another node's claim of a task created here overtakes our own
	// publication of its creation.
	relayed := change(7, 2)
	relayed.Relayed = true
	b.PublishTasks([]TaskChange{relayed})
	require.Empty(t, pending(s), "held: the broker has no history of task 7")
	b.PublishTasks([]TaskChange{change(7, 1)})
	require.Equal(t, int64(1), recv(t, s).Task.Version)
	require.Equal(t, int64(2), recv(t, s).Task.Version)
	// A local change of an unknown task is delivered at once.
	b.PublishTasks([]TaskChange{change(8, 5)})
	require.Equal(t, int64(5), recv(t, s).Task.Version)
}

func TestBacklog(t *testing.T) {
	t.Parallel()
	t.Run("ASlowSubscriberGetsTheLatestVersionOfEveryTaskInOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{Backlog: 1000})
		slow := b.SubscribeTasks(nil, 4)
		defer slow.Close()
		// 500 tasks, 3 versions each, published while nobody reads.
		for v := int64(1); v <= 3; v++ {
			for id := 1; id <= 500; id++ {
				b.PublishTasks([]TaskChange{change(id, v)})
			}
		}
		require.Positive(t, b.Stats().Backlogged)
		last := map[int]int64{}
		for len(last) < 500 || !allAt(last, 3) {
			c := recv(t, slow)
			require.Greater(t, c.Task.Version, last[c.Task.ID], "task %d in version order", c.Task.ID)
			last[c.Task.ID] = c.Task.Version
		}
		require.Empty(t, pending(slow))
		require.Zero(t, b.Stats().Dropped)
		// Drained, it receives directly again.
		b.PublishTasks([]TaskChange{change(1, 4)})
		require.Equal(t, int64(4), recv(t, slow).Task.Version)
	})
	t.Run("ASubscriberPastItsBacklogIsDroppedWithErrLagged", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{Backlog: 10})
		slow := b.SubscribeTasks(nil, 2)
		for id := 1; id <= 20; id++ {
			b.PublishTasks([]TaskChange{change(id, 1)})
		}
		require.ErrorIs(t, ended(t, slow), ErrLagged)
		require.Equal(t, int64(1), b.Stats().Dropped)
	})
	t.Run("LogLinesAreBackloggedWithoutCoalescing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{Backlog: 100})
		s := b.SubscribeLogs(1, 1)
		defer s.Close()
		var lines []*ent.TaskLog
		for i := 1; i <= 50; i++ {
			lines = append(lines, &ent.TaskLog{ID: i, TaskID: 1})
		}
		b.PublishLogs(lines)
		for i := 1; i <= 50; i++ {
			require.Equal(t, i, recv(t, s).ID)
		}
	})
	t.Run("EndingWhileTheBacklogDrainsClosesOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{Backlog: 100})
		s := b.SubscribeTasks(nil, 1)
		for id := 1; id <= 50; id++ {
			b.PublishTasks([]TaskChange{change(id, 1)})
		}
		recv(t, s)
		s.Close()
		require.NoError(t, ended(t, s))
		b.PublishTasks([]TaskChange{change(1, 2)}) // no send on a closed channel
	})
}

func allAt(last map[int]int64, v int64) bool {
	for _, x := range last {
		if x != v {
			return false
		}
	}
	return true
}

func TestResync(t *testing.T) {
	t.Parallel()
	t.Run("ResyncRequiredEndsClientSubscriptionsOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{})
		client := b.SubscribeTasks(nil, 4)
		one := b.SubscribeTask(1, nil, 4)
		logs := b.SubscribeLogs(1, 4)
		pool := b.SubscribeInternal(nil, 4)
		defer pool.Close()
		b.ResyncRequired()
		require.ErrorIs(t, ended(t, client), ErrResyncRequired)
		require.ErrorIs(t, ended(t, one), ErrResyncRequired)
		require.ErrorIs(t, ended(t, logs), ErrResyncRequired)
		b.PublishTasks([]TaskChange{change(5, 1)})
		require.Equal(t, 5, recv(t, pool).Task.ID, "the worker pool keeps listening")
		require.False(t, b.WantsFullChanges())
	})
	t.Run("MissedLogLinesAreNotSentTwice", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{})
		s := b.SubscribeLogs(1, 10)
		defer s.Close()
		require.Equal(t, []int{1}, b.LogTasks())
		b.PublishLogs([]*ent.TaskLog{{ID: 1, TaskID: 1}, {ID: 2, TaskID: 1}})
		b.PublishMissedLogs([]*ent.TaskLog{{ID: 1, TaskID: 1}, {ID: 2, TaskID: 1}, {ID: 3, TaskID: 1}, {ID: 4, TaskID: 2}})
		var ids []int
		for _, l := range pending(s) {
			ids = append(ids, l.ID)
		}
		require.Equal(t, []int{1, 2, 3}, ids)
	})
	t.Run("LatestChangesAreDeliveredAtOnceAndOnlyWhenNew", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{HoldBack: time.Hour})
		s := b.SubscribeTasks(nil, 10)
		defer s.Close()
		b.PublishTasks([]TaskChange{change(1, 1), change(1, 2)})
		dup, newer, unknown := change(1, 2), change(1, 5), change(2, 4)
		for _, c := range []*TaskChange{&dup, &newer, &unknown} {
			c.Latest, c.Relayed = true, true
		}
		b.PublishTasks([]TaskChange{dup, newer, unknown})
		var got []string
		for _, c := range pending(s) {
			got = append(got, fmt.Sprintf("%d:%d", c.Task.ID, c.Task.Version))
		}
		require.Equal(t, []string{"1:1", "1:2", "1:5", "2:4"}, got, "nothing held back, nothing twice")
	})
}
