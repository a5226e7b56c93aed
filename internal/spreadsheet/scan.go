package spreadsheet

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"errors"
	"io"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/encoding/simplifiedchinese"
)

// Info is what a scan learnt about a file.
type Info struct {
	Format   Format
	Encoding Encoding // CSV only
	// Rows is the number of data rows after the header, counting blank
	// rows: an upper bound on what reading will yield.
	Rows int
	// Sheet is the xlsx worksheet read (the first one).
	Sheet string
}

// Scan checks that the content of r (size bytes) is a file of the format
// its name claims and within limits, and counts its rows. It reads the whole
// file once as a stream; memory stays bounded whatever the file holds. A
// refused file yields a *FileError.
func Scan(r io.ReaderAt, size int64, format Format, lim Limits) (Info, error) {
	lim = lim.WithDefaults()
	head := make([]byte, min(size, 8))
	if _, err := r.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return Info{}, err
	}
	switch format {
	case XLSX:
		return scanXLSX(r, size, head, lim)
	case CSV:
		return scanCSV(io.NewSectionReader(r, 0, size), head, lim)
	}
	return Info{}, badFile("unsupported format %q", format)
}

var (
	zipMagic = []byte("PK\x03\x04")
	oleMagic = []byte{0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1}
)

func scanXLSX(r io.ReaderAt, size int64, head []byte, lim Limits) (Info, error) {
	info := Info{Format: XLSX}
	switch {
	case bytes.HasPrefix(head, oleMagic):
		return info, badFile("not an xlsx file: it is a legacy Excel (.xls) or encrypted workbook; save it as .xlsx")
	case !bytes.HasPrefix(head, zipMagic):
		return info, badFile("not an xlsx file: its content is not a zip package (a renamed file?)")
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return info, badFile("not an xlsx file: broken zip package (%v)", err)
	}
	var total uint64
	files := make(map[string]*zip.File, len(zr.File))
	for _, f := range zr.File {
		// archive/zip refuses to inflate more than an entry declares, so
		// declared sizes bound what decompression can produce.
		total += f.UncompressedSize64
		if total > uint64(lim.UnzipSizeLimit) {
			return info, overLimit("unzip size limit "+strconv.FormatInt(lim.UnzipSizeLimit, 10)+" bytes",
				"the xlsx unpacks to more than %d bytes (a zip bomb?)", lim.UnzipSizeLimit)
		}
		files[strings.ToLower(strings.ReplaceAll(f.Name, "\\", "/"))] = f
	}
	if files["[content_types].xml"] == nil || files["xl/workbook.xml"] == nil {
		return info, badFile("not an xlsx file: the zip package has no [Content_Types].xml or xl/workbook.xml")
	}
	sheetPath, sheetName, err := firstSheet(files)
	if err != nil {
		return info, err
	}
	info.Sheet = sheetName
	sf := files[strings.ToLower(sheetPath)]
	if sf == nil {
		return info, badFile("broken xlsx: worksheet %s is missing", sheetPath)
	}
	// Shared strings are read whole by the reader, one at a time: a
	// string too large to be a cell is refused before reading starts.
	if sst := files["xl/sharedstrings.xml"]; sst != nil {
		rc, err := sst.Open()
		if err != nil {
			return info, badFile("broken xlsx: %v", err)
		}
		_, err = countRows(rc, lim.MaxCellBytes)
		_ = rc.Close()
		if err != nil {
			return info, err
		}
	}
	rc, err := sf.Open()
	if err != nil {
		return info, badFile("broken xlsx: %v", err)
	}
	defer rc.Close()
	rows, err := countRows(rc, lim.MaxCellBytes)
	if err != nil {
		return info, err
	}
	info.Rows = max(rows-1, 0)
	if info.Rows > lim.MaxRows {
		return info, overLimit("max rows "+strconv.Itoa(lim.MaxRows), "the sheet has %d data rows", info.Rows)
	}
	return info, nil
}

// firstSheet resolves the first worksheet of the workbook to its part name.
func firstSheet(files map[string]*zip.File) (partPath, name string, err error) {
	var wb struct {
		Sheets []struct {
			Name string `xml:"name,attr"`
			RID  string `xml:"http://schemas.openxmlformats.org/officeDocument/2006/relationships id,attr"`
		} `xml:"sheets>sheet"`
	}
	if err := decodeSmallXML(files["xl/workbook.xml"], &wb); err != nil {
		return "", "", badFile("broken xlsx: workbook.xml: %v", err)
	}
	if len(wb.Sheets) == 0 {
		return "", "", badFile("the workbook has no sheet")
	}
	first := wb.Sheets[0]
	var rels struct {
		Rels []struct {
			ID     string `xml:"Id,attr"`
			Target string `xml:"Target,attr"`
		} `xml:"Relationship"`
	}
	if f := files["xl/_rels/workbook.xml.rels"]; f != nil {
		if err := decodeSmallXML(f, &rels); err != nil {
			return "", "", badFile("broken xlsx: workbook.xml.rels: %v", err)
		}
	}
	for _, r := range rels.Rels {
		if r.ID == first.RID {
			t := r.Target
			if strings.HasPrefix(t, "/") {
				return strings.TrimPrefix(t, "/"), first.Name, nil
			}
			return path.Clean(path.Join("xl", t)), first.Name, nil
		}
	}
	return "xl/worksheets/sheet1.xml", first.Name, nil
}

const maxPartXML = 8 << 20

func decodeSmallXML(f *zip.File, v any) error {
	if f.UncompressedSize64 > maxPartXML {
		return errors.New("part too large")
	}
	rc, err := f.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	return xml.NewDecoder(io.LimitReader(rc, maxPartXML)).Decode(v)
}

