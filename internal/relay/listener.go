package relay

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/pgdsn"
	"github.com/taskgraph/taskgraph/internal/service"
)

// Config of a Listener.
type Config struct {
	// DSN of the PostgreSQL database the nodes share.
	DSN string
	// Node is this node's name; its own notifications are ignored (its
	// broker already has those changes, in full).
	Node string
	// DB names the channel (the same query the writers use).
	DB *sql.DB
	// Client reads changed rows.
	Client *ent.Client
	// Broker receives the other nodes' changes.
	Broker *events.Broker
	// OnResync is called after the listening connection was lost and
	// re-established (a worker pool should look for work).
	OnResync func()
	// OnWake is called when another node released work without changing
	// a task (NotifyWake): a worker pool should look for it.
	OnWake func()
	// HeldAtCap, when set, says whether this node's claims found a type
	// at its cluster-wide cap (store.Store.HeldAtCap): other nodes' ends
	// of executions are then passed on to its worker pool too, since one
	// of them may have freed a slot of the cap.
	HeldAtCap func() bool
	// ResyncLimit bounds how many changed tasks (and log lines) a resync
	// re-publishes; past it, clients are told to re-read and subscribe
	// again (events.ErrResyncRequired). Default: ResyncLimitDefault.
	ResyncLimit int
	// ResyncPage is how many rows one read of a resync returns.
	// Default: ResyncPageDefault.
	ResyncPage int
	// PingInterval is how often the listening connection is checked (a
	// dead connection TCP has not reported yet; the last good check bounds
	// what a resync must re-read). Default: PingIntervalDefault.
	PingInterval time.Duration
	// Logger. Default: slog.Default().
	Logger *slog.Logger
}

// Defaults of Config.
const (
	ResyncLimitDefault  = 10000
	ResyncPageDefault   = 500
	PingIntervalDefault = 5 * time.Second
)

// Listener receives other nodes' notifications.
type Listener struct {
	cfg    Config
	pql    *pq.Listener
	dialer *pgdsn.Dialer // pql's connections, ended by Abort
	log    *slog.Logger

	mu sync.Mutex
	// healthy is when the listening connection last proved alive (a
	// notification came, a ping answered), on this process's clock:
	// whatever committed before it, minus a margin, was received.
	healthy time.Time
	// missedSince is set while changes since then (minus the margin) may
	// have been missed and are not yet re-read: a lost connection, a
	// re-read that failed.
	missedSince time.Time
	// lostAt is the last sign of life before the listening connection was
	// lost, kept until it is back: the resync the reconnection asks for
	// re-reads from there. Not from healthy, which a notification received
	// before the loss but delivered after it moves on; nor from
	// missedSince, which a resync that ran while the connection was down
	// cleared (it could not see what committed after it).
	lostAt time.Time
	// misses counts what set missedSince: a resync clears it only if
	// nothing was missed while it ran. Comparing the time instead is not
	// enough: a reconnection sets it again to the very time a resync under
	// way read (lostAt), and that resync may not have seen what committed
	// since.
	misses uint64

	cancel context.CancelFunc
	done   chan struct{}
	// pings are the pings under way (at most one), outside the loop: pq's
	// Ping waits for its answer on the connection whose notifications the
	// loop must keep draining meanwhile, or both wait for ever.
	pings   sync.WaitGroup
	pinging atomic.Bool
	// resyncer re-reads what may have been missed (resync), woken when
	// changes may have been missed, retried with a backoff until it works.
	resyncer *service.Loop[int]
	// own is how this node's notifications begin (nodePrefix).
	own string

	// Counters for metrics.
	received, resyncs, resyncFailures, resyncsRequired int64
}

