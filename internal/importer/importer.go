// Package importer runs batch imports: the importFile upload (stored in the
// artifact store, checked, then turned into an "import" task), the import
// targets (columns with Chinese headers and aliases, per-column validation,
// a write-once key), the import task type that streams, validates and
// writes rows in chunks, and the error report listing every refused row.
package importer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	entartifact "github.com/taskgraph/taskgraph/ent/artifact"
	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/spreadsheet"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// TaskType is the name of the import task type.
const TaskType = "import"

// Config configures an Importer.
type Config struct {
	Engine    *engine.Engine
	Artifacts *artifact.Store
	Targets   *Registry
	Masker    *mask.Masker
	// Limits bound what a file may make the reader do.
	Limits spreadsheet.Limits
	// MaxUploadSize bounds an uploaded file. Default: MaxUploadSizeDefault.
	MaxUploadSize int64
	// ChunkSize is how many rows are written in one statement.
	// Default: ChunkSizeDefault.
	ChunkSize int
	// ChunkHook, when set, is called before each chunk is written, with
	// the chunk's number (from 1). An error fails the execution there, as a
	// crash would: tests use it to stop imports half-way.
	ChunkHook func(ctx context.Context, job *tasktype.Job, chunk int) error
	Logger    *slog.Logger
}

// Defaults of Config.
const (
	MaxUploadSizeDefault = 50 << 20
	ChunkSizeDefault     = 1000
)

// Importer uploads files and runs import tasks.
type Importer struct {
	cfg Config
	log *slog.Logger
}

// New validates cfg.
func New(cfg Config) (*Importer, error) {
	if cfg.Engine == nil || cfg.Artifacts == nil || cfg.Targets == nil || cfg.Masker == nil {
		return nil, errors.New("importer: engine, artifacts, targets and masker are required")
	}
	if cfg.MaxUploadSize <= 0 {
		cfg.MaxUploadSize = MaxUploadSizeDefault
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = ChunkSizeDefault
	}
	cfg.Limits = cfg.Limits.WithDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Importer{cfg: cfg, log: cfg.Logger.With("component", "importer")}, nil
}

// Limits are the file limits in force.
func (im *Importer) Limits() spreadsheet.Limits { return im.cfg.Limits }

// MaxUploadSize is the upload limit in force.
func (im *Importer) MaxUploadSize() int64 { return im.cfg.MaxUploadSize }

// Targets are the registered targets.
func (im *Importer) Targets() *Registry { return im.cfg.Targets }

// Input is the input of an import task. It names the uploaded file by its
// checksum (what it is), not by where it is stored: the same file with the
// same target and options is the same input, which is what makes an
// idempotency key recognise a re-upload.
type Input struct {
	Target  string   `json:"target" jsonschema:"minLength=1,maxLength=64,description=Registered import target such as contacts"`
	Options Options  `json:"options,omitempty"`
	File    FileInfo `json:"file"`
}

// Options are what a client may set about an import.
type Options struct {
	// DryRun validates every row and writes the error report, but writes
	// no row.
	DryRun bool `json:"dryRun,omitempty" jsonschema:"description=Validate only: write the error report but no rows"`
	// MaxFailedRows, when set, is how many refused rows an import may
	// have before a person must decide on it: past it, the import waits
	// for review (REVIEW_PENDING) with its counts and its error report
	// as evidence, instead of ending PARTIAL_SUCCESS or FAILED.
	MaxFailedRows *int `json:"maxFailedRows,omitempty" jsonschema:"minimum=0,description=Refused rows allowed before a person must review the import"`
}

// ReviewEvidence is what an import over its failed-rows threshold leaves
// for its reviewer.
type ReviewEvidence struct {
	TotalCount    int `json:"totalCount"`
	SuccessCount  int `json:"successCount"`
	FailedCount   int `json:"failedCount"`
	MaxFailedRows int `json:"maxFailedRows"`
	// ReportFile names the error report (xlsx; a CSV twin beside it):
	// the task's artifacts of kind ERROR_REPORT, which the review's
	// files list (artifactDownloadUrl downloads them).
	ReportFile string `json:"reportFile"`
}

