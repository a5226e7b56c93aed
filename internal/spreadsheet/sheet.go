package spreadsheet

import (
	"archive/zip"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"
)

// sheetRows streams the rows of one worksheet straight from the zip
// package with a small SpreadsheetML scanner, yielding what excelize's row
// iterator yields with RawCellValue (shared and inline strings resolved,
// numbers and dates as stored, blank rows between numbered rows): it is
// several times faster, allocates little, and keeps at most one row, the
// reader's buffer and the shared-string index in memory (shared strings
// themselves spill to a temporary file past UnzipXMLSizeLimit). A
// differential test holds it to excelize's output.
type sheetRows struct {
	tok  *xmlTokens
	rc   io.ReadCloser
	sst  *sharedStrings
	lim  Limits
	row  []string
	no   int
	err  error
	done bool
	// A parsed row waiting for the blank rows before it to be yielded.
	next   []string
	nextNo int
	// Scratch.
	cells []string
	text  []byte
}

func openSheet(src Source, info Info, lim Limits) (Rows, error) {
	zr, err := zip.NewReader(src.ReaderAt, src.Size)
	if err != nil {
		return nil, badFile("not an xlsx file: broken zip package (%v)", err)
	}
	files := make(map[string]*zip.File, len(zr.File))
	var total uint64
	for _, f := range zr.File {
		total += f.UncompressedSize64
		files[strings.ToLower(strings.ReplaceAll(f.Name, "\\", "/"))] = f
	}
	if total > uint64(lim.UnzipSizeLimit) {
		return nil, overLimit("unzip size limit "+strconv.FormatInt(lim.UnzipSizeLimit, 10)+" bytes", "the xlsx unpacks to more than %d bytes", lim.UnzipSizeLimit)
	}
	if files["xl/workbook.xml"] == nil {
		return nil, badFile("not an xlsx file: no xl/workbook.xml")
	}
	sheetPath, _, err := firstSheet(files)
	if err != nil {
		return nil, err
	}
	sf := files[strings.ToLower(sheetPath)]
	if sf == nil {
		return nil, badFile("broken xlsx: worksheet %s is missing", sheetPath)
	}
	sst := &sharedStrings{}
	if f := files["xl/sharedstrings.xml"]; f != nil {
		if sst, err = loadSharedStrings(f, lim); err != nil {
			return nil, err
		}
	}
	rc, err := sf.Open()
	if err != nil {
		sst.close()
		return nil, badFile("broken xlsx: %v", err)
	}
	return &sheetRows{tok: newXMLTokens(rc, lim), rc: rc, sst: sst, lim: lim}, nil
}

func (s *sheetRows) Row() []string { return s.row }
func (s *sheetRows) RowNo() int    { return s.no }
func (s *sheetRows) Err() error    { return s.err }

func (s *sheetRows) Close() error {
	s.sst.close()
	return s.rc.Close()
}

func (s *sheetRows) Next() bool {
	if s.err != nil {
		return false
	}
	if s.next != nil {
		s.no++
		if s.no < s.nextNo {
			s.row = nil
			return s.check()
		}
		s.row, s.next = s.next, nil
		return s.check()
	}
	if s.done {
		return false
	}
	no, cells, ok, err := s.readRow()
	if err != nil {
		s.err = err
		return false
	}
	if !ok {
		s.done = true
		return false
	}
	if no <= s.no {
		no = s.no + 1 // out of order or unnumbered: the next one
	}
	s.no++
	if no > s.no {
		s.next, s.nextNo = cells, no
		s.row = nil
		return s.check()
	}
	s.row = cells
	return s.check()
}

func (s *sheetRows) check() bool {
	if err := checkRow(s.row, s.no, s.lim); err != nil {
		s.err = err
		return false
	}
	return true
}