// Listen connects, LISTENs and starts delivering.
func Listen(ctx context.Context, cfg Config) (*Listener, error) {
	if cfg.DSN == "" || cfg.DB == nil || cfg.Client == nil || cfg.Broker == nil || cfg.Node == "" {
		return nil, errors.New("relay: DSN, DB, node, client and broker are required")
	}
	var channel string
	if err := cfg.DB.QueryRowContext(ctx, "SELECT "+channelExpr).Scan(&channel); err != nil {
		return nil, fmt.Errorf("relay: name the channel: %w", err)
	}
	cfg.ResyncLimit = cmp.Or(cfg.ResyncLimit, ResyncLimitDefault)
	cfg.ResyncPage = cmp.Or(cfg.ResyncPage, ResyncPageDefault)
	cfg.PingInterval = cmp.Or(cfg.PingInterval, PingIntervalDefault)
	l := &Listener{cfg: cfg, own: nodePrefix(cfg.Node), log: cmp.Or(cfg.Logger, slog.Default()).With("component", "relay"), done: make(chan struct{})}
	resyncer, err := service.New(service.Config[int]{
		Name: "relay resync",
		// Woken when changes may have been missed; the interval only
		// catches a wake-up lost to a race.
		Interval: retryMax,
		Retry:    resyncBackoff,
		OnPass: func(_ int, err error) {
			if err != nil {
				l.mu.Lock()
				l.resyncFailures++
				l.mu.Unlock()
			}
		},
		Logger: cmp.Or(cfg.Logger, slog.Default()),
	}, l.resync)
	if err != nil {
		return nil, err
	}
	l.resyncer = resyncer
	dsn, err := withAppName(cfg.DSN, "taskgraph-relay-"+cfg.Node)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	// Until the first LISTEN is done, a failed connection attempt ends
	// Listen with its error (the store has just connected with the same
	// DSN: this is no blip), rather than being retried for ever.
	firstFailure := make(chan error, 1)
	var listening atomic.Bool
	l.dialer = &pgdsn.Dialer{}
	l.pql = pq.NewDialListener(l.dialer, dsn, 100*time.Millisecond, 5*time.Second, func(ev pq.ListenerEventType, err error) {
		if ev == pq.ListenerEventConnectionAttemptFailed && !listening.Load() {
			select {
			case firstFailure <- err:
			default:
			}
			return
		}
		switch ev {
		case pq.ListenerEventDisconnected:
			l.disconnected()
			l.log.Warn("listening connection lost; reconnecting", "err", err)
		case pq.ListenerEventReconnected:
			l.log.Info("listening connection re-established")
		case pq.ListenerEventConnectionAttemptFailed:
			l.log.Warn("reconnecting the listening connection failed", "err", err)
		}
	})
	listened := make(chan error, 1)
	go func() { listened <- l.pql.Listen(channel) }()
	select {
	case err := <-listened:
		if err != nil {
			_ = l.pql.Close()
			return nil, fmt.Errorf("relay: listen at %s: %w", pgdsn.Where(dsn), err)
		}
	case err := <-firstFailure:
		l.dialer.Abort()
		_ = l.pql.Close()
		<-listened
		return nil, fmt.Errorf("relay: connect the listening connection to %s: %w", pgdsn.Where(dsn), err)
	case <-ctx.Done():
		l.dialer.Abort() // a connection attempt under way fails
		_ = l.pql.Close()
		<-listened
		return nil, fmt.Errorf("relay: listen at %s: %w", pgdsn.Where(dsn), context.Cause(ctx))
	}
	listening.Store(true)
	l.healthy = time.Now()
	// Whatever this node delivers from now on may be re-published by a
	// resync: the broker remembers it (to drop duplicates) from the point
	// a resync would re-read from.
	cfg.Broker.SetReplayFloor(l.replayFloor)
	// The relay re-reads for the whole node; subscribers' own visibility is
	// applied when the broker hands changes to them.
	ctx, l.cancel = context.WithCancel(auth.NewSystemContext(context.WithoutCancel(ctx)))
	if err := l.resyncer.Start(ctx); err != nil {
		_ = l.pql.Close()
		return nil, err
	}
	go l.loop(ctx)
	return l, nil
}

// withAppName names the listening connection in pg_stat_activity, in
// the DSN's own form (a URL or key=value; TCP or a Unix socket).
func withAppName(dsn, name string) (string, error) {
	return pgdsn.WithDefault(dsn, "application_name", name[:min(len(name), 63)])
}

