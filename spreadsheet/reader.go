package spreadsheet

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/xuri/excelize/v2"
)

// Rows reads a file row by row. Next advances; Row is valid until the next
// call to Next.
type Rows interface {
	Next() bool
	// Row is the current row's cells (trailing empty cells may be missing).
	Row() []string
	// RowNo is the current row's number as a spreadsheet program shows it:
	// the header is row 1.
	RowNo() int
	Err() error
	Close() error
}

// Source is a file to read: its bytes, and a local path when it has one
// (xlsx files are read from a path; others are copied to a temporary file).
type Source struct {
	ReaderAt io.ReaderAt
	Size     int64
	Path     string
}

// Open returns the rows of a scanned file.
func Open(src Source, info Info, lim Limits) (Rows, error) {
	lim = lim.WithDefaults()
	switch info.Format {
	case CSV:
		cr, err := newCSVReader(io.NewSectionReader(src.ReaderAt, 0, src.Size), info.Encoding, ',')
		if err != nil {
			return nil, err
		}
		return &csvRows{r: cr, lim: lim}, nil
	case XLSX:
		return openXLSX(src, info, lim)
	}
	return nil, badFile("unsupported format %q", info.Format)
}

type csvRows struct {
	r   interface{ Read() ([]string, error) }
	lim Limits
	row []string
	no  int
	err error
}

func (c *csvRows) Next() bool {
	if c.err != nil {
		return false
	}
	rec, err := c.r.Read()
	if errors.Is(err, io.EOF) {
		return false
	}
	if err != nil {
		c.err = badFile("malformed CSV after row %d: %v", c.no, err)
		return false
	}
	c.no++
	if c.err = checkRow(rec, c.no, c.lim); c.err != nil {
		return false
	}
	c.row = rec
	return true
}

func (c *csvRows) Row() []string { return c.row }
func (c *csvRows) RowNo() int    { return c.no }
func (c *csvRows) Err() error    { return c.err }
func (c *csvRows) Close() error  { return nil }

func checkRow(rec []string, no int, lim Limits) error {
	if no-1 > lim.MaxRows {
		return overLimit("max rows "+strconv.Itoa(lim.MaxRows), "the file has more than %d data rows", lim.MaxRows)
	}
	if len(rec) > lim.MaxColumns {
		return overLimit("max columns "+strconv.Itoa(lim.MaxColumns), "row %d has %d cells", no, len(rec))
	}
	for _, c := range rec {
		if len(c) > lim.MaxCellBytes {
			return overLimit("max cell size "+strconv.Itoa(lim.MaxCellBytes)+" bytes", "row %d has a cell of %d bytes", no, len(c))
		}
	}
	return nil
}

type xlsxRows struct {
	f       *excelize.File
	rows    *excelize.Rows
	lim     Limits
	row     []string
	no      int
	err     error
	cleanup func()
}

func openXLSX(src Source, info Info, lim Limits) (Rows, error) {
	p, cleanup := src.Path, func() {}
	if p == "" {
		tmp, err := os.CreateTemp("", "taskgraph-import-*.xlsx")
		if err != nil {
			return nil, fmt.Errorf("spreadsheet: %w", err)
		}
		if _, err := io.Copy(tmp, io.NewSectionReader(src.ReaderAt, 0, src.Size)); err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
			return nil, fmt.Errorf("spreadsheet: %w", err)
		}
		_ = tmp.Close()
		p = tmp.Name()
		cleanup = func() { _ = os.Remove(tmp.Name()) }
	}
	f, err := excelize.OpenFile(p, excelize.Options{
		UnzipSizeLimit:    lim.UnzipSizeLimit,
		UnzipXMLSizeLimit: lim.UnzipXMLSizeLimit,
	})
	if err != nil {
		cleanup()
		return nil, badFile("unreadable xlsx: %v", err)
	}
	sheet := info.Sheet
	if sheet == "" {
		if list := f.GetSheetList(); len(list) > 0 {
			sheet = list[0]
		}
	}
	rows, err := f.Rows(sheet)
	if err != nil {
		_ = f.Close()
		cleanup()
		return nil, badFile("unreadable xlsx sheet %q: %v", sheet, err)
	}
	return &xlsxRows{f: f, rows: rows, lim: lim, cleanup: cleanup}, nil
}

func (x *xlsxRows) Next() bool {
	if x.err != nil || !x.rows.Next() {
		if x.err == nil && x.rows.Error() != nil {
			x.err = badFile("unreadable xlsx after row %d: %v", x.no, x.rows.Error())
		}
		return false
	}
	x.no++
	// Raw values: dates stay serial numbers, converted by the columns that
	// expect dates, instead of being formatted per the cell's style.
	row, err := x.rows.Columns(excelize.Options{RawCellValue: true})
	if err != nil {
		x.err = badFile("unreadable xlsx row %d: %v", x.no, err)
		return false
	}
	if x.err = checkRow(row, x.no, x.lim); x.err != nil {
		return false
	}
	x.row = row
	return true
}

func (x *xlsxRows) Row() []string { return x.row }
func (x *xlsxRows) RowNo() int    { return x.no }
func (x *xlsxRows) Err() error    { return x.err }

func (x *xlsxRows) Close() error {
	err := x.rows.Close()
	if cerr := x.f.Close(); err == nil {
		err = cerr
	}
	x.cleanup()
	return err
}
