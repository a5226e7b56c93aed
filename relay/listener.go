package relay

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/lib/pq"

	"taskgraph/auth"
	"taskgraph/ent"
	"taskgraph/ent/task"
	"taskgraph/ent/tasklog"
	"taskgraph/events"
	"taskgraph/lifecycle"
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
	// ResyncLimit bounds how many changed tasks a resync re-publishes.
	// Default: 10000.
	ResyncLimit int
	// Logger. Default: slog.Default().
	Logger *slog.Logger
}

// Listener receives other nodes' notifications.
type Listener struct {
	cfg Config
	pql *pq.Listener
	log *slog.Logger

	mu       sync.Mutex
	lastSeen time.Time // commit time (clock of the sender) of the newest change received

	cancel context.CancelFunc
	done   chan struct{}

	// Counters for metrics.
	received, resyncs int64
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
	cfg.ResyncLimit = cmp.Or(cfg.ResyncLimit, 10000)
	l := &Listener{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()).With("component", "relay"), done: make(chan struct{})}
	l.pql = pq.NewListener(withAppName(cfg.DSN, "taskgraph-relay-"+cfg.Node), 100*time.Millisecond, 5*time.Second, func(ev pq.ListenerEventType, err error) {
		switch ev {
		case pq.ListenerEventDisconnected:
			l.log.Warn("listening connection lost; reconnecting", "err", err)
		case pq.ListenerEventReconnected:
			l.log.Info("listening connection re-established")
		case pq.ListenerEventConnectionAttemptFailed:
			l.log.Warn("reconnecting the listening connection failed", "err", err)
		}
	})
	if err := l.pql.Listen(channel); err != nil {
		_ = l.pql.Close()
		return nil, err
	}
	l.lastSeen = time.Now()
	// The relay re-reads for the whole node; subscribers' own visibility is
	// applied when the broker hands changes to them.
	ctx, l.cancel = context.WithCancel(auth.NewSystemContext(context.WithoutCancel(ctx)))
	go l.loop(ctx)
	return l, nil
}

// withAppName names the listening connection in pg_stat_activity.
func withAppName(dsn, name string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	if q.Get("application_name") == "" {
		q.Set("application_name", name[:min(len(name), 63)])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Close stops listening.
func (l *Listener) Close() {
	l.cancel()
	<-l.done
	_ = l.pql.Close()
}

func (l *Listener) loop(ctx context.Context) {
	defer close(l.done)
	ping := time.NewTicker(30 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			// Finds a dead connection that TCP has not reported yet.
			_ = l.pql.Ping()
		case n := <-l.pql.Notify:
			if n == nil {
				// pq says notifications may have been lost.
				l.resync(ctx)
				continue
			}
			batch := []*pq.Notification{n}
			// Take whatever else is already waiting: one re-read for all.
		drain:
			for len(batch) < 64 {
				select {
				case more := <-l.pql.Notify:
					if more == nil {
						l.deliver(ctx, batch)
						batch = nil
						l.resync(ctx)
						break drain
					}
					batch = append(batch, more)
				default:
					break drain
				}
			}
			if len(batch) > 0 {
				l.deliver(ctx, batch)
			}
		}
	}
}

func (l *Listener) deliver(ctx context.Context, batch []*pq.Notification) {
	var ts [][4]int64
	var ls [][2]int64
	for _, n := range batch {
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
	}
	l.mu.Lock()
	l.received += int64(len(ts))
	l.mu.Unlock()
	if len(ts) == 0 && len(ls) == 0 {
		return
	}
	full := l.cfg.Broker.WantsFullChanges()
	changes := make([]events.TaskChange, 0, len(ts))
	if !full {
		for _, t := range ts {
			if !wakesWorkers(events.ChangeKind(t[2]), lifecycle.AllStatuses[t[3]]) {
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
		return
	}
	if len(ts) > 0 {
		ids := make([]int, 0, len(ts))
		for _, t := range ts {
			ids = append(ids, int(t[0]))
		}
		rows, err := l.cfg.Client.Task.Query().Where(task.IDIn(ids...)).All(ctx)
		if err != nil {
			l.log.Error("re-reading changed tasks failed", "err", err, "count", len(ids))
			return
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
			l.seen(snap.UpdatedAt)
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
			l.log.Error("re-reading log lines failed", "err", err, "count", len(ids))
			return
		}
		l.cfg.Broker.PublishLogs(logs)
	}
}

// wakesWorkers reports the changes a worker pool acts on: new work (a task
// created, a retry scheduled) and cancel requests. Without clients, the
// rest of another node's changes concern nobody here.
func wakesWorkers(kind events.ChangeKind, status lifecycle.Status) bool {
	switch kind {
	case events.Created, events.CancelRequested:
		return true
	case events.Transitioned:
		return status == lifecycle.RetryPending
	}
	return false
}

func (l *Listener) seen(t time.Time) {
	l.mu.Lock()
	if t.After(l.lastSeen) {
		l.lastSeen = t
	}
	l.mu.Unlock()
}

// resyncMargin covers clock differences between nodes and commits that were
// in flight when the connection dropped.
const resyncMargin = 10 * time.Second

// resync re-publishes the current state of every task changed since shortly
// before the last change received, so that subscribers see where things
// stand after notifications may have been lost.
func (l *Listener) resync(ctx context.Context) {
	l.mu.Lock()
	since := l.lastSeen.Add(-resyncMargin)
	l.resyncs++
	l.mu.Unlock()
	if l.cfg.OnResync != nil {
		l.cfg.OnResync()
	}
	if !l.cfg.Broker.WantsFullChanges() {
		return
	}
	rows, err := l.cfg.Client.Task.Query().
		Where(task.UpdatedAtGTE(since)).
		Order(ent.Desc(task.FieldUpdatedAt)).
		Limit(l.cfg.ResyncLimit).
		All(ctx)
	if err != nil {
		l.log.Error("resync failed", "err", err)
		return
	}
	l.log.Info("resynced after a lost listening connection", "since", since, "tasks", len(rows))
	changes := make([]events.TaskChange, 0, len(rows))
	for i := len(rows) - 1; i >= 0; i-- {
		changes = append(changes, events.TaskChange{Kind: events.Transitioned, Task: rows[i], Relayed: true})
		l.seen(rows[i].UpdatedAt)
	}
	l.cfg.Broker.PublishTasks(changes)
}

// Stats are the listener's counters.
type Stats struct{ Received, Resyncs int64 }

// Stats returns the listener's counters.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Received: l.received, Resyncs: l.resyncs}
}
