package nodes

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/externalworker"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/store"
)

// WorkerLeaseDefault is how long a worker's last recorded claim holds: a
// worker long-polls (up to 30 s a claim) while it has room, so one not
// seen for longer than this is gone.
const WorkerLeaseDefault = 90 * time.Second

// WorkerIDPrefix prefixes an external worker's name in the worker id of
// the executions it claims.
const WorkerIDPrefix = "ext:"

// WorkerInfo is what an external worker says of itself in a claim, and
// the credentials it claims with.
type WorkerInfo struct {
	Name, Tenant, User, Language, Version string
	Types                                 []string
}

// Workers is a node's record of the external workers whose claims it
// serves (external_workers). A claim is recorded when its worker is new
// to this node, says something new of itself, or was last recorded a
// refresh interval ago — not at every claim — and answers whether an
// admin drained the worker, as the row said then.
type Workers struct {
	store          *store.Store
	node           string
	refresh, lease time.Duration
	log            *slog.Logger

	mu   sync.Mutex
	seen map[workerKey]*seenWorker
}

type workerKey struct{ tenant, name string }

type seenWorker struct {
	info     WorkerInfo
	written  time.Time
	draining bool
}

// NewWorkers returns the record of node's external workers: a worker's row
// is written at most every refresh (default RefreshDefault) and holds for
// lease (default WorkerLeaseDefault).
func NewWorkers(st *store.Store, node string, refresh, lease time.Duration, log *slog.Logger) *Workers {
	return &Workers{
		store: st, node: node, refresh: cmp.Or(refresh, RefreshDefault), lease: cmp.Or(lease, WorkerLeaseDefault),
		log: cmp.Or(log, slog.Default()), seen: map[workerKey]*seenWorker{},
	}
}

