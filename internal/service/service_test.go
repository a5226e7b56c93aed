package service_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/service"
	"github.com/taskgraph/taskgraph/internal/servicetest"
)

func newLoop(t *testing.T, cfg service.Config[int], pass func(context.Context) (int, error)) *service.Loop[int] {
	t.Helper()
	cfg.Name = "test"
	if cfg.Interval == 0 {
		cfg.Interval = time.Hour
	}
	l, err := service.New(cfg, pass)
	require.NoError(t, err)
	t.Cleanup(l.Stop)
	return l
}

func TestConfigIsValidated(t *testing.T) {
	pass := func(context.Context) (int, error) { return 0, nil }
	for _, cfg := range []service.Config[int]{
		{Interval: time.Second},
		{Name: "x"},
		{Name: "x", Interval: -time.Second},
		{Name: "x", Interval: time.Second, Delay: -1},
		{Name: "x", Interval: time.Second, Settle: -1},
	} {
		_, err := service.New(cfg, pass)
		require.Error(t, err, "%+v", cfg)
	}
	_, err := service.New[int](service.Config[int]{Name: "x", Interval: time.Second}, nil)
	require.Error(t, err)
}

func TestFirstPassAtStartThenWakes(t *testing.T) {
	passes := make(chan int, 10)
	var n atomic.Int64
	l := newLoop(t, service.Config[int]{OnPass: func(r int, err error) { passes <- r }}, func(context.Context) (int, error) {
		return int(n.Add(1)), nil
	})
	require.NoError(t, l.Start(context.Background()))
	require.Equal(t, 1, <-passes, "the first pass runs at Start")
	l.Wake()
	require.Equal(t, 2, <-passes, "a wake runs a pass before the hour-long interval")
	require.True(t, l.Running())
	l.Stop()
	require.False(t, l.Running())
	require.NoError(t, l.Start(context.Background()), "a stopped loop starts again")
	require.Equal(t, 3, <-passes)
}

func TestDelayPostponesTheFirstPass(t *testing.T) {
	var n atomic.Int64
	l := newLoop(t, service.Config[int]{Delay: time.Hour}, func(context.Context) (int, error) { n.Add(1); return 0, nil })
	require.NoError(t, l.Start(context.Background()))
	l.Stop()
	require.Zero(t, n.Load())
}

func TestAWakeWithinSettleWaitsAndStopDoesNot(t *testing.T) {
	passes := make(chan int, 10)
	var n atomic.Int64
	l := newLoop(t, service.Config[int]{Settle: time.Hour, OnPass: func(r int, err error) { passes <- r }}, func(context.Context) (int, error) {
		return int(n.Add(1)), nil
	})
	require.NoError(t, l.Start(context.Background()))
	require.Equal(t, 1, <-passes)
	l.Wake()
	l.Wake()
	l.Stop() // returns at once: a settling wake is not a pass under way
	require.EqualValues(t, 1, n.Load(), "the wakes wait an hour after the first pass")
}

func TestPassesRunOnlyWhileLeading(t *testing.T) {
	var leading atomic.Bool
	var n atomic.Int64
	l := newLoop(t, service.Config[int]{Leader: func(context.Context) (bool, error) {
		if !leading.Load() {
			return false, nil
		}
		return true, nil
	}}, func(context.Context) (int, error) { n.Add(1); return 0, nil })
	require.False(t, l.RunOnce(context.Background()))
	leading.Store(true)
	require.True(t, l.RunOnce(context.Background()))
	require.EqualValues(t, 1, n.Load())

	failing := newLoop(t, service.Config[int]{Leader: func(context.Context) (bool, error) { return false, errors.New("db down") }},
		func(context.Context) (int, error) { n.Add(1); return 0, nil })
	require.False(t, failing.RunOnce(context.Background()))
	require.EqualValues(t, 1, n.Load())
}

func TestAPanickingPassIsAFailureNotACrash(t *testing.T) {
	var got error
	l := newLoop(t, service.Config[int]{OnPass: func(_ int, err error) { got = err }}, func(context.Context) (int, error) { panic("boom") })
	require.True(t, l.RunOnce(context.Background()))
	require.ErrorContains(t, got, "boom")
}

func TestStopCancelsThePassUnderWay(t *testing.T) {
	started := make(chan struct{})
	l := newLoop(t, service.Config[int]{}, func(ctx context.Context) (int, error) {
		close(started)
		<-ctx.Done()
		return 0, ctx.Err()
	})
	require.NoError(t, l.Start(context.Background()))
	<-started
	l.Stop() // returns: the pass saw its context end
}

func TestStartStopStress(t *testing.T) {
	l := newLoop(t, service.Config[int]{Interval: time.Millisecond}, func(ctx context.Context) (int, error) {
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Microsecond):
		}
		return 0, nil
	})
	servicetest.StressStartStop(t, l)
	require.False(t, l.Running())
}

func TestAFailedPassIsRetriedWithTheBackoff(t *testing.T) {
	var n atomic.Int64
	retries := make(chan int, 10)
	ok := make(chan struct{})
	l := newLoop(t, service.Config[int]{Retry: func(i int) time.Duration { retries <- i; return time.Millisecond }}, func(context.Context) (int, error) {
		if n.Add(1) <= 3 {
			return 0, errors.New("not yet")
		}
		close(ok)
		return 0, nil
	})
	require.NoError(t, l.Start(context.Background()))
	select {
	case <-ok:
	case <-time.After(20 * time.Second):
		t.Fatal("the failed pass was not tried again before the hour-long interval")
	}
	require.Equal(t, []int{1, 2, 3}, []int{<-retries, <-retries, <-retries}, "the n-th failure in a row")
}
