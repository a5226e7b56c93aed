package tg

import (
	"context"
	"fmt"
	"regexp"

	"github.com/taskgraph/taskgraph/internal/importer"
)

// ImportTarget is where imports of files (xlsx or CSV, uploaded through the
// API, the console or the CLI) write their rows: a table of the program's
// own, say. The importer reads the file as a stream, matches its headers
// to Columns, checks and normalizes every value, writes the good rows
// through Write in batches, and gives the owner an error report of the bad
// ones, cell by cell.
type ImportTarget struct {
	// Name is what an import names (importFile's target), lower case.
	Name        string
	Description string
	Columns     []Column
	// BusinessKey names what makes a written row unique (documented in the
	// API), so that an import run again writes no row twice: the import's
	// id and the row's number ("task_id", "row_no") for rows of their own,
	// or a key of the data (an order number).
	BusinessKey []string
	// Write writes rows of import importID (a task id) in one transaction
	// of the program's, skipping every row whose business key it wrote
	// before: an import may run again after a crash, from its first row.
	Write func(ctx context.Context, importID int, rows []Row) error
	// Written counts the rows of import importID in the target (an
	// import's summary says how many it wrote).
	Written func(ctx context.Context, importID int) (int, error)
}

// Row is a checked row of an import: its number in the file (the header
// is row 1) and its values by column key, normalized: a Text is a string,
// an Int an int64, a Date "2006-01-02", an Enum its value, a List a
// []string.
type Row struct {
	No     int
	Values map[string]any
}

// Column is one column of an import target.
type Column struct {
	// Key names the value in a Row.
	Key string
	// Headers are the header spellings accepted, the first being the one
	// shown; matching ignores case, width, spaces and a trailing *.
	Headers  []string
	Required bool
	Type     ColumnType
	// MaxLen bounds a value (each item of a List) in characters.
	MaxLen int
	// MaxItems bounds a List.
	MaxItems int
	// Enum maps accepted spellings (any case) to the values stored, for an
	// Enum column.
	Enum map[string]string
	// Pattern, when set, must match the whole normalized value; PatternHint
	// says what it asks for in the error report.
	Pattern     *regexp.Regexp
	PatternHint string
	// Sensitive values are masked in error reports and logs.
	Sensitive bool
}

// ColumnType says how a column's values are checked and normalized.
type ColumnType int

// The column types.
const (
	// Text is any text, trimmed.
	Text ColumnType = iota
	// Int is an integer.
	Int
	// Phone is a mainland China mobile number, normalized to 11 digits.
	Phone
	// Email is an e-mail address.
	Email
	// Date takes many spellings and Excel serial numbers, normalized to
	// 2006-01-02.
	Date
	// Enum is one of the column's Enum spellings, normalized to its value.
	Enum
	// List is items separated by , ， ; ； | or 、, each a Text of MaxLen.
	List
)

var columnTypes = map[ColumnType]importer.ColumnType{
	Text: importer.Text, Int: importer.Int, Phone: importer.Phone, Email: importer.Email,
	Date: importer.Date, Enum: importer.Enum, List: importer.List,
}

// RegisterImportTarget adds t to c's import targets, before Start. A
// target without a name, columns or a writer, a name taken, or a header
// that names two columns, is a *ValidationError.
func RegisterImportTarget(c *Client, t ImportTarget) error {
	it := &importer.Target{Name: t.Name, Description: t.Description, BusinessKey: t.BusinessKey}
	var v ValidationError
	if t.Write == nil || t.Written == nil {
		v.Problems = append(v.Problems, Problem{Field: "Write", Message: "a target needs Write and Written"})
	}
	for i, col := range t.Columns {
		typ, ok := columnTypes[col.Type]
		if !ok {
			v.Problems = append(v.Problems, Problem{Field: fmt.Sprintf("Columns[%d].Type", i), Message: fmt.Sprintf("%d is not a ColumnType", col.Type)})
		}
		it.Columns = append(it.Columns, importer.Column{Key: col.Key, Headers: col.Headers, Required: col.Required, Type: typ,
			MaxLen: col.MaxLen, MaxItems: col.MaxItems, Enum: col.Enum, Pattern: col.Pattern, PatternHint: col.PatternHint, Sensitive: col.Sensitive})
	}
	if len(v.Problems) > 0 {
		return &v
	}
	it.Writer = targetWriter{t}
	return c.beforeStart(func() error {
		if err := c.app.Importer.Targets().TryAdd(it); err != nil {
			return &ValidationError{Problems: []Problem{{Field: "target", Message: err.Error()}}}
		}
		return nil
	})
}

// targetWriter is an ImportTarget as the importer writes through it.
type targetWriter struct{ t ImportTarget }

func (w targetWriter) Write(ctx context.Context, taskID int, rows []importer.Record) error {
	out := make([]Row, len(rows))
	for i, r := range rows {
		out[i] = Row{No: r.RowNo, Values: r.Values}
	}
	return w.t.Write(ctx, taskID, out)
}

func (w targetWriter) Written(ctx context.Context, taskID int) (int, error) {
	return w.t.Written(ctx, taskID)
}
