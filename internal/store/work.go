package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/predicate"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/internal/events"
)

// maxLogRowsPerTxn bounds the log lines one transaction writes. Their
// parameters (6 a row) would allow maxBatchRows; half of it because a log
// line carries text (a message, fields) where the other batches carry a few
// numbers, so that a transaction of them, and the events it publishes,
// stays as small as theirs.
const maxLogRowsPerTxn = maxBatchRows / 2

// Beat is the answer to a heartbeat.
type Beat struct {
	// Lost are the executions that are no longer theirs to run (the watchdog
	// or a cancel moved the instance on). Their handlers must stop.
	Lost []Token
	// CancelRequested are the executions whose task was asked to cancel.
	CancelRequested []CancelRequest
	// Stalled are the executions the watchdog flagged as stalled (no
	// progress for their stallAfter); their type decides what follows.
	Stalled []Token
}

// CancelRequest is a cancel asked of a running execution.
type CancelRequest struct {
	Token  Token
	Reason string
}

// Pulse is one execution's heartbeat: it is alive, and its handler last
// reported progress or wrote a log line at MovedAt (zero: not since it
// started).
type Pulse struct {
	Token   Token
	MovedAt time.Time
}

// heartbeatSQL is the heartbeat's statement over the derived table v of
// pulses (iid, moved, live_status): the running executions among them are
// seen alive now, their progress time moved forward; keys reads them by id
// (see liveByKeys).
func (d sqlDialect) heartbeatSQL(v, keys string) string {
	return `
UPDATE task_instances SET heartbeat_at = ` + d.timeParam() + `,
	progress_at = CASE WHEN v.moved IS NOT NULL AND (task_instances.progress_at IS NULL OR v.moved > task_instances.progress_at)
		THEN v.moved ELSE task_instances.progress_at END
FROM ` + v + `
WHERE task_instances.id = v.iid AND task_instances.status = v.live_status` + keys + `
RETURNING id, version, task_id, CASE WHEN stalled_at IS NULL THEN 0 ELSE 1 END`
}

// Heartbeat records that the executions behind tokens are alive.
func (s *Store) Heartbeat(ctx context.Context, tokens []Token) (Beat, error) {
	pulses := make([]Pulse, len(tokens))
	for i, tok := range tokens {
		pulses[i] = Pulse{Token: tok}
	}
	return s.Pulse(ctx, pulses)
}

// Pulse records that executions are alive and when each last moved
// (progress_at, what stall detection reads; it never goes back).
func (s *Store) Pulse(ctx context.Context, pulses []Pulse) (Beat, error) {
	var all Beat
	for chunk := range slices.Chunk(pulses, maxBatchRows) {
		b, err := s.heartbeat(ctx, chunk)
		if err != nil {
			return all, err
		}
		all.Lost = append(all.Lost, b.Lost...)
		all.CancelRequested = append(all.CancelRequested, b.CancelRequested...)
		all.Stalled = append(all.Stalled, b.Stalled...)
	}
	return all, nil
}

func (s *Store) heartbeat(ctx context.Context, pulses []Pulse) (Beat, error) {
	ctx = internal(ctx)
	var beat Beat
	err := s.write(ctx, func(t *txn) error {
		beat = Beat{}
		cols := [][]any{make([]any, len(pulses)), make([]any, len(pulses)), make([]any, len(pulses))}
		for i, p := range pulses {
			cols[0][i] = int64(p.Token.InstanceID)
			if !p.MovedAt.IsZero() {
				cols[1][i] = p.MovedAt.UTC().Truncate(time.Microsecond)
			}
			cols[2][i] = string(lifecycle.Executing)
		}
		v, vArgs := s.d.valuesTable("v", []string{"iid", "moved", "live_status"}, []colType{colInt, colTime, colText}, cols)
		keys, keyArgs := s.d.liveByKeys("task_instances.id", cols[0])
		const returned = 4 // id, version, task_id, stalled: the RETURNING list
		rows, err := s.queryInts(ctx, t, returned, s.d.heartbeatSQL(v, keys), append(append([]any{s.Now()}, vArgs...), keyArgs...)...)
		if err != nil {
			return fmt.Errorf("heartbeat: %w", err)
		}
		alive := make(map[Token]int, len(rows))
		taskIDs := make([]int, 0, len(rows))
		for _, r := range rows {
			tok := Token{InstanceID: int(r[0]), Version: r[1]}
			alive[tok] = int(r[2])
			taskIDs = append(taskIDs, int(r[2]))
			if r[3] == 1 {
				beat.Stalled = append(beat.Stalled, tok)
			}
		}
		for _, p := range pulses {
			if _, ok := alive[p.Token]; !ok {
				beat.Lost = append(beat.Lost, p.Token)
			}
		}
		if len(taskIDs) == 0 {
			return nil
		}
		flagged, err := t.Task.Query().
			Where(task.IDIn(taskIDs...), task.CancelRequested(true)).
			Select(task.FieldID, task.FieldCancelReason).
			All(ctx)
		if err != nil {
			return fmt.Errorf("heartbeat: read cancel requests: %w", err)
		}
		reasons := make(map[int]string, len(flagged))
		for _, tk := range flagged {
			reasons[tk.ID] = tk.CancelReason
		}
		for tok, taskID := range alive {
			if reason, ok := reasons[taskID]; ok {
				beat.CancelRequested = append(beat.CancelRequested, CancelRequest{Token: tok, Reason: reason})
			}
		}
		return nil
	})
	return beat, err
}

// LogLine is a line of an execution's trace.
type LogLine struct {
	Token   Token
	TaskID  int
	Level   tasklog.Level
	Message string // already masked
	Fields  map[string]any
	At      time.Time
}