// FileInfo is what the upload learnt about the file.
type FileInfo struct {
	SHA256   string `json:"sha256" jsonschema:"pattern=^[0-9a-f]{64}$"`
	Format   string `json:"format" jsonschema:"enum=xlsx,enum=csv"`
	Encoding string `json:"encoding,omitempty" jsonschema:"enum=utf-8,enum=gbk"`
	Sheet    string `json:"sheet,omitempty" jsonschema:"maxLength=200"`
	Rows     int    `json:"rows" jsonschema:"minimum=0"`
}

// Summary is an import's result.
type Summary struct {
	Status       string  `json:"status"` // SUCCESS, PARTIAL_SUCCESS or FAILED
	TotalCount   int     `json:"totalCount"`
	SuccessCount int     `json:"successCount"`
	FailedCount  int     `json:"failedCount"`
	ReportFile   *string `json:"reportFile"`
	Target       string  `json:"target"`
	DryRun       bool    `json:"dryRun,omitempty"`
}

// Result statuses.
const (
	StatusSuccess        = "SUCCESS"
	StatusPartialSuccess = "PARTIAL_SUCCESS"
	StatusFailed         = "FAILED"
)

// Register adds the import task type to r.
func (im *Importer) Register(r *tasktype.Registry) {
	tasktype.Register(r, TaskType, im.handle,
		tasktype.WithDescription("Imports an uploaded xlsx or CSV file into a target (created by the importFile mutation): validates every row, writes the good ones once, and reports the bad ones in an error report."),
		tasktype.WithTimeout(2*time.Hour),
		tasktype.WithConcurrency(4))
}

func (im *Importer) handle(ctx context.Context, job *tasktype.Job, in Input) error {
	sum, err := im.run(ctx, job, in)
	err = artifact.AsResource(err)
	if sum != nil {
		if serr := job.SetResult(sum); serr != nil && err == nil {
			err = serr
		}
		job.SetResultStatus(sum.Status)
	}
	return err
}

// run executes one import. Every execution reads the whole file again;
// rows an earlier execution wrote are skipped by the target's write-once
// key, and the counts come from the table, so that a retried, recovered or
// twice-delivered import ends with each good row exactly once.
func (im *Importer) run(ctx context.Context, job *tasktype.Job, in Input) (*Summary, error) {
	taskID := job.Task.ID
	target, ok := im.cfg.Targets.Get(in.Target)
	if !ok {
		return nil, tasktype.NonRetryable(fmt.Errorf("unknown import target %q (registered: %s)", in.Target, strings.Join(im.cfg.Targets.Names(), ", ")))
	}
	summary := &Summary{Status: StatusFailed, Target: target.Name, DryRun: in.Options.DryRun}
	src, err := im.source(ctx, job.Task, in.File.SHA256)
	if err != nil {
		return summary, err
	}
	blob, err := im.cfg.Artifacts.Open(ctx, src)
	if err != nil {
		return summary, im.openError(src, err)
	}
	defer blob.Close()
	// A parser that meets a failure of the store reports a broken file;
	// the store's failure is the truth, and worth another attempt.
	fileErr := func(err error) error {
		if serr := blob.Err(); serr != nil {
			return tasktype.Resource(fmt.Errorf("read the uploaded file: %w", serr))
		}
		return tasktype.NonRetryable(err)
	}
	s := spreadsheet.Source{ReaderAt: blob, Size: blob.Size()}
	info := spreadsheet.Info{Format: spreadsheet.Format(in.File.Format), Encoding: spreadsheet.Encoding(in.File.Encoding), Sheet: in.File.Sheet, Rows: in.File.Rows}
	rows, err := spreadsheet.Open(s, info, im.cfg.Limits)
	if err != nil {
		return summary, fileErr(err)
	}
	defer rows.Close()

	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return summary, fileErr(err)
		}
		return summary, tasktype.NonRetryable(errors.New("the file is empty: no header row"))
	}
	header := append([]string(nil), rows.Row()...)
	m, err := target.MapHeader(header)
	if err != nil {
		return summary, tasktype.NonRetryable(err)
	}
	if len(m.Ignored) > 0 {
		job.Warn("columns not used by the target were ignored", "columns", strings.Join(m.Ignored, ", "))
	}
	job.Info("import started", "target", target.Name, "rows", in.File.Rows, "attempt", job.Attempt())
	job.Progress(0, int64(in.File.Rows))

	sp, err := newSpool()
	if err != nil {
		return summary, err
	}
	defer sp.close()
	// The rows this execution imports, for the task history, are the
	// target's count after it less the count before it: the rows it
	// committed, whether it then succeeds or fails. Rows an earlier
	// execution wrote (skipped now by the write-once key) were counted
	// with that execution's end.
	before, err := target.Writer.Written(ctx, taskID)
	if err != nil {
		return summary, err
	}
	total, err := im.stream(ctx, job, rows, m, target, sp, in)
	if err != nil && blob.Err() != nil {
		err = fileErr(err)
	}
	summary.TotalCount = total
	summary.FailedCount = sp.rows
	if n, werr := target.Writer.Written(context.WithoutCancel(ctx), taskID); werr == nil {
		summary.SuccessCount = n
		job.CountRows(int64(max(n-before, 0)), 0)
	} else if err == nil {
		err = werr
	}
	if err != nil {
		return summary, err
	}
	job.Progress(int64(total), int64(total))

	if sp.rows > 0 {
		name, err := im.saveReports(ctx, job, sp, header)
		if err != nil {
			return summary, err
		}
		summary.ReportFile = &name
	}
	if limit := in.Options.MaxFailedRows; limit != nil && total > 0 && sp.rows > *limit {
		summary.Status = StatusPartialSuccess
		if sp.rows == total {
			summary.Status = StatusFailed
		}
		job.Warn("import over its failed-rows threshold: waiting for review", "failed", sp.rows, "threshold", *limit)
		return summary, tasktype.NeedsReview(
			fmt.Errorf("%d of %d rows were refused, over the threshold of %d; see the error report", sp.rows, total, *limit),
			ReviewEvidence{TotalCount: total, SuccessCount: summary.SuccessCount, FailedCount: sp.rows, MaxFailedRows: *limit,
				ReportFile: *summary.ReportFile})
	}
	switch {
	case total == 0:
		return summary, tasktype.NonRetryable(errors.New("the file has no data rows"))
	case sp.rows == 0:
		summary.Status = StatusSuccess
	case sp.rows < total:
		summary.Status = StatusPartialSuccess
	default:
		summary.Status = StatusFailed
		return summary, tasktype.NonRetryable(fmt.Errorf("all %d rows were refused; see the error report", total))
	}
	job.Info("import finished", "status", summary.Status, "total", total, "written", summary.SuccessCount, "failed", summary.FailedCount)
	return summary, nil
}

