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
// search): the caller must then confirm a match with a query.
func matchTask(w *ent.TaskWhereInput, t *ent.Task) (ok, exact bool) {
	if w == nil {
		return true, true
	}
	exact = true
	ok = true
	wv := reflect.ValueOf(w).Elem()
	tv := reflect.ValueOf(t).Elem()
	wt := wv.Type()
	for i := 0; i < wt.NumField(); i++ {
		f := wt.Field(i)
		v := wv.Field(i)
		if v.IsZero() {
			continue
		}
		switch f.Name {
		case "Predicates":
			exact = false
			continue
		case "Not":
			m, e := matchTask(v.Interface().(*ent.TaskWhereInput), t)
			exact = exact && e
			ok = ok && !m
			continue
		case "And", "Or":
			subs := v.Interface().([]*ent.TaskWhereInput)
			some := false
			all := true
			for _, s := range subs {
				m, e := matchTask(s, t)
				exact = exact && e
				some = some || m
				all = all && m
			}
			if f.Name == "And" {
				ok = ok && all
			} else {
				ok = ok && some
			}
			continue
		}
		field, op := splitPredicate(f.Name, tv)
		if !field.IsValid() {
			// A predicate on something a task value cannot tell (an edge);
			// leave it to the database.
			exact = false
			continue
		}
		ok = ok && evalPredicate(field, op, v)
	}
	return ok, exact
}

// predicateSuffixes are the operators entgql appends to field names,
// longest first so that "ContainsFold" is not read as "Contains".
var predicateSuffixes = []string{"ContainsFold", "EqualFold", "HasPrefix", "HasSuffix", "Contains", "NotNil", "NotIn", "IsNil", "NEQ", "GTE", "LTE", "GT", "LT", "In"}

// splitPredicate maps a where-input field name (StatusIn) to the task's
// field (Status) and the operator (In).
func splitPredicate(name string, task reflect.Value) (reflect.Value, string) {
	if f := task.FieldByName(name); f.IsValid() {
		return f, "EQ"
	}
	for _, suf := range predicateSuffixes {
		if base, found := strings.CutSuffix(name, suf); found {
			if f := task.FieldByName(base); f.IsValid() {
				return f, suf
			}
		}
	}
	return reflect.Value{}, ""
}

func evalPredicate(field reflect.Value, op string, arg reflect.Value) bool {
	isNil := field.Kind() == reflect.Pointer && field.IsNil() ||
		field.Kind() == reflect.String && field.Len() == 0
	switch op {
	case "IsNil":
		return isNil == arg.Bool()
	case "NotNil":
		return !isNil == arg.Bool()
	}
	if field.Kind() == reflect.Pointer {
		if field.IsNil() {
			return false // SQL: NULL compares as unknown
		}
		field = field.Elem()
	}
	if arg.Kind() == reflect.Pointer {
		arg = arg.Elem()
	}
	switch op {
	case "EQ":
		return compare(field, arg) == 0
	case "NEQ":
		return compare(field, arg) != 0
	case "GT":
		return compare(field, arg) > 0
	case "GTE":
		return compare(field, arg) >= 0
	case "LT":
		return compare(field, arg) < 0
	case "LTE":
		return compare(field, arg) <= 0
	case "In", "NotIn":
		in := false
		for i := 0; i < arg.Len(); i++ {
			if compare(field, arg.Index(i)) == 0 {
				in = true
				break
			}
		}
		return in == (op == "In")
	}
	s, a := field.String(), arg.String()
	switch op {
	case "Contains":
		return strings.Contains(s, a)
	case "HasPrefix":
		return strings.HasPrefix(s, a)
	case "HasSuffix":
		return strings.HasSuffix(s, a)
	case "EqualFold":
		return strings.EqualFold(s, a)
	case "ContainsFold":
		return strings.Contains(strings.ToLower(s), strings.ToLower(a))
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
