package graph_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// limitOf returns the extensions.limit of the response's only error,
// which must be LIMIT_EXCEEDED.
func limitOf(t *testing.T, r apptest.Response) string {
	t.Helper()
	require.Len(t, r.Errors, 1, "%s", r.Data)
	require.Equal(t, "LIMIT_EXCEEDED", r.Errors[0].Code(), "%+v", r.Errors[0])
	l, _ := r.Errors[0].Extensions["limit"].(string)
	return l
}

func repeat(n int, f func(i int) string) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(f(i))
		b.WriteByte(' ')
	}
	return b.String()
}

func TestQueryLimits(t *testing.T) {
	t.Parallel()
	// The limits are about the request's shape, not the data: SQLite is enough.
	s := apptest.Start(t, dbtest.SQLite(t), app.Options{}, func(c *app.Config) { c.Playground = false })
	t.Run("FiveHundredAliasesAreRejected", func(t *testing.T) {
		t.Parallel()
		q := "{ " + repeat(500, func(i int) string { return "a" + itoa(i) + `: task(id: 1) { id }` }) + "}"
		require.Equal(t, "aliases", limitOf(t, s.Do(t, q, nil)))
		q = "{ " + repeat(500, func(i int) string { return "a" + itoa(i) + `: taskTypes { name }` }) + "}"
		require.Equal(t, "aliases", limitOf(t, s.Do(t, q, nil)), "even of a cheap field")
	})
	t.Run("AliasesCountTowardsComplexity", func(t *testing.T) {
		t.Parallel()
		one := `tasks(first: 50) { edges { node { id code title status } } }`
		var out map[string]any
		s.Query(t, "{ "+one+" }", nil, &out)
		q := "{ " + repeat(90, func(i int) string { return "a" + itoa(i) + ": " + one }) + "}"
		r := s.Do(t, q, nil)
		require.Equal(t, "complexity", limitOf(t, r))
	})
	t.Run("AnExpensivePageIsRejected", func(t *testing.T) {
		t.Parallel()
		q := `{ tasks(first: 500) { edges { node { id code title status instances { id status lastError } logs(first: 100) { edges { node { message } } } } } } }`
		require.Equal(t, "complexity", limitOf(t, s.Do(t, q, nil)))
	})
	t.Run("AThirtyDeepQueryIsRejected", func(t *testing.T) {
		t.Parallel()
		// task > instances > task > instances ... is 30 fields deep.
		q := "{ task(id: 1) { " + strings.Repeat("instances { task { ", 14) + "id" + strings.Repeat(" } }", 14) + " } }"
		require.Equal(t, "depth", limitOf(t, s.Do(t, q, nil)))
		q = "{ task(id: 1) { " + strings.Repeat("instances { task { ", 3) + "id" + strings.Repeat(" } }", 3) + " } }"
		r := s.Do(t, q, nil)
		require.Equal(t, "NOT_FOUND", code(t, r), "an 8-deep query runs: %+v", r.Errors)
	})
	t.Run("DepthCountsThroughFragments", func(t *testing.T) {
		t.Parallel()
		q := `{ task(id: 1) { ...A } } ` +
			repeat(15, func(i int) string {
				return "fragment " + string(rune('A'+i)) + " on Task { instances { task { ..." + string(rune('A'+i+1)) + " } } }"
			}) + "fragment " + string(rune('A'+15)) + " on Task { id }"
		require.Equal(t, "depth", limitOf(t, s.Do(t, q, nil)))
	})
	t.Run("AFragmentBombIsRejectedQuickly", func(t *testing.T) {
		t.Parallel()
		// Each fragment spreads the next twice: 2^40 fields once expanded.
		var b strings.Builder
		b.WriteString("{ taskTypes { ...F0 } } ")
		for i := range 40 {
			b.WriteString("fragment F" + itoa(i) + " on TaskType { name ...F" + itoa(i+1) + " ...F" + itoa(i+1) + " } ")
		}
		b.WriteString("fragment F40 on TaskType { name }")
		require.Equal(t, "fields", limitOf(t, s.Do(t, b.String(), nil)))
	})
	t.Run("RepeatedFieldsAreRefusedBeforeValidation", func(t *testing.T) {
		t.Parallel()
		// Validation compares every two fields sharing a response key:
		// 4,999 "__typename" (under the 5,000-field limit) took a second of
		// CPU, 9,990 several. The document is refused before validation: a
		// field that does not exist is not even reported.
		for n, limit := range map[int]string{300: "repeatedFields", 4999: "repeatedFields", 9990: "fields"} {
			q := "{ " + strings.Repeat("__typename ", n) + "}"
			require.Equal(t, limit, limitOf(t, s.Do(t, q, nil)), n)
			require.Equal(t, limit, limitOf(t, s.Do(t, "{ nosuchfield "+q[1:], nil)), "before validation")
		}
		q := "{ " + strings.Repeat("taskTypes { "+strings.Repeat("name ", 40)+"} ", 40) + "}"
		require.Equal(t, "repeatedFields", limitOf(t, s.Do(t, q, nil)), "merged one level down")
		var out map[string]any
		s.Query(t, "{ "+strings.Repeat("__typename ", 20)+"taskTypes { name name description } }", nil, &out)
	})
	t.Run("RepeatedAndManyFragmentsAreRefusedBeforeValidation", func(t *testing.T) {
		t.Parallel()
		q := "{ " + strings.Repeat("...F ", 3000) + "} fragment F on Query { __typename }"
		require.Equal(t, "repeatedFields", limitOf(t, s.Do(t, q, nil)))
		var b strings.Builder
		b.WriteString("{ ")
		for i := range 1200 {
			b.WriteString("...F" + itoa(i) + " ")
		}
		b.WriteString("} ")
		for i := range 1200 {
			b.WriteString("fragment F" + itoa(i) + " on Query { taskTypes { name } } ")
		}
		require.Equal(t, "repeatedFields", limitOf(t, s.Do(t, b.String(), nil)))
		// Each operation is validated with the fragments it spreads.
		b.Reset()
		for i := range 1500 {
			b.WriteString("query Q" + itoa(i) + " { ...F } ")
		}
		b.WriteString("fragment F on Query { " + strings.Repeat("taskTypes { name } ", 10) + "}")
		require.Equal(t, "selections", limitOf(t, s.Do(t, b.String(), nil)))
	})
	t.Run("VariablesArgumentsAndDirectivesAreBounded", func(t *testing.T) {
		t.Parallel()
		q := "query(" + repeat(150, func(i int) string { return "$v" + itoa(i) + ": Int" }) + ") { __typename }"
		require.Equal(t, "variables", limitOf(t, s.Do(t, q, nil)))
		q = "{ __typename " + strings.Repeat("@skip(if: false) ", 40) + "}"
		require.Equal(t, "arguments", limitOf(t, s.Do(t, q, nil)))
	})
	t.Run("IntrospectionIsRefusedByDefault", func(t *testing.T) {
		t.Parallel()
		for _, q := range []string{
			`{ __schema { types { name } } }`,
			`{ __type(name: "Task") { fields { name } } }`,
			`query { ...I } fragment I on Query { __schema { queryType { name } } }`,
		} {
			r := s.Do(t, q, nil)
			require.Equal(t, "FORBIDDEN", code(t, r), q)
			require.Contains(t, r.Errors[0].Message, "introspection is disabled on this server; start it with --playground", "the refusal says how to turn it on")
		}
		var out struct {
			Typename string `json:"__typename"`
		}
		s.Query(t, `{ __typename }`, nil, &out)
		require.Equal(t, "Query", out.Typename, "__typename is not introspection")
		resp, err := http.Get(s.URL + "/playground")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
	})
	t.Run("IntrospectionWorksWhenEnabled", func(t *testing.T) {
		t.Parallel()
		on := apptest.Start(t, dbtest.SQLite(t), app.Options{}, func(c *app.Config) { c.Playground = true })
		var out struct {
			Schema struct{ QueryType struct{ Name string } } `json:"__schema"`
		}
		on.Query(t, `{ __schema { queryType { name } } }`, nil, &out)
		require.Equal(t, "Query", out.Schema.QueryType.Name)
	})
	t.Run("NoDidYouMeanSuggestions", func(t *testing.T) {
		t.Parallel()
		for _, q := range []string{
			`{ tsks { totalCount } }`, `{ tasks(frist: 1) { totalCount } }`, `{ tasks { totalCont } }`,
			`query($s: TaskStatu) { tasks(where: {status: $s}) { totalCount } }`, `{ tasks(where: {status: PENDIN}) { totalCount } }`,
			`{ tasks(where: {statu: PENDING}) { totalCount } }`,
		} {
			r := s.Do(t, q, nil)
			require.NotEmpty(t, r.Errors)
			for _, e := range r.Errors {
				require.NotContains(t, strings.ToLower(e.Message), "did you mean", q)
			}
		}
	})
	t.Run("AHugeDocumentIsRejectedByThePaser", func(t *testing.T) {
		t.Parallel()
		q := "{ taskTypes { " + strings.Repeat("name ", 20000) + "} }"
		r := s.Do(t, q, nil)
		require.NotEmpty(t, r.Errors)
		require.Contains(t, r.Errors[0].Message, "token limit")
	})
	t.Run("ATooLargeBodyIsRefused", func(t *testing.T) {
		t.Parallel()
		big := `{"query": "{ taskTypes { name } }", "variables": {"x": "` + strings.Repeat("a", 3<<20) + `"}}`
		r := s.DoRaw(t, "application/json", []byte(big))
		require.NotEmpty(t, r.Errors)
		require.Equal(t, "null", string(r.Data))
	})
}

// TestInternalErrorsShowOnlyAReference breaks the database under a running
// server: the client sees a reference, never SQL, driver messages or paths.
func TestInternalErrorsShowOnlyAReference(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := apptest.Start(t, dsn, app.Options{})
		create(t, s, map[string]any{"type": "noop"})
		require.NoError(t, s.App.Store.DB().Close())
		r := s.Do(t, `{ tasks { totalCount edges { node { id } } } }`, nil)
		require.Len(t, r.Errors, 1)
		e := r.Errors[0]
		require.Equal(t, "INTERNAL", e.Code(), "%+v", e)
		ref, _ := e.Extensions["reference"].(string)
		require.Len(t, ref, 12)
		require.Equal(t, "internal error (reference "+ref+")", e.Message)
		require.Len(t, e.Extensions, 2, "code and reference only: %v", e.Extensions)
	})
}

func itoa(i int) string { return strconv.Itoa(i) }
