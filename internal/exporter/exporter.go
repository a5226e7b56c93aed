// Package exporter runs the export and report task types: an export pages
// through a filtered query over an import target (contacts), over the
// tasks themselves or over the audit trail (admins only) and streams it into an xlsx or CSV artifact, escaping
// cells against formula injection; a report aggregates (task outcomes per
// type and day, contacts per city) into an xlsx with a summary sheet.
package exporter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/ent/predicate"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/importer"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/spreadsheet"
	"github.com/taskgraph/taskgraph/internal/tasktype"

	"entgo.io/ent/dialect/sql"
	"entgo.io/ent/dialect/sql/sqljson"
)

// Task type names.
const (
	ExportType = "export"
	ReportType = "report"
)

// PageSizeDefault is how many rows one query reads.
const PageSizeDefault = 2000

// Config configures an Exporter.
type Config struct {
	Client    *ent.Client
	Artifacts *artifact.Store
	// Postgres selects the SQL dialect of the report's aggregates.
	Postgres bool
	// PageSize is how many rows one query reads. Default: PageSizeDefault.
	PageSize int
	// Masker masks every text cell of an export: a file that leaves the
	// system shows no more than the API does. Default: mask.Default().
	Masker *mask.Masker
	Logger *slog.Logger
}

// Exporter runs exports and reports.
type Exporter struct {
	cfg Config

	mu       sync.RWMutex
	sources  map[string]Source // of the program's own (AddSource)
	registry *tasktype.Registry
}

// builtinSources are what an export reads without a Source of its own.
var builtinSources = []string{"contacts", "tasks", "audit"}

// Source is an export source of the program's own: a table of its, say.
type Source struct {
	Name        string
	Description string
	// Columns is the header row.
	Columns []string
	// Rows writes the rows q selects through row, one call a row, page by
	// page: what the export's owner (q.Owner) may see, created in
	// [q.CreatedAfter, q.CreatedBefore) when they are given. Text cells
	// are masked and escaped against formula injection by the exporter.
	Rows func(ctx context.Context, q SourceQuery, row func(cells ...any) error) error
}

// SourceQuery is what an export asks of a Source.
type SourceQuery struct {
	// Owner is the export task's owner, as whom it reads.
	Owner                       auth.Viewer
	CreatedAfter, CreatedBefore *time.Time
	// Params are the export's filter's params, the source's to read.
	Params map[string]string
}

