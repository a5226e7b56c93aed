package store

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"entgo.io/ent/dialect"
	"github.com/lib/pq"
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

// forUpdate locks the rows of the named table of a SELECT on PostgreSQL
// (SQLite's single writer needs no row locks).
func (d sqlDialect) forUpdate(table string) string {
	if d.postgres() {
		return " FOR UPDATE OF " + table
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

// inInts is the predicate "col is one of ids": on PostgreSQL "col =
// ANY(array)" with one array parameter (a statement text that does not grow
// with the batch, and that the planner reads as index probes: "col IN
// (SELECT unnest(...))" it may plan as a join over every row matching the
// rest of the WHERE); on SQLite an IN list of placeholders.
func (d sqlDialect) inInts(col string, ids []int64) (string, []any) {
	if d.postgres() {
		return col + " = ANY(CAST(? AS BIGINT[]))", []any{pq.Int64Array(ids)}
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return col + " IN (" + placeholders(len(ids)) + ")", args
}

// liveByKeys is what an UPDATE ... FROM a valuesTable of executions adds to
// its WHERE on PostgreSQL so that its plan reads the rows it moves by key,
// whatever the statistics say: " AND col = ANY(ids)" (ids: the derived
// table's key column, int64 values), an index probe per row of the batch.
// The statement's condition on status must then be a join condition (the
// status the rows move from, a column of the derived table), not a
// constant: ANALYZE on a long history samples no live row (every task but
// the few running ones is finished), so a constant status = 'EXECUTING'
// is estimated at one row, and PostgreSQL drove the join from the tasks
// table, reading every live row (a sequential scan of every task, or all
// the live instances) and the derived table again for each of them: the
// finish of 2,000 tasks took seconds while it held their instances, and
// the heartbeats of those instances waited on it. SQLite keeps no
// statistics and joins by key already: nothing added.
func (d sqlDialect) liveByKeys(col string, ids []any) (string, []any) {
	if !d.postgres() {
		return "", nil
	}
	a := make(pq.Int64Array, len(ids))
	for i, v := range ids {
		a[i] = v.(int64)
	}
	return ` AND ` + col + ` = ANY(CAST(? AS BIGINT[]))`, []any{a}
}

// stringArray is a text[] parameter (PostgreSQL only).
func stringArray(ss []string) any { return pq.StringArray(ss) }

// colType is the type of a column of a valuesTable.
type colType int

const (
	colInt colType = iota
	colText
	colJSON
	colTime
	colBytes
	colNullInt // an integer or NULL
)

// insertChunk is how many rows of cols columns one insert carries: on
// SQLite, within its 32,766 parameters; on PostgreSQL (one array parameter
// per column) a size that keeps one statement's work bounded.
func (d sqlDialect) insertChunk(cols int) int {
	if d.postgres() {
		return 5000
	}
	return 32000 / cols
}

// valuesTable returns a derived table named name with the given columns,
// holding the rows whose values cols holds column by column, and its
// arguments. On PostgreSQL it is an unnest of one array parameter per
// column: the statement's text and its parameter count do not grow with
// the batch, so parsing and planning cost the same for 1 row or 2,000. On
// SQLite it is a VALUES list.
func (d sqlDialect) valuesTable(name string, names []string, types []colType, cols [][]any) (string, []any) {
	n := len(cols[0])
	if d.postgres() {
		var sel, un strings.Builder
		args := make([]any, len(cols))
		for c, col := range cols {
			if c > 0 {
				sel.WriteString(", ")
				un.WriteString(", ")
			}
			switch types[c] {
			case colInt:
				a := make(pq.Int64Array, n)
				for i, v := range col {
					a[i] = v.(int64)
				}
				args[c] = a
				un.WriteString("CAST(? AS BIGINT[])")
				sel.WriteString(names[c])
			case colBytes:
				a := make(pq.ByteaArray, n)
				for i, v := range col {
					a[i], _ = v.([]byte)
				}
				args[c] = a
				un.WriteString("CAST(? AS BYTEA[])")
				sel.WriteString(names[c])
			default:
				args[c] = textArray(col)
				un.WriteString("CAST(? AS TEXT[])")
				switch types[c] {
				case colJSON:
					sel.WriteString("CAST(" + names[c] + " AS JSONB) AS " + names[c])
				case colTime:
					sel.WriteString("CAST(" + names[c] + " AS TIMESTAMPTZ) AS " + names[c])
				case colNullInt:
					sel.WriteString("CAST(" + names[c] + " AS BIGINT) AS " + names[c])
				default:
					sel.WriteString(names[c])
				}
			}
		}
		return "(SELECT " + sel.String() + " FROM unnest(" + un.String() + ") AS u(" + strings.Join(names, ", ") + ")) " + name, args
	}
	var sel strings.Builder
	for c, nm := range names {
		if c > 0 {
			sel.WriteString(", ")
		}
		sel.WriteString("column" + strconv.Itoa(c+1) + " AS " + nm)
	}
	args := make([]any, 0, n*len(cols))
	for i := range n {
		for _, col := range cols {
			args = append(args, col[i])
		}
	}
	return "(SELECT " + sel.String() + " FROM (VALUES " + valuesRows(placeholders(len(cols)), n) + ")) " + name, args
}

// textArray encodes values (strings, times, nil) as a PostgreSQL text[]
// literal, NULL for nil. It is built in one buffer sized up front: a
// column of a thousand rows' values is one literal.
func textArray(vals []any) string {
	n := 2
	for _, v := range vals {
		if s, ok := v.(string); ok {
			n += len(s) + 3
		} else {
			n += len(time.RFC3339Nano) + 3
		}
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, v := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		switch x := v.(type) {
		case nil:
			b = append(b, "NULL"...)
		case string:
			b = appendArrayElem(b, x)
		case time.Time:
			// No quote or backslash in the format.
			b = append(x.UTC().AppendFormat(append(b, '"'), time.RFC3339Nano), '"')
		default:
			b = appendArrayElem(b, fmt.Sprint(x))
		}
	}
	return string(append(b, '}'))
}

// appendArrayElem appends s to b as a quoted element of an array literal,
// its quotes and backslashes escaped.
func appendArrayElem(b []byte, s string) []byte {
	b = append(b, '"')
	for {
		j := strings.IndexAny(s, `"\`)
		if j < 0 {
			break
		}
		b = append(append(b, s[:j]...), '\\', s[j])
		s = s[j+1:]
	}
	return append(append(b, s...), '"')
}
