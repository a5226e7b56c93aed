package importer

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/spreadsheet"
)

// spool collects an import's row problems in a temporary file, so that a
// file of a million bad rows costs disk, not memory.
type spool struct {
	f     *os.File
	w     *bufio.Writer
	enc   *json.Encoder
	lines int
	rows  int
}

type spooled struct {
	Row    int      `json:"r"`
	Column string   `json:"c"`
	Value  string   `json:"v"`
	Reason string   `json:"m"`
	Cells  []string `json:"o,omitempty"` // the original row, on its first problem
}

func newSpool() (*spool, error) {
	f, err := os.CreateTemp("", "taskgraph-import-problems-*.jsonl")
	if err != nil {
		return nil, fmt.Errorf("import: problem spool: %w", err)
	}
	w := bufio.NewWriterSize(f, 64<<10)
	return &spool{f: f, w: w, enc: json.NewEncoder(w)}, nil
}

// add records a bad row's problems, masking every value in the problems
// and in the copy of the original row: sensitive columns whatever they
// hold (a malformed phone number is still one), every other column by
// what the masker recognises in it (an ID or card number under a name, a
// note, an unknown column...).
func (s *spool) add(m *Mapping, masker *mask.Masker, rowNo int, cells []string, problems []Problem) error {
	s.rows++
	orig := make([]string, len(cells))
	sensitive := make([]bool, len(cells))
	for i, c := range m.target.Columns {
		if idx := m.index[i]; c.Sensitive && idx >= 0 && idx < len(cells) {
			sensitive[idx] = true
		}
	}
	for i, c := range cells {
		if sensitive[i] {
			orig[i] = maskValue(masker, c)
		} else {
			orig[i] = masker.String(c)
		}
	}
	for i, p := range problems {
		v := masker.String(p.Value)
		if p.Column.Sensitive {
			v = maskValue(masker, p.Value)
		}
		line := spooled{Row: rowNo, Column: p.Column.Label(), Value: v, Reason: masker.String(p.Reason)}
		if i == 0 {
			line.Cells = orig
		}
		if err := s.enc.Encode(line); err != nil {
			return fmt.Errorf("import: problem spool: %w", err)
		}
		s.lines++
	}
	return nil
}

// maskValue masks what the masker recognises, and otherwise keeps only the
// ends of the value: a malformed phone number is still a phone number.
func maskValue(m *mask.Masker, v string) string {
	if out := m.String(v); out != v {
		return out
	}
	r := []rune(v)
	switch {
	case len(r) <= 2:
		return strings.Repeat("*", len(r))
	case len(r) <= 6:
		return string(r[:1]) + strings.Repeat("*", len(r)-1)
	}
	return string(r[:3]) + strings.Repeat("*", len(r)-5) + string(r[len(r)-2:])
}

func (s *spool) close() {
	_ = s.f.Close()
	_ = os.Remove(s.f.Name())
}

// ReportHeader is the first row of an error report, before the original
// header's cells.
var ReportHeader = []string{"行号 Row", "列 Column", "值 Value", "原因 Reason"}

// writeReport writes the spooled problems as a report: one line per
// problem with the row number, column, (masked) value and reason, followed
// by the original row.
func (s *spool) writeReport(format spreadsheet.Format, header []string, w io.Writer) error {
	if err := s.w.Flush(); err != nil {
		return err
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	out, err := spreadsheet.NewWriter(format, w, "Errors")
	if err != nil {
		return err
	}
	head := make([]any, 0, len(ReportHeader)+len(header))
	for _, h := range ReportHeader {
		head = append(head, h)
	}
	for _, h := range header {
		head = append(head, h)
	}
	if err := out.Row(head...); err != nil {
		return err
	}
	dec := json.NewDecoder(bufio.NewReaderSize(s.f, 64<<10))
	var last []string
	lastRow := 0
	cells := make([]any, 0, len(head))
	for {
		var l spooled
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("import: read problem spool: %w", err)
		}
		if l.Cells != nil || l.Row != lastRow {
			last, lastRow = l.Cells, l.Row
		}
		cells = append(cells[:0], l.Row, l.Column, l.Value, l.Reason)
		for _, c := range last {
			cells = append(cells, c)
		}
		if err := out.Row(cells...); err != nil {
			return err
		}
	}
	return out.Close()
}
