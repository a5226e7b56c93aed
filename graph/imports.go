package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/taskgraph/taskgraph/ent"
	entartifact "github.com/taskgraph/taskgraph/ent/artifact"
	"github.com/taskgraph/taskgraph/graph/model"
	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/importer"
	"github.com/taskgraph/taskgraph/internal/store"
)

var errUnavailable = errors.New("imports and downloads are not served by this process")

func (r *Resolver) importFile(ctx context.Context, file graphql.Upload, target string, options json.RawMessage, key *string) (*ent.Task, error) {
	if r.Importer == nil {
		return nil, errUnavailable
	}
	return r.Importer.Upload(ctx, importer.Upload{
		File: file.File, Filename: file.Filename, Size: file.Size,
		Target: target, Options: options, IdempotencyKey: key,
	})
}

// precheckImport checks an upload's importFile arguments that need no
// file — its target and idempotency key — from the multipart request's
// operations part, which comes before the file: a request that names an
// unknown target or a bad key is refused before its file is read. The
// resolver checks them again (a JSON request, a document this misses).
func (r *Resolver) precheckImport(p *graphql.RawParams) error {
	if r.Importer == nil {
		return nil
	}
	doc, err := parser.ParseQuery(&ast.Source{Input: p.Query})
	if err != nil {
		return nil // gqlgen's parse error says it better
	}
	value := func(v *ast.Value) (string, bool) {
		switch {
		case v == nil:
			return "", false
		case v.Kind == ast.Variable:
			s, ok := p.Variables[v.Raw].(string)
			return s, ok
		case v.Kind == ast.StringValue || v.Kind == ast.BlockValue:
			return v.Raw, true
		}
		return "", false
	}
	for _, op := range doc.Operations {
		if op.Operation != ast.Mutation {
			continue
		}
		for _, sel := range op.SelectionSet {
			f, ok := sel.(*ast.Field)
			if !ok || f.Name != "importFile" {
				continue
			}
			if a := f.Arguments.ForName("target"); a != nil {
				if t, ok := value(a.Value); ok {
					if _, known := r.Importer.Targets().Get(t); !known {
						return fmt.Errorf("target: unknown import target %q (registered: %s); the file was not read", t, strings.Join(r.Importer.Targets().Names(), ", "))
					}
				}
			}
			if a := f.Arguments.ForName("idempotencyKey"); a != nil {
				if k, ok := value(a.Value); ok && (k == "" || utf8.RuneCountInString(k) > engine.MaxKeyLen) {
					return fmt.Errorf("idempotencyKey: must be 1 to %d characters; the file was not read", engine.MaxKeyLen)
				}
			}
		}
	}
	return nil
}

func (r *Resolver) artifactDownloadURL(ctx context.Context, taskID int, kind *artifact.Kind, format *model.FileFormat) (*model.DownloadLink, error) {
	if r.Links == nil {
		return nil, errUnavailable
	}
	k := artifact.KindErrorReport
	if kind != nil {
		k = *kind
	}
	if _, err := r.Engine.Task(ctx, taskID); err != nil {
		return nil, err
	}
	q := r.Client.Artifact.Query().Where(entartifact.TaskID(taskID), entartifact.KindEQ(k))
	if format != nil {
		q = q.Where(entartifact.FilenameHasSuffix("." + strings.ToLower(string(*format))))
	}
	// The xlsx first where a report exists in both formats.
	all, err := q.Order(ent.Desc(entartifact.FieldID)).Limit(10).All(ctx)
	if err != nil {
		return nil, err
	}
	var a *ent.Artifact
	for _, c := range all {
		if a == nil || (strings.HasSuffix(c.Filename, ".xlsx") && !strings.HasSuffix(a.Filename, ".xlsx")) {
			a = c
		}
	}
	if a == nil {
		return nil, &noFileError{taskID: taskID, kind: k, format: format}
	}
	viewer, err := auth.Require(ctx)
	if err != nil {
		return nil, err
	}
	link := r.Links.Sign(a, viewer)
	// From the configured public URL, never from the request's Host: a
	// link carries a signature worth stealing.
	return &model.DownloadLink{URL: r.PublicURL + link.Path, ExpiresAt: link.ExpiresAt}, nil
}

// noFileError is a task without the file asked for: NOT_FOUND.
type noFileError struct {
	taskID int
	kind   artifact.Kind
	format *model.FileFormat
}

