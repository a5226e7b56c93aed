package graph

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"entgo.io/contrib/entgql"

	"taskgraph/ent"
	"taskgraph/graph/model"
)

// Defaults of the limits on a request's shape (ServerConfig).
const (
	ComplexityLimitDefault  = 20000
	MaxDepthDefault         = 15
	MaxAliasesDefault       = 100
	MaxFieldsDefault        = 5000
	ParserTokenLimitDefault = 15000
)

// shapeLimit refuses operations that are too deep, use too many aliases or
// select too many fields once fragments are expanded, and introspection
// when it is disabled. It runs before the complexity limit, whose walk
// expands fragments without memory: a "fragment bomb" never reaches it.
type shapeLimit struct {
	maxDepth, maxAliases, maxFields int
	introspection                   bool
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = shapeLimit{}

func (shapeLimit) ExtensionName() string                          { return "ShapeLimit" }
func (shapeLimit) Validate(schema graphql.ExecutableSchema) error { return nil }

// MutateOperationContext runs after the document was parsed and validated
// (so fragments are defined and acyclic).
func (l shapeLimit) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil {
		return nil
	}
	w := shapeWalker{memo: map[string]shape{}}
	s := w.selectionSet(oc.Operation.SelectionSet)
	switch {
	case s.depth > l.maxDepth:
		return limitError("depth", l.maxDepth, "the operation is %d fields deep; the limit is %d", s.depth, l.maxDepth)
	case s.aliases > l.maxAliases:
		return limitError("aliases", l.maxAliases, "the operation uses %d aliases; the limit is %d", s.aliases, l.maxAliases)
	case s.fields > l.maxFields:
		return limitError("fields", l.maxFields, "the operation selects %d fields once fragments are expanded; the limit is %d", s.fields, l.maxFields)
	case s.introspection && !l.introspection:
		err := gqlerror.Errorf("introspection is disabled on this server")
		err.Extensions = map[string]any{"code": CodeForbidden}
		return err
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
	depth, aliases, fields int
	introspection          bool
}

func (s *shape) add(o shape, levels int) {
	s.depth = max(s.depth, o.depth+levels)
	s.aliases = satAdd(s.aliases, o.aliases)
	s.fields = satAdd(s.fields, o.fields)
	s.introspection = s.introspection || o.introspection
}

type shapeWalker struct {
	memo map[string]shape // by fragment name: each is walked once
}

func (w *shapeWalker) selectionSet(set ast.SelectionSet) shape {
	var out shape
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			f := shape{fields: 1}
			if s.Alias != "" && s.Alias != s.Name {
				f.aliases = 1
			}
			if s.Name == "__schema" || s.Name == "__type" {
				f.introspection = true
			}
			f.add(w.selectionSet(s.SelectionSet), 0)
			out.add(f, 1)
		case *ast.InlineFragment:
			out.add(w.selectionSet(s.SelectionSet), 0)
		case *ast.FragmentSpread:
			out.add(w.fragment(s), 0)
		}
	}
	return out
}

func (w *shapeWalker) fragment(s *ast.FragmentSpread) shape {
	if f, ok := w.memo[s.Name]; ok {
		return f
	}
	w.memo[s.Name] = shape{} // a cycle (refused by validation anyway) ends here
	var f shape
	if s.Definition != nil {
		f = w.selectionSet(s.Definition.SelectionSet)
	}
	w.memo[s.Name] = f
	return f
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
	c.Query.TaskStats = func(child int) int { return fetch(child) }
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
