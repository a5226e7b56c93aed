package spreadsheet

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"time"
	"unicode"

	"github.com/xuri/excelize/v2"
)

// TimeLayout is how a time is written into a cell: ISO 8601 in UTC, with
// its zone (Z), so that whoever reads the file, in whatever zone, reads
// the same instant.
const TimeLayout = "2006-01-02T15:04:05Z"

// Writer writes rows of a table, streaming: an xlsx writer spills to a
// temporary file past a few MiB, a CSV writer writes through.
type Writer interface {
	// Sheet starts a new sheet (xlsx; CSV files have one and ignore it).
	// The first sheet is started by NewWriter.
	Sheet(name string) error
	// Row writes one row. Strings are escaped against formula injection;
	// numbers, booleans and times keep their type in xlsx.
	Row(cells ...any) error
	// Close finishes the file and writes it to w.
	Close() error
}

// NewWriter returns a writer of format to w, whose first sheet is named
// sheet.
func NewWriter(format Format, w io.Writer, sheet string) (Writer, error) {
	switch format {
	case CSV:
		// A BOM makes spreadsheet programs read the file as UTF-8.
		if _, err := io.WriteString(w, "\xEF\xBB\xBF"); err != nil {
			return nil, err
		}
		return &csvWriter{w: csv.NewWriter(w)}, nil
	case XLSX:
		x := &xlsxWriter{f: excelize.NewFile(), out: w}
		if err := x.f.SetSheetName("Sheet1", sheet); err != nil {
			return nil, err
		}
		var err error
		if x.sw, err = x.f.NewStreamWriter(sheet); err != nil {
			return nil, err
		}
		return x, nil
	}
	return nil, fmt.Errorf("spreadsheet: unsupported format %q", format)
}

// EscapeFormula defuses a text cell that a spreadsheet program would read
// as a formula or a command (OWASP "CSV injection"): one whose first
// character other than white space and line breaks (which programs skip)
// is = + - @ or one of their full-width forms (＝ ＋ － ＠, which some
// programs fold to them), or that starts with a tab or a carriage return,
// gets a leading apostrophe.
func EscapeFormula(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '\t', '\r':
		return "'" + s
	}
	for _, r := range s {
		switch r {
		case '=', '+', '-', '@', '\uFF1D', '\uFF0B', '\uFF0D', '\uFF20':
			return "'" + s
		}
		if !unicode.IsSpace(r) {
			return s
		}
	}
	return s
}

type csvWriter struct {
	w   *csv.Writer
	rec []string
}

func (c *csvWriter) Sheet(string) error { return nil }

func (c *csvWriter) Row(cells ...any) error {
	c.rec = c.rec[:0]
	for _, v := range cells {
		c.rec = append(c.rec, csvCell(v))
	}
	return c.w.Write(c.rec)
}

func csvCell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return EscapeFormula(x)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case time.Time:
		if x.IsZero() {
			return ""
		}
		return x.UTC().Format(TimeLayout)
	case *time.Time:
		if x == nil {
			return ""
		}
		return csvCell(*x)
	}
	return EscapeFormula(fmt.Sprint(v))
}

func (c *csvWriter) Close() error {
	c.w.Flush()
	return c.w.Error()
}

type xlsxWriter struct {
	f     *excelize.File
	sw    *excelize.StreamWriter
	out   io.Writer
	row   int
	cells []any
}

func (x *xlsxWriter) Sheet(name string) error {
	if err := x.sw.Flush(); err != nil {
		return err
	}
	if _, err := x.f.NewSheet(name); err != nil {
		return err
	}
	var err error
	x.sw, err = x.f.NewStreamWriter(name)
	x.row = 0
	return err
}

func (x *xlsxWriter) Row(cells ...any) error {
	x.row++
	x.cells = x.cells[:0]
	for _, v := range cells {
		switch c := v.(type) {
		case string:
			x.cells = append(x.cells, EscapeFormula(c))
		case *time.Time:
			if c == nil {
				x.cells = append(x.cells, nil)
			} else {
				x.cells = append(x.cells, c.UTC().Format(TimeLayout))
			}
		case time.Time:
			x.cells = append(x.cells, c.UTC().Format(TimeLayout))
		case nil, int, int64, float64, bool:
			x.cells = append(x.cells, c)
		default:
			x.cells = append(x.cells, EscapeFormula(fmt.Sprint(c)))
		}
	}
	cell, err := excelize.CoordinatesToCellName(1, x.row)
	if err != nil {
		return err
	}
	return x.sw.SetRow(cell, x.cells)
}

func (x *xlsxWriter) Close() error {
	defer x.f.Close()
	if err := x.sw.Flush(); err != nil {
		return err
	}
	return x.f.Write(x.out)
}
