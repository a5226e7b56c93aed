package graph

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"

	"entgo.io/contrib/entgql"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/graph/model"
)

// Defaults of the limits on a request's shape (ServerConfig).
const (
	ComplexityLimitDefault  = 20000
	MaxDepthDefault         = 15
	MaxAliasesDefault       = 100
	MaxFieldsDefault        = 5000
	ParserTokenLimitDefault = 15000
	// MaxSelectionsDefault bounds the selections (fields, fragment spreads,
	// inline fragments) of a whole document with its fragments expanded:
	// every operation and every fragment definition, as validation walks
	// them.
	MaxSelectionsDefault = 10000
	// MaxMergeCostDefault bounds the work of the overlapping-fields rule
	// of validation, which compares every two fields that land on the
	// same response key (see mergeCost).
	MaxMergeCostDefault = 40000
	// MaxVariablesDefault and MaxArgumentsDefault bound variable
	// definitions per operation and arguments (and directives) per field:
	// validation looks each use up in a list.
	MaxVariablesDefault = 100
	MaxArgumentsDefault = 32
)

// documentLimit refuses documents that are too costly before gqlgen
// validates them: validation is where the cost is (its overlapping-fields
// rule compares every two fields that share a response key: 9,990
// "__typename" in one selection set took seconds), so limits applied after
// it come too late. It parses the document itself (linear, with the same
// token limit), walks it once with fragments memoized, and refuses an
// operation that is too deep, uses too many aliases, selects too many
// fields once fragments are expanded, or is introspection while that is
// disabled; and a document whose selections, fields sharing a response key,
// variables or arguments exceed their limits. It runs as an operation
// parameter mutator, the last hook before gqlgen parses and validates, and
// after automatic persisted queries have filled the query in. A document in
// gqlgen's query cache was validated (and passed) before: it is not walked
// again.
type documentLimit struct {
	cache                                          graphql.Cache[*ast.QueryDocument]
	tokenLimit                                     int
	maxDepth, maxAliases, maxFields, maxSelections int
	maxMergeCost, maxVariables, maxArguments       int
	introspection                                  bool
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationParameterMutator
} = documentLimit{}

func (documentLimit) ExtensionName() string                          { return "DocumentLimit" }
func (documentLimit) Validate(schema graphql.ExecutableSchema) error { return nil }

func (l documentLimit) MutateOperationParameters(ctx context.Context, params *graphql.RawParams) *gqlerror.Error {
	if params.Query == "" {
		return nil
	}
	if l.cache != nil {
		if _, ok := l.cache.Get(ctx, params.Query); ok {
			return nil
		}
	}
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: params.Query}, l.tokenLimit)
	if err != nil {
		return nil // gqlgen parses it again and reports the error
	}
	return l.check(doc)
}

// check applies the limits to a parsed, unvalidated document: fragments
// are found by name (validation has not linked them yet), may be missing
// or cyclic (validation reports both; the walk stops there).
func (l documentLimit) check(doc *ast.QueryDocument) *gqlerror.Error {
	w := shapeWalker{memo: map[string]shape{}, frags: map[string]*ast.FragmentDefinition{}, maxArguments: l.maxArguments}
	for _, f := range doc.Fragments {
		if _, dup := w.frags[f.Name]; !dup {
			w.frags[f.Name] = f
		}
	}
	selections := 0
	for _, op := range doc.Operations {
		if n := len(op.VariableDefinitions); n > l.maxVariables {
			return limitError("variables", l.maxVariables, "the operation defines %d variables; the limit is %d", n, l.maxVariables)
		}
		s := w.selectionSet(op.SelectionSet)
		switch {
		case s.depth > l.maxDepth:
			return limitError("depth", l.maxDepth, "the operation is %d fields deep; the limit is %d", s.depth, l.maxDepth)
		case s.aliases > l.maxAliases:
			return limitError("aliases", l.maxAliases, "the operation uses %d aliases; the limit is %d", s.aliases, l.maxAliases)
		case s.fields > l.maxFields:
			return limitError("fields", l.maxFields, "the operation selects %d fields once fragments are expanded; the limit is %d", s.fields, l.maxFields)
		case s.arguments > l.maxArguments:
			return limitError("arguments", l.maxArguments, "a field has %d arguments and directives; the limit is %d", s.arguments, l.maxArguments)
		case s.introspection && !l.introspection:
			err := gqlerror.Errorf("introspection is disabled on this server; start it with --playground (TASKGRAPH_PLAYGROUND=true) for introspection and the playground")
			err.Extensions = map[string]any{"code": CodeForbidden}
			return err
		}
		selections = satAdd(selections, s.selections)
	}
	for _, f := range doc.Fragments {
		s := w.fragment(f.Name)
		if s.arguments > l.maxArguments {
			return limitError("arguments", l.maxArguments, "a field has %d arguments and directives; the limit is %d", s.arguments, l.maxArguments)
		}
		selections = satAdd(selections, s.selections)
	}
	if selections > l.maxSelections {
		return limitError("selections", l.maxSelections, "the document has %d selections once fragments are expanded, counting each operation and fragment; the limit is %d", selections, l.maxSelections)
	}
	// Bounded now: expanding every definition visits at most maxSelections
	// selections.
	m := mergeWalker{frags: w.frags, budget: l.maxMergeCost, inFlight: map[string]bool{}}
	for _, op := range doc.Operations {
		m.node([]ast.SelectionSet{op.SelectionSet})
	}
	for _, f := range doc.Fragments {
		m.node([]ast.SelectionSet{f.SelectionSet})
	}
	if m.cost > l.maxMergeCost {
		return limitError("repeatedFields", l.maxMergeCost, "too many fields share a response key (the cost of merging them is over %d): select each field once per selection set, or alias them", l.maxMergeCost)
	}
	return nil
}