// countRows counts <row> elements of a worksheet, and returns the larger of
// that count and the highest row number an r attribute names: readers
// yield the blank rows in between. It refuses text runs (between two tags)
// far longer than a cell may be, which a reader would hold in memory
// whole. It scans bytes rather than tokens, which is an order of magnitude
// faster than an XML decoder.
func countRows(r io.Reader, maxCell int) (int, error) {
	// XML escaping may triple a cell's text (& is &amp;).
	maxRun := max(3*maxCell, 64<<10)
	br := bufio.NewReaderSize(r, maxRun+16)
	count, maxR := 0, 0
	for {
		// Find the next tag.
		if _, err := br.ReadSlice('<'); err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return 0, overLimit("max cell size "+strconv.Itoa(maxCell)+" bytes", "the xlsx holds a text of more than %d bytes", maxRun)
			}
			if errors.Is(err, io.EOF) {
				return max(count, maxR), nil
			}
			return 0, badFile("broken xlsx: %v", err)
		}
		name, err := br.Peek(16)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, badFile("broken xlsx: %v", err)
		}
		local := name
		if i := bytes.IndexAny(local, " \t\r\n>/"); i >= 0 {
			local = local[:i]
		}
		if i := bytes.IndexByte(local, ':'); i >= 0 {
			local = local[i+1:]
		}
		if string(local) != "row" {
			continue
		}
		count++
		// Read the start tag's attributes (bounded) for r="N".
		tag, err := br.ReadSlice('>')
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) {
				return max(count, maxR), nil
			}
			return 0, badFile("broken xlsx: %v", err)
		}
		if n := rowAttr(tag); n > maxR {
			maxR = n
		}
		if n := max(count, maxR); n > 1<<21 {
			// Far beyond any limit and Excel's own 1,048,576 rows.
			return n, nil
		}
	}
}

func rowAttr(tag []byte) int {
	for i := 0; i+3 < len(tag); i++ {
		if tag[i] == 'r' && tag[i+1] == '=' && (i == 0 || tag[i-1] == ' ' || tag[i-1] == '\t' || tag[i-1] == '\n' || tag[i-1] == '\r') {
			q := tag[i+2]
			if q != '"' && q != '\'' {
				return 0
			}
			end := bytes.IndexByte(tag[i+3:], q)
			if end < 0 {
				return 0
			}
			n, err := strconv.Atoi(string(tag[i+3 : i+3+end]))
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}

// scanCSV checks that the file is text — UTF-8 (with or without BOM) or
// else GBK — and counts its records.
func scanCSV(r *io.SectionReader, head []byte, lim Limits) (Info, error) {
	info := Info{Format: CSV, Encoding: UTF8}
	if bytes.HasPrefix(head, zipMagic) || bytes.HasPrefix(head, oleMagic) {
		return info, badFile("not a CSV file: its content is a binary (zip/Office) file; upload it as .xlsx")
	}
	// Pass 1: binary? valid UTF-8?
	br := bufio.NewReaderSize(r, 64<<10)
	var carry []byte
	valid := true
	buf := make([]byte, 64<<10)
	for {
		n, err := br.Read(buf)
		chunk := buf[:n]
		if bytes.IndexByte(chunk, 0) >= 0 {
			return info, badFile("not a CSV file: it contains binary data (NUL bytes)")
		}
		if valid {
			data := append(carry, chunk...)
			// Keep an incomplete rune at the end for the next chunk.
			cut := len(data)
			for i := 1; i <= 3 && i <= len(data); i++ {
				if utf8.RuneStart(data[len(data)-i]) {
					if !utf8.FullRune(data[len(data)-i:]) {
						cut = len(data) - i
					}
					break
				}
			}
			if !utf8.Valid(data[:cut]) {
				valid = false
			}
			carry = append(carry[:0], data[cut:]...)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return info, err
		}
	}
	if valid && len(carry) > 0 {
		valid = false
	}
	if !valid {
		info.Encoding = GBK
	}
	// Pass 2: count records, decoding as the encoding says.
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return info, err
	}
	cr, err := newCSVReader(r, info.Encoding, ',')
	if err != nil {
		return info, err
	}
	records := 0
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return info, badFile("malformed CSV at line %d: %v", pe.StartLine, pe.Err)
			}
			return info, badFile("unreadable CSV: %v", err)
		}
		if info.Encoding == GBK && strings.ContainsRune(strings.Join(rec, ""), utf8.RuneError) {
			return info, badFile("not a CSV file: the text is neither UTF-8 nor GBK")
		}
		records++
		if err := checkRow(rec, records, lim); err != nil {
			return info, err
		}
		if records-1 > lim.MaxRows {
			return info, overLimit("max rows "+strconv.Itoa(lim.MaxRows), "the file has more than %d data rows", lim.MaxRows)
		}
	}
	info.Rows = max(records-1, 0)
	return info, nil
}

// newCSVReader reads comma-separated records from r in enc, dropping a
// UTF-8 byte-order mark.
func newCSVReader(r io.Reader, enc Encoding, comma rune) (*csv.Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	if enc == GBK {
		br = bufio.NewReaderSize(simplifiedchinese.GB18030.NewDecoder().Reader(br), 64<<10)
	} else if bom, _ := br.Peek(3); bytes.Equal(bom, []byte("\xEF\xBB\xBF")) {
		_, _ = br.Discard(3)
	}
	cr := csv.NewReader(br)
	cr.Comma = comma
	cr.FieldsPerRecord = -1
	cr.LazyQuotes = true
	cr.ReuseRecord = true
	return cr, nil
}
