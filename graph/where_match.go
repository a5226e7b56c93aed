package graph

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/99designs/gqlgen/graphql"

	"github.com/taskgraph/taskgraph/ent"
)

// matchTask evaluates a TaskWhereInput against a task in memory, as the
// database would, so that a subscription can filter committed changes
// without a query per change and per subscriber. exact is false when the
// input carries predicates that only the database can evaluate (custom
// predicates other than search): ok then says whether the task may match,
// and the caller must confirm a match with a query. A subscription plans
// its input once (planWhere) and evaluates the plan for every change.
func matchTask(w *ent.TaskWhereInput, t *ent.Task) (ok, exact bool) {
	return planWhere(w).match(t)
}

// sqlBool is SQL's three-valued logic: a comparison with NULL is unknown,
// NOT unknown is unknown, and WHERE keeps only true. Ordered so that AND is
// the minimum and OR the maximum.
type sqlBool int8

const (
	sqlFalse sqlBool = iota
	sqlUnknown
	sqlTrue
)

func (b sqlBool) not() sqlBool { return sqlTrue - b }

func sqlOf(b bool) sqlBool {
	if b {
		return sqlTrue
	}
	return sqlFalse
}

// wherePlan is a TaskWhereInput with its reflection done once: the task
// fields and operators it compares, and its nested inputs.
type wherePlan struct {
	preds []plannedPredicate
	not   *wherePlan
	and   []*wherePlan
	or    []*wherePlan
	// search is the search field's predicate (any of code, title and biz
	// id contains the text, without regard to case): true when one is.
	search []plannedPredicate
	// opaque counts the parts only the database can evaluate (custom
	// predicates other than search, edge predicates).
	opaque int
}

// searchPlan is the search predicate as the database evaluates it (see the
// Search resolver): code, title or biz id contains term, folding case.
func searchPlan(term string) []plannedPredicate {
	wt := reflect.TypeOf(ent.TaskWhereInput{})
	var out []plannedPredicate
	for _, name := range []string{"CodeContainsFold", "TitleContainsFold", "BizIDContainsFold"} {
		field, op, nullable := splitPredicate(name, wt)
		out = append(out, plannedPredicate{field: field, op: op, nullable: nullable, arg: reflect.ValueOf(term)})
	}
	return out
}

type plannedPredicate struct {
	field    []int // index of the task's field
	op       string
	nullable bool
	arg      reflect.Value
}

var taskType = reflect.TypeOf(ent.Task{})

// planWhere reads w once. A nil input matches everything.
func planWhere(w *ent.TaskWhereInput) *wherePlan { return planWhereArgs(w, nil) }

// planWhereArgs is planWhere with the argument w was read from (a GraphQL
// input object as a map, variables resolved; see whereArgument), which
// holds what w no longer does: the text of its search field, which the
// field's resolver turned into a predicate (a function). With it, search
// is evaluated in memory.
func planWhereArgs(w *ent.TaskWhereInput, raw any) *wherePlan {
	p := &wherePlan{}
	if w == nil {
		return p
	}
	args, _ := raw.(map[string]any)
	nested := func(key string, i int) any {
		if i < 0 {
			return args[key]
		}
		if l, ok := args[key].([]any); ok && i < len(l) {
			return l[i]
		}
		return nil
	}
	wv := reflect.ValueOf(w).Elem()
	wt := wv.Type()
	for i := 0; i < wt.NumField(); i++ {
		f := wt.Field(i)
		v := wv.Field(i)
		// entgql ignores empty lists (statusIn: [] filters nothing).
		if v.IsZero() || v.Kind() == reflect.Slice && v.Len() == 0 {
			continue
		}
		switch f.Name {
		case "Predicates":
			// The search field's predicate, if it is the only one, is
			// evaluated in memory; any other only by the database.
			if term, ok := args["search"].(string); ok && term != "" && v.Len() == 1 {
				p.search = searchPlan(term)
			} else {
				p.opaque++
			}
		case "Not":
			p.not = planWhereArgs(v.Interface().(*ent.TaskWhereInput), nested("not", -1))
		case "And":
			for i, s := range v.Interface().([]*ent.TaskWhereInput) {
				p.and = append(p.and, planWhereArgs(s, nested("and", i)))
			}
		case "Or":
			for i, s := range v.Interface().([]*ent.TaskWhereInput) {
				p.or = append(p.or, planWhereArgs(s, nested("or", i)))
			}
		default:
			field, op, nullable := splitPredicate(f.Name, wt)
			if field == nil {
				p.opaque++
				continue
			}
			p.preds = append(p.preds, plannedPredicate{field: field, op: op, nullable: nullable, arg: v})
		}
	}
	return p
}

func (p *wherePlan) match(t *ent.Task) (ok, exact bool) {
	_, hi, exact := p.eval(reflect.ValueOf(t).Elem())
	return hi == sqlTrue, exact
}

