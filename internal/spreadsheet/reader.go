package spreadsheet

import (
	"errors"
	"io"
	"strconv"
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

// Source is a file to read.
type Source struct {
	ReaderAt io.ReaderAt
	Size     int64
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
		return openSheet(src, info, lim)
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
