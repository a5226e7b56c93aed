package external_test

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/external"
)

// TestRoutesMatchTheOpenAPIDescription: docs/workers.openapi.json lists
// exactly the routes the handler serves, and every request body it
// describes has the fields the handler's types take.
func TestRoutesMatchTheOpenAPIDescription(t *testing.T) {
	raw, err := os.ReadFile("../../docs/workers.openapi.json")
	require.NoError(t, err)
	var doc struct {
		Paths      map[string]map[string]json.RawMessage
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage
			}
		}
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	var described []string
	for path, ops := range doc.Paths {
		for method := range ops {
			described = append(described, map[string]string{"post": "POST", "get": "GET"}[method]+" "+path)
		}
	}
	require.ElementsMatch(t, external.Routes(), described)
	for name, v := range map[string]any{
		"ClaimRequest": external.ClaimRequest{}, "ClaimResponse": external.ClaimResponse{Draining: true}, "ClaimedTask": external.ClaimedTask{Parents: map[string]json.RawMessage{"a": nil}, ParentOutcomes: map[string]external.ParentOutcome{"a": {}}},
		"ParentOutcome":   external.ParentOutcome{Result: json.RawMessage(`{}`), Error: "e"},
		"CompleteRequest": external.CompleteRequest{}, "CompleteResponse": external.CompleteResponse{},
		"CompleteManyRequest": external.CompleteManyRequest{}, "CompleteManyResponse": external.CompleteManyResponse{},
		"HeartbeatRequest": external.HeartbeatRequest{}, "HeartbeatResponse": external.HeartbeatResponse{},
		"LogRequest": external.LogRequest{}, "ProgressRequest": external.ProgressRequest{}, "WriteResponse": external.WriteResponse{},
		"ErrorDetail": external.ErrorDetail{},
	} {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		var fields map[string]any
		require.NoError(t, json.Unmarshal(b, &fields))
		want := slices.Sorted(func(yield func(string) bool) {
			for k := range doc.Components.Schemas[name].Properties {
				if !yield(k) {
					return
				}
			}
		})
		for k := range fields {
			require.Contains(t, want, k, "%s.%s is not described", name, k)
		}
	}
}
