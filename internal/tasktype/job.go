package tasktype

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/tasklog"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/store"
)

// Job is what a handler is given: the task and execution it runs, and the
// means to report progress, write log lines and set its result. Every write
// carries the execution's fencing token: once the execution has been moved
// on (timed out, cancelled), its writes are dropped.
type Job struct {
	// Task is the task as committed by the claim. Its input is masked;
	// the handler's typed input is the unmasked one.
	Task JobTask
	// Instance is this execution.
	Instance JobInstance
	// Parents are the results of the tasks this one waited for, by their
	// step key (a parent outside a workflow: by its code), as stored; nil
	// for a task without parents.
	Parents map[string]json.RawMessage
	// Outcomes are how those tasks ended (or stand), by the same keys:
	// a step that runs whatever its parents did (RUN_ANYWAY) reads a
	// failed or cancelled parent's error here.
	Outcomes map[string]ParentOutcome

	token store.Token
	w     JobWriter
	mask  *mask.Masker
	// moved is when the handler last reported progress or wrote a log
	// line (unix nanoseconds of the store's clock; 0: not yet). Heartbeats
	// carry it to progress_at, which stall detection reads.
	moved atomic.Int64

	mu           sync.Mutex
	result       json.RawMessage
	resultStatus string
	// rowsImported and rowsExported are what CountRows added up.
	rowsImported, rowsExported int64
}

// ParentOutcome is how a parent of a job's task ended: its state, and its
// result (SUCCESS) or its error (FAILED: its last error; CANCELLED: the
// reason), as stored (masked).
type ParentOutcome struct {
	ID     int
	Code   string
	Status lifecycle.Status
	Result json.RawMessage
	Error  string
}

// JobWriter is where a Job's progress and log lines go: the worker pool
// batches them and writes them fenced by the token they carry.
type JobWriter interface {
	// Progress queues an execution's progress; only the latest per token
	// need be written.
	Progress(store.Progress)
	// Log queues a log line, already masked; the writer makes its text
	// storable.
	Log(store.LogLine)
	// Now is the store's clock.
	Now() time.Time
}

// JobTask is what a handler knows of its task: a copy of the task as the
// claim committed it.
type JobTask struct {
	ID    int
	Code  string
	Type  string
	Title string
	BizID string
	// Input is masked.
	Input    json.RawMessage
	Priority int
	// The owner's identity (OwnerSource, Tenant, Owner) and the role it
	// had when it created the task.
	Owner, OwnerSource, OwnerRole, Tenant string
	CreatedAt                             time.Time
}

// JobInstance is what a handler knows of its execution.
type JobInstance struct {
	ID int
	// No is its number among the task's executions, Attempt its attempt
	// of the retry policy.
	No, Attempt int
	WorkerID    string
	StartedAt   time.Time
	// Deadline is when its timeout ends it.
	Deadline time.Time
}

// NewJob returns the Job of a claimed execution, whose writes go to w and
// are masked by m, and the JobControl through which the pool reads what
// the handler left.
func NewJob(task JobTask, instance JobInstance, token store.Token, w JobWriter, m *mask.Masker) (*Job, JobControl) {
	j := &Job{Task: task, Instance: instance, token: token, w: w, mask: m}
	return j, JobControl{j: j}
}

// Owner is the viewer who created the task — its identity (source, tenant,
// user) and the role it had then. A handler runs as the process itself;
// one that reads data on the owner's behalf (an export, a report) reads as
// Owner, so that it shows the owner no more than the API would: an
// operator its own tasks, an admin its tenant's.
func (j *Job) Owner() auth.Viewer {
	role := auth.Role(j.Task.OwnerRole)
	switch role {
	case auth.RoleAdmin, auth.RolePlatform, auth.RoleOperator, auth.RoleViewer:
	default:
		// Unknown, empty, or the process's own: no more than an operator.
		role = auth.RoleOperator
	}
	return auth.Viewer{User: j.Task.Owner, Role: role, Source: j.Task.OwnerSource, Tenant: j.Task.Tenant}
}

// Token is the execution's fencing token.
func (j *Job) Token() store.Token { return j.token }

// Attempt is the attempt number of this execution (1 for the first).
func (j *Job) Attempt() int { return j.Instance.Attempt }

// Progress reports done out of total units of work. Only the latest value
// is written, at most a few times a second.
func (j *Job) Progress(done, total int64) {
	j.touch()
	j.w.Progress(store.Progress{Token: j.token, TaskID: j.Task.ID, Done: done, Total: total})
}

