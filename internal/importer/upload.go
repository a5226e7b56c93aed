package importer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/spreadsheet"
)

// Upload is a file to import.
type Upload struct {
	File     io.Reader
	Filename string
	// Size is the size the client declared (-1 or 0 when unknown); the
	// stored size is what counts.
	Size           int64
	Target         string
	Options        json.RawMessage
	IdempotencyKey *string
}

func invalid(field, format string, args ...any) error {
	return &engine.ValidationError{Problems: []engine.Problem{{Field: field, Message: fmt.Sprintf(format, args...)}}}
}

// Upload stores the file in the artifact store (hashing it and enforcing
// the size limit as it streams), checks its content against its extension
// and the limits, and creates the import task through the engine. Anything
// refused is a *engine.ValidationError naming the limit, and leaves
// nothing behind: if any step after storing the file fails, the file is
// deleted. The same file with the same target, options and idempotency key
// returns the task created first.
func (im *Importer) Upload(ctx context.Context, u Upload) (*ent.Task, error) {
	target, ok := im.cfg.Targets.Get(u.Target)
	if !ok {
		return nil, invalid("target", "unknown import target %q (registered: %s)", u.Target, strings.Join(im.cfg.Targets.Names(), ", "))
	}
	var opts Options
	if len(bytes.TrimSpace(u.Options)) > 0 && string(u.Options) != "null" {
		dec := json.NewDecoder(bytes.NewReader(u.Options))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&opts); err != nil {
			return nil, invalid("options", "%v", err)
		}
	}
	name := cleanFilename(u.Filename)
	format, ok := spreadsheet.FormatOf(name)
	// The name is shown (the task's title, downloads, the audit log,
	// this error): masked like every other text a client sends, keeping
	// its extension.
	name = im.cfg.Masker.String(name)
	if !ok {
		return nil, invalid("file", "%q is not an .xlsx or .csv file (allowed extensions: .xlsx, .csv)", name)
	}
	if ext := "." + string(format); !strings.HasSuffix(strings.ToLower(name), ext) {
		name += ext
	}
	if u.Size > im.cfg.MaxUploadSize {
		return nil, invalid("file", "the file is %d bytes; the limit (max upload size) is %d bytes", u.Size, im.cfg.MaxUploadSize)
	}
	// Who may create tasks may upload; nobody else stores a byte.
	viewer, err := auth.Require(ctx)
	if err != nil {
		return nil, err
	}
	if err := viewer.AllowMutate("import a file"); err != nil {
		return nil, err
	}
	a, err := im.cfg.Artifacts.Save(ctx, artifact.Meta{
		Owner: viewer.User, OwnerSource: viewer.Source, Tenant: viewer.Tenant, TaskType: TaskType, Kind: artifact.KindSource, Filename: name,
		ContentType: format.ContentType(), MaxSize: im.cfg.MaxUploadSize,
	}, u.File)
	var tooLarge *artifact.TooLargeError
	if errors.As(err, &tooLarge) {
		return nil, invalid("file", "the file is larger than the limit (max upload size) of %d bytes", tooLarge.Limit)
	}
	if err != nil {
		return nil, fmt.Errorf("store upload: %w", err)
	}
	task, err := im.createFrom(ctx, a, target, format, opts, u.IdempotencyKey)
	if err != nil {
		// No task is left half-made, and no file without a task.
		if derr := im.cfg.Artifacts.Delete(context.WithoutCancel(ctx), a); derr != nil {
			im.log.Error("could not delete a refused upload", "artifact_id", a.ID, "err", derr)
		}
		return nil, err
	}
	return task, nil
}

func (im *Importer) createFrom(ctx context.Context, a *ent.Artifact, target *Target, format spreadsheet.Format, opts Options, key *string) (*ent.Task, error) {
	blob, err := im.cfg.Artifacts.Open(ctx, a)
	if err != nil {
		return nil, fmt.Errorf("reopen upload: %w", err)
	}
	info, err := spreadsheet.Scan(blob, blob.Size(), format, im.cfg.Limits)
	_ = blob.Close()
	if serr := blob.Err(); serr != nil {
		// The store failed while the file was checked: not the file's fault.
		return nil, fmt.Errorf("check upload: %w", serr)
	}
	var fe *spreadsheet.FileError
	if errors.As(err, &fe) {
		return nil, invalid("file", "%s", fe.Error())
	}
	if err != nil {
		return nil, fmt.Errorf("check upload: %w", err)
	}
	if info.Rows == 0 {
		// Refused here, before a task exists: an import of nothing would
		// only succeed with nothing done, or fail later for no reason.
		return nil, invalid("file", "%s has no rows to import (it is empty, or has its header row alone)", a.Filename)
	}
	input, err := json.Marshal(Input{
		Target:  target.Name,
		Options: opts,
		File:    FileInfo{SHA256: a.Sha256, Format: string(info.Format), Encoding: string(info.Encoding), Sheet: info.Sheet, Rows: info.Rows},
	})
	if err != nil {
		return nil, err
	}
	title := "Import " + a.Filename + " into " + target.Name
	if utf8.RuneCountInString(title) > engine.MaxTitleLen {
		title = string([]rune(title)[:engine.MaxTitleLen])
	}
	task, err := im.cfg.Engine.Create(ctx, engine.CreateRequest{
		Type: TaskType, Title: title, Input: input, IdempotencyKey: key,
	})
	if err != nil {
		return nil, err
	}
	// A resubmission returns the task created first, which has its own
	// copy of the file: this one is not needed.
	if prev, err := im.cfg.Artifacts.Latest(ctx, task.ID, artifact.KindSource); err == nil && prev.ID != a.ID {
		if derr := im.cfg.Artifacts.Delete(context.WithoutCancel(ctx), a); derr != nil {
			im.log.Error("could not delete a duplicate upload", "artifact_id", a.ID, "err", derr)
		}
		return task, nil
	}
	// The handler links the file itself if it runs first.
	if err := im.cfg.Artifacts.Link(context.WithoutCancel(ctx), a.ID, task.ID); err != nil {
		im.log.Warn("linking the upload to its task failed; the handler will", "task_id", task.ID, "err", err)
	}
	return task, nil
}

// cleanFilename keeps the last element of a client's file name, as
// display text only: it is never used as a path.
func cleanFilename(name string) string {
	name = strings.ReplaceAll(name, "\\", "/")
	name = path.Base(name)
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, name)
	if !utf8.ValidString(name) {
		name = strings.ToValidUTF8(name, "_")
	}
	if name == "." || name == "/" || name == "" {
		name = "upload"
	}
	if r := []rune(name); len(r) > 200 {
		name = string(r[len(r)-200:])
	}
	return name
}
