package nodes

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/clusternode"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/store"
)

// View is a node as the API shows it.
type View struct {
	*ent.ClusterNode
	State State
	// Running are the executions the node runs, of tasks the viewer may
	// see.
	Running []Execution
}

// Execution is one instance a node runs.
type Execution struct {
	InstanceID int
	TaskID     int
	TaskType   string
	StartedAt  *time.Time
}

// Summary is what every signed-in user may know of the nodes: counts.
type Summary struct {
	Live, Draining, Gone, Stopped int
	// Busy and Total add up the workers of the live and draining nodes.
	Busy, Total int
}

// Service reads and drains nodes for the API.
type Service struct {
	store *store.Store
	audit *audit.Recorder
	// admit is engine.Engine.Admit: the viewer, if it may act now (rate
	// limit).
	admit func(ctx context.Context, n int) (auth.Viewer, error)
	// Refresh is how often nodes refresh their rows: subscriptions re-read
	// at that pace.
	Refresh time.Duration
}

// NewService returns the API's service. admit (engine.Engine.Admit) says
// whether the viewer may act now; nil: anyone signed in.
func NewService(st *store.Store, rec *audit.Recorder, admit func(ctx context.Context, n int) (auth.Viewer, error), refresh time.Duration) *Service {
	if admit == nil {
		admit = func(ctx context.Context, _ int) (auth.Viewer, error) { return auth.Require(ctx) }
	}
	if refresh <= 0 {
		refresh = RefreshDefault
	}
	return &Service{store: st, audit: rec, admit: admit, Refresh: refresh}
}

// List returns every node, ordered by name, with its running executions
// (those of tasks the viewer may see). Admins only: others read Summarize.
func (s *Service) List(ctx context.Context) ([]View, error) {
	if _, err := auth.RequireAdmin(ctx, "see the cluster's nodes"); err != nil {
		return nil, err
	}
	rows, err := s.store.Client().ClusterNode.Query().Order(ent.Asc(clusternode.FieldName)).All(ctx)
	if err != nil {
		return nil, err
	}
	now := s.store.Now()
	out := make([]View, len(rows))
	names := make([]string, len(rows))
	byName := make(map[string]int, len(rows))
	for i, n := range rows {
		out[i] = View{ClusterNode: n, State: StateOf(n, now), Running: []Execution{}}
		// The row says what the node said at its last refresh: one killed
		// while it led still says so. A node past its lease or stopped
		// leads nothing (its advisory lock went with its session), so it is
		// never shown as leading beside the node that took over.
		if out[i].State == Gone || out[i].State == Stopped {
			n.Leading = false
		}
		names[i] = n.Name
		byName[n.Name] = i
	}
	if len(names) == 0 {
		return out, nil
	}
	// The viewer's context: package access keeps out the executions of
	// tasks it may not see (another tenant's).
	insts, err := s.store.Client().TaskInstance.Query().
		Where(taskinstance.StatusEQ(lifecycle.Executing), taskinstance.WorkerIDIn(names...)).
		Select(taskinstance.FieldID, taskinstance.FieldTaskID, taskinstance.FieldTaskType, taskinstance.FieldWorkerID, taskinstance.FieldStartedAt).
		All(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the nodes' executions: %w", err)
	}
	sort.Slice(insts, func(i, j int) bool { return insts[i].ID < insts[j].ID })
	for _, in := range insts {
		if i, ok := byName[in.WorkerID]; ok {
			out[i].Running = append(out[i].Running, Execution{InstanceID: in.ID, TaskID: in.TaskID, TaskType: in.TaskType, StartedAt: in.StartedAt})
		}
	}
	return out, nil
}

// Summarize counts the nodes by state, and the workers of those that run.
// Any signed-in user reads it.
func (s *Service) Summarize(ctx context.Context) (Summary, error) {
	if _, err := auth.Require(ctx); err != nil {
		return Summary{}, err
	}
	rows, err := s.store.Client().ClusterNode.Query().
		Select(clusternode.FieldStoppedAt, clusternode.FieldExpiresAt, clusternode.FieldDraining, clusternode.FieldBusy, clusternode.FieldTotal).
		All(auth.NewSystemContext(ctx))
	if err != nil {
		return Summary{}, err
	}
	return summarize(rows, s.store.Now()), nil
}

func summarize(rows []*ent.ClusterNode, now time.Time) Summary {
	var sum Summary
	for _, n := range rows {
		switch StateOf(n, now) {
		case Live:
			sum.Live++
		case Draining:
			sum.Draining++
		case Gone:
			sum.Gone++
			continue
		case Stopped:
			sum.Stopped++
			continue
		}
		sum.Busy += n.Busy
		sum.Total += n.Total
	}
	return sum
}

// Drain sets (drain) or clears a node's drain flag; the node applies it at
// its next refresh. Admins only; audited whatever the outcome. An unknown
// node is store.ErrNotFound.
func (s *Service) Drain(ctx context.Context, name string, drain bool) (*View, error) {
	v, err := s.admit(ctx, 1)
	if err != nil {
		return nil, err
	}
	action := audit.NodeDrain
	if !drain {
		action = audit.NodeUndrain
	}
	entry := audit.Entry{Action: action, Details: map[string]any{"node": name}}
	err = func() error {
		// A node runs every tenant's tasks: only an admin of the whole
		// deployment (a platform admin, or an admin without a tenant
		// where there are none) may take it out of service.
		if !v.IsAdmin() || (v.Tenant != "" && !v.SeesEveryTenant()) {
			return &auth.ForbiddenError{Role: v.Role, Action: "drain a node (it runs every tenant's tasks: platform admins only)"}
		}
		// The flag and its record: one commit.
		return s.store.Tx(ctx, func(tx *ent.Tx) error {
			n, err := tx.ClusterNode.Update().Where(clusternode.Name(name)).SetDraining(drain).Save(ctx)
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("node %q: %w", name, store.ErrNotFound)
			}
			return s.audit.Insert(ctx, tx, entry)
		})
	}()
	if err != nil {
		entry.Err = err
		_ = s.audit.Record(ctx, entry)
		return nil, err
	}
	list, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	for i := range list {
		if list[i].Name == name {
			return &list[i], nil
		}
	}
	return nil, fmt.Errorf("node %q: %w", name, store.ErrNotFound)
}
