package store

import (
	"strconv"
	"strings"

	"entgo.io/ent/dialect"
)

// sqlDialect hides the few places where the SQL taskgraph writes by hand
// differs between PostgreSQL and SQLite. Everything else is one text.
type sqlDialect struct {
	name string
}

func (d sqlDialect) postgres() bool { return d.name == dialect.Postgres }

// rebind turns ? placeholders into $1, $2... for PostgreSQL.
func (d sqlDialect) rebind(q string) string {
	if !d.postgres() {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// jsonParam is a placeholder for a JSON value in a VALUES list (PostgreSQL
// needs the type; SQLite would read a cast to JSONB as a cast to a number).
func (d sqlDialect) jsonParam() string {
	if d.postgres() {
		return "CAST(? AS JSONB)"
	}
	return "?"
}

// intParam is a placeholder for an integer in a VALUES list.
func (d sqlDialect) intParam() string { return "CAST(? AS BIGINT)" }

// textParam is a placeholder for a text value in a VALUES list.
func (d sqlDialect) textParam() string { return "CAST(? AS TEXT)" }

// skipLocked is appended to the claim's inner SELECT. SQLite has a single
// writer and needs no row locks.
func (d sqlDialect) skipLocked() string {
	if d.postgres() {
		return " FOR UPDATE SKIP LOCKED"
	}
	return ""
}

// maxBatchRows bounds the rows one hand-written statement carries, so that
// its parameters stay under SQLite's limit (32,766) and PostgreSQL's
// (65,535) at 7 per row. Larger batches are split, in the same transaction.
const maxBatchRows = 2000

// placeholders returns "?, ?, ?" for n values.
func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// valuesRows returns "(row), (row), ..." with row repeated n times.
func valuesRows(row string, n int) string {
	var b strings.Builder
	b.Grow((len(row) + 4) * n)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		b.WriteString(row)
		b.WriteByte(')')
	}
	return b.String()
}

// timeParam is a placeholder for a timestamp where PostgreSQL cannot infer
// the type (CASE, VALUES). SQLite stores the driver's text as is.
func (d sqlDialect) timeParam() string {
	if d.postgres() {
		return "CAST(? AS TIMESTAMPTZ)"
	}
	return "?"
}

// returningAll is "RETURNING" every column of table in an UPDATE ... FROM.
// PostgreSQL's * would include the FROM list's columns; SQLite only knows
// the target table's, and refuses the qualified form.
func (d sqlDialect) returningAll(table string) string {
	if d.postgres() {
		return "RETURNING " + table + ".*"
	}
	return "RETURNING *"
}
