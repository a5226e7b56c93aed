// Package spreadsheet reads and writes the tabular files taskgraph imports
// and exports — xlsx and CSV — as streams of rows, never a whole sheet in
// memory. Reading checks a file's content against its claimed format
// (content signature, text encoding, decompression and row limits) before a
// task is created from it; writing escapes cells that a spreadsheet program
// would run as formulas.
package spreadsheet

import (
	"errors"
	"fmt"
	"strings"
)

// Format is a file format.
type Format string

// Formats.
const (
	XLSX Format = "xlsx"
	CSV  Format = "csv"
)

// ContentType is the MIME type of a format.
func (f Format) ContentType() string {
	if f == XLSX {
		return "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
	}
	return "text/csv; charset=utf-8"
}

// FormatOf returns the format a file name's extension claims.
func FormatOf(filename string) (Format, bool) {
	i := strings.LastIndexByte(filename, '.')
	if i < 0 {
		return "", false
	}
	switch strings.ToLower(filename[i+1:]) {
	case "xlsx":
		return XLSX, true
	case "csv":
		return CSV, true
	}
	return "", false
}

// Encoding is a CSV file's text encoding.
type Encoding string

// Encodings of CSV files.
const (
	UTF8 Encoding = "utf-8"
	GBK  Encoding = "gbk" // read as GB18030, its superset
)

// Limits bound what a file may make the reader do.
type Limits struct {
	// MaxRows is the most data rows (after the header) a file may have.
	MaxRows int
	// UnzipSizeLimit bounds the total uncompressed size of an xlsx.
	UnzipSizeLimit int64
	// UnzipXMLSizeLimit is the largest worksheet or shared-string table
	// unzipped into memory; larger ones are streamed from a temporary file.
	UnzipXMLSizeLimit int64
	// MaxColumns bounds the cells of one row.
	MaxColumns int
	// MaxCellBytes bounds one cell.
	MaxCellBytes int
}

// Defaults of Limits.
const (
	MaxRowsDefault           = 1_000_000
	UnzipSizeLimitDefault    = 1 << 30
	UnzipXMLSizeLimitDefault = 16 << 20
	MaxColumnsDefault        = 256
	MaxCellBytesDefault      = 32 << 10
)

// WithDefaults fills zero fields.
func (l Limits) WithDefaults() Limits {
	if l.MaxRows <= 0 {
		l.MaxRows = MaxRowsDefault
	}
	if l.UnzipSizeLimit <= 0 {
		l.UnzipSizeLimit = UnzipSizeLimitDefault
	}
	if l.UnzipXMLSizeLimit <= 0 {
		l.UnzipXMLSizeLimit = min(UnzipXMLSizeLimitDefault, l.UnzipSizeLimit)
	}
	if l.MaxColumns <= 0 {
		l.MaxColumns = MaxColumnsDefault
	}
	if l.MaxCellBytes <= 0 {
		l.MaxCellBytes = MaxCellBytesDefault
	}
	return l
}

// ErrBadFile is matched by errors.Is for every *FileError.
var ErrBadFile = errors.New("bad file")

// FileError is a file refused: wrong content for its format, or over a
// limit (Limit names it).
type FileError struct {
	Limit   string // e.g. "max rows"; empty for a format problem
	Message string
}

func (e *FileError) Error() string {
	if e.Limit != "" {
		return fmt.Sprintf("%s (limit: %s)", e.Message, e.Limit)
	}
	return e.Message
}

// Is makes errors.Is(err, ErrBadFile) true.
func (e *FileError) Is(target error) bool { return target == ErrBadFile }

func badFile(format string, args ...any) *FileError {
	return &FileError{Message: fmt.Sprintf(format, args...)}
}

func overLimit(limit, format string, args ...any) *FileError {
	return &FileError{Limit: limit, Message: fmt.Sprintf(format, args...)}
}
