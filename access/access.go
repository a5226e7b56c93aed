// Package access decides what a viewer may see. Install puts a filter on
// every query of an ent client, so that whatever reads tasks, instances,
// logs, artifacts, imported contacts or audit records — a resolver, node/nodes, a connection and its
// totalCount, the store inside a cancel or a retry — reads only what the
// viewer of its context may see:
//
//   - admin and the process itself (auth.System): everything;
//   - operator and viewer: the tasks they own, and the instances and logs
//     of those tasks; no audit records;
//   - no viewer at all: nothing (the query fails with ErrNoViewer).
//
// A task that exists but is not visible is indistinguishable from one that
// does not exist: reads find nothing and say NOT_FOUND. What a viewer may
// *do* (its role) is checked by the engine; this package only narrows reads.
package access

import (
	"context"
	"errors"

	"entgo.io/ent/dialect/sql"

	"taskgraph/auth"
	"taskgraph/ent"
	"taskgraph/ent/artifact"
	"taskgraph/ent/contact"
	"taskgraph/ent/intercept"
	"taskgraph/ent/task"
	"taskgraph/ent/taskinstance"
	"taskgraph/ent/tasklog"
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
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		if !v.SeesAll() {
			q.Where(task.Owner(v.User))
		}
		return nil
	}))
	c.TaskInstance.Intercept(intercept.TraverseTaskInstance(func(ctx context.Context, q *ent.TaskInstanceQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		if !v.SeesAll() {
			q.Where(taskinstance.HasTaskWith(task.Owner(v.User)))
		}
		return nil
	}))
	c.TaskLog.Intercept(intercept.TraverseTaskLog(func(ctx context.Context, q *ent.TaskLogQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		if !v.SeesAll() {
			q.Where(tasklog.HasTaskWith(task.Owner(v.User)))
		}
		return nil
	}))
	c.Artifact.Intercept(intercept.TraverseArtifact(func(ctx context.Context, q *ent.ArtifactQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		if !v.SeesAll() {
			q.Where(artifact.Owner(v.User))
		}
		return nil
	}))
	c.Contact.Intercept(intercept.TraverseContact(func(ctx context.Context, q *ent.ContactQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		if !v.SeesAll() {
			// The rows a viewer's own imports wrote.
			q.Where(func(s *sql.Selector) {
				t := sql.Table(task.Table)
				s.Where(sql.In(s.C(contact.FieldTaskID),
					sql.Select(t.C(task.FieldID)).From(t).Where(sql.EQ(t.C(task.FieldOwner), v.User))))
			})
		}
		return nil
	}))
	c.AuditLog.Intercept(intercept.TraverseAuditLog(func(ctx context.Context, q *ent.AuditLogQuery) error {
		v, err := viewer(ctx)
		if err != nil {
			return err
		}
		if !v.SeesAll() {
			q.Where(func(s *sql.Selector) { s.Where(sql.False()) })
		}
		return nil
	}))
	installAlerts(c)
}

func viewer(ctx context.Context) (auth.Viewer, error) {
	v, ok := auth.FromContext(ctx)
	if !ok || v.User == "" || v.Role == "" {
		return auth.Viewer{}, ErrNoViewer
	}
	return v, nil
}

// CanSee reports whether v sees a task owned by owner. It is the rule the
// filters above apply in SQL, for data that does not come from a query
// (events fanned out to subscribers).
func CanSee(v auth.Viewer, owner string) bool {
	return v.SeesAll() || (v.User != "" && v.User == owner)
}

// Task returns task id as v sees it, or an *ent.NotFoundError when it does
// not exist or v may not see it. A download handler calls it with the
// viewer the download link was issued to, at the time of the download:
// a link stops working for a user who can no longer see the task.
func Task(ctx context.Context, c *ent.Client, v auth.Viewer, id int) (*ent.Task, error) {
	return c.Task.Get(auth.NewContext(ctx, v), id)
}