// readRow reads the next <row> element: its number (0 when it has none)
// and its cells by column.
func (s *sheetRows) readRow() (int, []string, bool, error) {
	// Find the row.
	var tag token
	for {
		var err error
		if tag, err = s.tok.next(); err != nil {
			return 0, nil, false, err
		}
		switch {
		case tag.kind == tokEOF:
			return 0, nil, false, nil
		case tag.kind == tokEnd && tag.name == "sheetData":
			return 0, nil, false, nil
		case tag.kind == tokStart && tag.name == "row":
		default:
			continue
		}
		break
	}
	no, _ := strconv.Atoi(string(attr(tag.raw, "r")))
	cells := make([]string, 0, 8)
	if tag.selfClosing {
		return no, cells, true, nil
	}
	var (
		col      int // 1-based column of the current cell
		typ      string
		inV, inT bool
		rph      int
		inCell   bool
		hasV     bool
	)
	s.text = s.text[:0]
	finishCell := func() error {
		inCell = false
		var v string
		switch typ {
		case "s":
			if !hasV {
				break
			}
			i, err := strconv.Atoi(strings.TrimSpace(string(s.text)))
			if err != nil {
				return badFile("broken xlsx: row %d: shared string index %q", no, s.text)
			}
			if v, err = s.sst.get(i); err != nil {
				return err
			}
		case "inlineStr":
			v = unescapeBSTR(string(s.text))
		default:
			v = string(s.text)
		}
		if col > s.lim.MaxColumns {
			return overLimit("max columns "+strconv.Itoa(s.lim.MaxColumns), "row %d has a cell in column %d", no, col)
		}
		if v != "" {
			for len(cells) < col-1 {
				cells = append(cells, "")
			}
			if len(cells) >= col {
				cells[col-1] = v
			} else {
				cells = append(cells, v)
			}
		}
		return nil
	}
	for {
		t, err := s.tok.next()
		if err != nil {
			return 0, nil, false, err
		}
		switch t.kind {
		case tokEOF:
			return 0, nil, false, badFile("broken xlsx: the sheet ends inside row %d", no)
		case tokText:
			if inCell && (inV || (inT && rph == 0)) {
				s.text = appendUnescaped(s.text, t.raw)
				if len(s.text) > 3*s.lim.MaxCellBytes {
					return 0, nil, false, overLimit("max cell size "+strconv.Itoa(s.lim.MaxCellBytes)+" bytes", "row %d has a larger cell", no)
				}
			}
		case tokStart:
			switch t.name {
			case "c":
				if ref := attr(t.raw, "r"); len(ref) > 0 {
					col = columnOf(ref)
					if col == 0 {
						return 0, nil, false, badFile("broken xlsx: row %d: bad cell reference %q", no, ref)
					}
				} else {
					col++
				}
				typ = string(attr(t.raw, "t"))
				s.text, hasV, inCell = s.text[:0], false, true
				if t.selfClosing {
					inCell = false
				}
			case "v":
				inV, hasV = !t.selfClosing, true
			case "t":
				inT = !t.selfClosing
			case "rPh":
				if !t.selfClosing {
					rph++
				}
			}
		case tokEnd:
			switch t.name {
			case "c":
				if err := finishCell(); err != nil {
					return 0, nil, false, err
				}
			case "v":
				inV = false
			case "t":
				inT = false
			case "rPh":
				rph = max(rph-1, 0)
			case "row":
				return no, cells, true, nil
			case "sheetData":
				return 0, nil, false, badFile("broken xlsx: row %d is not closed", no)
			}
		}
	}
}

// columnOf returns the 1-based column of a cell reference such as AB12
// (0 if it has no letters or more than three).
func columnOf(ref []byte) int {
	col, n := 0, 0
	for _, c := range ref {
		switch {
		case c >= 'A' && c <= 'Z':
			col = col*26 + int(c-'A') + 1
		case c >= 'a' && c <= 'z':
			col = col*26 + int(c-'a') + 1
		default:
			if n == 0 || n > 3 {
				return 0
			}
			return col
		}
		n++
	}
	if n == 0 || n > 3 {
		return 0
	}
	return col
}

// sharedStrings is the shared-string table: texts in an arena, in memory
// or, past the XML size limit, in a temporary file.
type sharedStrings struct {
	offsets []int64 // start of string i; the end is offsets[i+1]
	arena   []byte
	file    *os.File
	size    int64
}

func loadSharedStrings(f *zip.File, lim Limits) (*sharedStrings, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, badFile("broken xlsx: %v", err)
	}
	defer rc.Close()
	sst := &sharedStrings{}
	tok := newXMLTokens(rc, lim)
	var text []byte
	inSI, inT, rph := false, false, 0
	for {
		t, err := tok.next()
		if err != nil {
			sst.close()
			return nil, err
		}
		switch t.kind {
		case tokEOF:
			sst.offsets = append(sst.offsets, sst.size)
			return sst, nil
		case tokText:
			if inSI && inT && rph == 0 {
				text = appendUnescaped(text, t.raw)
			}
		case tokStart:
			switch t.name {
			case "si":
				inSI, text = true, text[:0]
				if t.selfClosing {
					inSI = false
					if err := sst.add(nil, lim); err != nil {
						return nil, err
					}
				}
			case "t":
				inT = !t.selfClosing
			case "rPh":
				if !t.selfClosing {
					rph++
				}
			}
		case tokEnd:
			switch t.name {
			case "si":
				inSI = false
				if err := sst.add([]byte(unescapeBSTR(string(text))), lim); err != nil {
					sst.close()
					return nil, err
				}
			case "t":
				inT = false
			case "rPh":
				rph = max(rph-1, 0)
			}
		}
	}
}

