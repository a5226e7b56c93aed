package engine

import (
	"testing"

	"github.com/taskgraph/taskgraph/internal/tasktype"

	"github.com/stretchr/testify/require"
)

func TestBulkInputSchemaTakesAnyFilter(t *testing.T) {
	r := tasktype.NewRegistry()
	(&Engine{}).RegisterBulk(r)
	typ, ok := r.Lookup(BulkType)
	require.True(t, ok)
	require.True(t, typ.Internal)
	require.NoError(t, typ.Validate([]byte(`{"action":"CANCEL","where":{"statusIn":["PENDING"],"or":[{"search":"x"}]},"ceiling":9,"matched":3}`)), "%s", typ.InputSchema)
	require.Error(t, typ.Validate([]byte(`{"action":"DELETE","where":{},"ceiling":9,"matched":3}`)))
}
