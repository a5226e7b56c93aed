// Package relay shares committed changes between the nodes of a cluster
// through PostgreSQL LISTEN/NOTIFY. The writing node sends, inside each write
// transaction, compact notifications naming what changed (ids, versions,
// states): PostgreSQL delivers them only if the transaction commits, in commit
// order. Every other node receives them on a dedicated connection and
// publishes the changes to its own broker — re-reading the rows once per batch
// when its clients subscribe, or passing on the states alone to its worker
// pool (wake-ups, cancels) when nobody else listens. A node that loses its
// listening connection reconnects and re-publishes the current state of what
// changed meanwhile.
package relay

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/events"
)

// channelExpr names the notification channel of the deployment: one per
// database and schema. Channels are database-wide, and two deployments in
// one database (or tests, each in a schema) must not hear each other.
const channelExpr = `'taskgraph_' || substr(md5(current_database() || '/' || current_schema()), 1, 16)`

// maxPayload stays under PostgreSQL's 8000-byte notification limit.
const maxPayload = 7000

// message is one notification. T holds [task id, version, kind, status
// index]; L holds [task id, log id]; W says that work may have been
// released without a task changing (a type resumed, a cap or rate
// raised): worker pools should look for it now.
type message struct {
	Node string     `json:"n"`
	T    [][4]int64 `json:"t,omitempty"`
	L    [][2]int64 `json:"l,omitempty"`
	W    bool       `json:"w,omitempty"`
}

// NotifyWake tells the other nodes' worker pools to look for work now
// (Config.OnWake): a change that releases waiting tasks without changing
// any of them, such as a type resumed or its cap raised, committed by
// node. Without it they would find that work at their next poll.
func NotifyWake(ctx context.Context, db *sql.DB, node string) error {
	b, _ := json.Marshal(message{Node: node, W: true})
	if _, err := db.ExecContext(ctx, "SELECT pg_notify("+channelExpr+", $1)", string(b)); err != nil {
		return fmt.Errorf("relay: notify a wake-up: %w", err)
	}
	return nil
}

// encode splits what a transaction committed into notification payloads.
func encode(node string, changes []events.TaskChange, logs []*ent.TaskLog) []string {
	var out []string
	m := message{Node: node}
	size := 0
	flush := func() {
		if len(m.T)+len(m.L) == 0 {
			return
		}
		b, _ := json.Marshal(m)
		out = append(out, string(b))
		m = message{Node: node}
		size = 0
	}
	for _, c := range changes {
		if size > maxPayload-64 {
			flush()
		}
		m.T = append(m.T, [4]int64{int64(c.Task.ID), c.Task.Version, int64(c.Kind), int64(statusIndex(c.Task.Status))})
		size += 12 + len(strconv.Itoa(c.Task.ID)) + len(strconv.FormatInt(c.Task.Version, 10))
	}
	for _, l := range logs {
		if size > maxPayload-64 {
			flush()
		}
		m.L = append(m.L, [2]int64{int64(l.TaskID), int64(l.ID)})
		size += 8 + len(strconv.Itoa(l.TaskID)) + len(strconv.Itoa(l.ID))
	}
	flush()
	return out
}

func decode(payload string) (message, error) {
	var m message
	if err := json.Unmarshal([]byte(payload), &m); err != nil {
		return m, fmt.Errorf("relay: bad notification: %w", err)
	}
	for _, t := range m.T {
		if t[3] < 0 || int(t[3]) >= len(lifecycle.AllStatuses) {
			return m, fmt.Errorf("relay: bad status index %d", t[3])
		}
	}
	return m, nil
}

// nodePrefix is how encode's payloads of node begin: the node's name comes
// first, so a node skips its own notifications (most of what it hears
// while it works hard) for the cost of a prefix comparison, undecoded.
func nodePrefix(node string) string {
	name, _ := json.Marshal(node)
	return `{"n":` + string(name) + `,`
}

func statusIndex(s lifecycle.Status) int {
	for i, v := range lifecycle.AllStatuses {
		if v == s {
			return i
		}
	}
	return 0
}

// Notifier writes the notifications of a transaction before it commits.
type Notifier struct {
	Node string
}

// BeforeCommit sends one pg_notify per payload in a single statement. The
// notifications of a foreign transaction (one the store's caller commits,
// store.Store.In) name no node: every node publishes them, this one too,
// since it cannot publish them itself after a commit it does not see.
func (n Notifier) BeforeCommit(ctx context.Context, exec func(ctx context.Context, query string, args ...any) error, changes []events.TaskChange, logs []*ent.TaskLog, foreign bool) error {
	node := n.Node
	if foreign {
		node = ""
	}
	payloads := encode(node, changes, logs)
	if len(payloads) == 0 {
		return nil
	}
	var q strings.Builder
	args := make([]any, 0, len(payloads))
	q.WriteString("SELECT ")
	for i, p := range payloads {
		if i > 0 {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "pg_notify(%s, $%d)", channelExpr, i+1)
		args = append(args, p)
	}
	if err := exec(ctx, q.String(), args...); err != nil {
		return fmt.Errorf("relay: notify: %w", err)
	}
	return nil
}