// openError says why the uploaded file cannot be read. A file the store
// does not have is final, and said as it is: expired if its row says so,
// otherwise missing from the store (where). A store that fails, or this
// node's store not being the deployment's, is worth another attempt.
func (im *Importer) openError(src *ent.Artifact, err error) error {
	switch {
	case errors.Is(err, artifact.ErrNoBlob) && !im.cfg.Artifacts.Now().Before(src.ExpiresAt):
		return tasktype.NonRetryable(fmt.Errorf("the uploaded file %q expired at %s and was removed: upload it again",
			src.Filename, src.ExpiresAt.UTC().Format(time.RFC3339)))
	case errors.Is(err, artifact.ErrNoBlob):
		return tasktype.NonRetryable(fmt.Errorf("the uploaded file %q was %w", src.Filename, err))
	}
	return artifact.AsResource(fmt.Errorf("open the uploaded file: %w", err))
}

type chunk struct {
	records []Record
	done    int // data rows read so far
}

// stream reads and validates rows in one goroutine and writes them, a
// chunk per statement, in this one: parsing and the database work overlap.
// Cancel is honoured between chunks.
func (im *Importer) stream(ctx context.Context, job *tasktype.Job, rows spreadsheet.Rows, m *Mapping, target *Target, sp *spool, in Input) (int, error) {
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	chunks := make(chan chunk, 2)
	total := 0
	var readErr error
	go func() {
		defer close(chunks)
		recs := make([]Record, 0, im.cfg.ChunkSize)
		for rows.Next() {
			cells := rows.Row()
			if blank(cells) {
				continue
			}
			total++
			rec, problems := m.Validate(rows.RowNo(), cells)
			if len(problems) > 0 {
				if readErr = sp.add(m, im.cfg.Masker, rows.RowNo(), cells, problems); readErr != nil {
					return
				}
			} else {
				recs = append(recs, rec)
			}
			if len(recs) == cap(recs) {
				select {
				case chunks <- chunk{records: recs, done: total}:
				case <-pctx.Done():
					return
				}
				recs = make([]Record, 0, im.cfg.ChunkSize)
			}
		}
		if readErr = rows.Err(); readErr != nil {
			readErr = tasktype.NonRetryable(readErr)
			return
		}
		select {
		case chunks <- chunk{records: recs, done: total}:
		case <-pctx.Done():
		}
	}()
	n := 0
	var err error
	for c := range chunks {
		if err = ctx.Err(); err != nil {
			err = context.Cause(ctx)
			break
		}
		n++
		if im.cfg.ChunkHook != nil {
			if err = im.cfg.ChunkHook(ctx, job, n); err != nil {
				break
			}
		}
		if !in.Options.DryRun {
			if err = target.Writer.Write(ctx, job.Task.ID, c.records); err != nil {
				break
			}
		}
		job.Progress(int64(c.done), int64(max(in.File.Rows, c.done)))
	}
	if err != nil {
		stop()
		for range chunks { // let the reader end
		}
		return total, err
	}
	if readErr != nil {
		return total, readErr
	}
	if ctx.Err() != nil {
		return total, context.Cause(ctx)
	}
	return total, nil
}

