package importer

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/xuri/excelize/v2"
	"golang.org/x/text/width"
)

// Target is where an import writes: the columns it reads (with their
// headers, Chinese ones and aliases included, and their validation), its
// write-once key, and how validated rows are written.
type Target struct {
	Name        string
	Description string
	Columns     []Column
	// BusinessKey names what makes a written row unique, so that a re-run
	// import never writes it twice (ARCHITECTURE.md, invariant 6).
	BusinessKey []string
	// Writer writes validated rows.
	Writer Writer
}

// Writer writes an import's rows idempotently: rows whose key was already
// written (by an earlier execution of the same import) are skipped.
type Writer interface {
	// Write writes rows of import taskID in one transaction.
	Write(ctx context.Context, taskID int, rows []Record) error
	// Written counts the rows of import taskID in the table.
	Written(ctx context.Context, taskID int) (int, error)
}

// Record is a validated row: values by column key, normalized.
type Record struct {
	RowNo  int
	Values map[string]any
}

// ColumnType says how a value is checked and normalized.
type ColumnType int

// Column types.
const (
	Text  ColumnType = iota
	Int              // an integer
	Phone            // a mainland China mobile number, normalized to 11 digits
	Email
	Date // many spellings and Excel serial numbers, normalized to YYYY-MM-DD
	Enum // one of Enum's keys, normalized to its value
	List // separated by , ， ; ； | or 、, each item a Text of MaxLen
)

// Column is one column of a target.
type Column struct {
	Key string
	// Headers are the header spellings accepted, the first being the one
	// shown; matching ignores case, width, spaces and a trailing *.
	Headers  []string
	Required bool
	Type     ColumnType
	// MaxLen bounds the value (of each item, for a List) in characters.
	MaxLen int
	// MaxItems bounds a List.
	MaxItems int
	// Enum maps accepted spellings (case-insensitive) to stored values.
	Enum map[string]string
	// Pattern, when set, must match the whole (normalized) value.
	Pattern *regexp.Regexp
	// PatternHint explains Pattern in errors.
	PatternHint string
	// Sensitive values are masked in error reports and logs.
	Sensitive bool
}

// Label is how the column is named in messages: its first header and key.
func (c Column) Label() string {
	if len(c.Headers) > 0 && c.Headers[0] != c.Key {
		return c.Headers[0] + " (" + c.Key + ")"
	}
	return c.Key
}

// Registry holds the import targets.
type Registry struct {
	mu      sync.RWMutex
	targets map[string]*Target
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{targets: map[string]*Target{}} }

// Add registers a target. It panics on a duplicate or malformed target:
// registration is program structure.
func (r *Registry) Add(t *Target) {
	if err := r.TryAdd(t); err != nil {
		panic(err.Error())
	}
}

// TryAdd registers a target, or says what is wrong with it: no name,
// columns or writer, a name taken, a header naming two columns.
func (r *Registry) TryAdd(t *Target) error {
	if t.Name == "" || t.Writer == nil || len(t.Columns) == 0 {
		return errors.New("importer: a target needs a name, columns and a writer")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.targets[t.Name]; dup {
		return fmt.Errorf("importer: target %s registered twice", t.Name)
	}
	seen := map[string]string{}
	for _, c := range t.Columns {
		if c.Key == "" {
			return fmt.Errorf("importer: target %s: a column has no key", t.Name)
		}
		for _, h := range append([]string{c.Key}, c.Headers...) {
			n := normalizeHeader(h)
			if other, ok := seen[n]; ok && other != c.Key {
				return fmt.Errorf("importer: target %s: header %q names both %s and %s", t.Name, h, other, c.Key)
			}
			seen[n] = c.Key
		}
	}
	r.targets[t.Name] = t
	return nil
}

// Get returns a target.
func (r *Registry) Get(name string) (*Target, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.targets[name]
	return t, ok
}

// Names lists the targets.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.targets))
	for n := range r.targets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// normalizeHeader folds a header for matching: full-width to half-width,
// lower case, without spaces, underscores, dashes or a required-marker *.
func normalizeHeader(s string) string {
	s = width.Fold.String(strings.TrimSpace(strings.TrimPrefix(s, "\ufeff")))
	s = strings.ToLower(s)
	s = strings.TrimSuffix(s, "*")
	s = strings.TrimPrefix(s, "*")
	return strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '_', '-', '\u3000':
			return -1
		}
		return r
	}, s)
}

