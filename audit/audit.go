// Package audit records who asked for what: one AuditLog row per create,
// cancel, retry, bulk action and download, whatever its outcome, with the
// user, role, tenant, client address and time. A bulk action writes one
// record listing its ids, with each id's outcome in details.
package audit

import (
	"context"
	"fmt"
	"log/slog"

	"taskgraph/auth"
	"taskgraph/ent"
	"taskgraph/ent/auditlog"
	"taskgraph/mask"
)

// Actions recorded.
const (
	Create     = auditlog.ActionCREATE
	Cancel     = auditlog.ActionCANCEL
	Retry      = auditlog.ActionRETRY
	CancelMany = auditlog.ActionCANCEL_MANY
	RetryMany  = auditlog.ActionRETRY_MANY
	Download   = auditlog.ActionDOWNLOAD
)

// Entry is one action to record. The actor is the viewer of the context
// it is recorded with, and the address is auth.ClientAddr of it.
type Entry struct {
	Action  auditlog.Action
	TaskIDs []int
	// Err is why the action failed (nil: it succeeded).
	Err error
	// Partial marks a bulk action that succeeded for some ids only.
	Partial bool
	// Details are masked and bounded (every text cut to MaxDetailText
	// characters, saying so) before they are stored.
	Details map[string]any
}

// Recorder writes audit records.
type Recorder struct {
	client *ent.Client
	masker *mask.Masker
	code   func(error) string
	log    *slog.Logger
}

// New returns a Recorder writing through client. code names an error the
// way the API does (NOT_FOUND, FORBIDDEN...).
func New(client *ent.Client, masker *mask.Masker, code func(error) string, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.Default()
	}
	return &Recorder{client: client, masker: masker, code: code, log: log}
}

// Record writes e. A record that cannot be written is logged at ERROR with
// everything it would have held (the action it describes has happened and
// is not undone), and the error is returned.
func (r *Recorder) Record(ctx context.Context, e Entry) error {
	if r == nil {
		return nil
	}
	v, _ := auth.FromContext(ctx)
	outcome, code := auditlog.OutcomeOK, ""
	switch {
	case e.Err != nil:
		outcome, code = auditlog.OutcomeFAILED, r.Code(e.Err)
	case e.Partial:
		outcome = auditlog.OutcomePARTIAL
	}
	details := r.boundDetails(e.Details)
	addr := auth.ClientAddr(ctx)
	// Written even when the request was cancelled meanwhile: the action
	// may have happened.
	err := r.client.AuditLog.Create().
		SetActor(v.User).
		SetRole(string(v.Role)).
		SetTenant(v.Tenant).
		SetAction(e.Action).
		SetTaskIds(e.TaskIDs).
		SetOutcome(outcome).
		SetErrorCode(code).
		SetRemoteAddr(addr).
		SetDetails(details).
		Exec(context.WithoutCancel(ctx))
	if err != nil {
		r.log.Error("audit record not written", "actor", v.User, "role", v.Role, "action", e.Action,
			"task_ids", fmt.Sprint(e.TaskIDs), "outcome", outcome, "error_code", code, "remote_addr", addr, "details", details, "err", err)
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// Code names err as the API does ("" without a namer).
func (r *Recorder) Code(err error) string {
	if r == nil || r.code == nil || err == nil {
		return ""
	}
	return r.code(err)
}