var sourceName = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,62}$`)

// AddSource adds an export source: exports may name it from now on (the
// export type's schema lists it).
func (e *Exporter) AddSource(src Source) error {
	switch {
	case !sourceName.MatchString(src.Name):
		return fmt.Errorf("exporter: source name %q must match %s", src.Name, sourceName)
	case slices.Contains(builtinSources, src.Name):
		return fmt.Errorf("exporter: source %s is built in", src.Name)
	case src.Rows == nil || len(src.Columns) == 0:
		return fmt.Errorf("exporter: source %s needs columns and rows", src.Name)
	}
	e.mu.Lock()
	if _, dup := e.sources[src.Name]; dup {
		e.mu.Unlock()
		return fmt.Errorf("exporter: source %s registered twice", src.Name)
	}
	if e.sources == nil {
		e.sources = map[string]Source{}
	}
	e.sources[src.Name] = src
	r := e.registry
	e.mu.Unlock()
	if r != nil {
		t, err := e.exportType()
		if err != nil {
			return err
		}
		r.Replace(t)
	}
	return nil
}

// sourceNames are every source an export may name.
func (e *Exporter) sourceNames() []string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	names := slices.Clone(builtinSources)
	for n := range e.sources {
		names = append(names, n)
	}
	slices.Sort(names[len(builtinSources):])
	return names
}

// exportType is the export task type, its input's source one of the
// sources registered now.
func (e *Exporter) exportType() (*tasktype.Type, error) {
	names := e.sourceNames()
	return tasktype.New(ExportType, storeFailuresWait(e.export),
		tasktype.WithDescription("Exports contacts, tasks, (admins) the audit trail, or a source of the program's own, matching a filter, to an xlsx or CSV file (download it with artifactDownloadUrl, kind EXPORT)."),
		tasktype.WithTimeout(time.Hour),
		tasktype.WithConcurrency(4),
		tasktype.WithSchemaPatch(func(s map[string]any) {
			if props, ok := s["properties"].(map[string]any); ok {
				if src, ok := props["source"].(map[string]any); ok {
					enum := make([]any, len(names))
					for i, n := range names {
						enum[i] = n
					}
					src["enum"] = enum
				}
			}
		}))
}

// New validates cfg.
func New(cfg Config) (*Exporter, error) {
	if cfg.Client == nil || cfg.Artifacts == nil {
		return nil, errors.New("exporter: client and artifacts are required")
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = PageSizeDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Masker == nil {
		cfg.Masker = mask.Default()
	}
	return &Exporter{cfg: cfg}, nil
}

// Register adds the export and report task types to r; a source added
// later replaces the export type with one whose schema lists it.
func (e *Exporter) Register(r *tasktype.Registry) {
	t, err := e.exportType()
	if err != nil {
		panic(err.Error()) // the built-in schema: program structure
	}
	if err := r.Add(t); err != nil {
		panic(err.Error())
	}
	e.mu.Lock()
	e.registry = r
	e.mu.Unlock()
	tasktype.Register(r, ReportType, storeFailuresWait(e.report),
		tasktype.WithDescription("Writes an aggregate report (task outcomes per type and day, contacts per city) as xlsx with a summary sheet (kind REPORT)."),
		tasktype.WithTimeout(30*time.Minute),
		tasktype.WithConcurrency(2))
}

// storeFailuresWait makes a failure of the blob store a resource error of
// the execution that met it: retried later, with the longer backoff.
func storeFailuresWait[I any](h func(context.Context, *tasktype.Job, I) error) func(context.Context, *tasktype.Job, I) error {
	return func(ctx context.Context, job *tasktype.Job, in I) error {
		return artifact.AsResource(h(ctx, job, in))
	}
}

// ExportInput is the input of an export task.
type ExportInput struct {
	// Source is what to export: an import target (contacts), tasks, the
	// audit trail (admins only: the rule of the auditLogs query), or a
	// source of the program's own (the schema lists those registered).
	Source string       `json:"source" jsonschema:"enum=contacts,enum=tasks,enum=audit"`
	Format string       `json:"format,omitempty" jsonschema:"enum=xlsx,enum=csv,description=Default xlsx"`
	Filter ExportFilter `json:"filter,omitempty"`
}

// ExportFilter selects rows. Fields that do not apply to the source are
// refused.
type ExportFilter struct {
	// Contacts.
	City         string `json:"city,omitempty" jsonschema:"maxLength=50"`
	ImportTaskID int    `json:"importTaskId,omitempty" jsonschema:"minimum=1"`
	// Tasks.
	Type         string   `json:"type,omitempty" jsonschema:"maxLength=64"`
	Status       []string `json:"status,omitempty" jsonschema:"maxItems=6"`
	ResultStatus string   `json:"resultStatus,omitempty" jsonschema:"enum=SUCCESS,enum=PARTIAL_SUCCESS,enum=FAILED"`
	// Audit: the actor, any of the actions, the outcome, a task acted on.
	Actor   string   `json:"actor,omitempty" jsonschema:"maxLength=200"`
	Action  []string `json:"action,omitempty" jsonschema:"maxItems=20"`
	Outcome string   `json:"outcome,omitempty" jsonschema:"enum=OK,enum=PARTIAL,enum=FAILED"`
	TaskID  int      `json:"taskId,omitempty" jsonschema:"minimum=1"`
	// All: created_at in [createdAfter, createdBefore).
	CreatedAfter  *time.Time `json:"createdAfter,omitempty"`
	CreatedBefore *time.Time `json:"createdBefore,omitempty"`
	// A source of the program's own: what it takes, by name.
	Params map[string]string `json:"params,omitempty" jsonschema:"maxProperties=20"`
}

// Validate checks what the schema cannot.
func (in *ExportInput) Validate() error {
	f := in.Filter
	contacts := f.City != "" || f.ImportTaskID != 0
	tasks := f.Type != "" || len(f.Status) > 0 || f.ResultStatus != ""
	audit := f.Actor != "" || len(f.Action) > 0 || f.Outcome != "" || f.TaskID != 0
	if len(f.Params) > 0 && slices.Contains(builtinSources, in.Source) {
		return fmt.Errorf("filter: params apply to a source of the program's own, not to %s", in.Source)
	}
	switch in.Source {
	case "contacts":
		if tasks || audit {
			return errors.New("filter: only city, importTaskId, createdAfter and createdBefore apply to contacts")
		}
	case "audit":
		if contacts || tasks {
			return errors.New("filter: only actor, action, outcome, taskId, createdAfter and createdBefore apply to the audit trail")
		}
		for _, a := range f.Action {
			if auditlog.ActionValidator(auditlog.Action(a)) != nil {
				return fmt.Errorf("filter: unknown action %q", a)
			}
		}
	case "tasks":
		if contacts || audit {
			return errors.New("filter: only type, status, resultStatus, createdAfter and createdBefore apply to tasks")
		}
		for _, s := range f.Status {
			if !lifecycle.Status(s).Valid() {
				return fmt.Errorf("filter: unknown status %q", s)
			}
		}
	default: // a source of the program's own
		if contacts || tasks || audit {
			return fmt.Errorf("filter: only createdAfter, createdBefore and params apply to %s", in.Source)
		}
	}
	return nil
}

// ExportResult is an export's result.
type ExportResult struct {
	Rows   int    `json:"rows"`
	File   string `json:"file"`
	Format string `json:"format"`
}

func (e *Exporter) export(ctx context.Context, job *tasktype.Job, in ExportInput) error {
	format := spreadsheet.XLSX
	if in.Format == "csv" {
		format = spreadsheet.CSV
	}
	name := job.Task.Code + "-" + in.Source + "." + string(format)
	rows := 0
	a, err := e.cfg.Artifacts.Write(ctx, artifact.Meta{
		TaskID: &job.Task.ID, Owner: job.Task.Owner, OwnerSource: job.Task.OwnerSource, Tenant: job.Task.Tenant, TaskType: job.Task.Type, Kind: artifact.KindExport,
		Filename: name, ContentType: format.ContentType(),
	}, func(w io.Writer) error {
		sheet, err := spreadsheet.NewWriter(format, w, in.Source)
		if err != nil {
			return err
		}
		out := maskedWriter{Writer: sheet, masker: e.cfg.Masker}
		// The rows are read as the task's owner: an operator's export
		// holds that operator's tasks and imported contacts only.
		asOwner := auth.NewContext(ctx, job.Owner())
		switch in.Source {
		case "contacts":
			rows, err = e.exportContacts(asOwner, job, out, in.Filter)
		case "tasks":
			rows, err = e.exportTasks(asOwner, job, out, in.Filter)
		case "audit":
			rows, err = e.exportAudit(asOwner, job, out, in.Filter)
		default:
			rows, err = e.exportSource(asOwner, job, out, in)
		}
		if err != nil {
			return err
		}
		return out.Close()
	})
	if err != nil {
		return err
	}
	// The rows are exported once their file is stored: a failed write
	// stored nothing and counts none.
	job.CountRows(0, int64(rows))
	if err := e.cfg.Artifacts.Replace(ctx, job.Task.ID, artifact.KindExport, a.ID); err != nil {
		job.Warn("could not remove an earlier export", "err", err)
	}
	job.Info("export written", "rows", rows, "file", name)
	job.SetResultStatus("SUCCESS")
	return job.SetResult(ExportResult{Rows: rows, File: name, Format: string(format)})
}

// exportSource writes a source of the program's own.
func (e *Exporter) exportSource(ctx context.Context, job *tasktype.Job, out spreadsheet.Writer, in ExportInput) (int, error) {
	e.mu.RLock()
	src, ok := e.sources[in.Source]
	e.mu.RUnlock()
	if !ok {
		return 0, tasktype.NonRetryable(fmt.Errorf("unknown export source %q", in.Source))
	}
	f := in.Filter
	header := make([]any, len(src.Columns))
	for i, c := range src.Columns {
		header[i] = c
	}
	if err := out.Row(header...); err != nil {
		return 0, err
	}
	v, _ := auth.FromContext(ctx)
	n := 0
	err := src.Rows(ctx, SourceQuery{Owner: v, CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore, Params: f.Params}, func(cells ...any) error {
		if err := out.Row(cells...); err != nil {
			return err
		}
		n++
		if n%e.cfg.PageSize == 0 {
			job.Progress(int64(n), int64(n))
		}
		return ctx.Err()
	})
	if err != nil {
		return n, fmt.Errorf("export %s: %w", src.Name, err)
	}
	job.Progress(int64(n), int64(n))
	return n, nil
}

// exportContacts pages through contacts (never the whole table in memory),
// with the contacts target's own SQL (the table is not in the ent schema),
// as the viewer of ctx may see them.
func (e *Exporter) exportContacts(ctx context.Context, job *tasktype.Job, out spreadsheet.Writer, f ExportFilter) (int, error) {
	r := e.contacts()
	filter := importer.ContactFilter{City: f.City, ImportTaskID: f.ImportTaskID, CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore}
	total, err := r.Count(ctx, filter)
	if err != nil {
		return 0, err
	}
	if err := out.Row("ID", "姓名 Name", "手机 Phone", "邮箱 E-mail", "公司 Company", "城市 City", "标签 Tags", "性别 Gender", "生日 Birthday", "导入任务 Import task", "行号 Row", "创建时间 Created at"); err != nil {
		return 0, err
	}
	n := 0
	// Keyset pagination on an order an index provides: the rows of one
	// import by source row (the unique (task_id, row_no) index), others
	// by id. Either way a page costs one index range, not a sort of all
	// that is left.
	key := func(c importer.Contact) int { return c.ID }
	if f.ImportTaskID != 0 {
		key = func(c importer.Contact) int { return c.RowNo }
	}
	err = pages(ctx, e.cfg.PageSize, func(ctx context.Context, after int) ([]importer.Contact, error) {
		return r.Page(ctx, filter, after, e.cfg.PageSize)
	}, key, func(page []importer.Contact) error {
		for _, c := range page {
			if err := out.Row(c.ID, c.Name, c.Phone, c.Email, c.Company, c.City, strings.Join(c.Tags, ","), c.Gender, c.Birthday, c.TaskID, c.RowNo, c.CreatedAt); err != nil {
				return err
			}
		}
		n += len(page)
		job.Progress(int64(n), int64(max(total, n)))
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("export contacts: %w", err)
	}
	return n, nil
}

// contacts reads the contacts table through the client's connections.
func (e *Exporter) contacts() importer.ContactReader {
	return importer.ContactReader{DB: e.cfg.Client, Postgres: e.cfg.Postgres}
}

func (e *Exporter) exportTasks(ctx context.Context, job *tasktype.Job, out spreadsheet.Writer, f ExportFilter) (int, error) {
	preds := []predicate.Task{}
	if f.Type != "" {
		preds = append(preds, task.Type(f.Type))
	}
	if len(f.Status) > 0 {
		st := make([]lifecycle.Status, len(f.Status))
		for i, s := range f.Status {
			st[i] = lifecycle.Status(s)
		}
		preds = append(preds, task.StatusIn(st...))
	}
	if f.ResultStatus != "" {
		preds = append(preds, task.ResultStatusEQ(task.ResultStatus(f.ResultStatus)))
	}
	if f.CreatedAfter != nil {
		preds = append(preds, task.CreatedAtGTE(*f.CreatedAfter))
	}
	if f.CreatedBefore != nil {
		preds = append(preds, task.CreatedAtLT(*f.CreatedBefore))
	}
	total, err := e.cfg.Client.Task.Query().Where(preds...).Count(ctx)
	if err != nil {
		return 0, fmt.Errorf("count tasks: %w", err)
	}
	if err := out.Row("ID", "Code", "Type", "Title", "Status", "Result status", "Owner", "Priority", "Progress", "Last error", "Created at", "Finished at"); err != nil {
		return 0, err
	}
	n := 0
	err = pages(ctx, e.cfg.PageSize, func(ctx context.Context, after int) ([]*ent.Task, error) {
		return e.cfg.Client.Task.Query().
			Where(append(preds, task.IDGT(after))...).
			Select(task.FieldID, task.FieldCode, task.FieldType, task.FieldTitle, task.FieldStatus, task.FieldResultStatus,
				task.FieldOwner, task.FieldPriority, task.FieldProgressDone, task.FieldProgressTotal, task.FieldLastError,
				task.FieldCreatedAt, task.FieldFinishedAt).
			Order(ent.Asc(task.FieldID)).
			Limit(e.cfg.PageSize).
			All(ctx)
	}, func(t *ent.Task) int { return t.ID }, func(page []*ent.Task) error {
		for _, t := range page {
			rs := ""
			if t.ResultStatus != nil {
				rs = string(*t.ResultStatus)
			}
			progress := ""
			if t.ProgressTotal > 0 {
				progress = fmt.Sprintf("%d/%d", t.ProgressDone, t.ProgressTotal)
			}
			if err := out.Row(t.ID, t.Code, t.Type, t.Title, string(t.Status), rs, t.Owner, t.Priority, progress, t.LastError, t.CreatedAt, t.FinishedAt); err != nil {
				return err
			}
		}
		n += len(page)
		job.Progress(int64(n), int64(max(total, n)))
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("export tasks: %w", err)
	}
	return n, nil
}

// exportAudit pages through the audit trail, oldest first. Only admins
// read it, their tenant's records (a platform administrator every
// tenant's): the rule of the auditLogs query, which package access applies
// to the owner's reads.
func (e *Exporter) exportAudit(ctx context.Context, job *tasktype.Job, out spreadsheet.Writer, f ExportFilter) (int, error) {
	if v := job.Owner(); !v.IsAdmin() {
		return 0, tasktype.NonRetryable(&auth.ForbiddenError{Role: v.Role, Action: "read the audit log"})
	}
	preds := []predicate.AuditLog{}
	if f.Actor != "" {
		preds = append(preds, auditlog.Actor(f.Actor))
	}
	if len(f.Action) > 0 {
		as := make([]auditlog.Action, len(f.Action))
		for i, a := range f.Action {
			as[i] = auditlog.Action(a)
		}
		preds = append(preds, auditlog.ActionIn(as...))
	}
	if f.Outcome != "" {
		preds = append(preds, auditlog.OutcomeEQ(auditlog.Outcome(f.Outcome)))
	}
	if f.TaskID != 0 {
		preds = append(preds, func(s *sql.Selector) { s.Where(sqljson.ValueContains(auditlog.FieldTaskIds, f.TaskID)) })
	}
	if f.CreatedAfter != nil {
		preds = append(preds, auditlog.CreatedAtGTE(*f.CreatedAfter))
	}
	if f.CreatedBefore != nil {
		preds = append(preds, auditlog.CreatedAtLT(*f.CreatedBefore))
	}
	total, err := e.cfg.Client.AuditLog.Query().Where(preds...).Count(ctx)
	if err != nil {
		return 0, fmt.Errorf("count audit records: %w", err)
	}
	if err := out.Row("ID", "Time", "Actor", "Role", "Source", "Tenant", "Action", "Outcome", "Error code", "Tasks", "Address", "Details"); err != nil {
		return 0, err
	}
	n := 0
	err = pages(ctx, e.cfg.PageSize, func(ctx context.Context, after int) ([]*ent.AuditLog, error) {
		return e.cfg.Client.AuditLog.Query().
			Where(append(preds, auditlog.IDGT(after))...).
			Order(ent.Asc(auditlog.FieldID)).
			Limit(e.cfg.PageSize).
			All(ctx)
	}, func(a *ent.AuditLog) int { return a.ID }, func(page []*ent.AuditLog) error {
		for _, a := range page {
			ids := make([]string, len(a.TaskIds))
			for i, id := range a.TaskIds {
				ids[i] = fmt.Sprint(id)
			}
			details := ""
			if len(a.Details) > 0 {
				b, err := json.Marshal(a.Details)
				if err != nil {
					return err
				}
				details = string(b)
			}
			if err := out.Row(a.ID, a.CreatedAt, a.Actor, string(a.Role), a.Source, a.Tenant, string(a.Action), string(a.Outcome), a.ErrorCode,
				strings.Join(ids, ","), a.RemoteAddr, details); err != nil {
				return err
			}
		}
		n += len(page)
		job.Progress(int64(n), int64(max(total, n)))
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("export audit trail: %w", err)
	}
	return n, nil
}

// pages reads a query page by page (keyset pagination on id: each page is
// one indexed query, never the whole table in memory), fetching the next
// page while write handles the current one. Cancel is honoured between
// pages.
func pages[T any](ctx context.Context, size int, fetch func(ctx context.Context, after int) ([]T, error), id func(T) int, write func([]T) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type page struct {
		rows []T
		err  error
	}
	ch := make(chan page, 1)
	go func() {
		defer close(ch)
		after := 0
		for {
			rows, err := fetch(ctx, after)
			select {
			case ch <- page{rows, err}:
			case <-ctx.Done():
				return
			}
			if err != nil || len(rows) < size {
				return
			}
			after = id(rows[len(rows)-1])
		}
	}()
	for p := range ch {
		if p.err != nil {
			return p.err
		}
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		if err := write(p.rows); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// maskedWriter masks the text cells of every row: imported contacts keep
// their phone numbers and addresses for the business, but an export is a
// file that leaves the system.
type maskedWriter struct {
	spreadsheet.Writer
	masker *mask.Masker
}

func (w maskedWriter) Row(cells ...any) error {
	for i, c := range cells {
		if s, ok := c.(string); ok {
			cells[i] = w.masker.String(s)
		}
	}
	return w.Writer.Row(cells...)
}