func limitError(limit string, max int, format string, args ...any) *gqlerror.Error {
	err := gqlerror.Errorf(format, args...)
	err.Extensions = map[string]any{"code": CodeLimitExceeded, "limit": limit, "max": max}
	return err
}

// shape is what the limits look at, for a selection set with its
// fragments expanded.
type shape struct {
	depth, aliases, fields, selections int
	arguments                          int // the most on one field
	introspection                      bool
}

func (s *shape) add(o shape, levels int) {
	s.depth = max(s.depth, o.depth+levels)
	s.aliases = satAdd(s.aliases, o.aliases)
	s.fields = satAdd(s.fields, o.fields)
	s.selections = satAdd(s.selections, o.selections)
	s.arguments = max(s.arguments, o.arguments)
	s.introspection = s.introspection || o.introspection
}

type shapeWalker struct {
	frags        map[string]*ast.FragmentDefinition
	memo         map[string]shape // by fragment name: each is walked once
	maxArguments int
}

func (w *shapeWalker) selectionSet(set ast.SelectionSet) shape {
	var out shape
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			f := shape{fields: 1, selections: 1, arguments: len(s.Arguments) + len(s.Directives)}
			if s.Alias != "" && s.Alias != s.Name {
				f.aliases = 1
			}
			if s.Name == "__schema" || s.Name == "__type" {
				f.introspection = true
			}
			f.add(w.selectionSet(s.SelectionSet), 0)
			out.add(f, 1)
		case *ast.InlineFragment:
			out.add(shape{selections: 1, arguments: len(s.Directives)}, 0)
			out.add(w.selectionSet(s.SelectionSet), 0)
		case *ast.FragmentSpread:
			out.add(shape{selections: 1, arguments: len(s.Directives)}, 0)
			out.add(w.fragment(s.Name), 0)
		}
	}
	return out
}

func (w *shapeWalker) fragment(name string) shape {
	if f, ok := w.memo[name]; ok {
		return f
	}
	w.memo[name] = shape{} // a cycle (refused by validation) ends here
	var f shape
	if def := w.frags[name]; def != nil {
		f = w.selectionSet(def.SelectionSet)
		f.arguments = max(f.arguments, len(def.Directives))
	}
	w.memo[name] = f
	return f
}

// mergeWalker estimates the work of validation's overlapping-fields rule.
// The rule compares, for every response object the query builds, every
// two fields that land on the same key in it (from the selection set
// itself, its inline fragments and the fragments it spreads, at any
// depth), then merges their selection sets and does the same one level
// down; and it compares every two fragment spreads of a selection set. So
// the cost of a response object is the sum of k² over its keys (k fields
// land on the key) plus s² (s spreads), and its children are the keys'
// merged selection sets. The sum over a document is what mergeCost bounds:
// wide selections of distinct fields cost little, repeating one field or
// one fragment many times costs its square.
type mergeWalker struct {
	frags    map[string]*ast.FragmentDefinition
	inFlight map[string]bool // fragments being expanded: a cycle stops
	cost     int
	budget   int
}

