package graph

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/99designs/gqlgen/graphql"
)

// decodeParams answers every body as a full decode into graphql.RawParams
// does: the same error, or none.
func TestDecodeParamsFailsAsTheFullDecode(t *testing.T) {
	for _, body := range []string{
		`{"query":"{ a }"}`,
		`{"query":"{ a }","variables":null}`,
		`{"query":"{ a }","variables":{"in":[{"type":"x","input":{"n":1}}]},"extensions":{"e":1}}`,
		`{"query":"{ a }","variables":[]}`,
		`{"query":"{ a }","variables":"x"}`,
		`{"query":"{ a }","variables":1}`,
		`{"query":"{ a }","variables":true}`,
		`{"query":"{ a }","Variables":[1]}`,
		`{"query":1,"variables":[1]}`,
		`{"variables":[1],"query":1}`,
		`{"query":1,"variables":{}}`,
		`{"query":"{ a }","variables":{},"variables":[]}`,
		`{"query":"{ a }","variables":[],"variables":{}}`,
		`{"query":"{ a }","extensions":[]}`,
		`{"operationName":5}`,
		`{"query":"{ a }","variables":{"a":}}`,
		`{"query":"{ a }","variables":{"a":1}`,
		`{"query":"{ a }"} trailing`,
		`[]`,
		`"query"`,
		`null`,
		``,
		` {"query":"{ a }", "variables" :  {"x": "\u00e9\ud800"} } `,
	} {
		var full graphql.RawParams
		dec := json.NewDecoder(bytes.NewReader([]byte(body)))
		dec.UseNumber()
		want := fmt.Sprint(dec.Decode(&full))
		if got := fmt.Sprint(decodeParams([]byte(body))); got != want {
			t.Errorf("%s: %s, want %s", body, got, want)
		}
	}
}
