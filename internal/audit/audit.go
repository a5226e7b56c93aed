// Package audit records who asked for what: one AuditLog row per create,
// cancel, retry, bulk action, download, schedule change and flow-control
// change, whatever its outcome, with the
// actor's identity (source, tenant, user), role, client address and time.
// A bulk action writes one record listing its ids, with each id's outcome
// in details. Records are read through package access: an admin reads its
// tenant's, a platform administrator everyone's.
//
// A record is never lost: the record of an action that changes something
// commits in the transaction that makes the change (Begin attaches it to
// the store's write through a store.TxHook), so that the action fails if
// its record cannot be written; the record of an action that failed, or
// changed nothing, is written on its own (Record, End). Every write goes
// through the store's writer, which on SQLite is the process's one writer,
// retried when the database is busy.
package audit

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/outage"
	"github.com/taskgraph/taskgraph/internal/store"
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
}

// New returns a Recorder writing with write. code names an error the way
// the API does (NOT_FOUND, FORBIDDEN...). outages, when set, counts records
// lost to an outage instead of logging each.
func New(write Writer, masker *mask.Masker, code func(error) string, log *slog.Logger, outages *outage.Monitor) *Recorder {
	if log == nil {
		log = slog.Default()
	}
	return &Recorder{write: write, masker: masker, code: code, log: log, outages: outages}
}

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
	// may have happened. Not through a hook of the action's: on its own.
	ctx = store.WithTxHook(context.WithoutCancel(ctx), nil)
	err := r.write(ctx, func(tx *ent.Tx) error { return r.insert(ctx, tx, e) })
	if err != nil {
		r.lost(ctx, e, err)
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// insert adds e's record to tx.
func (r *Recorder) insert(ctx context.Context, tx *ent.Tx, e Entry) error {
	v, _ := auth.FromContext(ctx)
	outcome, code := r.outcome(e)
	return tx.AuditLog.Create().
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

// lost reports a record that could not be written.
func (r *Recorder) lost(ctx context.Context, e Entry, err error) {
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

// Pending is the record of an action under way. The action's store calls
// take Context(): the first write transaction that commits through it
// commits the record too (as Entry says at that moment, completed by Fill),
// and if the record cannot be inserted the transaction, and so the action,
// fails. End writes the record on its own when no transaction carried it.
type Pending struct {
	r   *Recorder
	ctx context.Context
	// Entry is what will be recorded; the action sets its fields as it
	// learns them (each transaction of the action records it as it is
	// when that transaction commits).
	Entry Entry
	// Fill, when set, completes the entry from what a transaction of the
	// action is about to commit (a created task's id and code, a bulk
	// action's per-id outcomes), and reports whether that transaction
	// carries the record: false for one that did not do the action (a
	// create that found its idempotency key taken meanwhile), whose record
	// then waits for another transaction or for End.
	Fill func(e *Entry, c store.Committing) bool

	committed bool
	written   Entry
}

// Begin starts the record of an action done on behalf of ctx's viewer.
func (r *Recorder) Begin(ctx context.Context, e Entry) *Pending {
	p := &Pending{r: r, Entry: e}
	if r == nil {
		p.ctx = ctx
		return p
	}
	var tentative Entry
	carried := false // by the transaction about to commit
	p.ctx = store.WithTxHook(ctx, &store.TxHook{
		BeforeCommit: func(txCtx context.Context, tx *ent.Tx, c store.Committing) error {
			carried = false
			if p.committed {
				return nil // recorded with an earlier transaction of this action
			}
			tentative = p.Entry
			if p.Fill != nil && !p.Fill(&tentative, c) {
				return nil
			}
			// The record's actor is the action's viewer, whatever context
			// the store writes with (its own reads run as the system).
			if err := r.insert(context.WithoutCancel(ctx), tx, tentative); err != nil {
				return fmt.Errorf("audit: record %s with it: %w", tentative.Action, err)
			}
			carried = true
			return nil
		},
		Committed: func() {
			if carried && !p.committed {
				p.committed, p.written = true, tentative
			}
		},
	})
	return p
}

// Context is the context the action's store calls take.
func (p *Pending) Context() context.Context { return p.ctx }

// Committed reports whether the record committed with the action.
func (p *Pending) Committed() bool { return p.committed }

// End finishes the record: err is the action's outcome. When no
// transaction of the action committed the record (the action failed, or
// wrote nothing), it is written now, on its own.
func (p *Pending) End(err error) error {
	if p.r == nil {
		return nil
	}
	if err != nil && p.Entry.Err == nil {
		p.Entry.Err = err
	}
	if p.committed {
		if p.Entry.Err != nil && p.written.Err == nil {
			// The action's change committed (with its record) and then
			// something else failed: the record stands, the rest is logged.
			p.r.log.Warn("action failed after its change and audit record committed", "action", p.Entry.Action,
				"task_ids", fmt.Sprint(p.written.TaskIDs), "err", p.Entry.Err)
		}
		return nil
	}
	return p.r.Record(p.ctx, p.Entry)
}