// Close stops listening.
func (l *Listener) Close() {
	l.cancel()
	<-l.done
	l.resyncer.Stop()
	l.dialer.Abort()  // a reconnection to a silent server ends
	_ = l.pql.Close() // a ping under way returns
	l.pings.Wait()
}

// Missed tells the listener that changes committed from about now may not
// have been published on this node (one of its own COMMITs failed with an
// unknown outcome: it may have committed all the same): they are re-read
// and replayed, as after a lost connection.
func (l *Listener) Missed() {
	l.mu.Lock()
	l.missLocked(time.Now())
	l.mu.Unlock()
	l.resyncer.Wake()
}

// resyncMargin covers clock differences between nodes and commits that were
// in flight when the connection dropped.
const resyncMargin = 10 * time.Second

// Backoff of a failed resync.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 5 * time.Second
)

// resyncBackoff is the wait after the n-th failed resync in a row:
// retryFirst, doubling, at most retryMax.
func resyncBackoff(n int) time.Duration {
	d := retryFirst
	for i := 1; i < n && d < retryMax; i++ {
		d *= 2
	}
	return min(d, retryMax)
}

func (l *Listener) alive() {
	l.mu.Lock()
	l.healthy = time.Now()
	l.mu.Unlock()
}

// disconnected records that the listening connection was lost: what was
// committed since the last sign of life may not be received.
func (l *Listener) disconnected() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lostAt = earliest(l.lostAt, l.healthy)
	l.missLocked(l.healthy)
}

// lost records that what was committed since the last sign of life, or
// since the connection was lost if it was, may not have been received
// (pq says so when the connection is back).
func (l *Listener) lost() {
	l.mu.Lock()
	defer l.mu.Unlock()
	since := earliest(l.healthy, l.lostAt)
	l.lostAt = time.Time{}
	l.missLocked(since)
}

func (l *Listener) missLocked(since time.Time) {
	l.missedSince = earliest(l.missedSince, since)
	l.misses++
}

// earliest returns the earliest of ts that is set (zero: none is).
func earliest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if !t.IsZero() && (out.IsZero() || t.Before(out)) {
			out = t
		}
	}
	return out
}

// replayFloor is the oldest delivery a resync may repeat.
func (l *Listener) replayFloor() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return earliest(l.healthy, l.missedSince, l.lostAt).Add(-resyncMargin)
}

func (l *Listener) loop(ctx context.Context) {
	defer close(l.done)
	ping := time.NewTicker(l.cfg.PingInterval)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			// Finds a dead connection that TCP has not reported yet. Not
			// in this goroutine: pq delivers the ping's answer after the
			// notifications received before it, which this loop drains.
			if l.pinging.CompareAndSwap(false, true) {
				l.pings.Go(func() {
					defer l.pinging.Store(false)
					if l.pql.Ping() == nil {
						l.alive()
					}
				})
			}
		case n := <-l.pql.Notify:
			if n == nil {
				// pq says notifications may have been lost.
				l.lost()
				l.resyncer.Wake()
				continue
			}
			batch := []*pq.Notification{n}
			// Take whatever else is already waiting: one re-read for all.
			reconnected := false
		drain:
			for len(batch) < 64 {
				select {
				case more := <-l.pql.Notify:
					if more == nil {
						reconnected = true
						break drain
					}
					batch = append(batch, more)
				default:
					break drain
				}
			}
			if reconnected {
				// Before the batch is delivered, which is a sign of life.
				l.lost()
				l.resyncer.Wake()
			}
			if !l.deliver(ctx, batch) {
				// Re-reading failed (the changes are marked missed):
				// re-read what changed since instead, until it works.
				l.resyncer.Wake()
			}
		}
	}
}

