package alert

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lib/pq"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/pgdsn"
)

// Hub fans out changed incidents to this process's subscribers (the
// console's live banner), without blocking the writer: a subscriber whose
// buffer is full is dropped (its channel closes; it subscribes again).
type Hub struct {
	mu   sync.Mutex
	subs map[chan *ent.AlertIncident]struct{}
}

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{subs: make(map[chan *ent.AlertIncident]struct{})} }

// Subscribe returns a channel of changed incidents and its cancel.
func (h *Hub) Subscribe(buffer int) (<-chan *ent.AlertIncident, func()) {
	c := make(chan *ent.AlertIncident, max(buffer, 1))
	h.mu.Lock()
	h.subs[c] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return c, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if _, ok := h.subs[c]; ok {
				delete(h.subs, c)
				close(c)
			}
		})
	}
}

// Publish hands inc to every subscriber.
func (h *Hub) Publish(inc *ent.AlertIncident) {
	if h == nil || inc == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.subs {
		select {
		case c <- inc:
		default:
			delete(h.subs, c)
			close(c)
		}
	}
}

// Subscribers counts subscriptions (tests wait for them).
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// channelExpr names the notification channel of incident changes: one per
// database and schema, like the relay's.
const channelExpr = `'taskgraph_alerts_' || substr(md5(current_database() || '/' || current_schema()), 1, 16)`

// notifyIncident is run in the transaction that changed an incident on
// PostgreSQL: other nodes' hubs hear of it if and only if it commits.
func notifyIncident(ctx context.Context, tx *ent.Tx, node string, id int) error {
	if _, err := tx.ExecContext(ctx, "SELECT pg_notify("+channelExpr+", $1)", node+" "+strconv.Itoa(id)); err != nil {
		return fmt.Errorf("notify incident change: %w", err)
	}
	return nil
}

// Listener re-publishes other nodes' incident changes to this node's hub
// (PostgreSQL only; with SQLite there is one process).
type Listener struct {
	pql    *pq.Listener
	dialer *pgdsn.Dialer
	cancel context.CancelFunc
	done   chan struct{}
}

// Listen listens for incident changes of other nodes than node.
func Listen(ctx context.Context, dsn string, db *sql.DB, client *ent.Client, hub *Hub, node string, log *slog.Logger) (*Listener, error) {
	var channel string
	if err := db.QueryRowContext(ctx, "SELECT "+channelExpr).Scan(&channel); err != nil {
		return nil, fmt.Errorf("alerts: name the channel: %w", err)
	}
	l := &Listener{done: make(chan struct{})}
	named, err := pgdsn.WithDefault(dsn, "application_name", "taskgraph-alerts-"+node[:min(len(node), 46)])
	if err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	l.dialer = &pgdsn.Dialer{}
	l.pql = pq.NewDialListener(l.dialer, named, 100*time.Millisecond, 5*time.Second, func(ev pq.ListenerEventType, err error) {
		if err != nil {
			log.Warn("alert listener", "event", ev, "err", err)
		}
	})
	// pq's Listen waits for a connection, retrying for ever: a shutdown
	// (ctx) ends the wait.
	listened := make(chan error, 1)
	go func() { listened <- l.pql.Listen(channel) }()
	select {
	case err := <-listened:
		if err != nil {
			_ = l.pql.Close()
			return nil, fmt.Errorf("alerts: listen: %w", err)
		}
	case <-ctx.Done():
		l.dialer.Abort() // a connection attempt under way fails
		_ = l.pql.Close()
		<-listened
		return nil, fmt.Errorf("alerts: listen at %s: %w", pgdsn.Where(dsn), context.Cause(ctx))
	}
	ctx, l.cancel = context.WithCancel(auth.NewSystemContext(context.WithoutCancel(ctx)))
	go func() {
		defer close(l.done)
		for {
			select {
			case <-ctx.Done():
				return
			case n := <-l.pql.Notify:
				if n == nil {
					continue // reconnected; the console re-reads on its own reconnect
				}
				from, idText, ok := strings.Cut(n.Extra, " ")
				id, err := strconv.Atoi(idText)
				if !ok || err != nil || from == node {
					continue
				}
				inc, err := client.AlertIncident.Get(ctx, id)
				if err != nil {
					if !ent.IsNotFound(err) && !errors.Is(err, context.Canceled) {
						log.Warn("alerts: re-read a changed incident", "incident_id", id, "err", err)
					}
					continue
				}
				hub.Publish(inc)
			}
		}
	}()
	return l, nil
}

// Close stops listening.
func (l *Listener) Close() {
	l.cancel()
	<-l.done
	l.dialer.Abort() // a reconnection to a silent server ends
	_ = l.pql.Close()
}