func blank(cells []string) bool {
	for _, c := range cells {
		if strings.TrimSpace(c) != "" {
			return false
		}
	}
	return true
}

// source finds the uploaded file of an import task: the SOURCE artifact
// with the file's checksum that belongs to the task, or else the owner's
// not yet linked upload with that checksum (the task may run before the
// upload request has linked it), which it then links.
func (im *Importer) source(ctx context.Context, t tasktype.JobTask, sha string) (*ent.Artifact, error) {
	// One statement, so one snapshot: read as two queries, the upload
	// request linking the file in between would hide it from both.
	found, err := im.cfg.Artifacts.Client().Artifact.Query().
		Where(entartifact.KindEQ(entartifact.KindSOURCE), entartifact.Sha256(sha),
			entartifact.Or(entartifact.TaskID(t.ID), entartifact.And(entartifact.TaskIDIsNil(),
				entartifact.Owner(t.Owner), entartifact.OwnerSource(t.OwnerSource), entartifact.Tenant(t.Tenant)))).
		Order(ent.Desc(entartifact.FieldID)).
		Limit(50).
		All(ctx)
	if err != nil {
		return nil, fmt.Errorf("find uploaded file: %w", err)
	}
	var a *ent.Artifact
	for _, c := range found {
		if a == nil || (c.TaskID != nil && a.TaskID == nil) {
			a = c // the task's own first, else the newest unlinked
		}
	}
	if a == nil {
		if ttl := im.cfg.Artifacts.TTL(); t.CreatedAt.Before(im.cfg.Artifacts.Now().Add(-ttl)) {
			return nil, tasktype.NonRetryable(fmt.Errorf("the uploaded file was removed: uploads are kept for %s (--artifact-ttl) and this import was created at %s: upload it again",
				ttl, t.CreatedAt.UTC().Format(time.RFC3339)))
		}
		return nil, tasktype.NonRetryable(errors.New("no uploaded file for this import: import tasks are created by the importFile mutation"))
	}
	if a.TaskID == nil {
		if err := im.cfg.Artifacts.Link(ctx, a.ID, t.ID); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// saveReports writes the error report as xlsx and CSV artifacts,
// replacing those of an earlier execution, and returns the xlsx's name.
func (im *Importer) saveReports(ctx context.Context, job *tasktype.Job, sp *spool, header []string) (string, error) {
	var keep []int
	var name string
	for _, f := range []spreadsheet.Format{spreadsheet.XLSX, spreadsheet.CSV} {
		fname := job.Task.Code + "-errors." + string(f)
		a, err := im.cfg.Artifacts.Write(ctx, artifact.Meta{
			TaskID: &job.Task.ID, Owner: job.Task.Owner, OwnerSource: job.Task.OwnerSource, Tenant: job.Task.Tenant, TaskType: job.Task.Type, Kind: artifact.KindErrorReport,
			Filename: fname, ContentType: f.ContentType(),
		}, func(w io.Writer) error { return sp.writeReport(f, header, w) })
		if err != nil {
			return "", fmt.Errorf("write error report: %w", err)
		}
		keep = append(keep, a.ID)
		if f == spreadsheet.XLSX {
			name = fname
		}
	}
	if err := im.cfg.Artifacts.Replace(ctx, job.Task.ID, artifact.KindErrorReport, keep...); err != nil {
		job.Warn("could not remove an earlier error report", "err", err)
	}
	return name, nil
}
