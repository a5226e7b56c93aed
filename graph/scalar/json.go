// Package scalar holds the custom GraphQL scalars bound in gqlgen.yml.
package scalar

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/99designs/gqlgen/graphql"
)

// MarshalJSON writes a stored JSON document as a GraphQL JSON value. A nil or
// empty document is null.
func MarshalJSON(v json.RawMessage) graphql.Marshaler {
	return graphql.WriterFunc(func(w io.Writer) {
		if len(v) == 0 {
			_, _ = io.WriteString(w, "null")
			return
		}
		_, _ = w.Write(v)
	})
}

// UnmarshalJSON reads any GraphQL value (object, list, string, number,
// boolean, null) given for a JSON argument.
func UnmarshalJSON(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("JSON value: %w", err)
	}
	return b, nil
}
