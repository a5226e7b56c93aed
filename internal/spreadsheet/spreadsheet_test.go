package spreadsheet_test

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/xuri/excelize/v2"

	"github.com/taskgraph/taskgraph/internal/importtest"
	"github.com/taskgraph/taskgraph/internal/spreadsheet"
)

func scan(t *testing.T, b []byte, f spreadsheet.Format, lim spreadsheet.Limits) (spreadsheet.Info, error) {
	t.Helper()
	return spreadsheet.Scan(bytes.NewReader(b), int64(len(b)), f, lim)
}

func readAll(t testing.TB, b []byte, info spreadsheet.Info, lim spreadsheet.Limits) ([][]string, []int, error) {
	t.Helper()
	rows, err := spreadsheet.Open(spreadsheet.Source{ReaderAt: bytes.NewReader(b), Size: int64(len(b))}, info, lim)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var out [][]string
	var nos []int
	for rows.Next() {
		out = append(out, append([]string(nil), rows.Row()...))
		nos = append(nos, rows.RowNo())
	}
	return out, nos, rows.Err()
}

func TestScan(t *testing.T) {
	t.Parallel()
	rows := importtest.Rows(30, nil)
	t.Run("CountsXLSXRowsAndNamesTheFirstSheet", func(t *testing.T) {
		t.Parallel()
		info, err := scan(t, importtest.XLSX(t, importtest.ContactsHeader, rows), spreadsheet.XLSX, spreadsheet.Limits{})
		require.NoError(t, err)
		require.Equal(t, spreadsheet.Info{Format: spreadsheet.XLSX, Rows: 30, Sheet: "Sheet1"}, info)
	})
	t.Run("ReadsUTF8WithAndWithoutBOMAndGBK", func(t *testing.T) {
		t.Parallel()
		plain := importtest.CSV(importtest.ContactsHeader, rows, false)
		for _, c := range []struct {
			file []byte
			enc  spreadsheet.Encoding
		}{
			{plain, spreadsheet.UTF8},
			{importtest.CSV(importtest.ContactsHeader, rows, true), spreadsheet.UTF8},
			{importtest.GBK(t, plain), spreadsheet.GBK},
		} {
			info, err := scan(t, c.file, spreadsheet.CSV, spreadsheet.Limits{})
			require.NoError(t, err)
			require.Equal(t, c.enc, info.Encoding)
			require.Equal(t, 30, info.Rows)
			got, nos, err := readAll(t, c.file, info, spreadsheet.Limits{})
			require.NoError(t, err)
			require.Equal(t, importtest.ContactsHeader, got[0], "no BOM left in the first header")
			require.Equal(t, rows[29], got[30])
			require.Equal(t, 31, nos[30])
		}
	})
	t.Run("CountsRowNumbersPastGaps", func(t *testing.T) {
		t.Parallel()
		f := excelize.NewFile()
		require.NoError(t, f.SetCellValue("Sheet1", "A1", "姓名"))
		require.NoError(t, f.SetCellValue("Sheet1", "A500", "x"))
		var buf bytes.Buffer
		require.NoError(t, f.Write(&buf))
		info, err := scan(t, buf.Bytes(), spreadsheet.XLSX, spreadsheet.Limits{})
		require.NoError(t, err)
		require.Equal(t, 499, info.Rows)
		got, nos, err := readAll(t, buf.Bytes(), info, spreadsheet.Limits{})
		require.NoError(t, err)
		require.Equal(t, 500, len(got))
		require.Equal(t, 500, nos[len(nos)-1])
		_, err = scan(t, buf.Bytes(), spreadsheet.XLSX, spreadsheet.Limits{MaxRows: 400})
		requireLimit(t, err, "max rows 400")
	})
	t.Run("RefusesWhatIsNotItsFormat", func(t *testing.T) {
		t.Parallel()
		csvFile := importtest.CSV(importtest.ContactsHeader, rows, false)
		ole := append([]byte{0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1}, make([]byte, 100)...)
		notXLSX := zipOf(t, map[string]string{"word/document.xml": "<w/>", "[Content_Types].xml": "<Types/>"})
		for _, c := range []struct {
			name string
			file []byte
			f    spreadsheet.Format
			want string
		}{
			{"CSVNamedXLSX", csvFile, spreadsheet.XLSX, "not a zip package"},
			{"LegacyXLS", ole, spreadsheet.XLSX, "legacy Excel"},
			{"DocxNamedXLSX", notXLSX, spreadsheet.XLSX, "no [Content_Types].xml or xl/workbook.xml"},
			{"XLSXNamedCSV", importtest.XLSX(t, importtest.ContactsHeader, rows), spreadsheet.CSV, "binary (zip/Office)"},
			{"Binary", []byte("GIF89a\x00\x01\x02"), spreadsheet.CSV, "NUL bytes"},
			{"NeitherUTF8NorGBK", []byte("a,b\n\xff\xfe\xfd,\x80\n"), spreadsheet.CSV, "neither UTF-8 nor GBK"},
			{"Empty", nil, spreadsheet.XLSX, "not a zip package"},
		} {
			_, err := scan(t, c.file, c.f, spreadsheet.Limits{})
			var fe *spreadsheet.FileError
			require.ErrorAs(t, err, &fe, c.name)
			require.Contains(t, fe.Error(), c.want, c.name)
		}
	})
	t.Run("RefusesAZipBombBeforeInflatingIt", func(t *testing.T) {
		t.Parallel()
		bomb := importtest.ZipBomb(t, 256<<20)
		require.Less(t, len(bomb), 1<<20, "a tiny file")
		_, err := scan(t, bomb, spreadsheet.XLSX, spreadsheet.Limits{UnzipSizeLimit: 64 << 20})
		requireLimit(t, err, "unzip size limit 67108864 bytes")
		// Under the unzip limit, its one giant cell is refused as such,
		// without holding it in memory.
		_, err = scan(t, bomb, spreadsheet.XLSX, spreadsheet.Limits{})
		requireLimit(t, err, "max cell size 32768 bytes")
	})
	t.Run("RefusesTooManyRows", func(t *testing.T) {
		t.Parallel()
		_, err := scan(t, importtest.XLSX(t, importtest.ContactsHeader, rows), spreadsheet.XLSX, spreadsheet.Limits{MaxRows: 29})
		requireLimit(t, err, "max rows 29")
		_, err = scan(t, importtest.CSV(importtest.ContactsHeader, rows, false), spreadsheet.CSV, spreadsheet.Limits{MaxRows: 29})
		requireLimit(t, err, "max rows 29")
	})
	t.Run("ReadingStopsAtCellLimits", func(t *testing.T) {
		t.Parallel()
		file := []byte("a,b\n" + strings.Repeat("x", 100) + ",y\n")
		info, err := scan(t, file, spreadsheet.CSV, spreadsheet.Limits{})
		require.NoError(t, err)
		_, _, err = readAll(t, file, info, spreadsheet.Limits{MaxCellBytes: 50})
		requireLimit(t, err, "max cell size 50 bytes")
	})
}

