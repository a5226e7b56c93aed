// Package access decides what a viewer may see. Install puts a filter on
// every query of an ent client, so that whatever reads tasks, instances,
// logs, artifacts, workflows, their edges or audit records — a resolver, node/nodes, a connection
// and its totalCount, an aggregate, the store inside a cancel or a retry,
// an export or a report read as its owner — reads only what the viewer of
// its context may see. The imported contacts, a table of the importer's
// outside the ent schema, are read with SQL filtered by TaskRule, the same
// rule (importer.ContactReader).
//
// A viewer is an identity (source, tenant, user) with a role, and tenants
// isolate:
//
//   - the process itself (auth.System) and platform administrators
//     (auth.RolePlatform, named by --platform-admins): everything, in
//     every tenant;
//   - admin: every task of its own tenant, and the audit records of its
//     tenant's users;
//   - operator and viewer: the tasks it owns — same source, same tenant,
//     same user — and the instances, logs, files and imported contacts of
//     those tasks, and the schedules it owns with their logs; no audit
//     records;
//   - no viewer at all: nothing (the query fails with ErrNoViewer).
//
// A task that exists but is not visible is indistinguishable from one that
// does not exist: reads find nothing and say NOT_FOUND. What a viewer may
// *do* (its role) is checked by the engine; this package only narrows
// reads, and actions read through it.
package access

import (
	"context"
	"errors"

	"entgo.io/ent/dialect/sql"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/artifact"
	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/ent/intercept"
	"github.com/taskgraph/taskgraph/ent/predicate"
	"github.com/taskgraph/taskgraph/ent/schedule"
	"github.com/taskgraph/taskgraph/ent/scheduleevent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/taskdependency"
	"github.com/taskgraph/taskgraph/ent/taskinputversion"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/ent/taskreview"
	"github.com/taskgraph/taskgraph/ent/workflow"
	"github.com/taskgraph/taskgraph/internal/auth"
)

// ErrNoViewer fails a query made with a context that carries no viewer: a
// request that skipped authentication, or internal work that forgot to use
// auth.NewSystemContext. Nothing is read for nobody.
var ErrNoViewer = errors.New("access: no viewer in context")

