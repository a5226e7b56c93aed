package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskgraph/taskgraph/internal/outage"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/telemetry"
)

// Limits of a flusher.
const (
	// progressFlushInterval: progress is written at most this often (a
	// bar moves smoothly; a handler reporting in a tight loop costs one
	// row per interval), except with its execution's outcome.
	progressFlushInterval = 250 * time.Millisecond
	// maxQueuedLogLines bounds the log lines held while the database lags
	// or is down; lines beyond are dropped and counted, memory stays bounded.
	maxQueuedLogLines = 10000
	// outcomesQueuedPerSlot: the queue of outcomes holds this many per
	// worker slot, so that one batch is written while the next gathers.
	outcomesQueuedPerSlot = 2
	// earlyFlushDivisor: once 1/earlyFlushDivisor of the queue of outcomes
	// waits, they are written without waiting for the tick (the batch is
	// worth a statement, and the rest of the queue keeps handlers going).
	earlyFlushDivisor = 2
	// flushBackoffMin and flushBackoffMax bound the wait before a failed
	// write is tried again (doubling from the first to the second): soon
	// enough after a blip, rare enough not to hammer a database that is down.
	flushBackoffMin = 100 * time.Millisecond
	flushBackoffMax = 5 * time.Second
	// finalFlushTimeout bounds the last write when the pool stops: what is
	// not written by then is left to the watchdog (the instances' heartbeats
	// stop), and a shutdown does not hang on a database that is down.
	finalFlushTimeout = 15 * time.Second
	// finalFlushRetryPause is the wait between two tries of the last write.
	finalFlushRetryPause = 200 * time.Millisecond
)

// flusher batches what executions write — log lines, progress and their
// final outcomes — and writes them together: log lines and progress first,
// then outcomes, so that an execution's last lines are stored while it is
// still EXECUTING. Batching is what makes thousands of short tasks a
// second possible.
type flusher struct {
	out              Completer
	log              *slog.Logger
	interval         time.Duration
	progressInterval time.Duration
	maxLogs          int
	finalTimeout     time.Duration

	// space bounds the outcomes waiting to be written: a handler that
	// finishes while it is full waits, and keeps its worker slot, so that
	// the pool cannot claim faster than it completes.
	space chan struct{}
	kick  chan struct{}
	// tracer, when set, traces each flush that writes something.
	tracer trace.Tracer

	mu       sync.Mutex
	logs     []store.LogLine
	prog     map[store.Token]store.Progress
	outcomes []store.Outcome
	// writing are the outcomes being written now (by flush), out of
	// outcomes and not yet answered.
	writing       []store.Outcome
	droppedLogs   int
	lastProgFlush time.Time
	closed        bool

	// onLost is told about executions whose writes were refused: they were
	// moved on by someone else and must stop.
	onLost func(store.Token)
	// onFinished is told how each written outcome fared.
	onFinished func(store.Outcome, error)
	// outages, when set, counts failures during an outage instead of the
	// flusher logging each retry.
	outages *outage.Monitor

	// waitingForSpace is signalled when finish waits for room (tests).
	waitingForSpace testSignal

	done chan struct{}
}

// newFlusher returns a flusher writing to out at most every interval,
// holding at most capacity outcomes; run starts it.
func newFlusher(out Completer, log *slog.Logger, interval time.Duration, capacity int) *flusher {
	return &flusher{
		out:              out,
		log:              log,
		interval:         interval,
		progressInterval: progressFlushInterval,
		maxLogs:          maxQueuedLogLines,
		finalTimeout:     finalFlushTimeout,
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

// finish queues an outcome, waiting while the queue is full (the caller,
// a handler's goroutine, keeps its worker slot meanwhile: backpressure on
// claims). It returns false if ctx ended or the flusher closed first.
func (f *flusher) finish(ctx context.Context, o store.Outcome) bool {
	select {
	case f.space <- struct{}{}:
	default:
		f.waitingForSpace.signal()
		select {
		case f.space <- struct{}{}:
		case <-ctx.Done():
			return false
		case <-f.done:
			return false
		}
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		<-f.space
		return false
	}
	f.outcomes = append(f.outcomes, o)
	full := len(f.outcomes) >= cap(f.space)/earlyFlushDivisor
	f.mu.Unlock()
	if full {
		f.nudge()
	}
	return true
}

// unwritten returns the tokens of the outcomes queued or being written:
// their handlers have returned, and until an outcome is written its
// execution is still this node's, kept alive by its heartbeats.
func (f *flusher) unwritten() []store.Token {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]store.Token, 0, len(f.outcomes)+len(f.writing))
	for _, o := range f.writing {
		out = append(out, o.Token)
	}
	for _, o := range f.outcomes {
		out = append(out, o.Token)
	}
	return out
}

