package spreadsheet_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/xuri/excelize/v2"

	"github.com/taskgraph/taskgraph/internal/spreadsheet"
)

// excelizeRows reads the first sheet with excelize's row iterator, raw
// values, as the reference.
func excelizeRows(t testing.TB, b []byte) [][]string {
	t.Helper()
	f, err := excelize.OpenReader(bytes.NewReader(b))
	require.NoError(t, err)
	defer f.Close()
	rows, err := f.Rows(f.GetSheetList()[0])
	require.NoError(t, err)
	defer rows.Close()
	var out [][]string
	for rows.Next() {
		cols, err := rows.Columns(excelize.Options{RawCellValue: true})
		require.NoError(t, err)
		out = append(out, trimRow(cols))
	}
	return out
}

func trimRow(r []string) []string {
	for len(r) > 0 && r[len(r)-1] == "" {
		r = r[:len(r)-1]
	}
	if len(r) == 0 {
		return nil
	}
	return r
}

func ourRows(t testing.TB, b []byte) [][]string {
	t.Helper()
	info, err := spreadsheet.Scan(bytes.NewReader(b), int64(len(b)), spreadsheet.XLSX, spreadsheet.Limits{})
	require.NoError(t, err)
	got, nos, err := readAll(t, b, info, spreadsheet.Limits{})
	require.NoError(t, err)
	for i, n := range nos {
		require.Equal(t, i+1, n, "row numbers count from 1 without gaps")
	}
	require.LessOrEqual(t, len(got), info.Rows+1, "the scan's count bounds the rows")
	for i := range got {
		got[i] = trimRow(got[i])
	}
	return got
}

var texts = []string{"", "plain", "张三", "a & b < c > d", `quote " and ' apostrophe`, "line\nbreak", "tab\tin", " lead and trail ",
	"_x000D_ literal", "emoji 😀", "=1+2", "&amp; literal", "<tag/>", "]]>", "x", "12345678901234567890"}

// TestSheetReaderMatchesExcelize reads workbooks with shared strings, rich
// text, inline strings, numbers, booleans, formulas, gaps and sparse
// columns, and requires the same rows as excelize's iterator.
func TestSheetReaderMatchesExcelize(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		t.Run(fmt.Sprintf("Seed%d", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 7))
			f := excelize.NewFile()
			defer f.Close()
			rows := 1 + rng.IntN(60)
			for r := 1; r <= rows; r++ {
				if rng.IntN(5) == 0 {
					continue // a gap
				}
				for c := 1; c <= 1+rng.IntN(30); c++ {
					if rng.IntN(3) == 0 {
						continue // a sparse column
					}
					cell, _ := excelize.CoordinatesToCellName(c, r)
					switch rng.IntN(7) {
					case 0, 1:
						require.NoError(t, f.SetCellStr("Sheet1", cell, texts[rng.IntN(len(texts))]))
					case 2:
						require.NoError(t, f.SetCellInt("Sheet1", cell, int64(rng.IntN(1e9)-5e8)))
					case 3:
						require.NoError(t, f.SetCellFloat("Sheet1", cell, rng.Float64()*1e6, -1, 64))
					case 4:
						require.NoError(t, f.SetCellBool("Sheet1", cell, rng.IntN(2) == 0))
					case 5:
						require.NoError(t, f.SetCellRichText("Sheet1", cell, []excelize.RichTextRun{
							{Text: texts[rng.IntN(len(texts))]}, {Text: "粗体", Font: &excelize.Font{Bold: true}}}))
					case 6:
						require.NoError(t, f.SetCellFormula("Sheet1", cell, "1+1"))
					}
				}
			}
			var buf bytes.Buffer
			require.NoError(t, f.Write(&buf))
			require.Equal(t, excelizeRows(t, buf.Bytes()), ourRows(t, buf.Bytes()))
		})
	}
	t.Run("StreamWrittenInlineStrings", func(t *testing.T) {
		t.Parallel()
		f := excelize.NewFile()
		defer f.Close()
		sw, err := f.NewStreamWriter("Sheet1")
		require.NoError(t, err)
		for i, s := range texts {
			cell, _ := excelize.CoordinatesToCellName(1, i*2+1)
			require.NoError(t, sw.SetRow(cell, []any{s, i, float64(i) / 3, i%2 == 0, nil, s}))
		}
		require.NoError(t, sw.Flush())
		var buf bytes.Buffer
		require.NoError(t, f.Write(&buf))
		require.Equal(t, excelizeRows(t, buf.Bytes()), ourRows(t, buf.Bytes()))
	})
}

// FuzzSheetText: any text written to a cell, as a shared or an inline
// string, reads back as excelize reads it.
func FuzzSheetText(f *testing.F) {
	for _, s := range texts {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1000 {
			return
		}
		x := excelize.NewFile()
		defer x.Close()
		if err := x.SetCellStr("Sheet1", "A1", s); err != nil {
			return
		}
		if err := x.SetCellStr("Sheet1", "B1", strings.ToUpper(s)); err != nil {
			return
		}
		var buf bytes.Buffer
		if err := x.Write(&buf); err != nil {
			return
		}
		require.Equal(t, excelizeRows(t, buf.Bytes()), ourRows(t, buf.Bytes()))
	})
}