func requireLimit(t *testing.T, err error, limit string) {
	t.Helper()
	var fe *spreadsheet.FileError
	require.ErrorAs(t, err, &fe)
	require.True(t, errors.Is(err, spreadsheet.ErrBadFile))
	require.Equal(t, limit, fe.Limit)
	require.Contains(t, fe.Error(), "limit: "+limit)
}

func zipOf(t testing.TB, files map[string]string) []byte {
	t.Helper()
	f := excelize.NewFile()
	defer f.Close()
	var buf bytes.Buffer
	zw := f.ZipWriter(&buf)
	for name, body := range files {
		w, err := zw.Create(name)
		require.NoError(t, err)
		_, _ = w.Write([]byte(body))
	}
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func TestWriter(t *testing.T) {
	t.Parallel()
	// However the formula is introduced: behind white space or line
	// breaks, which programs skip, or in full-width forms, which some fold.
	dangerous := []string{"=HYPERLINK(\"http://x\")", "+1+1", "-2+3", "@SUM(A1)", "\tcmd", "\rcmd",
		"\n=1+1", " =1+1", "\u3000=cmd", "\n\n@SUM(A1)", "＝HYPERLINK(\"http://x\")", "＋1", "－1", "＠SUM(A1)", " \n ＝1"}
	t.Run("LeavesPlainTextAlone", func(t *testing.T) {
		t.Parallel()
		for _, safe := range []string{"", "safe", " safe", "\nline", "a=b", "1-2", "e@mail", "全角＝"} {
			require.Equal(t, safe, spreadsheet.EscapeFormula(safe))
		}
	})
	t.Run("EscapesFormulaInjectionInCSV", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		w, err := spreadsheet.NewWriter(spreadsheet.CSV, &buf, "x")
		require.NoError(t, err)
		cells := []any{"safe", 42, -5}
		for _, d := range dangerous {
			cells = append(cells, d)
		}
		require.NoError(t, w.Row(cells...))
		require.NoError(t, w.Close())
		rec, err := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(buf.Bytes(), []byte("\xEF\xBB\xBF")))).Read()
		require.NoError(t, err)
		require.Equal(t, []string{"safe", "42", "-5"}, rec[:3], "numbers are not text")
		for i, d := range dangerous {
			require.Equal(t, "'"+d, rec[3+i])
		}
	})
	t.Run("EscapesFormulaInjectionInXLSX", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		w, err := spreadsheet.NewWriter(spreadsheet.XLSX, &buf, "x")
		require.NoError(t, err)
		cells := []any{}
		for _, d := range dangerous {
			cells = append(cells, d)
		}
		require.NoError(t, w.Row(cells...))
		require.NoError(t, w.Close())
		f, err := excelize.OpenReader(&buf)
		require.NoError(t, err)
		defer f.Close()
		got, err := f.GetRows("x")
		require.NoError(t, err)
		for i, d := range dangerous {
			require.Equal(t, "'"+d, got[0][i])
			formula, err := f.GetCellFormula("x", fmt.Sprintf("%c1", 'A'+i))
			require.NoError(t, err)
			require.Empty(t, formula)
		}
	})
}

