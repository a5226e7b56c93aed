package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// TestABatchThatTheDatabaseRefusesFailsOnlyItsBadOutcome gives the flusher
// a batch in which one outcome is refused by the database for good (a
// result PostgreSQL cannot read as JSON): it is split until that outcome is
// alone, the others are written, and nothing is retried for ever.
func TestABatchThatTheDatabaseRefusesFailsOnlyItsBadOutcome(t *testing.T) {
	t.Parallel()
	ctx := auth.NewSystemContext(context.Background())
	s, err := store.Open(ctx, store.Config{DSN: dbtest.PostgresOnly(t)})
	require.NoError(t, err)
	access.Install(s.Client())
	t.Cleanup(func() { _ = s.Close() })
	batch := make([]store.NewTask, 7)
	for i := range batch {
		batch[i] = store.NewTask{Type: "noop", Owner: "o", Input: json.RawMessage(`{}`), InputHash: "h", TimeoutSeconds: 60, RetryPolicy: "none", MaxAttempts: 1}
	}
	_, err = s.CreateTasks(ctx, batch)
	require.NoError(t, err)
	cl, err := s.Claim(ctx, "w", []string{"noop"}, 10)
	require.NoError(t, err)
	require.Len(t, cl, 7)
	outcomes := make([]store.Outcome, len(cl))
	for i, c := range cl {
		outcomes[i] = store.Outcome{Token: c.Token(), Status: lifecycle.Success, Task: c.Task}
	}
	outcomes[4].Result = json.RawMessage(`{"not json`)

	f := newFlusher(s, slog.New(slog.NewTextHandler(io.Discard, nil)), FlushIntervalDefault, 16)
	errs, done, err := f.write(ctx, outcomes)
	require.NoError(t, err, "a refusal for good is not a transient failure")
	require.Equal(t, len(outcomes), done)
	for i, e := range errs {
		if i == 4 {
			require.Error(t, e)
			continue
		}
		require.NoError(t, e)
		tk, err := s.TaskByID(ctx, cl[i].Task.ID)
		require.NoError(t, err)
		require.Equal(t, lifecycle.Success, tk.Status)
	}
	tk, err := s.TaskByID(ctx, cl[4].Task.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.Executing, tk.Status, "left for the watchdog")
}

func TestDBTextIsStorable(t *testing.T) {
	require.Equal(t, "a\uFFFDb\uFFFDc", dbText("a\x00b\xffc"))
	require.Equal(t, "plain", dbText("plain"))
}

// queue makes a flusher on c holding at most capacity outcomes, with no
// loop running: the test calls flush itself.
func queue(c Completer, capacity int) *flusher {
	return newFlusher(c, discard, time.Hour, capacity)
}

func TestFlusherBackpressureBlocksFinishWhileTheQueueIsFullAndLosesNothing(t *testing.T) {
	t.Parallel()
	c := &fakeCompleter{}
	f := queue(c, 2)
	f.waitingForSpace = newTestSignal()
	ctx := context.Background()
	require.True(t, f.finish(ctx, success(1)))
	require.True(t, f.finish(ctx, success(2)))
	require.Len(t, f.waitingForSpace, 0, "room for two: nobody waited")

	third := make(chan bool)
	go func() { third <- f.finish(ctx, success(3)) }()
	await(t, f.waitingForSpace, "the third outcome to wait for room")
	select {
	case <-third:
		t.Fatal("finish returned while the queue was full")
	default:
	}
	require.Empty(t, c.writtenIDs(), "nothing written yet")

	require.NoError(t, f.flush(ctx, false))
	require.True(t, await(t, third, "the third outcome to be queued once the first two were written"))
	require.NoError(t, f.flush(ctx, false))
	require.Equal(t, []int{1, 2, 3}, c.writtenIDs(), "each outcome written once, in order")
	require.Len(t, f.space, 0, "every written outcome gave its room back")
}

func TestFlusherFinishGivesUpWhenItsContextEndsOrTheFlusherCloses(t *testing.T) {
	t.Parallel()
	f := queue(&fakeCompleter{}, 1)
	f.waitingForSpace = newTestSignal()
	require.True(t, f.finish(context.Background(), success(1)))

	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan bool)
	go func() { gaveUp <- f.finish(ctx, success(2)) }()
	await(t, f.waitingForSpace, "the second outcome to wait")
	cancel()
	require.False(t, await(t, gaveUp, "finish to give up with its context"))

	go func() { gaveUp <- f.finish(context.Background(), success(3)) }()
	await(t, f.waitingForSpace, "the third outcome to wait")
	close(f.done)
	require.False(t, await(t, gaveUp, "finish to give up when the flusher closed"))
}

