package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"taskgraph/store"
)

// flusher batches what executions write — log lines, progress and their
// final outcomes — and writes them together: log lines and progress first,
// then outcomes, so that an execution's last lines are stored while it is
// still EXECUTING. It is the pool's "completer": batching is what makes
// thousands of short tasks a second possible.
type flusher struct {
	store            *store.Store
	log              *slog.Logger
	interval         time.Duration
	progressInterval time.Duration
	maxLogs          int

	// space bounds the outcomes waiting to be written: a handler that
	// finishes while it is full waits, and keeps its worker slot, so that
	// the pool cannot claim faster than it completes.
	space chan struct{}
	kick  chan struct{}

	mu            sync.Mutex
	logs          []store.LogLine
	prog          map[store.Token]store.Progress
	outcomes      []store.Outcome
	droppedLogs   int
	lastProgFlush time.Time
	closed        bool

	// onLost is told about executions whose writes were refused: they were
	// moved on by someone else and must stop.
	onLost func(store.Token)
	// onFinished is told how each written outcome fared.
	onFinished func(store.Outcome, error)

	done chan struct{}
}

func newFlusher(s *store.Store, log *slog.Logger, interval time.Duration, capacity int) *flusher {
	return &flusher{
		store:            s,
		log:              log,
		interval:         interval,
		progressInterval: 250 * time.Millisecond,
		maxLogs:          10000,
		space:            make(chan struct{}, capacity),
		kick:             make(chan struct{}, 1),
		prog:             make(map[store.Token]store.Progress),
		onLost:           func(store.Token) {},
		onFinished:       func(store.Outcome, error) {},
		done:             make(chan struct{}),
	}
}

func (f *flusher) logLine(l store.LogLine) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	if len(f.logs) >= f.maxLogs {
		// The database is not keeping up (or is down); bound memory.
		f.droppedLogs++
		return
	}
	f.logs = append(f.logs, l)
}

func (f *flusher) progress(p store.Progress) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.prog[p.Token] = p
	}
}

// finish queues an outcome, waiting while the queue is full. It returns
// false if the flusher closed first.
func (f *flusher) finish(ctx context.Context, o store.Outcome) bool {
	select {
	case f.space <- struct{}{}:
	case <-ctx.Done():
		return false
	case <-f.done:
		return false
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		<-f.space
		return false
	}
	f.outcomes = append(f.outcomes, o)
	full := len(f.outcomes) >= cap(f.space)/2
	f.mu.Unlock()
	if full {
		f.nudge()
	}
	return true
}

func (f *flusher) nudge() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// run writes batches until ctx ends, then writes what is left.
func (f *flusher) run(ctx context.Context) {
	defer close(f.done)
	tick := time.NewTicker(f.interval)
	defer tick.Stop()
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			f.final()
			return
		case <-tick.C:
		case <-f.kick:
		}
		if backoff > 0 {
			select {
			case <-ctx.Done():
				f.final()
				return
			case <-time.After(backoff):
			}
		}
		if err := f.flush(ctx, false); err != nil {
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			if !errors.Is(err, context.Canceled) {
				f.log.Error("writing executions' work failed; will retry", "err", err, "retry_in", backoff)
			}
		} else {
			backoff = 0
		}
	}
}

// final writes what is left, with a bounded wait, when the pool stops.
func (f *flusher) final() {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if err := f.flush(ctx, true); err == nil {
			break
		} else {
			f.log.Error("final write of executions' work failed", "err", err)
			time.Sleep(200 * time.Millisecond)
		}
	}
	f.mu.Lock()
	f.closed = true
	lost := len(f.outcomes)
	f.mu.Unlock()
	if lost > 0 {
		f.log.Error("outcomes could not be written before stopping; the watchdog will recover their instances", "count", lost)
	}
}

// flush writes one batch. On error the batch is put back to be retried.
func (f *flusher) flush(ctx context.Context, all bool) error {
	f.mu.Lock()
	logs, outcomes := f.logs, f.outcomes
	var prog []store.Progress
	finishing := make(map[store.Token]bool, len(outcomes))
	for _, o := range outcomes {
		finishing[o.Token] = true
	}
	now := time.Now()
	progDue := all || now.Sub(f.lastProgFlush) >= f.progressInterval
	for tok, p := range f.prog {
		if progDue || finishing[tok] {
			prog = append(prog, p)
			delete(f.prog, tok)
		}
	}
	if progDue {
		f.lastProgFlush = now
	}
	f.logs, f.outcomes = nil, nil
	dropped := f.droppedLogs
	f.droppedLogs = 0
	f.mu.Unlock()

	if dropped > 0 {
		f.log.Warn("log lines dropped: the database did not keep up", "count", dropped)
	}
	putBack := func() {
		f.mu.Lock()
		f.logs = append(logs, f.logs...)
		f.outcomes = append(outcomes, f.outcomes...)
		for _, p := range prog {
			if _, newer := f.prog[p.Token]; !newer {
				f.prog[p.Token] = p
			}
		}
		f.mu.Unlock()
	}

	if len(logs) > 0 || len(prog) > 0 {
		rejected, err := f.store.RecordWork(ctx, logs, prog)
		if err != nil {
			putBack()
			return err
		}
		for _, tok := range rejected {
			f.onLost(tok)
		}
		logs, prog = nil, nil
	}
	if len(outcomes) > 0 {
		errs, err := f.store.Finish(ctx, outcomes)
		if err != nil {
			putBack()
			return err
		}
		for i, o := range outcomes {
			f.onFinished(o, errs[i])
			<-f.space
		}
	}
	return nil
}