// Progress is the latest progress of an execution.
type Progress struct {
	Token       Token
	TaskID      int
	Done, Total int64
}

// RecordWork writes log lines and progress of running executions, in
// transactions of at most maxLogRowsPerTxn log lines or maxBatchRows
// progress rows. Writes of executions that are no
// longer EXECUTING with the token's version are dropped; their tokens are
// returned.
func (s *Store) RecordWork(ctx context.Context, logs []LogLine, progress []Progress) ([]Token, error) {
	rejected := map[Token]bool{}
	record := func(l []LogLine, p []Progress) error {
		r, err := s.recordWork(ctx, l, p)
		for _, tok := range r {
			rejected[tok] = true
		}
		return err
	}
	for chunk := range slices.Chunk(logs, maxLogRowsPerTxn) {
		if err := record(chunk, nil); err != nil {
			return nil, err
		}
	}
	for chunk := range slices.Chunk(progress, maxBatchRows) {
		if err := record(nil, chunk); err != nil {
			return nil, err
		}
	}
	out := make([]Token, 0, len(rejected))
	for tok := range rejected {
		out = append(out, tok)
	}
	return out, nil
}

func (s *Store) recordWork(ctx context.Context, logs []LogLine, progress []Progress) (rejected []Token, err error) {
	ctx = internal(ctx)
	if len(logs) == 0 && len(progress) == 0 {
		return nil, nil
	}
	err = s.write(ctx, func(t *txn) error {
		rejected = nil
		tokens := make(map[Token]bool)
		var ids []int
		for _, l := range logs {
			if _, ok := tokens[l.Token]; !ok {
				tokens[l.Token] = false
				ids = append(ids, l.Token.InstanceID)
			}
		}
		for _, p := range progress {
			if _, ok := tokens[p.Token]; !ok {
				tokens[p.Token] = false
				ids = append(ids, p.Token.InstanceID)
			}
		}
		q := t.TaskInstance.Query().Where(taskinstance.IDIn(ids...), taskinstance.StatusEQ(lifecycle.Executing))
		if s.d.postgres() {
			q = q.ForShare()
		}
		live, err := q.All(ctx)
		if err != nil {
			return fmt.Errorf("record work: lock instances: %w", err)
		}
		for _, in := range live {
			tok := Token{InstanceID: in.ID, Version: in.Version}
			if _, ok := tokens[tok]; ok {
				tokens[tok] = true
			}
		}
		for tok, ok := range tokens {
			if !ok {
				rejected = append(rejected, tok)
			}
		}

		var creates []*ent.TaskLogCreate
		for _, l := range logs {
			if !tokens[l.Token] {
				continue
			}
			at := l.At.UTC().Truncate(time.Microsecond)
			if l.At.IsZero() {
				at = s.Now()
			}
			c := t.TaskLog.Create().
				SetTaskID(l.TaskID).
				SetInstanceID(l.Token.InstanceID).
				SetLevel(l.Level).
				SetMessage(l.Message).
				SetCreatedAt(at)
			if len(l.Fields) > 0 {
				c.SetFields(l.Fields)
			}
			creates = append(creates, c)
		}
		if len(creates) > 0 {
			created, err := t.TaskLog.CreateBulk(creates...).Save(ctx)
			if err != nil {
				return fmt.Errorf("record work: write logs: %w", err)
			}
			t.logged(created...)
		}

		var accepted []Progress
		for _, p := range progress {
			if tokens[p.Token] {
				accepted = append(accepted, p)
			}
		}
		if len(accepted) == 0 {
			return nil
		}
		now := s.Now()
		row := s.d.intParam() + ", " + s.d.intParam() + ", " + s.d.intParam()
		const perRow = 3 // id, done, total: the columns of row
		args := make([]any, 0, len(accepted)*perRow+1)
		for _, p := range accepted {
			args = append(args, p.TaskID, p.Done, p.Total)
		}
		args = append(args, now)
		rows, err := t.QueryContext(ctx, s.d.rebind(`
WITH v(id, done, total) AS (VALUES `+valuesRows(row, len(accepted))+`)
UPDATE tasks SET progress_done = v.done, progress_total = v.total, updated_at = `+s.d.timeParam()+`, version = tasks.version + 1
FROM v
WHERE tasks.id = v.id AND tasks.status = `+sqlExecuting+`
`+s.d.returningAll("tasks")), args...)
		if err != nil {
			return fmt.Errorf("record work: progress: %w", err)
		}
		tasks, err := ent.ScanTaskRows(s.client, rows)
		if err != nil {
			return fmt.Errorf("record work: progress: %w", err)
		}
		t.changed(events.Progressed, tasks...)
		return nil
	})
	return rejected, err
}

// runningInstances selects the running instances with the status as a
// literal, so that every plan, cached or not, reads the partial index of
// running instances (a placeholder would not prove its predicate).
var runningInstances = predicate.TaskInstance(func(s *entsql.Selector) {
	s.Where(entsql.ExprP(s.C(taskinstance.FieldStatus) + " = " + sqlExecuting))
})

// Executing lists every running execution with its task, for the watchdog.
// There are at most as many as all workers' slots together.
func (s *Store) Executing(ctx context.Context) ([]Claimed, error) {
	ctx = internal(ctx)
	insts, err := s.client.TaskInstance.Query().
		Where(runningInstances).
		WithTask().
		All(ctx)
	if err != nil {
		return nil, fmt.Errorf("list executing instances: %w", err)
	}
	out := make([]Claimed, 0, len(insts))
	for _, in := range insts {
		out = append(out, Claimed{Task: in.Edges.Task, Instance: in})
	}
	return out, nil
}
