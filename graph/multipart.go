package graph

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// multipartForm serves the GraphQL multipart request spec (importFile) in
// place of gqlgen's transport.MultipartForm, which bounds a request by the
// upload limit only: its operations part (the query and variables) could
// be 50 MiB where a JSON request may be 2 MiB, and it read a file into
// memory whenever the request's length was unknown (chunked) or small.
// Here the operations and map parts are held to the JSON cap, and files are
// kept in memory up to maxMemory for the whole request, the rest spooled
// to temporary files (removed when the request ends).
type multipartForm struct {
	maxUpload int64 // the whole body
	maxJSON   int64 // the operations part, and the map part
	maxMemory int64 // of files, held in memory, for the whole request
	// precheck looks at the operations part before any file is read: a
	// request it refuses (an unknown import target, a bad idempotency
	// key) is answered without its file being read or stored.
	precheck func(*graphql.RawParams) error
}

var _ graphql.Transport = multipartForm{}

// Supports compares the media type without regard to case (mime lowers it).
func (f multipartForm) Supports(r *http.Request) bool {
	return r.Method == http.MethodPost && isMultipart(r)
}

// isMultipart reports whether a request's body is multipart/form-data,
// however the client spells it.
func isMultipart(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "multipart/form-data"
}

// multipartError is a request the transport refuses.
type multipartError struct {
	status int
	msg    string
	ext    map[string]any
}

func (f multipartForm) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	w.Header().Set("Content-Type", "application/json")
	start := graphql.Now()
	r.Body = http.MaxBytesReader(w, r.Body, f.maxUpload)
	defer r.Body.Close()
	var spooled []*os.File
	defer func() {
		for _, t := range spooled {
			_ = t.Close()
			_ = os.Remove(t.Name())
		}
	}()
	params, merr := f.read(r, &spooled)
	if merr != nil {
		ext := map[string]any{"code": CodeValidation}
		for k, v := range merr.ext {
			ext[k] = v
		}
		writeResponse(w, merr.status, &graphql.Response{Errors: gqlerror.List{{Message: merr.msg, Extensions: ext}}})
		return
	}
	params.Headers = r.Header
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	rc, gerr := exec.CreateOperationContext(r.Context(), params)
	if gerr != nil {
		resp := exec.DispatchError(graphql.WithOperationContext(r.Context(), rc), gerr)
		status := http.StatusOK
		if errcode.GetErrorKind(gerr) == errcode.KindProtocol {
			status = http.StatusUnprocessableEntity
		}
		writeResponse(w, status, resp)
		return
	}
	responses, ctx := exec.DispatchOperation(r.Context(), rc)
	writeResponse(w, http.StatusOK, responses(ctx))
}

