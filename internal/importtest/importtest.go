// Package importtest makes import files for tests — xlsx written with
// excelize, CSV in UTF-8 or GBK, zip bombs — and uploads them to a running
// process with the GraphQL multipart request spec.
package importtest

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/xuri/excelize/v2"
	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/taskgraph/taskgraph/internal/apptest"
)

// ContactsHeader is a header row of the contacts target, in Chinese.
var ContactsHeader = []string{"姓名", "手机", "邮箱", "公司", "城市", "标签", "性别", "生日"}

// GoodRow is a valid contacts row, unique per i.
func GoodRow(i int) []string {
	cities := []string{"上海", "北京", "深圳", "杭州"}
	return []string{fmt.Sprintf("用户%d", i), fmt.Sprintf("138%08d", i), fmt.Sprintf("user%d@example.com", i),
		"某某科技有限公司", cities[i%len(cities)], "vip,new", "男", "1990-01-02"}
}

// BadPhone is the reason a row whose phone has n digits (not 11) is
// refused.
func BadPhone(n int) string {
	return fmt.Sprintf("is not a valid mobile number (has %d digits, needs 11 starting with 1)", n)
}

// Rows returns n data rows; every row i with bad(i) has a malformed phone.
func Rows(n int, bad func(i int) bool) [][]string {
	out := make([][]string, n)
	for i := range out {
		out[i] = GoodRow(i)
		if bad != nil && bad(i) {
			out[i][1] = fmt.Sprintf("12%d", i) // not a mobile number
		}
	}
	return out
}

// XLSX writes header and rows as an xlsx file.
func XLSX(t testing.TB, header []string, rows [][]string) []byte {
	t.Helper()
	f := excelize.NewFile()
	defer f.Close()
	sw, err := f.NewStreamWriter("Sheet1")
	if err != nil {
		t.Fatal(err)
	}
	write := func(r int, cells []string) {
		vals := make([]any, len(cells))
		for i, c := range cells {
			vals[i] = c
		}
		cell, _ := excelize.CoordinatesToCellName(1, r)
		if err := sw.SetRow(cell, vals); err != nil {
			t.Fatal(err)
		}
	}
	write(1, header)
	for i, r := range rows {
		write(i+2, r)
	}
	if err := sw.Flush(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := f.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// CSV writes header and rows as CSV in UTF-8, with a BOM if bom is set.
func CSV(header []string, rows [][]string, bom bool) []byte {
	var b strings.Builder
	if bom {
		b.WriteString("\xEF\xBB\xBF")
	}
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			if i > 0 {
				b.WriteByte(',')
			}
			if strings.ContainsAny(c, ",\"\n") {
				c = `"` + strings.ReplaceAll(c, `"`, `""`) + `"`
			}
			b.WriteString(c)
		}
		b.WriteString("\r\n")
	}
	return []byte(b.String())
}

// GBK encodes UTF-8 text as GBK.
func GBK(t testing.TB, utf8 []byte) []byte {
	t.Helper()
	out, err := simplifiedchinese.GBK.NewEncoder().Bytes(utf8)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ZipBomb is a small xlsx-shaped zip whose worksheet unpacks to size
// bytes of XML.
func ZipBomb(t testing.TB, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, flate.BestCompression) })
	add := func(name, body string) {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, body); err != nil {
			t.Fatal(err)
		}
	}
	add("[Content_Types].xml", `<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="xml" ContentType="application/xml"/></Types>`)
	add("xl/workbook.xml", `<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>`)
	add("xl/_rels/workbook.xml.rels", `<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/></Relationships>`)
	// The sheet's one giant cell is written compressed: deflate segments
	// of a fresh compressor each, flushed to a byte boundary, follow one
	// another in one stream; the 1 MiB chunk is compressed once and
	// repeated, so a bomb of any size costs milliseconds.
	segment := func(body []byte, final bool) []byte {
		var b bytes.Buffer
		fw, err := flate.NewWriter(&b, flate.BestCompression)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fw.Write(body); err != nil {
			t.Fatal(err)
		}
		if final {
			err = fw.Close()
		} else {
			err = fw.Flush()
		}
		if err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	head := []byte(`<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData><row r="1"><c r="A1" t="inlineStr"><is><t>`)
	tail := []byte(`</t></is></c></row></sheetData></worksheet>`)
	chunk := bytes.Repeat([]byte("A"), 1<<20)
	packed := segment(chunk, false)
	var body bytes.Buffer
	body.Write(segment(head, false))
	crc := crc32.Update(0, crc32.IEEETable, head)
	n := int64(len(head))
	for ; n-int64(len(head)) < size; n += int64(len(chunk)) {
		body.Write(packed)
		crc = crc32.Update(crc, crc32.IEEETable, chunk)
	}
	body.Write(segment(tail, true))
	crc = crc32.Update(crc, crc32.IEEETable, tail)
	n += int64(len(tail))
	w, err := zw.CreateRaw(&zip.FileHeader{
		Name: "xl/worksheets/sheet1.xml", Method: zip.Deflate, CRC32: crc,
		CompressedSize64: uint64(body.Len()), UncompressedSize64: uint64(n),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(body.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Task is what Upload reads back about the task it created.
type Task struct {
	ID     string `json:"id"`
	Code   string `json:"code"`
	Status string `json:"status"`
}

// Upload posts importFile with the multipart request spec and returns the
// raw response and its HTTP status.
func Upload(t testing.TB, s *apptest.Server, filename string, content []byte, target string, options map[string]any, key string) (apptest.Response, int) {
	t.Helper()
	return UploadAs(t, s, "", filename, content, target, options, key)
}

// UploadAs is Upload with a bearer token ("" sends none).
func UploadAs(t testing.TB, s *apptest.Server, token, filename string, content []byte, target string, options map[string]any, key string) (apptest.Response, int) {
	t.Helper()
	vars := map[string]any{"file": nil, "target": target}
	if options != nil {
		vars["options"] = options
	}
	if key != "" {
		vars["key"] = key
	}
	ops, _ := json.Marshal(map[string]any{
		"query":     `mutation($file: Upload!, $target: String!, $options: JSON, $key: String) { importFile(file: $file, target: $target, options: $options, idempotencyKey: $key) { id code status } }`,
		"variables": vars,
	})
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("operations", string(ops))
	_ = mw.WriteField("map", `{"0": ["variables.file"]}`)
	fw, err := mw.CreateFormFile("0", filename)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(content)
	_ = mw.Close()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/query", &body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Apollo-Require-Preflight", "true")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("importtest: upload: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var r apptest.Response
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("importtest: response %d is not JSON: %s", resp.StatusCode, raw)
	}
	return r, resp.StatusCode
}

// MustUpload uploads a file that must be accepted and returns its task.
func MustUpload(t testing.TB, s *apptest.Server, filename string, content []byte, options map[string]any, key string) Task {
	t.Helper()
	r, status := Upload(t, s, filename, content, "contacts", options, key)
	if len(r.Errors) > 0 || status != http.StatusOK {
		t.Fatalf("importtest: upload refused (%d): %+v", status, r.Errors)
	}
	var out struct{ ImportFile Task }
	if err := json.Unmarshal(r.Data, &out); err != nil {
		t.Fatal(err)
	}
	return out.ImportFile
}
