package graph_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/importtest"
)

// multipartBody is an importFile request with the given operations part,
// and a file unless file is nil.
func multipartBody(t *testing.T, ops string, file []byte) (string, []byte) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	require.NoError(t, mw.WriteField("operations", ops))
	if file == nil {
		require.NoError(t, mw.WriteField("map", `{}`))
	} else {
		require.NoError(t, mw.WriteField("map", `{"0": ["variables.file"]}`))
		fw, err := mw.CreateFormFile("0", "c.csv")
		require.NoError(t, err)
		_, _ = fw.Write(file)
	}
	require.NoError(t, mw.Close())
	return mw.FormDataContentType(), body.Bytes()
}

func postRaw(t *testing.T, s *apptest.Server, h http.Header, body io.Reader, length int64) (int, apptest.Response) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/query", body)
	require.NoError(t, err)
	req.Header = h
	req.ContentLength = length
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var r apptest.Response
	require.NoError(t, json.Unmarshal(raw, &r), "%s", raw)
	return resp.StatusCode, r
}

// TestMultipartRequests: an upload request is held to the same limits as a
// JSON one, however it spells its media type (a hostile review, findings 5, 6).
func TestMultipartRequests(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, dbtest.SQLite(t), app.Options{})
	t.Run("TheOperationsPartHoldsTheJSONCap", func(t *testing.T) {
		t.Parallel()
		// A request with no file used to lift the 2 MiB cap of a JSON
		// request to the ~50 MiB of an upload.
		ops, _ := json.Marshal(map[string]any{
			"query":     `mutation($t: String) { createTask(input: {type: "noop", title: $t}) { id } }`,
			"variables": map[string]any{"t": strings.Repeat("x", 3<<20)},
		})
		ct, body := multipartBody(t, string(ops), nil)
		status, r := postRaw(t, s, http.Header{"Content-Type": {ct}, "Apollo-Require-Preflight": {"1"}}, bytes.NewReader(body), int64(len(body)))
		require.Equal(t, http.StatusRequestEntityTooLarge, status)
		require.Len(t, r.Errors, 1)
		require.Equal(t, "VALIDATION", r.Errors[0].Code())
		require.Contains(t, r.Errors[0].Message, "operations part")
	})
	t.Run("AnUpperCaseMediaTypeIsGuardedToo", func(t *testing.T) {
		t.Parallel()
		ops := `{"query":"mutation($file: Upload!) { importFile(file: $file, target: \"contacts\") { id } }","variables":{"file":null}}`
		ct, body := multipartBody(t, ops, importtest.CSV(importtest.ContactsHeader, importtest.Rows(2, nil), false))
		upper := strings.Replace(ct, "multipart/form-data", "Multipart/Form-Data", 1)
		// No preflight header: a web page could send this.
		status, r := postRaw(t, s, http.Header{"Content-Type": {upper}}, bytes.NewReader(body), int64(len(body)))
		require.Equal(t, http.StatusBadRequest, status)
		require.Contains(t, r.Errors[0].Message, "Apollo-Require-Preflight")
		// With it, the upload works whatever the case.
		status, r = postRaw(t, s, http.Header{"Content-Type": {upper}, "Apollo-Require-Preflight": {"1"}}, bytes.NewReader(body), int64(len(body)))
		require.Equal(t, http.StatusOK, status, "%+v", r.Errors)
		require.Empty(t, r.Errors)
		require.Contains(t, string(r.Data), "importFile")
	})
	t.Run("AChunkedUploadIsCutAtTheLimit", func(t *testing.T) {
		t.Parallel()
		small := apptest.Start(t, dbtest.SQLite(t), app.Options{}, func(c *app.Config) { c.MaxUploadSize = 1 << 20 })
		ops := `{"query":"mutation($file: Upload!) { importFile(file: $file, target: \"contacts\") { id } }","variables":{"file":null}}`
		ct, body := multipartBody(t, ops, bytes.Repeat([]byte("a,b\n"), 1<<20))
		// No Content-Length: the body is sent chunked.
		status, r := postRaw(t, small, http.Header{"Content-Type": {strings.ToUpper(ct[:9]) + ct[9:]}, "Apollo-Require-Preflight": {"1"}}, io.MultiReader(bytes.NewReader(body)), -1)
		require.Equal(t, http.StatusRequestEntityTooLarge, status, "%+v", r.Errors)
		require.Equal(t, "VALIDATION", r.Errors[0].Code())
	})
}

// TestAnUploadIsRefusedBeforeItsFileIsRead: the operations part comes
// first; an unknown target or a bad idempotency key there is answered
// while the client is still sending the file (which never ends here: the
// answer cannot have waited for it), and no task exists.
func TestAnUploadIsRefusedBeforeItsFileIsRead(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, dbtest.SQLite(t), app.Options{})
	t.Cleanup(func() { // after the parallel sub-tests
		var out struct{ Tasks struct{ TotalCount int } }
		s.Query(t, `{ tasks { totalCount } }`, nil, &out)
		require.Zero(t, out.Tasks.TotalCount, "no task was created")
	})
	for name, tc := range map[string]struct{ ops, want string }{
		"UnknownTarget": {`{"query":"mutation($file: Upload!, $t: String!) { importFile(file: $file, target: $t) { id } }","variables":{"file":null,"t":"contactz"}}`,
			`target: unknown import target "contactz" (registered: contacts); the file was not read`},
		"UnknownTargetInline": {`{"query":"mutation($file: Upload!) { importFile(file: $file, target: \"nope\") { id } }","variables":{"file":null}}`,
			`unknown import target "nope"`},
		"EmptyKey": {`{"query":"mutation($file: Upload!) { importFile(file: $file, target: \"contacts\", idempotencyKey: \"\") { id } }","variables":{"file":null}}`,
			`idempotencyKey: must be 1 to 128 characters; the file was not read`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pr, pw := io.Pipe()
			defer pw.Close() //nolint:errcheck // the file never ends
			mw := multipart.NewWriter(pw)
			go func() {
				_ = mw.WriteField("operations", tc.ops)
				_ = mw.WriteField("map", `{"0": ["variables.file"]}`)
				fw, err := mw.CreateFormFile("0", "c.csv")
				if err != nil {
					return
				}
				_, _ = fw.Write([]byte("姓名,手机\n"))
				// ... and nothing more: the part stays open.
			}()
			status, r := postRaw(t, s, http.Header{"Content-Type": {mw.FormDataContentType()}, "Apollo-Require-Preflight": {"1"}}, pr, -1)
			require.Equal(t, http.StatusUnprocessableEntity, status)
			require.Len(t, r.Errors, 1)
			require.Equal(t, "VALIDATION", r.Errors[0].Code())
			require.Contains(t, r.Errors[0].Message, tc.want)
		})
	}
}
