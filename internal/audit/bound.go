package audit

import (
	"fmt"
	"regexp"
	"strconv"
	"unicode/utf8"
)

// Details are what a caller sent, and a caller may send anything: a
// refused createTask once recorded its whole 10 MB title. Every string in
// them is cut to MaxDetailText characters, saying that it was cut and how
// long it was, and a record keeps at most MaxDetailItems entries per map or
// list.
const (
	MaxDetailText  = 256
	MaxDetailItems = MaxBulkIDs
	// MaxBulkIDs is the most ids a bulk action takes (engine.MaxBulk): a
	// record lists each one with its outcome.
	MaxBulkIDs = 1000
	// preMask bounds what the masker is given, so that masking a huge
	// value costs little; the result is cut to MaxDetailText after
	// masking, so a value is never cut in the middle of what the masker
	// would have recognised and left half visible.
	preMask = 16 * MaxDetailText
)

// Cut returns s cut to max characters, with a note saying it was cut and
// how many bytes it had; s itself when it is short enough.
func Cut(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	total := len(s)
	if m := cutNote.FindStringSubmatch(s); m != nil {
		// Cut before: the note keeps the length of the original.
		total, _ = strconv.Atoi(m[1])
		s = s[:len(s)-len(m[0])]
	}
	i, n := 0, 0
	for i < len(s) && n < max {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		n++
	}
	return s[:i] + fmt.Sprintf("…[cut: %d bytes]", total)
}

var cutNote = regexp.MustCompile(`…\[cut: (\d+) bytes\]$`)

// bound applies cut to every string of v, and keeps at most MaxDetailItems
// entries of each map and list (a note says how many were dropped).
func bound(v any, cut func(string) string) any {
	switch x := v.(type) {
	case string:
		return cut(x)
	case map[string]any:
		out := make(map[string]any, min(len(x), MaxDetailItems+1))
		n := 0
		for k, e := range x {
			if n == MaxDetailItems {
				out["…"] = fmt.Sprintf("%d more entries cut", len(x)-n)
				break
			}
			out[cut(k)] = bound(e, cut)
			n++
		}
		return out
	case []any:
		return boundList(x, cut)
	case []map[string]any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = e
		}
		return boundList(l, cut)
	case []string:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = e
		}
		return boundList(l, cut)
	}
	return v
}

func boundList(x []any, cut func(string) string) []any {
	out := make([]any, 0, min(len(x), MaxDetailItems+1))
	for i, e := range x {
		if i == MaxDetailItems {
			out = append(out, fmt.Sprintf("%d more entries cut", len(x)-i))
			break
		}
		out = append(out, bound(e, cut))
	}
	return out
}

// boundDetails is what a record keeps of details: bounded before masking
// (so that masking costs little) and after (so that it is short).
func (r *Recorder) boundDetails(details map[string]any) map[string]any {
	if details == nil {
		return nil
	}
	pre, _ := bound(details, func(s string) string { return Cut(s, preMask) }).(map[string]any)
	masked := r.masker.Fields(pre)
	out, _ := bound(masked, func(s string) string { return Cut(s, MaxDetailText) }).(map[string]any)
	return out
}