// holds reports whether an outcome of instance id waits to be written.
func (f *flusher) holds(id int) bool {
	for _, tok := range f.unwritten() {
		if tok.InstanceID == id {
			return true
		}
	}
	return false
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
			backoff = min(max(2*backoff, flushBackoffMin), flushBackoffMax)
			if !errors.Is(err, context.Canceled) && !counted(f.outages, "flush", err) {
				f.log.Error("writing executions' work failed; will retry", "err", err, "retry_in", backoff)
			}
		} else {
			backoff = 0
		}
	}
}

// final writes what is left, with a bounded wait, when the pool stops.
func (f *flusher) final() {
	ctx, cancel := context.WithTimeout(context.Background(), f.finalTimeout)
	defer cancel()
	for ctx.Err() == nil {
		if err := f.flush(ctx, true); err == nil {
			break
		} else {
			f.log.Error("final write of executions' work failed", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(finalFlushRetryPause):
			}
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
func (f *flusher) flush(ctx context.Context, all bool) (err error) {
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
	f.writing = outcomes
	dropped := f.droppedLogs
	f.droppedLogs = 0
	f.mu.Unlock()

	if dropped > 0 {
		f.log.Warn("log lines dropped: the database did not keep up", "count", dropped)
	}
	if len(logs)+len(prog)+len(outcomes) > 0 && f.tracer != nil {
		var span trace.Span
		ctx, span = f.tracer.Start(ctx, telemetry.SpanFlush, trace.WithAttributes(
			attribute.Int("taskgraph.flush.outcomes", len(outcomes)),
			attribute.Int("taskgraph.flush.logs", len(logs)),
			attribute.Int("taskgraph.flush.progress", len(prog)),
		))
		defer func() { telemetry.End(span, err) }()
	}
	defer func() {
		f.mu.Lock()
		f.writing = nil
		f.mu.Unlock()
	}()
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
		callCtx, cancel := context.WithTimeout(ctx, flushCallTimeout)
		rejected, err := f.out.RecordWork(callCtx, logs, prog)
		cancel()
		switch {
		case err == nil:
			for _, tok := range rejected {
				f.onLost(tok)
			}
		case transient(err) || ctx.Err() != nil:
			putBack()
			return err
		default:
			// Log lines and progress are kept as well as can be: a batch
			// the database refuses for good is dropped, not retried for
			// ever ahead of the outcomes behind it.
			f.log.Error("log lines and progress refused by the database; dropped", "lines", len(logs), "progress", len(prog), "err", err)
		}
		logs, prog = nil, nil
	}
	if len(outcomes) > 0 {
		errs, done, err := f.write(ctx, outcomes)
		for i, o := range outcomes[:done] {
			f.onFinished(o, errs[i])
			<-f.space
		}
		if err != nil {
			outcomes = outcomes[done:]
			putBack()
			return err
		}
	}
	return nil
}

// flushCallTimeout bounds one write of a batch: a few statements over at
// most a few thousand rows. A write that takes longer is treated as a
// transient failure (the batch is put back and retried with backoff).
const flushCallTimeout = 30 * time.Second

// write writes outcomes and returns, for the first done of them, how each
// fared. A transient failure (an outage, a timeout) is returned as err with
// the outcomes from done on still to be written. A batch the database
// refuses for good is split in halves until the outcome it refuses is
// alone: that one fails on its own (with the error), never the others, and
// the watchdog recovers its instance when its heartbeats stop.
func (f *flusher) write(ctx context.Context, outcomes []store.Outcome) (errs []error, done int, err error) {
	callCtx, cancel := context.WithTimeout(ctx, flushCallTimeout)
	errs, err = f.out.Finish(callCtx, outcomes)
	cancel()
	switch {
	case err == nil:
		return errs, len(outcomes), nil
	case transient(err) || ctx.Err() != nil:
		return nil, 0, err
	case len(outcomes) == 1:
		f.log.Error("outcome refused by the database; left to the watchdog", "instance_id", outcomes[0].Token.InstanceID, "err", err)
		return []error{err}, 1, nil
	}
	half := len(outcomes) / 2
	errs, done, err = f.write(ctx, outcomes[:half])
	if err != nil {
		return errs, done, err
	}
	more, n, err := f.write(ctx, outcomes[half:])
	return append(errs, more...), done + n, err
}

// transient reports an error after which the same write may succeed: an
// outage of the database or the disk, a timeout, a COMMIT whose outcome is
// unknown (written again, an outcome that did commit is refused as moved
// on, harmlessly).
func transient(err error) bool {
	return outage.Classify(err) != outage.None || errors.Is(err, context.DeadlineExceeded) || store.CommitUncertain(err)
}