func (w *mergeWalker) node(sets []ast.SelectionSet) {
	if w.cost > w.budget {
		return
	}
	count := map[string]int{}
	var keys []string
	children := map[string][]ast.SelectionSet{}
	spreads := 0
	var collect func(set ast.SelectionSet)
	collect = func(set ast.SelectionSet) {
		for _, sel := range set {
			switch s := sel.(type) {
			case *ast.Field:
				key := s.Alias
				if key == "" {
					key = s.Name
				}
				if count[key] == 0 {
					keys = append(keys, key)
				}
				count[key]++
				if len(s.SelectionSet) > 0 {
					children[key] = append(children[key], s.SelectionSet)
				}
			case *ast.InlineFragment:
				collect(s.SelectionSet)
			case *ast.FragmentSpread:
				spreads++
				def := w.frags[s.Name]
				if def == nil || w.inFlight[s.Name] {
					continue
				}
				w.inFlight[s.Name] = true
				collect(def.SelectionSet)
				delete(w.inFlight, s.Name)
			}
		}
	}
	for _, set := range sets {
		collect(set)
	}
	w.cost = satAdd(w.cost, satMul(spreads, spreads))
	for _, k := range keys {
		w.cost = satAdd(w.cost, satMul(count[k], count[k]))
	}
	for _, k := range keys {
		if len(children[k]) > 0 {
			w.node(children[k])
		}
	}
}

// satAdd adds without overflowing, so that a fragment spread a million
// times a million times still counts as too many.
func satAdd(a, b int) int {
	const maxInt = int(^uint(0) >> 1)
	if a > maxInt-b {
		return maxInt
	}
	return a + b
}

// Costs of the complexity limit: a field that makes a database round trip
// costs fetchCost more than its selection; a list costs its selection once
// per element it may return.
const (
	fetchCost          = 10
	instancesPerTask   = 10 // a guess: most tasks run a few times
	defaultLogPageSize = 100
)

func pageCost(child int, first, last *int, def int) int {
	n := def
	if first != nil {
		n = *first
	} else if last != nil {
		n = *last
	}
	// A page over MaxPageSize is refused by the resolver with a clearer
	// error than a cost would give.
	n = min(max(n, 1), MaxPageSize)
	return satAdd(fetchCost, satMul(child, n))
}

func satMul(a, b int) int {
	const maxInt = int(^uint(0) >> 1)
	if a != 0 && b > maxInt/a {
		return maxInt
	}
	return a * b
}

func fetch(child int) int { return satAdd(fetchCost, child) }

type entgqlCursor = entgql.Cursor[int]

// complexity prices the fields that read the database; others cost 1 plus
// their selection (gqlgen's default). Aliases count: each aliased field is
// priced on its own.
func complexity() ComplexityRoot {
	var c ComplexityRoot
	c.Query.Task = func(child int, _ int) int { return fetch(child) }
	c.Query.TaskByCode = func(child int, _ string) int { return fetch(child) }
	c.Query.Node = func(child int, _ int) int { return fetch(child) }
	c.Query.Nodes = func(child int, ids []int) int { return satAdd(fetchCost, satMul(child, max(len(ids), 1))) }
	c.Query.Tasks = func(child int, _ *entgqlCursor, first *int, _ *entgqlCursor, last *int, _ []*ent.TaskOrder, _ *ent.TaskWhereInput) int {
		return pageCost(child, first, last, DefaultPageSize)
	}
	c.Query.AuditLogs = func(child int, _ *entgqlCursor, first *int, _ *entgqlCursor, last *int, _ *ent.AuditLogOrder, _ *ent.AuditLogWhereInput) int {
		return pageCost(child, first, last, DefaultPageSize)
	}
	c.Query.TaskStats = func(child int, _ *int) int { return fetch(child) }
	c.Task.Instances = func(child int) int { return satAdd(fetchCost, satMul(child, instancesPerTask)) }
	c.Task.Logs = func(child int, _ *entgqlCursor, first *int, _ *entgqlCursor, last *int) int {
		return pageCost(child, first, last, defaultLogPageSize)
	}
	c.TaskInstance.Task = fetch
	c.TaskLog.Task = fetch
	c.Mutation.CreateTask = func(child int, _ model.CreateTaskInput) int { return fetch(child) }
	c.Mutation.CancelTask = func(child int, _ int, _ *string) int { return fetch(child) }
	c.Mutation.RetryTask = func(child int, _ int) int { return fetch(child) }
	c.Mutation.CancelTasks = func(child int, ids []int, _ *string) int { return satAdd(fetchCost, satMul(child, max(len(ids), 1))) }
	c.Mutation.RetryTasks = func(child int, ids []int) int { return satAdd(fetchCost, satMul(child, max(len(ids), 1))) }
	c.Mutation.CreateTasks = func(child int, inputs []*model.CreateTaskInput) int {
		return satAdd(fetchCost, satMul(child, max(len(inputs), 1)))
	}
	c.Subscription.TaskUpdated = func(child int, _ *int, _ *ent.TaskWhereInput) int { return fetch(child) }
	c.Subscription.TaskLogAppended = func(child int, _ int) int { return fetch(child) }
	return c
}