// deliver publishes a batch of notifications. It reports false when the
// changed rows could not be re-read; the changes are then marked missed,
// for a resync.
func (l *Listener) deliver(ctx context.Context, batch []*pq.Notification) bool {
	arrived := time.Now()
	l.alive()
	var ts [][4]int64
	var ls [][2]int64
	wake := false
	for _, n := range batch {
		if strings.HasPrefix(n.Extra, l.own) {
			continue // this node's own (nodePrefix)
		}
		m, err := decode(n.Extra)
		if err != nil {
			l.log.Warn("ignoring a notification", "err", err)
			continue
		}
		if m.Node == l.cfg.Node {
			continue
		}
		ts = append(ts, m.T...)
		ls = append(ls, m.L...)
		wake = wake || m.W
	}
	if wake && l.cfg.OnWake != nil {
		l.cfg.OnWake()
	}
	l.mu.Lock()
	l.received += int64(len(ts))
	l.mu.Unlock()
	if len(ts) == 0 && len(ls) == 0 {
		return true
	}
	full := l.cfg.Broker.WantsFullChanges()
	changes := make([]events.TaskChange, 0, len(ts))
	if !full {
		held := l.cfg.HeldAtCap != nil && l.cfg.HeldAtCap()
		for _, t := range ts {
			if !wakesWorkers(events.ChangeKind(t[2]), lifecycle.AllStatuses[t[3]], held) {
				continue
			}
			changes = append(changes, events.TaskChange{
				Kind:    events.ChangeKind(t[2]),
				Partial: true,
				Relayed: true,
				Task: &ent.Task{
					ID: int(t[0]), Version: t[1], Status: lifecycle.AllStatuses[t[3]],
					CancelRequested: events.ChangeKind(t[2]) == events.CancelRequested,
				},
			})
		}
		l.cfg.Broker.PublishTasks(changes)
		return true
	}
	missed := func(what string, err error, n int) bool {
		l.log.Warn("re-reading "+what+" failed; they will be re-read with what changed since", "err", err, "count", n)
		l.mu.Lock()
		l.missLocked(arrived)
		l.mu.Unlock()
		return false
	}
	if len(ts) > 0 {
		ids := make([]int, 0, len(ts))
		for _, t := range ts {
			ids = append(ids, int(t[0]))
		}
		rows, err := l.cfg.Client.Task.Query().Where(task.IDIn(ids...)).All(ctx)
		if err != nil {
			return missed("changed tasks", err, len(ids))
		}
		byID := make(map[int]*ent.Task, len(rows))
		for _, r := range rows {
			byID[r.ID] = r
		}
		for _, t := range ts {
			row := byID[int(t[0])]
			if row == nil {
				continue // purged since
			}
			snap := row
			if row.Version != t[1] {
				// The row moved on since this change: show the change's
				// state on the current row, so that subscribers still see
				// every state in order.
				c := *row
				c.Version, c.Status = t[1], lifecycle.AllStatuses[t[3]]
				if !c.Status.Terminal() {
					c.FinishedAt = nil
				}
				snap = &c
			}
			changes = append(changes, events.TaskChange{Kind: events.ChangeKind(t[2]), Task: snap, Relayed: true})
		}
		l.cfg.Broker.PublishTasks(changes)
	}
	if len(ls) > 0 {
		ids := make([]int, 0, len(ls))
		for _, x := range ls {
			ids = append(ids, int(x[1]))
		}
		logs, err := l.cfg.Client.TaskLog.Query().Where(tasklog.IDIn(ids...)).Order(ent.Asc(tasklog.FieldID)).All(ctx)
		if err != nil {
			return missed("log lines", err, len(ids))
		}
		l.cfg.Broker.PublishLogs(logs)
	}
	return true
}

// wakesWorkers reports the changes a worker pool acts on: new work (a task
// created, a retry scheduled) and cancel requests. Without clients, the
// rest of another node's changes concern nobody here.
func wakesWorkers(kind events.ChangeKind, status lifecycle.Status, heldAtCap bool) bool {
	switch kind {
	case events.Created, events.CancelRequested:
		return true
	case events.Transitioned:
		switch status {
		case lifecycle.RetryPending, lifecycle.Pending:
			// A retry scheduled, or a step released by its parents.
			return true
		case lifecycle.Executing, lifecycle.WaitingDependency:
			return false
		}
		// An execution ended: it may have freed a capped type's slot.
		return heldAtCap
	}
	return false
}