// Seen records a claim of worker w and reports whether w is drained (its
// claim then takes nothing and tells it to stop).
func (ws *Workers) Seen(ctx context.Context, w WorkerInfo) (draining bool, err error) {
	key := workerKey{w.Tenant, w.Name}
	now := ws.store.Now()
	ws.mu.Lock()
	e := ws.seen[key]
	if e != nil && now.Sub(e.written) < ws.refresh && sameInfo(e.info, w) {
		d := e.draining
		ws.mu.Unlock()
		return d, nil
	}
	ws.mu.Unlock()
	ctx = auth.NewSystemContext(ctx)
	err = ws.store.Tx(ctx, func(tx *ent.Tx) error {
		n, err := tx.ExternalWorker.Update().Where(externalworker.Tenant(w.Tenant), externalworker.Name(w.Name)).
			SetUser(w.User).SetLanguage(w.Language).SetVersion(w.Version).SetTypes(w.Types).SetNode(ws.node).
			SetLastSeenAt(now).SetExpiresAt(now.Add(ws.lease)).
			Save(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			// New: it claims with the drain flag clear.
			draining = false
			return tx.ExternalWorker.Create().SetName(w.Name).SetTenant(w.Tenant).
				SetUser(w.User).SetLanguage(w.Language).SetVersion(w.Version).SetTypes(w.Types).SetNode(ws.node).
				SetFirstSeenAt(now).SetLastSeenAt(now).SetExpiresAt(now.Add(ws.lease)).
				Exec(ctx)
		}
		row, err := tx.ExternalWorker.Query().Where(externalworker.Tenant(w.Tenant), externalworker.Name(w.Name)).
			Select(externalworker.FieldDraining).Only(ctx)
		if err != nil {
			return err
		}
		draining = row.Draining
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("record worker %s: %w", w.Name, err)
	}
	ws.mu.Lock()
	ws.seen[key] = &seenWorker{info: w, written: now, draining: draining}
	ws.mu.Unlock()
	return draining, nil
}

// changed forgets what this node knew of a worker's row (a drain this
// node made): its next claim reads the row again.
func (ws *Workers) changed(tenant, name string) {
	if ws == nil {
		return
	}
	ws.mu.Lock()
	delete(ws.seen, workerKey{tenant, name})
	ws.mu.Unlock()
}

func sameInfo(a, b WorkerInfo) bool {
	return a.User == b.User && a.Language == b.Language && a.Version == b.Version && slices.Equal(a.Types, b.Types)
}

// WorkerView is an external worker as the API shows it.
type WorkerView struct {
	*ent.ExternalWorker
	State State
	// Running are the executions it holds, of tasks the viewer may see.
	Running []Execution
}

// WorkerStateOf says where worker w stands at now: LIVE, DRAINING or GONE.
func WorkerStateOf(w *ent.ExternalWorker, now time.Time) State {
	switch {
	case now.After(w.ExpiresAt):
		return Gone
	case w.Draining:
		return Draining
	}
	return Live
}

// ListWorkers returns the external workers the viewer may see (admins:
// those of their tenant; platform administrators: all), by tenant and
// name, with the executions each holds.
func (s *Service) ListWorkers(ctx context.Context) ([]WorkerView, error) {
	if _, err := auth.RequireAdmin(ctx, "see the external workers"); err != nil {
		return nil, err
	}
	rows, err := s.store.Client().ExternalWorker.Query().Order(ent.Asc(externalworker.FieldTenant), ent.Asc(externalworker.FieldName)).All(ctx)
	if err != nil {
		return nil, err
	}
	now := s.store.Now()
	out := make([]WorkerView, len(rows))
	ids := make([]string, len(rows))
	byID := make(map[string][]int, len(rows))
	for i, w := range rows {
		out[i] = WorkerView{ExternalWorker: w, State: WorkerStateOf(w, now), Running: []Execution{}}
		ids[i] = WorkerIDPrefix + w.Name
		byID[ids[i]] = append(byID[ids[i]], i)
	}
	if len(ids) == 0 {
		return out, nil
	}
	insts, err := s.store.Client().TaskInstance.Query().
		Where(taskinstance.StatusEQ(lifecycle.Executing), taskinstance.WorkerIDIn(ids...)).
		WithTask(func(q *ent.TaskQuery) { q.Select("tenant") }).
		Select(taskinstance.FieldID, taskinstance.FieldTaskID, taskinstance.FieldTaskType, taskinstance.FieldWorkerID, taskinstance.FieldStartedAt).
		All(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the workers' executions: %w", err)
	}
	sort.Slice(insts, func(i, j int) bool { return insts[i].ID < insts[j].ID })
	for _, in := range insts {
		for _, i := range byID[in.WorkerID] {
			// Two tenants' workers may have the same name: an execution is
			// the one whose tenant is its task's.
			if in.Edges.Task != nil && in.Edges.Task.Tenant != out[i].Tenant {
				continue
			}
			out[i].Running = append(out[i].Running, Execution{InstanceID: in.ID, TaskID: in.TaskID, TaskType: in.TaskType, StartedAt: in.StartedAt})
		}
	}
	return out, nil
}

// DrainWorker sets (drain) or clears an external worker's drain flag, by
// its row's id: its claims then take nothing and tell it to stop (on this
// node at once, on the others within a refresh). Admins of its tenant and
// platform administrators; audited whatever the outcome. A worker the
// viewer may not see is store.ErrNotFound.
func (s *Service) DrainWorker(ctx context.Context, id int, drain bool) (*WorkerView, error) {
	v, err := s.admit(ctx, 1)
	if err != nil {
		return nil, err
	}
	action := audit.WorkerDrain
	if !drain {
		action = audit.WorkerUndrain
	}
	entry := audit.Entry{Action: action, Details: map[string]any{"worker": id}}
	var row *ent.ExternalWorker
	err = func() error {
		if !v.IsAdmin() {
			return &auth.ForbiddenError{Role: v.Role, Action: "drain a worker (admins only)"}
		}
		n := id
		// The flag and its record: one commit; the viewer's context, so
		// that another tenant's worker is not found.
		return s.store.Tx(ctx, func(tx *ent.Tx) error {
			row, err = tx.ExternalWorker.Query().Where(externalworker.ID(n)).Only(ctx)
			if ent.IsNotFound(err) {
				return fmt.Errorf("worker %d: %w", id, store.ErrNotFound)
			}
			if err != nil {
				return err
			}
			entry.Details["name"] = row.Name
			if err := tx.ExternalWorker.UpdateOneID(n).SetDraining(drain).Exec(ctx); err != nil {
				return err
			}
			return s.audit.Insert(ctx, tx, entry)
		})
	}()
	if err != nil {
		entry.Err = err
		_ = s.audit.Record(ctx, entry)
		return nil, err
	}
	s.Workers.changed(row.Tenant, row.Name)
	list, err := s.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	for i := range list {
		if list[i].ID == row.ID {
			return &list[i], nil
		}
	}
	return nil, fmt.Errorf("worker %d: %w", id, store.ErrNotFound)
}
