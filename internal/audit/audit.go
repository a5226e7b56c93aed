// Package audit records who asked for what: one AuditLog row per create,
// cancel, retry, bulk action, download, schedule change, flow-control
// change and quota change, whatever its outcome, with the
// actor's identity (source, tenant, user), role, client address and time.
// A bulk action writes one record listing its ids, with each id's outcome
// in details. Records are read through package access: an admin reads its
// tenant's, a platform administrator everyone's.
//
// A record is never lost: the record of an action that changes something
// commits in the transaction that makes the change (the caller passes it
// to Insert), so that the action fails if its record cannot be written;
// the record of an action that failed, or changed nothing, is written on
// its own (Record). Every write goes
// through the store's writer, which on SQLite is the process's one writer,
// retried when the database is busy.
package audit

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/outage"
)

// Actions recorded.
const (
	Create     = auditlog.ActionCREATE
	Cancel     = auditlog.ActionCANCEL
	Retry      = auditlog.ActionRETRY
	CancelMany = auditlog.ActionCANCEL_MANY
	RetryMany  = auditlog.ActionRETRY_MANY
	// BulkCancel and BulkRetry record a bulk action over a filter when it
	// is submitted (its pages are recorded as CancelMany and RetryMany,
	// naming the bulk task in their details).
	BulkCancel = auditlog.ActionBULK_CANCEL
	BulkRetry  = auditlog.ActionBULK_RETRY
	Download   = auditlog.ActionDOWNLOAD

	ScheduleCreate = auditlog.ActionSCHEDULE_CREATE
	ScheduleUpdate = auditlog.ActionSCHEDULE_UPDATE
	SchedulePause  = auditlog.ActionSCHEDULE_PAUSE
	ScheduleResume = auditlog.ActionSCHEDULE_RESUME
	ScheduleDelete = auditlog.ActionSCHEDULE_DELETE
	ScheduleRunNow = auditlog.ActionSCHEDULE_RUN_NOW
	FlowControlSet = auditlog.ActionFLOW_CONTROL_SET
	TypePause      = auditlog.ActionTYPE_PAUSE
	TypeResume     = auditlog.ActionTYPE_RESUME
	NodeDrain      = auditlog.ActionNODE_DRAIN
	NodeUndrain    = auditlog.ActionNODE_UNDRAIN
	// WorkerDrain and WorkerUndrain are an admin's drain of an external
	// worker (package nodes).
	WorkerDrain   = auditlog.ActionWORKER_DRAIN
	WorkerUndrain = auditlog.ActionWORKER_UNDRAIN
	// TaskTypeDeclare and TaskTypeDelete are an admin's external task
	// types (package external).
	TaskTypeDeclare = auditlog.ActionTASK_TYPE_DECLARE
	TaskTypeDelete  = auditlog.ActionTASK_TYPE_DELETE
	// The decisions on a task in review (who decided, and why, in its
	// details), a deadline's rejection (the system's), and a FAILED
	// task's replay with an edited input.
	ReviewApprove   = auditlog.ActionREVIEW_APPROVE
	ReviewEdit      = auditlog.ActionREVIEW_EDIT
	ReviewAccept    = auditlog.ActionREVIEW_ACCEPT
	ReviewReject    = auditlog.ActionREVIEW_REJECT
	ReviewExpire    = auditlog.ActionREVIEW_EXPIRE
	ReplayWithInput = auditlog.ActionREPLAY_WITH_INPUT
	// TenantQuotaSet is a platform administrator's change of a tenant's
	// quota (package flow).
	TenantQuotaSet = auditlog.ActionTENANT_QUOTA_SET
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

// Writer runs fn in a write transaction (store.Store.Tx).
type Writer func(ctx context.Context, fn func(tx *ent.Tx) error) error

// Recorder writes audit records.
type Recorder struct {
	write   Writer
	masker  *mask.Masker
	code    func(error) string
	log     *slog.Logger
	outages *outage.Monitor
	// now stamps records (created_at): the cluster's clock (Store.Now), so
	// that records several nodes write order and filter by one time.
	now func() time.Time
}

// New returns a Recorder writing with write. code names an error the way
// the API does (NOT_FOUND, FORBIDDEN...). outages, when set, counts records
// lost to an outage instead of logging each.
func New(write Writer, masker *mask.Masker, code func(error) string, log *slog.Logger, outages *outage.Monitor) *Recorder {
	if log == nil {
		log = slog.Default()
	}
	return &Recorder{write: write, masker: masker, code: code, log: log, outages: outages,
		now: func() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }}
}