func (s *sharedStrings) add(b []byte, lim Limits) error {
	s.offsets = append(s.offsets, s.size)
	s.size += int64(len(b))
	if s.file != nil {
		_, err := s.file.Write(b)
		return err
	}
	s.arena = append(s.arena, b...)
	if int64(len(s.arena)) > lim.UnzipXMLSizeLimit {
		f, err := os.CreateTemp("", "taskgraph-sst-*")
		if err != nil {
			return err
		}
		_ = os.Remove(f.Name()) // gone when closed
		if _, err := f.Write(s.arena); err != nil {
			_ = f.Close()
			return err
		}
		s.file, s.arena = f, nil
	}
	return nil
}

func (s *sharedStrings) get(i int) (string, error) {
	if i < 0 || i+1 >= len(s.offsets) {
		return "", badFile("broken xlsx: shared string %d does not exist", i)
	}
	start, end := s.offsets[i], s.offsets[i+1]
	if s.file == nil {
		return string(s.arena[start:end]), nil
	}
	b := make([]byte, end-start)
	if _, err := s.file.ReadAt(b, start); err != nil {
		return "", fmt.Errorf("shared strings: %w", err)
	}
	return string(b), nil
}

func (s *sharedStrings) close() {
	if s.file != nil {
		_ = s.file.Close()
		s.file = nil
	}
}

// --- A minimal XML tokenizer for SpreadsheetML parts. ---

type tokKind int

const (
	tokEOF tokKind = iota
	tokText
	tokStart
	tokEnd
)

type token struct {
	kind        tokKind
	name        string // local name, without a namespace prefix
	raw         []byte // a start tag's attributes, or text; valid until the next token
	selfClosing bool
}

type xmlTokens struct {
	br      *bufio.Reader
	pending bool // a '<' was consumed: a tag comes next
	buf     []byte
	maxRun  int
}

func newXMLTokens(r io.Reader, lim Limits) *xmlTokens {
	maxRun := max(3*lim.MaxCellBytes, 64<<10)
	return &xmlTokens{br: bufio.NewReaderSize(r, maxRun+16), maxRun: maxRun}
}

// known local names are interned so that tokens do not allocate.
var known = map[string]string{"row": "row", "c": "c", "v": "v", "t": "t", "is": "is", "r": "r", "rPh": "rPh", "si": "si", "sst": "sst", "sheetData": "sheetData", "f": "f"}

func (x *xmlTokens) next() (token, error) {
	if !x.pending {
		text, err := x.br.ReadSlice('<')
		switch {
		case errors.Is(err, io.EOF):
			return token{kind: tokEOF}, nil
		case errors.Is(err, bufio.ErrBufferFull):
			return token{}, overLimit("max cell size", "a text of more than %d bytes", x.maxRun)
		case err != nil:
			return token{}, badFile("broken xlsx: %v", err)
		}
		x.pending = true
		if len(text) > 1 {
			return token{kind: tokText, raw: text[:len(text)-1]}, nil
		}
	}
	x.pending = false
	// The tag, up to a '>' outside quotes.
	x.buf = x.buf[:0]
	for {
		part, err := x.br.ReadSlice('>')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return token{kind: tokEOF}, nil
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				return token{}, overLimit("max cell size", "a tag of more than %d bytes", x.maxRun)
			}
			return token{}, badFile("broken xlsx: %v", err)
		}
		x.buf = append(x.buf, part...)
		if len(x.buf) > x.maxRun {
			return token{}, overLimit("max cell size", "a tag of more than %d bytes", x.maxRun)
		}
		if bytes.HasPrefix(x.buf, []byte("!")) || bytes.HasPrefix(x.buf, []byte("?")) || outsideQuotes(x.buf) {
			break
		}
	}
	tag := x.buf[:len(x.buf)-1]
	switch {
	case bytes.HasPrefix(tag, []byte("![CDATA[")):
		// Read to the end of the section; its content is text.
		for !bytes.HasSuffix(tag, []byte("]]")) {
			part, err := x.br.ReadSlice('>')
			if err != nil {
				return token{}, badFile("broken xlsx: unterminated CDATA")
			}
			x.buf = append(x.buf, part...)
			tag = x.buf[:len(x.buf)-1]
			if len(x.buf) > x.maxRun {
				return token{}, overLimit("max cell size", "a text of more than %d bytes", x.maxRun)
			}
		}
		return token{kind: tokText, raw: escapeText(tag[len("![CDATA[") : len(tag)-2])}, nil
	case bytes.HasPrefix(tag, []byte("!--")):
		for !bytes.HasSuffix(tag, []byte("--")) {
			part, err := x.br.ReadSlice('>')
			if err != nil {
				return token{kind: tokEOF}, nil
			}
			x.buf = append(x.buf[:0], part...)
			tag = x.buf[:len(x.buf)-1]
		}
		return x.next()
	case len(tag) > 0 && (tag[0] == '?' || tag[0] == '!'):
		return x.next()
	}
	t := token{kind: tokStart}
	if len(tag) > 0 && tag[0] == '/' {
		t.kind, tag = tokEnd, tag[1:]
	}
	if len(tag) > 0 && tag[len(tag)-1] == '/' {
		t.selfClosing, tag = true, tag[:len(tag)-1]
	}
	end := bytes.IndexAny(tag, " \t\r\n")
	if end < 0 {
		end = len(tag)
	}
	name := tag[:end]
	if i := bytes.IndexByte(name, ':'); i >= 0 {
		name = name[i+1:]
	}
	if k, ok := known[string(name)]; ok {
		t.name = k
	} else {
		t.name = string(name)
	}
	t.raw = tag[end:]
	return t, nil
}