func TestFlusherPutsBackWhatATransientFailureLeftUnwritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var recordFails, finishFails bool
	c := &fakeCompleter{
		record: func([]store.LogLine, []store.Progress) ([]store.Token, error) {
			if recordFails {
				return nil, errOutage
			}
			return nil, nil
		},
		finish: func(batch []store.Outcome) ([]error, error) {
			if finishFails {
				return nil, fmt.Errorf("finish: %w", errOutage)
			}
			return make([]error, len(batch)), nil
		},
	}
	f := queue(c, 4)
	var finished []int
	f.onFinished = func(o store.Outcome, err error) {
		require.NoError(t, err)
		finished = append(finished, o.Token.InstanceID)
	}
	tok := success(1).Token
	f.logLine(store.LogLine{Token: tok, TaskID: 1001, Message: "one"})
	f.progress(store.Progress{Token: tok, TaskID: 1001, Done: 1, Total: 2})
	require.True(t, f.finish(ctx, success(1)))
	require.True(t, f.finish(ctx, success(2)))

	// The log lines and progress fail: everything is put back.
	recordFails = true
	require.ErrorIs(t, f.flush(ctx, true), errOutage)
	require.Len(t, f.logs, 1)
	require.Len(t, f.prog, 1)
	require.Len(t, f.outcomes, 2)
	require.Zero(t, c.finishCalls(), "outcomes wait for their executions' lines")

	// The lines go through, the outcomes fail: the outcomes are put back,
	// still holding their room, and nobody is told they finished.
	recordFails, finishFails = false, true
	f.progress(store.Progress{Token: tok, TaskID: 1001, Done: 2, Total: 2})
	require.ErrorIs(t, f.flush(ctx, true), errOutage)
	require.Len(t, c.logs, 1)
	require.Equal(t, []store.Progress{{Token: tok, TaskID: 1001, Done: 2, Total: 2}}, c.progress,
		"newer progress queued meanwhile wins over the put-back value")
	require.Empty(t, f.logs)
	require.Len(t, f.outcomes, 2)
	require.Len(t, f.space, 2)
	require.Empty(t, finished)

	// Retried, they are written once each.
	finishFails = false
	require.NoError(t, f.flush(ctx, false))
	require.Equal(t, []int{1, 2}, c.writtenIDs())
	require.Equal(t, []int{1, 2}, finished)
	require.Empty(t, f.outcomes)
	require.Len(t, f.space, 0)
	require.Len(t, c.logs, 1, "log lines written once")
}

func TestFlusherSplitsABatchRefusedForGoodAndPutsBackOnlyTheTransientRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	refused := errors.New("invalid input syntax for type json")
	has := func(batch []store.Outcome, id int) bool {
		return slices.ContainsFunc(batch, func(o store.Outcome) bool { return o.Token.InstanceID == id })
	}
	outage := true
	c := &fakeCompleter{finish: func(batch []store.Outcome) ([]error, error) {
		switch {
		case has(batch, 3):
			return nil, refused // 3 is refused for good, with whatever it is written
		case has(batch, 6) && outage:
			outage = false
			return nil, errOutage // then the database goes away once
		}
		return make([]error, len(batch)), nil
	}}
	f := queue(c, 8)
	fared := map[int]error{}
	f.onFinished = func(o store.Outcome, err error) { fared[o.Token.InstanceID] = err }
	for id := 1; id <= 7; id++ {
		require.True(t, f.finish(ctx, success(id)))
	}
	f.logLine(store.LogLine{Token: success(1).Token, Message: "kept"})
	c.record = func([]store.LogLine, []store.Progress) ([]store.Token, error) { return nil, refused }

	// [1..7] is refused, so it is halved: [1,2,3] is refused, halved
	// again: [1] is written, [2,3] is refused, [2] is written and [3],
	// refused alone, fails alone. Then [4..7] meets the outage: it is put
	// back whole.
	require.ErrorIs(t, f.flush(ctx, false), errOutage)
	require.Equal(t, []int{1, 2}, c.writtenIDs())
	require.Len(t, fared, 3)
	require.ErrorIs(t, fared[3], refused, "the refused outcome fails alone")
	require.NoError(t, fared[1])
	require.NoError(t, fared[2])
	require.Empty(t, f.logs, "log lines refused for good are dropped, not retried ahead of outcomes")
	require.Len(t, f.outcomes, 4)
	require.Len(t, f.space, 4, "the put-back outcomes keep their room")

	require.NoError(t, f.flush(ctx, false))
	require.Equal(t, []int{1, 2, 4, 5, 6, 7}, c.writtenIDs())
	require.Len(t, fared, 7)
	require.Empty(t, f.outcomes)
	require.Len(t, f.space, 0)
}