// bilingual matches a header that gives a column's name in two languages,
// as an export writes it ("姓名 Name", "邮箱 E-mail"): its first word, or
// the rest, names the column, and no word names another.
func bilingual(byName map[string]int, h string) (int, bool) {
	first, rest, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok {
		return 0, false
	}
	col, found := -1, false
	for _, part := range []string{first, rest} {
		c, ok := byName[normalizeHeader(part)]
		if !ok {
			continue
		}
		if found && c != col {
			return 0, false
		}
		col, found = c, true
	}
	return col, found
}

// HeaderError lists what is wrong with a file's header row.
type HeaderError struct{ Problems []string }

func (e *HeaderError) Error() string {
	return "header problem: " + strings.Join(e.Problems, "; ")
}

// Mapping says which cell index holds which column.
type Mapping struct {
	target  *Target
	index   []int // per target column: the cell index, or -1
	Ignored []string
}

// MapHeader matches a header row to the target's columns.
func (t *Target) MapHeader(header []string) (*Mapping, error) {
	byName := map[string]int{}
	for i, c := range t.Columns {
		byName[normalizeHeader(c.Key)] = i
		for _, h := range c.Headers {
			byName[normalizeHeader(h)] = i
		}
	}
	m := &Mapping{target: t, index: make([]int, len(t.Columns))}
	for i := range m.index {
		m.index[i] = -1
	}
	var problems []string
	for cell, h := range header {
		if strings.TrimSpace(h) == "" {
			continue
		}
		col, ok := byName[normalizeHeader(h)]
		if !ok {
			col, ok = bilingual(byName, h)
		}
		if !ok {
			m.Ignored = append(m.Ignored, h)
			continue
		}
		if prev := m.index[col]; prev >= 0 {
			problems = append(problems, fmt.Sprintf("column %s appears twice (%q and %q)", t.Columns[col].Label(), header[prev], h))
			continue
		}
		m.index[col] = cell
	}
	var missing []string
	for i, c := range t.Columns {
		if c.Required && m.index[i] < 0 {
			missing = append(missing, c.Label())
		}
	}
	if len(missing) > 0 {
		problems = append(problems, "missing required column(s): "+strings.Join(missing, ", "))
	}
	if len(problems) > 0 {
		return nil, &HeaderError{Problems: problems}
	}
	return m, nil
}

// Problem is one invalid value of a row.
type Problem struct {
	Column *Column
	Value  string
	Reason string
}

// Validate checks and normalizes one row. A row with problems is not
// written.
func (m *Mapping) Validate(rowNo int, cells []string) (Record, []Problem) {
	rec := Record{RowNo: rowNo, Values: make(map[string]any, len(m.index))}
	var problems []Problem
	for i := range m.target.Columns {
		c := &m.target.Columns[i]
		var raw string
		if idx := m.index[i]; idx >= 0 && idx < len(cells) {
			raw = cells[idx]
		}
		v, reason := c.check(raw)
		if reason != "" {
			problems = append(problems, Problem{Column: c, Value: raw, Reason: reason})
			continue
		}
		rec.Values[c.Key] = v
	}
	return rec, problems
}

var (
	phoneDigits = regexp.MustCompile(`^1[3-9]\d{9}$`)
	listSplit   = regexp.MustCompile(`[,，;；|、]`)
)

