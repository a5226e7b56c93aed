package mask

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Rules are masking rules added to the built-in ones, from flags or a file.
//
// A rules file is JSON:
//
//	{
//	  "keys": ["iban", "salary"],
//	  "patterns": [
//	    {"name": "employee-id", "regexp": "\\bEMP-\\d{6}\\b", "keepHead": 4},
//	    {"name": "licence-plate", "regexp": "\\b[A-Z]{2}-\\d{4}\\b"}
//	  ]
//	}
//
// keys are case-insensitive substrings of JSON key names whose values are
// replaced whole; patterns are regular expressions (Go RE2 syntax) whose
// matches in any string are replaced, keeping keepHead leading and
// keepTail trailing characters (none by default: the whole match becomes
// ******).
type Rules struct {
	Keys     []string      `json:"keys"`
	Patterns []PatternRule `json:"patterns"`
}

// PatternRule is a value pattern of a Rules file.
type PatternRule struct {
	Name     string `json:"name"`
	Regexp   string `json:"regexp"`
	KeepHead int    `json:"keepHead"`
	KeepTail int    `json:"keepTail"`
}

// LoadRules reads a rules file; unknown fields are an error, so that a
// misspelt rule is not silently ignored.
func LoadRules(path string) (Rules, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Rules{}, fmt.Errorf("mask rules: %w", err)
	}
	var r Rules
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Rules{}, fmt.Errorf("mask rules %s: %w", path, err)
	}
	return r, nil
}

// New returns the built-in rules extended by extra. Extra patterns run
// before the built-in ones, so that a specific shape is masked as its rule
// says before a generic one (a long digit run, say) takes part of it.
func New(extra Rules) (*Masker, error) {
	m := Default()
	for _, k := range extra.Keys {
		k = strings.ToLower(strings.TrimSpace(k))
		if k == "" {
			continue
		}
		m.SecretKeys = append(m.SecretKeys, k)
	}
	var patterns []Pattern
	for i, pr := range extra.Patterns {
		re, err := regexp.Compile(pr.Regexp)
		if err != nil {
			return nil, fmt.Errorf("mask pattern %d (%s): %w", i+1, pr.Name, err)
		}
		if re.MatchString("") {
			return nil, fmt.Errorf("mask pattern %d (%s): matches the empty string", i+1, pr.Name)
		}
		if pr.KeepHead < 0 || pr.KeepTail < 0 {
			return nil, fmt.Errorf("mask pattern %d (%s): keepHead and keepTail must not be negative", i+1, pr.Name)
		}
		patterns = append(patterns, Pattern{Name: pr.Name, Regexp: re, Replace: keepOrRedact(pr.KeepHead, pr.KeepTail)})
	}
	m.Patterns = append(patterns, m.Patterns...)
	return m, nil
}

func keepOrRedact(head, tail int) func(string) string {
	if head == 0 && tail == 0 {
		return func(string) string { return Redacted }
	}
	return func(s string) string {
		r := []rune(s)
		if len(r) <= head+tail {
			return strings.Repeat("*", len(r))
		}
		return string(r[:head]) + strings.Repeat("*", len(r)-head-tail) + string(r[len(r)-tail:])
	}
}