// UseClock stamps records with now from here on (the store's Now, the
// database's clock, which every node shares); without it, the local clock.
func (r *Recorder) UseClock(now func() time.Time) { r.now = now }

// Record writes e in a transaction of its own: the record of an action
// that failed, or that changed nothing the store writes (a download, an
// idempotent replay). A record that cannot be written is logged with
// everything it would have held (counted instead during an outage), and
// the error is returned.
func (r *Recorder) Record(ctx context.Context, e Entry) error {
	if r == nil {
		return nil
	}
	// Written even when the request was cancelled meanwhile: the action
	// may have happened.
	ctx = context.WithoutCancel(ctx)
	err := r.write(ctx, func(tx *ent.Tx) error { return r.insert(ctx, tx, e) })
	if err != nil {
		r.Lost(ctx, e, err)
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// insert adds e's record to tx.
func (r *Recorder) insert(ctx context.Context, tx *ent.Tx, e Entry) error {
	v, _ := auth.FromContext(ctx)
	outcome, code := r.outcome(e)
	return tx.AuditLog.Create().
		SetCreatedAt(r.now()).
		SetActor(v.User).
		SetRole(string(v.Role)).
		SetSource(v.Source).
		SetTenant(v.Tenant).
		SetAction(e.Action).
		SetTaskIds(e.TaskIDs).
		SetOutcome(outcome).
		SetErrorCode(code).
		SetRemoteAddr(auth.ClientAddr(ctx)).
		SetDetails(r.boundDetails(e.Details)).
		Exec(ctx)
}

func (r *Recorder) outcome(e Entry) (auditlog.Outcome, string) {
	switch {
	case e.Err != nil:
		return auditlog.OutcomeFAILED, r.Code(e.Err)
	case e.Partial:
		return auditlog.OutcomePARTIAL, ""
	}
	return auditlog.OutcomeOK, ""
}

// Lost reports a record that could not be written: logged with everything
// it would have held (counted instead during an outage).
func (r *Recorder) Lost(ctx context.Context, e Entry, err error) {
	if r == nil {
		return
	}
	if r.outages.Failed("audit", err) != nil {
		return // counted with the outage, which is logged once
	}
	v, _ := auth.FromContext(ctx)
	outcome, code := r.outcome(e)
	r.log.Error("audit record not written", "actor", v.User, "source", v.Source, "tenant", v.Tenant, "role", v.Role, "action", e.Action,
		"task_ids", fmt.Sprint(e.TaskIDs), "outcome", outcome, "error_code", code, "remote_addr", auth.ClientAddr(ctx),
		"details", r.boundDetails(e.Details), "err", err)
}

// Code names err as the API does ("" without a namer).
func (r *Recorder) Code(err error) string {
	if r == nil || r.code == nil || err == nil {
		return ""
	}
	return r.code(err)
}

// Insert adds e's record to tx, the transaction that performs the action
// (store.Tx.Ent), so that the action and its record commit together or not
// at all. Its actor is the viewer of ctx.
func (r *Recorder) Insert(ctx context.Context, tx *ent.Tx, e Entry) error {
	if r == nil {
		return nil
	}
	if err := r.insert(context.WithoutCancel(ctx), tx, e); err != nil {
		return fmt.Errorf("audit: record %s with it: %w", e.Action, err)
	}
	return nil
}
