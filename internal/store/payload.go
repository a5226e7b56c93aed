package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"

	"github.com/taskgraph/taskgraph/ent/predicate"
	"github.com/taskgraph/taskgraph/ent/task"
)

// PathCondition is one condition on the value at a path of a task's JSON
// column (its input, as stored: masked, or its result). Exactly one of Eq,
// Prefix and Exists is set.
type PathCondition struct {
	// Path is object keys separated by dots ("customer.city").
	Path string
	// Eq: the value at Path equals this JSON string, number or boolean.
	Eq json.RawMessage
	// Prefix: the value at Path is a string that starts with this text
	// (case sensitive on both databases).
	Prefix *string
	// Exists: the path is present (with any value, null too), or absent.
	Exists *bool
}

// Limits of a path.
const (
	PathMaxKeys = 8
	PathMaxLen  = 200
)

// pathKey is one key of a path: a letter or _ first, so that no key reads
// as an array index (PostgreSQL's #> would index an array with "0", SQLite
// would look for a key "0": the two would differ).
var pathKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// PathError says what is wrong with a condition.
type PathError struct {
	// Index of the condition, Field the part of it that is wrong.
	Index int
	Field string
	Msg   string
}

func (e *PathError) Error() string {
	return fmt.Sprintf("condition %d: %s: %s", e.Index, e.Field, e.Msg)
}

// ParsePath splits a dotted path into its keys, checking it.
func ParsePath(p string) ([]string, error) {
	if p == "" {
		return nil, fmt.Errorf("empty path")
	}
	if len(p) > PathMaxLen {
		return nil, fmt.Errorf("longer than %d characters", PathMaxLen)
	}
	keys := strings.Split(p, ".")
	if len(keys) > PathMaxKeys {
		return nil, fmt.Errorf("more than %d keys", PathMaxKeys)
	}
	for _, k := range keys {
		if !pathKey.MatchString(k) {
			return nil, fmt.Errorf("key %q: a key is letters, digits, _ and -, starting with a letter or _", k)
		}
	}
	return keys, nil
}

// PayloadWhere is the predicate on tasks that holds when every condition
// holds on column (task.FieldInput or task.FieldResult). The SQL is the
// dialect's: on PostgreSQL (jsonb) equality is a containment, which the
// GIN index task_input_path serves for the input, checked exactly with #>;
// on SQLite json_type and json_extract. A task without the column (no
// result yet) has no path.
func PayloadWhere(column string, conds []PathCondition) (predicate.Task, error) {
	if column != task.FieldInput && column != task.FieldResult {
		return nil, fmt.Errorf("payload: no JSON column %q", column)
	}
	var ps []func(*sql.Builder, string)
	for i, c := range conds {
		keys, err := ParsePath(c.Path)
		if err != nil {
			return nil, &PathError{Index: i, Field: "path", Msg: err.Error()}
		}
		n := 0
		if c.Eq != nil {
			n++
		}
		if c.Prefix != nil {
			n++
		}
		if c.Exists != nil {
			n++
		}
		if n != 1 {
			return nil, &PathError{Index: i, Field: "path", Msg: "give exactly one of eq, prefix and exists"}
		}
		p, err := pathPredicate(keys, c)
		if err != nil {
			return nil, &PathError{Index: i, Field: "eq", Msg: err.Error()}
		}
		ps = append(ps, p)
	}
	return func(s *sql.Selector) {
		col := s.C(column)
		for _, p := range ps {
			s.Where(sql.P(func(b *sql.Builder) { p(b, col) }))
		}
	}, nil
}

var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// pathPredicate writes one condition on col.
func pathPredicate(keys []string, c PathCondition) (func(*sql.Builder, string), error) {
	// PostgreSQL: a text[] path for #> and #>>.
	// Quoted: a key "null" is not a NULL element.
	pgPath := `{"` + strings.Join(keys, `","`) + `"}`
	// SQLite: $."a"."b" (keys hold no quote).
	litePath := `$."` + strings.Join(keys, `"."`) + `"`
	switch {
	case c.Exists != nil:
		not := ""
		if *c.Exists {
			not = "NOT "
		}
		return func(b *sql.Builder, col string) {
			if b.Dialect() == dialect.Postgres {
				b.WriteString("(" + col + " #> CAST(").Arg(pgPath).WriteString(" AS text[])) IS " + not + "NULL")
				return
			}
			b.WriteString("json_type(" + col + ", ").Arg(litePath).WriteString(") IS " + not + "NULL")
		}, nil
	case c.Prefix != nil:
		like := likeEscaper.Replace(*c.Prefix) + "%"
		return func(b *sql.Builder, col string) {
			if b.Dialect() == dialect.Postgres {
				b.WriteString("(jsonb_typeof(" + col + " #> CAST(").Arg(pgPath).WriteString(" AS text[])) = 'string' AND ")
				b.WriteString("(" + col + " #>> CAST(").Arg(pgPath).WriteString(" AS text[])) LIKE ").Arg(like).WriteString(` ESCAPE '\')`)
				return
			}
			b.WriteString("(json_type(" + col + ", ").Arg(litePath).WriteString(") = 'text' AND ")
			b.WriteString("json_extract(" + col + ", ").Arg(litePath).WriteString(") LIKE ").Arg(like).WriteString(` ESCAPE '\')`)
		}, nil
	}
	d := json.NewDecoder(bytes.NewReader(c.Eq))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	// The value, canonical, and the containment document {"a":{"b":v}}.
	scalar, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var doc any = json.RawMessage(scalar)
	for i := len(keys) - 1; i >= 0; i-- {
		doc = map[string]any{keys[i]: doc}
	}
	contains, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	pg := func(b *sql.Builder, col string) {
		b.WriteString("(" + col + " @> CAST(").Arg(string(contains)).WriteString(" AS jsonb) AND ")
		b.WriteString("(" + col + " #> CAST(").Arg(pgPath).WriteString(" AS text[])) = CAST(").Arg(string(scalar)).WriteString(" AS jsonb))")
	}
	var lite func(b *sql.Builder, col string)
	switch x := v.(type) {
	case string:
		lite = func(b *sql.Builder, col string) {
			b.WriteString("(json_type(" + col + ", ").Arg(litePath).WriteString(") = 'text' AND ")
			b.WriteString("json_extract(" + col + ", ").Arg(litePath).WriteString(") = ").Arg(x).WriteString(")")
		}
	case bool:
		lite = func(b *sql.Builder, col string) {
			b.WriteString("json_type(" + col + ", ").Arg(litePath).WriteString(") = ").Arg(fmt.Sprint(x))
		}
	case json.Number:
		var arg any
		if n, err := x.Int64(); err == nil {
			arg = n
		} else if f, err := x.Float64(); err == nil {
			arg = f
		} else {
			return nil, fmt.Errorf("number %s out of range", x)
		}
		lite = func(b *sql.Builder, col string) {
			b.WriteString("(json_type(" + col + ", ").Arg(litePath).WriteString(") IN ('integer', 'real') AND ")
			b.WriteString("json_extract(" + col + ", ").Arg(litePath).WriteString(") = ").Arg(arg).WriteString(")")
		}
	default:
		return nil, fmt.Errorf("compare with a string, a number or a boolean, not %s", scalar)
	}
	return func(b *sql.Builder, col string) {
		if b.Dialect() == dialect.Postgres {
			pg(b, col)
			return
		}
		lite(b, col)
	}, nil
}