func (e *noFileError) Error() string {
	in := ""
	if e.format != nil {
		in = " in " + string(*e.format)
	}
	return fmt.Sprintf("task %d has no %s file%s (yet)", e.taskID, e.kind, in)
}

func (e *noFileError) Is(target error) bool { return target == store.ErrNotFound }

func (r *Resolver) importTargets() []*model.ImportTarget {
	if r.Importer == nil {
		return nil
	}
	reg := r.Importer.Targets()
	var out []*model.ImportTarget
	for _, name := range reg.Names() {
		t, _ := reg.Get(name)
		mt := &model.ImportTarget{Name: t.Name, Description: t.Description, BusinessKey: t.BusinessKey}
		for _, c := range t.Columns {
			mt.Columns = append(mt.Columns, &model.ImportColumn{Key: c.Key, Headers: c.Headers, Required: c.Required, Type: c.TypeName()})
		}
		out = append(out, mt)
	}
	return out
}

// LimitUploads guards the multipart (upload) requests of /query, however
// their media type is spelled (Multipart/Form-Data is multipart/form-data):
//
//   - one whose declared length exceeds the upload limit is refused before
//     it is read, with a VALIDATION error naming the limit (one without a
//     length is cut off by the multipart transport instead, which never
//     holds more than a few MiB of it in memory);
//   - one without a header that a plain HTML form cannot send
//     (Apollo-Require-Preflight or X-Requested-With) is refused: browsers
//     send multipart/form-data cross-site without a CORS preflight, and
//     without this any web page could upload files as the local user.
func LimitUploads(limit int64, next http.Handler) http.Handler {
	refuse := func(w http.ResponseWriter, status int, msg string, ext map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Connection", "close")
		w.WriteHeader(status)
		ext["code"] = CodeValidation
		_ = json.NewEncoder(w).Encode(map[string]any{"errors": []any{map[string]any{"message": msg, "extensions": ext}}, "data": nil})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || !strings.HasPrefix(mt, "multipart/") {
			next.ServeHTTP(w, r)
			return
		}
		if r.Header.Get("Apollo-Require-Preflight") == "" && r.Header.Get("X-Requested-With") == "" {
			refuse(w, http.StatusBadRequest, "multipart requests must carry an Apollo-Require-Preflight (or X-Requested-With) header", map[string]any{})
			return
		}
		if limit > 0 && r.ContentLength > limit+uploadSlack {
			refuse(w, http.StatusRequestEntityTooLarge,
				fmt.Sprintf("the upload is %d bytes; the limit (max upload size) is %d bytes", r.ContentLength, limit),
				map[string]any{"limit": "max upload size", "maxBytes": limit})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// UnavailableUploads answers an upload (a multipart request) that failed
// only because of an outage with HTTP 503 and Retry-After, as plain HTTP
// clients of an upload expect, instead of 200 with the GraphQL error
// (which the body still carries). Other requests pass through untouched.
func UnavailableUploads(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/") {
			next.ServeHTTP(w, r)
			return
		}
		rec := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		status := rec.status
		var resp struct {
			Data   map[string]json.RawMessage `json:"data"`
			Errors []struct {
				Extensions map[string]any `json:"extensions"`
			} `json:"errors"`
		}
		retryAfter := 0.0
		if status == http.StatusOK && json.Unmarshal(rec.body.Bytes(), &resp) == nil && len(resp.Errors) > 0 && noData(resp.Data) {
			status = http.StatusServiceUnavailable
			for _, e := range resp.Errors {
				if e.Extensions["code"] != CodeUnavailable {
					status = http.StatusOK
					break
				}
				if s, ok := e.Extensions["retryAfterSeconds"].(float64); ok {
					retryAfter = max(retryAfter, s)
				}
			}
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		if status == http.StatusServiceUnavailable && retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter)))
		}
		w.WriteHeader(status)
		_, _ = w.Write(rec.body.Bytes())
	})
}

// noData reports a response whose every field is null.
func noData(data map[string]json.RawMessage) bool {
	for _, v := range data {
		if string(v) != "null" {
			return false
		}
	}
	return true
}

// bufferedResponse holds a (small, JSON) response until it is inspected.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if !b.wrote {
		b.status, b.wrote = status, true
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.wrote = true
	return b.body.Write(p)
}