// Install adds the read filter to every entity of c (and of transactions
// opened from it). The store installs it on the client it opens; it is the
// one place where visibility is decided.
func Install(c *ent.Client) {
	c.Task.Intercept(intercept.TraverseTask(func(ctx context.Context, q *ent.TaskQuery) error {
		p, err := taskRule(ctx)
		if p != nil {
			q.Where(p)
		}
		return err
	}))
	c.TaskInstance.Intercept(intercept.TraverseTaskInstance(func(ctx context.Context, q *ent.TaskInstanceQuery) error {
		p, err := taskRule(ctx)
		if p != nil {
			q.Where(taskinstance.HasTaskWith(p))
		}
		return err
	}))
	c.TaskLog.Intercept(intercept.TraverseTaskLog(func(ctx context.Context, q *ent.TaskLogQuery) error {
		p, err := taskRule(ctx)
		if p != nil {
			q.Where(tasklog.HasTaskWith(p))
		}
		return err
	}))
	c.Artifact.Intercept(intercept.TraverseArtifact(func(ctx context.Context, q *ent.ArtifactQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		switch {
		case v.SeesEveryTenant():
		case v.IsAdmin():
			q.Where(artifact.Tenant(v.Tenant))
		case v.CanMutate():
			// An operator also sees the files of its tenant's review
			// queue (an import's error report is a reviewer's evidence).
			q.Where(artifact.Tenant(v.Tenant), artifact.Or(
				artifact.And(artifact.OwnerSource(v.Source), artifact.Owner(v.User)),
				func(s *sql.Selector) { s.Where(sql.In(s.C(artifact.FieldTaskID), taskIDs(reviewed(v)))) }))
		default:
			q.Where(artifact.Tenant(v.Tenant), artifact.OwnerSource(v.Source), artifact.Owner(v.User))
		}
		return nil
	}))
	c.Schedule.Intercept(intercept.TraverseSchedule(func(ctx context.Context, q *ent.ScheduleQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		if p := schedulePredicate(v); p != nil {
			q.Where(p)
		}
		return nil
	}))
	c.ScheduleEvent.Intercept(intercept.TraverseScheduleEvent(func(ctx context.Context, q *ent.ScheduleEventQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		if p := schedulePredicate(v); p != nil {
			q.Where(scheduleevent.HasScheduleWith(p))
		}
		return nil
	}))
	c.AuditLog.Intercept(intercept.TraverseAuditLog(func(ctx context.Context, q *ent.AuditLogQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		switch {
		case v.SeesEveryTenant():
		case v.IsAdmin():
			q.Where(auditlog.Tenant(v.Tenant))
		default:
			q.Where(func(s *sql.Selector) { s.Where(sql.False()) })
		}
		return nil
	}))
	c.Workflow.Intercept(intercept.TraverseWorkflow(func(ctx context.Context, q *ent.WorkflowQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		if p := workflowPredicate(v); p != nil {
			q.Where(p)
		}
		return nil
	}))
	// An edge is seen with its child: the steps of a workflow share its
	// owner, and a task added after others is its creator's.
	c.TaskDependency.Intercept(intercept.TraverseTaskDependency(func(ctx context.Context, q *ent.TaskDependencyQuery) error {
		p, err := taskRule(ctx)
		if p != nil {
			q.Where(func(s *sql.Selector) {
				t := sql.Table(task.Table)
				sub := sql.Select(t.C(task.FieldID)).From(t)
				p(sub)
				s.Where(sql.In(s.C(taskdependency.FieldChildID), sub))
			})
		}
		return err
	}))
	// A review and an input version are seen with their task.
	c.TaskReview.Intercept(intercept.TraverseTaskReview(func(ctx context.Context, q *ent.TaskReviewQuery) error {
		p, err := taskRule(ctx)
		if p != nil {
			q.Where(func(s *sql.Selector) { s.Where(sql.In(s.C(taskreview.FieldTaskID), taskIDs(p))) })
		}
		return err
	}))
	c.TaskInputVersion.Intercept(intercept.TraverseTaskInputVersion(func(ctx context.Context, q *ent.TaskInputVersionQuery) error {
		p, err := taskRule(ctx)
		if p != nil {
			q.Where(func(s *sql.Selector) { s.Where(sql.In(s.C(taskinputversion.FieldTaskID), taskIDs(p))) })
		}
		return err
	}))
	installAlerts(c)
	installNodes(c)
}

// taskIDs selects the ids of the tasks p allows.
func taskIDs(p predicate.Task) *sql.Selector {
	t := sql.Table(task.Table)
	sub := sql.Select(t.C(task.FieldID)).From(t)
	p(sub)
	return sub
}

// workflowPredicate is the rule on workflows, the tasks' rule: nil when v
// sees every workflow. A step is visible to whoever sees its task, and its
// task has its workflow's owner.
func workflowPredicate(v auth.Viewer) predicate.Workflow {
	switch {
	case v.SeesEveryTenant():
		return nil
	case v.IsAdmin():
		return workflow.Tenant(v.Tenant)
	default:
		return workflow.And(workflow.Tenant(v.Tenant), workflow.OwnerSource(v.Source), workflow.Owner(v.User))
	}
}

func viewer(ctx context.Context) (auth.Viewer, error) {
	v, ok := auth.FromContext(ctx)
	if !ok || v.User == "" || v.Role == "" {
		return auth.Viewer{}, ErrNoViewer
	}
	return v, nil
}

// TaskRule is the rule on tasks for reads that do not go through an ent
// client's queries: the rows of the contacts table (package importer),
// which the viewer sees when it sees the import task that wrote them.
// Apply it to a selector over the tasks table (sql.Select(id) from
// tasks, used as a subquery); nil when the viewer of ctx sees every task;
// ErrNoViewer when ctx has no viewer.
func TaskRule(ctx context.Context) (predicate.Task, error) { return taskRule(ctx) }