// check returns the normalized value, or why raw is refused.
func (c *Column) check(raw string) (any, string) {
	s := strings.Trim(raw, " \t\r\n\u3000\u00a0\ufeff")
	if s == "" {
		if c.Required {
			return nil, "is required"
		}
		if c.Type == List {
			return []string{}, ""
		}
		return "", ""
	}
	if !utf8.ValidString(s) {
		return nil, "is not valid text"
	}
	var v any = s
	switch c.Type {
	case Int:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, "is not a whole number"
		}
		v = n
	case Phone:
		p := strings.Map(func(r rune) rune {
			if r == ' ' || r == '-' || r == '(' || r == ')' {
				return -1
			}
			return r
		}, width.Fold.String(s))
		p = strings.TrimPrefix(strings.TrimPrefix(p, "+86"), "0086")
		if len(p) == 13 && strings.HasPrefix(p, "86") {
			p = p[2:]
		}
		if !phoneDigits.MatchString(p) {
			return nil, "is not a valid mobile number (" + phoneProblem(p) + ")"
		}
		v = p
	case Email:
		a, err := mail.ParseAddress(s)
		if err != nil || a.Address != s || !strings.Contains(s[strings.IndexByte(s, '@')+1:], ".") {
			return nil, "is not a valid e-mail address"
		}
		v = strings.ToLower(s)
	case Date:
		d, ok := parseDate(s)
		if !ok {
			return nil, "is not a date (e.g. 2024-03-01, 2024/3/1, 2024年3月1日)"
		}
		v = d
	case Enum:
		out, ok := c.Enum[strings.ToLower(width.Fold.String(s))]
		if !ok {
			return nil, "must be one of " + enumChoices(c.Enum)
		}
		v = out
	case List:
		var items []string
		for _, it := range listSplit.Split(s, -1) {
			it = strings.TrimSpace(it)
			if it == "" {
				continue
			}
			if c.MaxLen > 0 && utf8.RuneCountInString(it) > c.MaxLen {
				return nil, fmt.Sprintf("item %q is longer than %d characters", it, c.MaxLen)
			}
			items = append(items, it)
		}
		if c.MaxItems > 0 && len(items) > c.MaxItems {
			return nil, fmt.Sprintf("has %d items; the limit is %d", len(items), c.MaxItems)
		}
		return items, ""
	}
	if str, ok := v.(string); ok {
		if c.MaxLen > 0 && utf8.RuneCountInString(str) > c.MaxLen {
			return nil, fmt.Sprintf("is %d characters; the limit is %d", utf8.RuneCountInString(str), c.MaxLen)
		}
		if c.Pattern != nil && !c.Pattern.MatchString(str) {
			return nil, "does not match the expected format " + c.PatternHint
		}
	}
	return v, ""
}

func enumChoices(m map[string]string) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

var dateLayouts = []string{"2006-01-02", "2006/01/02", "2006.01.02", "2006-1-2", "2006/1/2", "2006.1.2", "20060102", "2006年1月2日", "2006年01月02日"}

func parseDate(s string) (string, bool) {
	s = width.Fold.String(s)
	if i := strings.IndexAny(s, " T"); i > 0 {
		s = s[:i] // a time part is dropped
	}
	for _, l := range dateLayouts {
		if t, err := time.Parse(l, s); err == nil && t.Year() >= 1900 && t.Year() <= 2200 {
			return t.Format("2006-01-02"), true
		}
	}
	// An Excel date cell, read raw, is a serial day number.
	if f, err := strconv.ParseFloat(s, 64); err == nil && f >= 1 && f < 150000 && !strings.ContainsAny(s, "eE") && len(s) != 8 {
		if t, err := excelize.ExcelDateToTime(f, false); err == nil {
			return t.Format("2006-01-02"), true
		}
	}
	return "", false
}

// TypeName names a column's type for clients.
func (c Column) TypeName() string {
	switch c.Type {
	case Int:
		return "int"
	case Phone:
		return "phone"
	case Email:
		return "email"
	case Date:
		return "date"
	case Enum:
		return "enum"
	case List:
		return "list"
	}
	return "text"
}

// phoneProblem says precisely what is wrong with p, the digits of a value
// that is not a mobile number (spaces, dashes, brackets and a country code
// removed): the report shows the value masked, so the reason must say it.
func phoneProblem(p string) string {
	n := 0
	for _, r := range p {
		if r < '0' || r > '9' {
			return fmt.Sprintf("has %q, which is not a digit; needs 11 digits starting with 1", r)
		}
		n++
	}
	switch {
	case n != 11:
		return fmt.Sprintf("has %d digits, needs 11 starting with 1", n)
	case p[0] != '1':
		return fmt.Sprintf("starts with %c, needs 11 digits starting with 1", p[0])
	default:
		return fmt.Sprintf("starts with 1%c, needs 13 to 19", p[1])
	}
}
