package graph

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/stretchr/testify/require"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// captureExec is an executor that records the request it was given.
type captureExec struct{ params *graphql.RawParams }

func (c *captureExec) CreateOperationContext(_ context.Context, p *graphql.RawParams) (*graphql.OperationContext, gqlerror.List) {
	c.params = p
	return nil, gqlerror.List{{Message: "captured"}}
}

func (c *captureExec) DispatchOperation(context.Context, *graphql.OperationContext) (graphql.ResponseHandler, context.Context) {
	panic("not reached")
}

func (c *captureExec) DispatchError(context.Context, gqlerror.List) *graphql.Response {
	return &graphql.Response{}
}

// chunkedUpload is a request whose length is unknown (chunked), with
// media type mediaType, carrying files of the given sizes.
func chunkedUpload(t *testing.T, mediaType string, sizes ...int) *http.Request {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	vars, m := []string{}, []string{}
	for i := range sizes {
		vars = append(vars, `"f`+string(rune('0'+i))+`": null`)
		m = append(m, `"`+string(rune('0'+i))+`": ["variables.f`+string(rune('0'+i))+`"]`)
	}
	require.NoError(t, mw.WriteField("operations", `{"query": "{ __typename }", "variables": {`+strings.Join(vars, ",")+`}}`))
	require.NoError(t, mw.WriteField("map", `{`+strings.Join(m, ",")+`}`))
	for i, n := range sizes {
		fw, err := mw.CreateFormFile(string(rune('0'+i)), "f.csv")
		require.NoError(t, err)
		_, _ = fw.Write(bytes.Repeat([]byte{'a'}, n))
	}
	require.NoError(t, mw.Close())
	r := httptest.NewRequest(http.MethodPost, "/query", io.MultiReader(&body))
	r.ContentLength = -1
	r.Header.Set("Content-Type", strings.Replace(mw.FormDataContentType(), "multipart/form-data", mediaType, 1))
	return r
}

func uploadOf(t *testing.T, p *graphql.RawParams, name string) graphql.Upload {
	t.Helper()
	require.NotNil(t, p)
	u, ok := p.Variables[name].(graphql.Upload)
	require.True(t, ok, "%v", p.Variables)
	return u
}

// TestAChunkedUploadIsNotReadIntoMemory: files beyond a memory budget per
// request are spooled to disk, whatever the request's length says.
func TestAChunkedUploadIsNotReadIntoMemory(t *testing.T) {
	t.Parallel()
	t.Run("GqlgensTransportReadsItIntoMemory", func(t *testing.T) {
		t.Parallel()
		// Why the transport is replaced: a chunked request reads as length
		// -1, which is "smaller" than MaxMemory.
		exec := &captureExec{}
		tr := transport.MultipartForm{MaxUploadSize: 64 << 20, MaxMemory: 1 << 20}
		tr.Do(httptest.NewRecorder(), chunkedUpload(t, "multipart/form-data", 8<<20), exec)
		_, onDisk := uploadOf(t, exec.params, "f0").File.(*os.File)
		require.False(t, onDisk)
	})
	t.Run("TheseAreSpooled", func(t *testing.T) {
		t.Parallel()
		exec := &captureExec{}
		tr := multipartForm{maxUpload: 64 << 20, maxJSON: 2 << 20, maxMemory: 1 << 20}
		r := chunkedUpload(t, "Multipart/Form-Data", 512<<10, 600<<10, 8<<20)
		require.True(t, tr.Supports(r))
		var spooled []*os.File
		p, merr := tr.read(r, &spooled)
		require.Nil(t, merr)
		defer func() {
			for _, f := range spooled {
				f.Close()
				os.Remove(f.Name())
			}
		}()
		_, onDisk := uploadOf(t, p, "f0").File.(*os.File)
		require.False(t, onDisk, "512 KiB fit the 1 MiB budget")
		_, onDisk = uploadOf(t, p, "f1").File.(*os.File)
		require.True(t, onDisk, "600 KiB more do not: the budget is per request")
		big := uploadOf(t, p, "f2")
		_, onDisk = big.File.(*os.File)
		require.True(t, onDisk)
		require.Equal(t, int64(8<<20), big.Size)
		n, err := io.Copy(io.Discard, big.File)
		require.NoError(t, err)
		require.Equal(t, int64(8<<20), n, "read from the start")
		_ = exec
	})
}
