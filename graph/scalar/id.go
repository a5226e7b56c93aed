package scalar

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/99designs/gqlgen/graphql"
)

// MarshalID writes an id as GraphQL does: a string ("42").
func MarshalID(id int) graphql.Marshaler {
	return graphql.WriterFunc(func(w io.Writer) {
		_, _ = io.WriteString(w, strconv.Quote(strconv.Itoa(id)))
	})
}

// UnmarshalID reads an id given as a string ("42") or a number (42). What
// is not one is refused with the value and the shape of an id, not with
// strconv's words.
func UnmarshalID(v any) (int, error) {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case json.Number:
		s = string(v)
	case int:
		return v, nil
	case int64:
		return int(v), nil
	default:
		return 0, fmt.Errorf("an ID is a whole number such as \"42\", not %T", v)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not an ID: an ID is a whole number such as \"42\"", s)
	}
	return n, nil
}
