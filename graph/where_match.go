package graph

import (
	"cmp"
	"fmt"
	"reflect"
	"strings"
	"time"

	"taskgraph/ent"
)

// matchTask evaluates a TaskWhereInput against a task in memory, as the
// database would, so that a subscription can filter committed changes
// without a query per change and per subscriber. exact is false when the
// input carries predicates that only the database can evaluate (such as
// search): ok then says whether the task may match, and the caller must
// confirm a match with a query.
func matchTask(w *ent.TaskWhereInput, t *ent.Task) (ok, exact bool) {
	_, hi, exact := evalWhere(w, reflect.ValueOf(t).Elem())
	return hi == sqlTrue, exact
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

// evalWhere returns the range [lo, hi] the input may evaluate to: one value
// when exact, and from false up to what the rest allows when part of it is
// left to the database (NOT turns such a range around, which is why a
// single "maybe" would not do).
func evalWhere(w *ent.TaskWhereInput, tv reflect.Value) (lo, hi sqlBool, exact bool) {
	lo, hi, exact = sqlTrue, sqlTrue, true
	if w == nil {
		return lo, hi, exact
	}
	and := func(l, h sqlBool) {
		lo, hi = min(lo, l), min(hi, h)
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
			exact = false
			and(sqlFalse, sqlTrue)
			continue
		case "Not":
			l, h, e := evalWhere(v.Interface().(*ent.TaskWhereInput), tv)
			exact = exact && e
			and(h.not(), l.not())
			continue
		case "And", "Or":
			l, h := sqlTrue, sqlTrue
			if f.Name == "Or" {
				l, h = sqlFalse, sqlFalse
			}
			for _, s := range v.Interface().([]*ent.TaskWhereInput) {
				sl, sh, e := evalWhere(s, tv)
				exact = exact && e
				if f.Name == "And" {
					l, h = min(l, sl), min(h, sh)
				} else {
					l, h = max(l, sl), max(h, sh)
				}
			}
			and(l, h)
			continue
		}
		field, op, nullable := splitPredicate(f.Name, wt, tv)
		if !field.IsValid() {
			// A predicate on something a task value cannot tell (an edge);
			// leave it to the database.
			exact = false
			and(sqlFalse, sqlTrue)
			continue
		}
		r := evalPredicate(field, op, nullable, v)
		and(r, r)
	}
	return lo, hi, exact
}

// predicateSuffixes are the operators entgql appends to field names,
// longest first so that "ContainsFold" is not read as "Contains".
var predicateSuffixes = []string{"ContainsFold", "EqualFold", "HasPrefix", "HasSuffix", "Contains", "NotNil", "NotIn", "IsNil", "NEQ", "GTE", "LTE", "GT", "LT", "In"}

// splitPredicate maps a where-input field name (StatusIn) to the task's
// field (Status) and the operator (In). nullable reports a column that may
// be NULL (the input has an IsNil predicate for it).
func splitPredicate(name string, where reflect.Type, task reflect.Value) (field reflect.Value, op string, nullable bool) {
	base, op := name, "EQ"
	if !task.FieldByName(name).IsValid() {
		base, op = "", ""
		for _, suf := range predicateSuffixes {
			if b, found := strings.CutSuffix(name, suf); found && task.FieldByName(b).IsValid() {
				base, op = b, suf
				break
			}
		}
		if base == "" {
			return reflect.Value{}, "", false
		}
	}
	_, nullable = where.FieldByName(base + "IsNil")
	return task.FieldByName(base), op, nullable
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