func writeResponse(w http.ResponseWriter, status int, resp *graphql.Response) {
	b, err := json.Marshal(resp)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"errors":[{"message":"the response could not be encoded","extensions":{"code":"INTERNAL"}}],"data":null}`)
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// read reads the parts: operations, map, then the files map names.
func (f multipartForm) read(r *http.Request, spooled *[]*os.File) (*graphql.RawParams, *multipartError) {
	bad := func(format string, args ...any) *multipartError {
		return &multipartError{status: http.StatusUnprocessableEntity, msg: fmt.Sprintf(format, args...)}
	}
	tooLarge := func(err error) *multipartError {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &multipartError{status: http.StatusRequestEntityTooLarge,
				msg: fmt.Sprintf("the upload is over the limit (max upload size) of %d bytes", f.maxUpload-uploadSlack),
				ext: map[string]any{"limit": "max upload size", "maxBytes": f.maxUpload - uploadSlack}}
		}
		return nil
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, bad("the body is not multipart/form-data: %v", err)
	}
	part, err := mr.NextPart()
	if err != nil || part.FormName() != "operations" {
		if e := tooLarge(err); e != nil {
			return nil, e
		}
		return nil, bad("the first part must be operations")
	}
	ops, merr := f.readJSON(part, "operations", tooLarge)
	if merr != nil {
		return nil, merr
	}
	var params graphql.RawParams
	dec := json.NewDecoder(bytes.NewReader(ops))
	dec.UseNumber()
	if err := dec.Decode(&params); err != nil {
		return nil, bad("the operations part is not a GraphQL request in JSON: %s", jsonProblem(err))
	}
	if f.precheck != nil {
		if err := f.precheck(&params); err != nil {
			return nil, bad("%s", err.Error())
		}
	}
	part, err = mr.NextPart()
	if err != nil || part.FormName() != "map" {
		if e := tooLarge(err); e != nil {
			return nil, e
		}
		return nil, bad("the second part must be map")
	}
	raw, merr := f.readJSON(part, "map", tooLarge)
	if merr != nil {
		return nil, merr
	}
	uploads := map[string][]string{}
	if err := json.Unmarshal(raw, &uploads); err != nil {
		return nil, bad("the map part is not a JSON object of lists of paths: %s", jsonProblem(err))
	}
	memory := f.maxMemory
	for {
		part, err = mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			if e := tooLarge(err); e != nil {
				return nil, e
			}
			return nil, bad("a part could not be read: %v", err)
		}
		key := part.FormName()
		paths := uploads[key]
		if len(paths) == 0 {
			return nil, bad("the part %q is not in the map", short(key))
		}
		delete(uploads, key)
		file, size, err := f.readFile(part, &memory, spooled)
		if err != nil {
			if e := tooLarge(err); e != nil {
				return nil, e
			}
			return nil, bad("the file %q could not be read: %v", short(key), err)
		}
		for i, path := range paths {
			upload := graphql.Upload{File: file, Size: size, Filename: part.FileName(), ContentType: part.Header.Get("Content-Type")}
			if i > 0 {
				// Each path gets a reader of its own.
				upload.File = io.NewSectionReader(file, 0, size)
			}
			if gerr := params.AddUpload(upload, key, path); gerr != nil {
				return nil, bad("%s", gerr.Message)
			}
		}
	}
	for key := range uploads {
		return nil, bad("the file %q named in the map is missing", short(key))
	}
	return &params, nil
}

// readJSON reads a JSON part, up to the JSON cap.
func (f multipartForm) readJSON(part io.Reader, name string, tooLarge func(error) *multipartError) ([]byte, *multipartError) {
	b, err := io.ReadAll(io.LimitReader(part, f.maxJSON+1))
	if err != nil {
		if e := tooLarge(err); e != nil {
			return nil, e
		}
		return nil, &multipartError{status: http.StatusUnprocessableEntity, msg: fmt.Sprintf("the %s part could not be read", name)}
	}
	if int64(len(b)) > f.maxJSON {
		return nil, &multipartError{status: http.StatusRequestEntityTooLarge,
			msg: fmt.Sprintf("the %s part is over %d bytes, the limit of a JSON request", name, f.maxJSON),
			ext: map[string]any{"limit": "request size", "maxBytes": f.maxJSON}}
	}
	return b, nil
}

// fileReader is what an upload is read from: bytes in memory or a
// temporary file, both seekable and readable at an offset.
type fileReader interface {
	io.ReadSeeker
	io.ReaderAt
}

// readFile keeps a file part in memory while the request's memory budget
// lasts, and spools it to a temporary file beyond that.
func (f multipartForm) readFile(part io.Reader, memory *int64, spooled *[]*os.File) (fileReader, int64, error) {
	head, err := io.ReadAll(io.LimitReader(part, *memory+1))
	if err != nil {
		return nil, 0, err
	}
	if int64(len(head)) <= *memory {
		*memory -= int64(len(head))
		return bytes.NewReader(head), int64(len(head)), nil
	}
	tmp, err := os.CreateTemp("", "taskgraph-upload-")
	if err != nil {
		return nil, 0, fmt.Errorf("spool: %w", err)
	}
	*spooled = append(*spooled, tmp)
	n, err := io.Copy(tmp, io.MultiReader(bytes.NewReader(head), part))
	if err != nil {
		return nil, 0, err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return nil, 0, fmt.Errorf("spool: %w", err)
	}
	return tmp, n, nil
}

func short(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
