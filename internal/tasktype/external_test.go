package tasktype_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/tasktype"
)

func TestExternalTypes(t *testing.T) {
	r := tasktype.NewRegistry()
	tasktype.Register(r, "builtin", func(context.Context, *tasktype.Job, struct{}) error { return nil })

	ext, err := tasktype.NewExternal(tasktype.ExternalDef{Name: "py.invoice", Timeout: time.Minute,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)})
	require.NoError(t, err)
	require.True(t, ext.External)
	require.Equal(t, tasktype.DefaultPolicyName, ext.RetryPolicy)
	require.Equal(t, tasktype.StallFlag, ext.StallAction)
	require.NoError(t, r.Declare(ext))
	got, ok := r.Lookup("py.invoice")
	require.True(t, ok)
	require.NoError(t, got.Validate(json.RawMessage(`{"n":3}`)))
	var ie *tasktype.InputError
	require.ErrorAs(t, got.Validate(json.RawMessage(`{"n":"x"}`)), &ie)
	require.ErrorAs(t, got.Validate(json.RawMessage(`{`)), &ie)
	in, err := got.DecodeAccepted(json.RawMessage(`{"n":3}`))
	require.NoError(t, err)
	require.ErrorIs(t, got.Handle(context.Background(), nil, in), tasktype.ErrExternal)

	shadow, err := tasktype.NewExternal(tasktype.ExternalDef{Name: "builtin", Timeout: time.Minute})
	require.NoError(t, err)
	require.True(t, errors.Is(r.Declare(shadow), tasktype.ErrDuplicate), "a built-in type is not replaced")
	require.False(t, r.Remove("builtin"), "nor removed")
	require.True(t, r.Remove("py.invoice"))
	_, ok = r.Lookup("py.invoice")
	require.False(t, ok)

	for name, d := range map[string]tasktype.ExternalDef{
		"bad name":   {Name: "Bad Name", Timeout: time.Minute},
		"no timeout": {Name: "a"},
		"bad schema": {Name: "a", Timeout: time.Minute, InputSchema: json.RawMessage(`{"type":"nope"}`)},
		"not json":   {Name: "a", Timeout: time.Minute, InputSchema: json.RawMessage(`{`)},
		"stall":      {Name: "a", Timeout: time.Minute, StallAction: "EXPLODE"},
		"neg stall":  {Name: "a", Timeout: time.Minute, StallAfter: -time.Second},
	} {
		_, err := tasktype.NewExternal(d)
		require.Error(t, err, name)
	}
}