// taskRule is the predicate on tasks the viewer of ctx may see; nil when
// it sees every task (or has no viewer: then the error).
func taskRule(ctx context.Context) (predicate.Task, error) {
	v, err := viewer(ctx)
	if err != nil {
		return nil, err
	}
	return taskPredicate(v), nil
}

// taskPredicate is the rule as an ent predicate on tasks: nil when v sees
// every task.
func taskPredicate(v auth.Viewer) predicate.Task {
	switch {
	case v.Role == auth.RoleWorker:
		return task.ID(-1) // a worker reads nothing (it is given its tasks by its claims)
	case v.SeesEveryTenant():
		return nil
	case v.IsAdmin():
		return task.Tenant(v.Tenant)
	case v.CanMutate():
		// An operator sees its own tasks, and its tenant's review queue:
		// the tasks waiting for review (someone else must decide those of
		// a four-eyes type) and those that were reviewed (so that a
		// reviewer finds what it decided, and one who comes second learns
		// that the task was decided, not that it vanished).
		return task.Or(task.And(task.Tenant(v.Tenant), task.OwnerSource(v.Source), task.Owner(v.User)), reviewed(v))
	default:
		return task.And(task.Tenant(v.Tenant), task.OwnerSource(v.Source), task.Owner(v.User))
	}
}

// reviewed is the review queue of v's tenant: the tasks waiting for
// review, and those that were reviewed.
func reviewed(v auth.Viewer) predicate.Task {
	return task.And(task.Tenant(v.Tenant), task.Or(
		task.AttentionStatusEQ(lifecycle.ReviewPending),
		func(s *sql.Selector) {
			r := sql.Table(taskreview.Table)
			s.Where(sql.In(s.C(task.FieldID), sql.Select(r.C(taskreview.FieldTaskID)).From(r)))
		}))
}

// schedulePredicate is the rule on schedules, the tasks' rule: nil when v
// sees every schedule.
func schedulePredicate(v auth.Viewer) predicate.Schedule {
	switch {
	case v.Role == auth.RoleWorker:
		return schedule.ID(-1)
	case v.SeesEveryTenant():
		return nil
	case v.IsAdmin():
		return schedule.Tenant(v.Tenant)
	default:
		return schedule.And(schedule.Tenant(v.Tenant), schedule.OwnerSource(v.Source), schedule.Owner(v.User))
	}
}

// CanSee reports whether v sees task t. It is the rule the filters above
// apply in SQL, for data that does not come from a query (events fanned
// out to subscribers). t must carry its owner, owner source and tenant.
func CanSee(v auth.Viewer, t *ent.Task) bool {
	switch {
	case v.User == "" || v.Role == "", v.Role == auth.RoleWorker:
		return false
	case v.SeesEveryTenant():
		return true
	case v.Tenant != t.Tenant:
		return false
	case v.IsAdmin():
		return true
	case v.CanMutate() && t.Status == lifecycle.ReviewPending:
		return true // its tenant's review queue (taskPredicate)
	}
	return v.Source == t.OwnerSource && v.User == t.Owner
}

// Owner is the identity that owns task t.
func Owner(t *ent.Task) auth.Identity {
	return auth.Identity{Source: t.OwnerSource, Tenant: t.Tenant, User: t.Owner}
}

// Task returns task id as v sees it, or an *ent.NotFoundError when it does
// not exist or v may not see it. A download handler calls it with the
// viewer the download link was issued to, at the time of the download:
// a link stops working for a user who can no longer see the task.
func Task(ctx context.Context, c *ent.Client, v auth.Viewer, id int) (*ent.Task, error) {
	return c.Task.Get(auth.NewContext(ctx, v), id)
}

// Artifact returns artifact id as v sees it now, or an *ent.NotFoundError:
// it must be visible to v itself and, when it belongs to a task, so must
// the task.
func Artifact(ctx context.Context, c *ent.Client, v auth.Viewer, id int) (*ent.Artifact, error) {
	ctx = auth.NewContext(ctx, v)
	a, err := c.Artifact.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if a.TaskID != nil {
		if _, err := c.Task.Get(ctx, *a.TaskID); err != nil {
			return nil, err
		}
	}
	return a, nil
}