// eval returns the range [lo, hi] the input may evaluate to: one value when
// exact, and from false up to what the rest allows when part of it is left
// to the database (NOT turns such a range around, which is why a single
// "maybe" would not do).
func (p *wherePlan) eval(tv reflect.Value) (lo, hi sqlBool, exact bool) {
	lo, hi, exact = sqlTrue, sqlTrue, p.opaque == 0
	if !exact {
		hi = sqlTrue
		lo = sqlFalse
	}
	and := func(l, h sqlBool) { lo, hi = min(lo, l), min(hi, h) }
	for _, pr := range p.preds {
		r := evalPredicate(tv.FieldByIndex(pr.field), pr.op, pr.nullable, pr.arg)
		and(r, r)
	}
	if len(p.search) > 0 {
		r := sqlFalse
		for _, pr := range p.search {
			r = max(r, evalPredicate(tv.FieldByIndex(pr.field), pr.op, pr.nullable, pr.arg))
		}
		and(r, r)
	}
	if p.not != nil {
		l, h, e := p.not.eval(tv)
		exact = exact && e
		and(h.not(), l.not())
	}
	if len(p.and) > 0 {
		l, h := sqlTrue, sqlTrue
		for _, s := range p.and {
			sl, sh, e := s.eval(tv)
			exact = exact && e
			l, h = min(l, sl), min(h, sh)
		}
		and(l, h)
	}
	if len(p.or) > 0 {
		l, h := sqlFalse, sqlFalse
		for _, s := range p.or {
			sl, sh, e := s.eval(tv)
			exact = exact && e
			l, h = max(l, sl), max(h, sh)
		}
		and(l, h)
	}
	return lo, hi, exact
}

// predicateSuffixes are the operators entgql appends to field names,
// longest first so that "ContainsFold" is not read as "Contains".
var predicateSuffixes = []string{"ContainsFold", "EqualFold", "HasPrefix", "HasSuffix", "Contains", "NotNil", "NotIn", "IsNil", "NEQ", "GTE", "LTE", "GT", "LT", "In"}

// splitPredicate maps a where-input field name (StatusIn) to the index of
// the task's field (Status) and the operator (In); nil when the task has no
// such field. nullable reports a column that may be NULL (the input has an
// IsNil predicate for it).
func splitPredicate(name string, where reflect.Type) (field []int, op string, nullable bool) {
	base, op := name, "EQ"
	if _, ok := taskType.FieldByName(name); !ok {
		base, op = "", ""
		for _, suf := range predicateSuffixes {
			if b, found := strings.CutSuffix(name, suf); found {
				if _, ok := taskType.FieldByName(b); ok {
					base, op = b, suf
					break
				}
			}
		}
		if base == "" {
			return nil, "", false
		}
	}
	_, nullable = where.FieldByName(base + "IsNil")
	f, _ := taskType.FieldByName(base)
	return f.Index, op, nullable
}

func evalPredicate(field reflect.Value, op string, nullable bool, arg reflect.Value) sqlBool {
	// An optional string that is not a pointer reads as "" when NULL; the
	// store writes NULL, never "", for an empty one.
	isNil := field.Kind() == reflect.Pointer && field.IsNil() ||
		nullable && field.Kind() == reflect.String && field.Len() == 0
	switch op {
	case "IsNil":
		return sqlOf(isNil == arg.Bool())
	case "NotNil":
		return sqlOf(!isNil == arg.Bool())
	}
	if isNil {
		return sqlUnknown // SQL: NULL compares as unknown, even in NOT IN
	}
	if field.Kind() == reflect.Pointer {
		field = field.Elem()
	}
	if arg.Kind() == reflect.Pointer {
		arg = arg.Elem()
	}
	switch op {
	case "EQ":
		return sqlOf(compare(field, arg) == 0)
	case "NEQ":
		return sqlOf(compare(field, arg) != 0)
	case "GT":
		return sqlOf(compare(field, arg) > 0)
	case "GTE":
		return sqlOf(compare(field, arg) >= 0)
	case "LT":
		return sqlOf(compare(field, arg) < 0)
	case "LTE":
		return sqlOf(compare(field, arg) <= 0)
	case "In", "NotIn":
		in := false
		for i := 0; i < arg.Len(); i++ {
			if compare(field, arg.Index(i)) == 0 {
				in = true
				break
			}
		}
		return sqlOf(in == (op == "In"))
	}
	s, a := field.String(), arg.String()
	switch op {
	case "Contains":
		return sqlOf(strings.Contains(s, a))
	case "HasPrefix":
		return sqlOf(strings.HasPrefix(s, a))
	case "HasSuffix":
		return sqlOf(strings.HasSuffix(s, a))
	case "EqualFold":
		return sqlOf(strings.EqualFold(s, a))
	case "ContainsFold":
		return sqlOf(strings.Contains(strings.ToLower(s), strings.ToLower(a)))
	}
	panic(fmt.Sprintf("where match: unknown operator %q", op))
}

func compare(a, b reflect.Value) int {
	if t, ok := a.Interface().(time.Time); ok {
		return t.Compare(b.Interface().(time.Time))
	}
	switch a.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return cmp.Compare(a.Int(), b.Int())
	case reflect.String:
		return cmp.Compare(a.String(), b.String())
	case reflect.Bool:
		if a.Bool() == b.Bool() {
			return 0
		}
		if a.Bool() {
			return 1
		}
		return -1
	}
	panic(fmt.Sprintf("where match: cannot compare %s", a.Type()))
}

// whereArgument is the where argument of the field being resolved, as the
// request wrote it (variables resolved), or nil.
func whereArgument(ctx context.Context) any {
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil || !graphql.HasOperationContext(ctx) {
		return nil
	}
	return fc.Field.ArgumentMap(graphql.GetOperationContext(ctx).Variables)["where"]
}