// FuzzParseCSV: no input crashes the CSV scan or reader; what the scan
// accepts, the reader reads without exceeding the scan's row count.
func FuzzParseCSV(f *testing.F) {
	f.Add([]byte("姓名,手机\n张三,13812345678\n"))
	f.Add([]byte("\xEF\xBB\xBFa,\"b\"\"c\",d\r\n1,2,3\n"))
	f.Add([]byte("\xd0\xd5\xc3\xfb,\xca\xd6\xbb\xfa\n"))
	f.Add([]byte("a,\"unterminated\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		lim := spreadsheet.Limits{MaxRows: 1000}
		info, err := spreadsheet.Scan(bytes.NewReader(b), int64(len(b)), spreadsheet.CSV, lim)
		if err != nil {
			var fe *spreadsheet.FileError
			if !errors.As(err, &fe) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		got, _, err := readAll(t, b, info, lim)
		if err != nil {
			var fe *spreadsheet.FileError
			if !errors.As(err, &fe) {
				t.Fatalf("untyped error %v", err)
			}
		}
		if len(got) > info.Rows+1 {
			t.Fatalf("read %d rows, scan counted %d", len(got), info.Rows+1)
		}
	})
}

// FuzzParseXLSX: no input crashes the xlsx scan or reader.
func FuzzParseXLSX(f *testing.F) {
	f.Add(importtest.XLSX(f, []string{"姓名", "手机"}, [][]string{{"张三", "13812345678"}}))
	f.Add(zipOf(f, map[string]string{"[Content_Types].xml": "<Types/>", "xl/workbook.xml": "<workbook/>"}))
	f.Add([]byte("PK\x03\x04garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		lim := spreadsheet.Limits{MaxRows: 1000, UnzipSizeLimit: 8 << 20}
		info, err := spreadsheet.Scan(bytes.NewReader(b), int64(len(b)), spreadsheet.XLSX, lim)
		if err != nil {
			var fe *spreadsheet.FileError
			if !errors.As(err, &fe) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		got, _, err := readAll(t, b, info, lim)
		if err != nil {
			var fe *spreadsheet.FileError
			if !errors.As(err, &fe) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if len(got) > info.Rows+1 {
			t.Fatalf("read %d rows, scan counted %d", len(got), info.Rows+1)
		}
	})
}