func TestFlusherRunRetriesAFailedBatchUntilItIsWritten(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	c := &fakeCompleter{finish: func(batch []store.Outcome) ([]error, error) {
		if calls.Add(1) <= 2 {
			return nil, errOutage
		}
		return make([]error, len(batch)), nil
	}}
	f := newFlusher(c, discard, time.Millisecond, 4)
	finished := make(chan int, 4)
	f.onFinished = func(o store.Outcome, err error) { finished <- o.Token.InstanceID }
	ctx, stop := context.WithCancel(context.Background())
	go f.run(ctx)
	require.True(t, f.finish(context.Background(), success(1)))
	require.Equal(t, 1, await(t, finished, "the outcome to be written after two failures"))
	stop()
	<-f.done
	require.Equal(t, []int{1}, c.writtenIDs())
	require.Equal(t, 3, c.finishCalls(), "tried until written, then no more")
}

func TestFlusherWritesEverythingQueuedWhenItStops(t *testing.T) {
	t.Parallel()
	c := &fakeCompleter{}
	// The tick never comes and the queue is never half full: only the
	// final flush writes.
	f := newFlusher(c, discard, time.Hour, 8)
	ctx, stop := context.WithCancel(context.Background())
	go f.run(ctx)
	tok := success(1).Token
	f.logLine(store.LogLine{Token: tok, Message: "last words"})
	f.progress(store.Progress{Token: success(2).Token, Done: 3, Total: 4})
	for id := 1; id <= 3; id++ {
		require.True(t, f.finish(context.Background(), success(id)))
	}
	require.Zero(t, c.finishCalls())
	stop()
	<-f.done
	require.Equal(t, []int{1, 2, 3}, c.writtenIDs())
	require.Len(t, c.logs, 1)
	require.Len(t, c.progress, 1, "progress is written at the end whatever its interval")
	require.False(t, f.finish(context.Background(), success(4)), "a closed flusher takes nothing more")
	f.logLine(store.LogLine{Token: tok, Message: "too late"})
	require.Empty(t, f.logs)
}

func TestFlusherReportsWhatItCouldNotWriteWhenItStops(t *testing.T) {
	t.Parallel()
	c := &fakeCompleter{finish: func([]store.Outcome) ([]error, error) { return nil, errOutage }}
	var logged bytes.Buffer
	f := newFlusher(c, slog.New(slog.NewTextHandler(&logged, nil)), time.Hour, 8)
	f.finalTimeout = time.Millisecond
	ctx, stop := context.WithCancel(context.Background())
	go f.run(ctx)
	require.True(t, f.finish(context.Background(), success(1)))
	require.True(t, f.finish(context.Background(), success(2)))
	stop()
	<-f.done
	require.Empty(t, c.writtenIDs())
	require.Contains(t, logged.String(), "outcomes could not be written before stopping")
	require.Contains(t, logged.String(), "count=2")
}

func TestFlusherTellsTheOwnerOfWritesRefusedAsMovedOn(t *testing.T) {
	t.Parallel()
	moved := success(2).Token
	c := &fakeCompleter{record: func([]store.LogLine, []store.Progress) ([]store.Token, error) {
		return []store.Token{moved}, nil
	}}
	f := queue(c, 2)
	var lost []store.Token
	f.onLost = func(tok store.Token) { lost = append(lost, tok) }
	f.logLine(store.LogLine{Token: moved, Message: "zombie"})
	require.NoError(t, f.flush(context.Background(), false))
	require.Equal(t, []store.Token{moved}, lost)
}

// TestFlusherSaysWhatItHasNotWrittenYet: an outcome queued, or being
// written, is unwritten (the pool keeps its execution's heartbeats going),
// until its write answered; a failed write puts it back, still unwritten.
func TestFlusherSaysWhatItHasNotWrittenYet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	writing, release := make(chan struct{}), make(chan struct{})
	fail := true
	c := &fakeCompleter{
		finish: func(batch []store.Outcome) ([]error, error) {
			writing <- struct{}{}
			<-release
			if fail {
				return nil, fmt.Errorf("finish: %w", errOutage)
			}
			return make([]error, len(batch)), nil
		},
	}
	f := queue(c, 4)
	require.Empty(t, f.unwritten())
	require.True(t, f.finish(ctx, success(1)))
	require.Equal(t, []store.Token{success(1).Token}, f.unwritten(), "queued")
	done := make(chan error, 1)
	go func() { done <- f.flush(ctx, true) }()
	<-writing
	require.True(t, f.finish(ctx, success(2)))
	require.ElementsMatch(t, []store.Token{success(1).Token, success(2).Token}, f.unwritten(), "being written, and queued")
	require.True(t, f.holds(1))
	require.False(t, f.holds(3))
	release <- struct{}{}
	require.ErrorIs(t, <-done, errOutage)
	require.ElementsMatch(t, []store.Token{success(1).Token, success(2).Token}, f.unwritten(), "put back after a failed write")
	fail = false
	go func() { done <- f.flush(ctx, true) }()
	<-writing
	release <- struct{}{}
	require.NoError(t, <-done)
	require.Empty(t, f.unwritten(), "written")
	require.False(t, f.holds(1))
}
