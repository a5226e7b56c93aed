// Package service is the one lifecycle every background loop of a node
// shares: the watchdog, retention, the artifact janitor, the scheduler, the
// alert evaluator, the node registry. Each is a pass — a function that does
// one round of work and returns a small result — run by a Loop: at Start,
// then every Interval, or at once when woken; only while this node leads,
// when a Leader is given. Stop ends the loop and waits for the pass under
// way. Start and Stop may be called in any order, any number of times, from
// any goroutine (servicetest.StressStartStop checks it of each service).
//
// A pass is tested by calling it directly, without timers; the Loop adds
// only scheduling, leadership and the logging of failures.
package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Service is what a node starts and stops.
type Service interface {
	// Start runs the service until Stop (or until ctx ends). A running
	// service is left running.
	Start(ctx context.Context) error
	// Stop ends the service and waits for the work under way. A service
	// that does not run is left alone.
	Stop()
}

// Config of a Loop running passes returning R.
type Config[R any] struct {
	// Name says which service logs (the "component" attribute).
	Name string
	// Interval between the end of a pass and the start of the next; must
	// be positive.
	Interval time.Duration
	// Delay before the first pass after Start. Zero: the first pass runs
	// at once.
	Delay time.Duration
	// Leader, when set, is asked before each pass: the pass runs only on
	// the node that leads (one watchdog, one purger in a cluster). A
	// failure to ask is logged like a failed pass.
	Leader func(ctx context.Context) (bool, error)
	// Retry, when set, is the wait after the n-th failed pass in a row
	// (n from 1) instead of Interval: a pass that must succeed soon (a
	// resync) is tried again with a backoff.
	Retry func(n int) time.Duration
	// OnPass, when set, is told each pass's result (metrics, tests).
	// Passes skipped for not leading are not told.
	OnPass func(R, error)
	// Quiet, when it returns true for a pass's error, keeps the error
	// out of the log (an outage the node already reports once, say).
	Quiet func(error) bool
	// Settle, when set, holds a woken pass until Settle has passed since
	// the previous pass started, so that a burst of wakes (task outcomes
	// arriving one by one) makes one pass rather than one each.
	Settle time.Duration
	Logger *slog.Logger
}

// Loop runs a pass at Start and every Interval until Stop.
type Loop[R any] struct {
	cfg  Config[R]
	pass func(context.Context) (R, error)
	log  *slog.Logger
	wake chan struct{}

	// mu serializes Start and Stop; Stop holds it while the loop ends.
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// New validates cfg. pass is the service's round of work.
func New[R any](cfg Config[R], pass func(context.Context) (R, error)) (*Loop[R], error) {
	if cfg.Name == "" {
		return nil, errors.New("service: a loop needs a name")
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("service %s: the interval must be positive, not %s", cfg.Name, cfg.Interval)
	}
	if cfg.Delay < 0 || cfg.Settle < 0 {
		return nil, fmt.Errorf("service %s: negative delay %s or settle %s", cfg.Name, cfg.Delay, cfg.Settle)
	}
	if pass == nil {
		return nil, fmt.Errorf("service %s: no pass", cfg.Name)
	}
	return &Loop[R]{
		cfg:  cfg,
		pass: pass,
		log:  cmp.Or(cfg.Logger, slog.Default()).With("component", cfg.Name),
		wake: make(chan struct{}, 1),
	}, nil
}

// Start runs the loop until Stop. It returns at once; the first pass runs
// after Delay. ctx's values reach every pass; its cancellation does not
// (Stop ends the loop), so that a request's context may start a service.
func (l *Loop[R]) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	l.cancel, l.done = cancel, done
	go l.run(ctx, done)
	return nil
}

// Stop ends the loop and waits for the pass under way (whose context is
// cancelled).
func (l *Loop[R]) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel == nil {
		return
	}
	l.cancel()
	<-l.done
	l.cancel, l.done = nil, nil
}

// Running says whether the loop runs (between Start and Stop).
func (l *Loop[R]) Running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cancel != nil
}

// Wake runs the next pass now (or after Settle) rather than at the end of
// the interval. A pass under way is not interrupted; the wakes that come
// while it runs make one more pass, and those that come before a pass
// starts are answered by it.
func (l *Loop[R]) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *Loop[R]) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	timer := time.NewTimer(l.cfg.Delay)
	defer timer.Stop()
	var last time.Time // when the previous pass started
	failures := 0      // failed passes in a row
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-l.wake:
			timer.Stop()
			if wait := l.cfg.Settle - time.Since(last); wait > 0 {
				settle := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					settle.Stop()
					return
				case <-settle.C:
				}
			}
		}
		// This pass answers every wake so far.
		select {
		case <-l.wake:
		default:
		}
		last = time.Now()
		_, failed := l.runOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		next := l.cfg.Interval
		if failed {
			failures++
			if l.cfg.Retry != nil {
				next = l.cfg.Retry(failures)
			}
		} else {
			failures = 0
		}
		timer.Reset(next)
	}
}

// RunOnce runs one pass now, as the loop does: only when leading, with a
// failure (or a panic) logged rather than returned. It says whether the
// pass ran. Tests of a service call its pass directly instead.
func (l *Loop[R]) RunOnce(ctx context.Context) (ran bool) {
	ran, _ = l.runOnce(ctx)
	return ran
}

// runOnce is RunOnce, which also says whether the pass failed (not leading,
// or failing to ask, is no failure to retry sooner).
func (l *Loop[R]) runOnce(ctx context.Context) (ran, failed bool) {
	if l.cfg.Leader != nil {
		led, err := l.cfg.Leader(ctx)
		if err != nil {
			l.failed(ctx, fmt.Errorf("ask whether this node leads: %w", err))
			return false, false
		}
		if !led {
			return false, false
		}
	}
	return true, l.pass1(ctx) != nil
}

// pass1 runs one pass, logs its failure and tells OnPass.
func (l *Loop[R]) pass1(ctx context.Context) error {
	res, err := l.safePass(ctx)
	if err != nil {
		l.failed(ctx, err)
	}
	if l.cfg.OnPass != nil {
		l.cfg.OnPass(res, err)
	}
	return err
}

// safePass runs the pass, turning a panic into an error: a loop that died
// silently would stop recovering work with nothing in the log.
func (l *Loop[R]) safePass(ctx context.Context) (res R, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pass panicked: %v", p)
		}
	}()
	return l.pass(ctx)
}

func (l *Loop[R]) failed(ctx context.Context, err error) {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return // stopping
	}
	if l.cfg.Quiet != nil && l.cfg.Quiet(err) {
		return
	}
	l.log.Warn("pass failed", "err", err)
}