// resync re-publishes the current state of every task changed since
// shortly before changes may have been missed, page by page, as Latest
// changes (the broker delivers each one only if it is news, and at once),
// and the log lines of the tasks whose logs are watched. When more changed
// than ResyncLimit, clients are told to re-read and subscribe again
// instead. An error leaves the missed interval in place for the next try.
func (l *Listener) resync(ctx context.Context) (int, error) {
	l.mu.Lock()
	missed, misses := l.missedSince, l.misses
	l.mu.Unlock()
	if missed.IsZero() {
		return 0, nil
	}
	since := missed.Add(-resyncMargin)
	if l.cfg.OnResync != nil {
		l.cfg.OnResync()
	}
	n := 0
	if l.cfg.Broker.WantsFullChanges() {
		var err error
		if n, err = l.replay(ctx, since); err != nil {
			return 0, err
		}
		l.log.Info("resynced after changes may have been missed", "since", since, "tasks", n)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resyncs++
	if l.misses == misses {
		l.missedSince = time.Time{}
	}
	return n, nil
}

// replay re-publishes what changed since, and returns how many tasks.
func (l *Listener) replay(ctx context.Context, since time.Time) (int, error) {
	n, err := l.cfg.Client.Task.Query().Where(task.UpdatedAtGTE(since)).Count(ctx)
	if err != nil {
		return 0, fmt.Errorf("count changed tasks: %w", err)
	}
	var logs []*ent.TaskLog
	if ids := l.cfg.Broker.LogTasks(); len(ids) > 0 {
		logs, err = l.cfg.Client.TaskLog.Query().
			Where(tasklog.TaskIDIn(ids...), tasklog.CreatedAtGTE(since)).
			Order(ent.Asc(tasklog.FieldID)).
			Limit(l.cfg.ResyncLimit + 1).
			All(ctx)
		if err != nil {
			return 0, fmt.Errorf("re-read log lines: %w", err)
		}
	}
	if n > l.cfg.ResyncLimit || len(logs) > l.cfg.ResyncLimit {
		l.log.Warn("too much changed to replay; clients must re-read and subscribe again",
			"since", since, "tasks", n, "log_lines", len(logs), "limit", l.cfg.ResyncLimit)
		l.cfg.Broker.ResyncRequired()
		l.mu.Lock()
		l.resyncsRequired++
		l.mu.Unlock()
		return n, nil
	}
	// Oldest first, by (updated_at, id): a row updated while we page moves
	// to the end and is read again, never skipped.
	var afterAt time.Time
	afterID := 0
	for {
		q := l.cfg.Client.Task.Query().Where(task.UpdatedAtGTE(since))
		if afterID != 0 {
			q = q.Where(task.Or(task.UpdatedAtGT(afterAt), task.And(task.UpdatedAt(afterAt), task.IDGT(afterID))))
		}
		rows, err := q.Order(ent.Asc(task.FieldUpdatedAt), ent.Asc(task.FieldID)).Limit(l.cfg.ResyncPage).All(ctx)
		if err != nil {
			return 0, fmt.Errorf("re-read changed tasks: %w", err)
		}
		changes := make([]events.TaskChange, len(rows))
		for i, r := range rows {
			changes[i] = events.TaskChange{Kind: events.Transitioned, Task: r, Relayed: true, Latest: true}
		}
		l.cfg.Broker.PublishTasks(changes)
		if len(rows) < l.cfg.ResyncPage {
			break
		}
		afterAt, afterID = rows[len(rows)-1].UpdatedAt, rows[len(rows)-1].ID
	}
	l.cfg.Broker.PublishMissedLogs(logs)
	return n, nil
}

// Stats are the listener's counters.
type Stats struct {
	Received int64
	// Resyncs counts completed resyncs; ResyncFailures the failed
	// attempts (retried); ResyncsRequired the times clients were told to
	// re-read instead.
	Resyncs, ResyncFailures, ResyncsRequired int64
}

// Stats returns the listener's counters.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Received: l.received, Resyncs: l.resyncs, ResyncFailures: l.resyncFailures, ResyncsRequired: l.resyncsRequired}
}