// outsideQuotes reports whether a tag's closing '>' (its last byte) is
// outside quoted attribute values.
func outsideQuotes(tag []byte) bool {
	var q byte
	for _, c := range tag[:len(tag)-1] {
		switch {
		case q == 0 && (c == '"' || c == '\''):
			q = c
		case c == q:
			q = 0
		}
	}
	return q == 0
}

// escapeText re-escapes CDATA content so that it can be unescaped like
// ordinary text.
func escapeText(b []byte) []byte {
	return []byte(strings.NewReplacer("&", "&amp;", "<", "&lt;").Replace(string(b)))
}

// attr returns the value of attribute name in a start tag's attributes.
func attr(raw []byte, name string) []byte {
	for i := 0; i < len(raw); {
		// Skip spaces.
		for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\r' || raw[i] == '\n') {
			i++
		}
		start := i
		for i < len(raw) && raw[i] != '=' && raw[i] != ' ' {
			i++
		}
		key := raw[start:i]
		for i < len(raw) && raw[i] != '"' && raw[i] != '\'' {
			i++
		}
		if i >= len(raw) {
			return nil
		}
		q := raw[i]
		end := bytes.IndexByte(raw[i+1:], q)
		if end < 0 {
			return nil
		}
		val := raw[i+1 : i+1+end]
		i += end + 2
		if k := bytes.IndexByte(key, ':'); k >= 0 && string(key[:k]) != "xml" {
			key = key[k+1:]
		}
		if string(key) == name {
			return val
		}
	}
	return nil
}

// appendUnescaped appends XML text with its entity and character
// references resolved.
func appendUnescaped(dst, text []byte) []byte {
	for {
		i := bytes.IndexByte(text, '&')
		if i < 0 {
			return append(dst, text...)
		}
		dst = append(dst, text[:i]...)
		text = text[i:]
		end := bytes.IndexByte(text, ';')
		if end < 0 || end > 12 {
			dst = append(dst, '&')
			text = text[1:]
			continue
		}
		ent := string(text[1:end])
		text = text[end+1:]
		switch ent {
		case "amp":
			dst = append(dst, '&')
		case "lt":
			dst = append(dst, '<')
		case "gt":
			dst = append(dst, '>')
		case "quot":
			dst = append(dst, '"')
		case "apos":
			dst = append(dst, '\'')
		default:
			var n uint64
			var err error
			switch {
			case strings.HasPrefix(ent, "#x"), strings.HasPrefix(ent, "#X"):
				n, err = strconv.ParseUint(ent[2:], 16, 32)
			case strings.HasPrefix(ent, "#"):
				n, err = strconv.ParseUint(ent[1:], 10, 32)
			default:
				err = errors.New("unknown entity")
			}
			if err != nil || !utf8.ValidRune(rune(n)) {
				dst = append(dst, '&')
				dst = append(dst, ent...)
				dst = append(dst, ';')
				continue
			}
			dst = utf8.AppendRune(dst, rune(n))
		}
	}
}

// unescapeBSTR resolves OOXML's _xHHHH_ escapes of characters XML cannot
// hold (_x005F_ is a literal underscore), as excelize does.
func unescapeBSTR(s string) string {
	if !strings.Contains(s, "_x") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if i+7 <= len(s) && s[i] == '_' && s[i+1] == 'x' && s[i+6] == '_' && isHex(s[i+2:i+6]) {
			if s[i+2:i+6] == "005F" || s[i+2:i+6] == "005f" {
				b.WriteByte('_')
			} else {
				n, _ := strconv.ParseUint(s[i+2:i+6], 16, 32)
				b.WriteRune(rune(n))
			}
			i += 7
			continue
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}

func isHex(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