// Log writes a line to the task's trace. keyvals are alternating keys and
// values, as with log/slog. The message and values are masked.
func (j *Job) Log(level tasklog.Level, msg string, keyvals ...any) {
	j.touch()
	var fields map[string]any
	if len(keyvals) > 0 {
		fields = make(map[string]any, len(keyvals)/2)
		for i := 0; i < len(keyvals); i += 2 {
			key := fmt.Sprint(keyvals[i])
			var val any = "(missing)"
			if i+1 < len(keyvals) {
				val = keyvals[i+1]
			}
			fields[key] = jsonValue(val)
		}
		fields = j.mask.Fields(fields)
	}
	j.w.Log(store.LogLine{
		Token:   j.token,
		TaskID:  j.Task.ID,
		Level:   level,
		Message: j.mask.String(msg),
		Fields:  fields,
		At:      time.Now(),
	})
}

// touch records that the handler moved now.
func (j *Job) touch() { j.moved.Store(j.w.Now().UnixNano()) }

// Touch records that the handler moves, for stall detection, without a
// log line or progress.
func (j *Job) Touch() { j.touch() }

// Info logs at INFO level.
func (j *Job) Info(msg string, keyvals ...any) { j.Log(tasklog.LevelINFO, msg, keyvals...) }

// Warn logs at WARN level.
func (j *Job) Warn(msg string, keyvals ...any) { j.Log(tasklog.LevelWARN, msg, keyvals...) }

// Error logs at ERROR level.
func (j *Job) Error(msg string, keyvals ...any) { j.Log(tasklog.LevelERROR, msg, keyvals...) }

// SetResult records the execution's result (any JSON-encodable value). It is
// stored, masked, with the execution's outcome, whether success or failure.
func (j *Job) SetResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("set result: %w", err)
	}
	masked, _, err := j.mask.JSON(b)
	if err != nil {
		return fmt.Errorf("set result: %w", err)
	}
	j.mu.Lock()
	j.result = masked
	j.mu.Unlock()
	return nil
}

// SetResultStatus records the handler's verdict on its work — SUCCESS,
// PARTIAL_SUCCESS or FAILED — written to the task's result_status with the
// execution's outcome (so that, say, imports with bad rows can be listed),
// whether the execution succeeded or failed.
func (j *Job) SetResultStatus(s string) {
	j.mu.Lock()
	j.resultStatus = s
	j.mu.Unlock()
}

// CountRows adds rows the execution wrote — imported into an import's
// target, exported into an export's file — to what its end counts in the
// task history (rows imported and exported, per type and tenant: the cost
// report). A handler counts the rows it committed, whatever its outcome:
// rows an earlier execution of the task wrote are that execution's.
func (j *Job) CountRows(imported, exported int64) {
	j.mu.Lock()
	j.rowsImported += imported
	j.rowsExported += exported
	j.mu.Unlock()
}

// JobControl is the pool's side of a Job: the masker its writes go
// through, and what the handler left — its result, its verdict, when it
// last moved. Handlers never see it.
type JobControl struct{ j *Job }

// Masker is the masker of the job's writes.
func (c JobControl) Masker() *mask.Masker { return c.j.mask }

// SetMasker replaces the masker of the job's writes (with one that also
// masks the values of the unsealed input, say). Call it before the handler
// runs.
func (c JobControl) SetMasker(m *mask.Masker) { c.j.mask = m }

// Result is the result the handler set (masked), or nil.
func (c JobControl) Result() json.RawMessage {
	c.j.mu.Lock()
	defer c.j.mu.Unlock()
	return c.j.result
}

// ResultStatus is the verdict the handler set with SetResultStatus, or "".
func (c JobControl) ResultStatus() string {
	c.j.mu.Lock()
	defer c.j.mu.Unlock()
	return c.j.resultStatus
}

// Rows is what the handler counted with CountRows: rows imported and
// rows exported.
func (c JobControl) Rows() (imported, exported int64) {
	c.j.mu.Lock()
	defer c.j.mu.Unlock()
	return c.j.rowsImported, c.j.rowsExported
}

// MovedAt is when the handler last reported progress or wrote a log line
// (the store's clock), or zero.
func (c JobControl) MovedAt() time.Time {
	if n := c.j.moved.Load(); n != 0 {
		return time.Unix(0, n).UTC()
	}
	return time.Time{}
}

// LastMoved is when the execution last moved: its last progress or log
// line, else its start (zero if neither is known).
func (c JobControl) LastMoved() time.Time {
	if t := c.MovedAt(); !t.IsZero() {
		return t
	}
	return c.j.Instance.StartedAt
}

// jsonValue keeps values that encode to JSON and turns the rest (errors,
// durations...) into their text.
func jsonValue(v any) any {
	switch x := v.(type) {
	case nil, bool, string, int, int32, int64, uint, uint32, uint64, float32, float64:
		return x
	case error:
		return x.Error()
	case fmt.Stringer:
		return x.String()
	}
	if _, err := json.Marshal(v); err != nil {
		return fmt.Sprint(v)
	}
	return v
}
