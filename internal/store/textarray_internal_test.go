package store

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// textArrayByByte is textArray as it was written first, a byte at a time:
// the literal textArray builds must not differ from it.
func textArrayByByte(vals []any) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		var s string
		switch x := v.(type) {
		case nil:
			b.WriteString("NULL")
			continue
		case string:
			s = x
		case time.Time:
			s = x.UTC().Format(time.RFC3339Nano)
		default:
			s = fmt.Sprint(x)
		}
		b.WriteByte('"')
		for j := 0; j < len(s); j++ {
			if s[j] == '"' || s[j] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(s[j])
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func TestTextArrayEscapesAsItDid(t *testing.T) {
	at := time.Date(2026, 12, 4, 1, 2, 3, 456789000, time.FixedZone("x", 3600))
	for _, vals := range [][]any{
		nil,
		{},
		{nil},
		{"", nil, ""},
		{"plain", `a "quoted" word`, `back\slash`, `\"`, `"`, `\`, `\\""`, "ends with \\", "上海 {x,y}", "NULL", "tab\tnew\nline"},
		{at, at.UTC(), time.Time{}},
		{int64(7), 3.5, true},
	} {
		if got, want := textArray(vals), textArrayByByte(vals); got != want {
			t.Errorf("textArray(%q) = %s, want %s", vals, got, want)
		}
	}
}
