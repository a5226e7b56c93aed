// Package mask redacts sensitive values before anything is stored or sent:
// task input, instance errors, log lines and events all pass through a
// Masker. Rules match by JSON key name (passwords, tokens...) and by the shape
// of a value anywhere in text (mobile numbers, national ID numbers, bank
// cards, e-mail local parts, bearer tokens, secrets in URLs).
package mask

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Redacted replaces a value whose key says it is secret.
const Redacted = "******"

// Pattern masks every match of Regexp in a string with Replace.
type Pattern struct {
	Name    string
	Regexp  *regexp.Regexp
	Replace func(match string) string
}

// Masker applies key rules and value patterns.
type Masker struct {
	// SecretKeys are lower-case substrings of JSON keys whose values are
	// replaced whole by Redacted.
	SecretKeys []string
	// Patterns are applied, in order, to every string value and to free text.
	Patterns []Pattern
}

// Default returns the built-in rules.
func Default() *Masker {
	return &Masker{
		SecretKeys: []string{"password", "passwd", "secret", "token", "apikey", "api_key", "authorization", "credential", "private_key", "cookie"},
		Patterns:   DefaultPatterns(),
	}
}

// DefaultPatterns are the built-in value patterns.
func DefaultPatterns() []Pattern {
	keep := func(head, tail int) func(string) string {
		return func(s string) string {
			if len(s) <= head+tail {
				return strings.Repeat("*", len(s))
			}
			return s[:head] + strings.Repeat("*", len(s)-head-tail) + s[len(s)-tail:]
		}
	}
	return []Pattern{
		{
			// Secrets in URLs and query strings: token=..., key=..., sig=...
			Name:   "url-secret",
			Regexp: regexp.MustCompile(`(?i)\b((?:access_?|api_?|auth_?)?(?:token|key|secret|password|passwd|sig|signature))=([^&\s"']+)`),
			Replace: func(m string) string {
				i := strings.IndexByte(m, '=')
				return m[:i+1] + Redacted
			},
		},
		{
			Name:    "bearer",
			Regexp:  regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9\-._~+/]+=*`),
			Replace: func(m string) string { return m[:strings.IndexAny(m, " \t")+1] + Redacted },
		},
		{
			// Chinese resident ID: 17 digits and a digit or X.
			Name:    "national-id",
			Regexp:  regexp.MustCompile(`\b[1-9]\d{5}(?:18|19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\d{3}[\dXx]\b`),
			Replace: keep(3, 4),
		},
		{
			// Bank card numbers: 16 to 19 digits.
			Name:    "bank-card",
			Regexp:  regexp.MustCompile(`\b\d{16,19}\b`),
			Replace: keep(0, 4),
		},
		{
			// Mobile numbers: Chinese 11-digit (optionally +86) and other
			// E.164 numbers.
			Name:    "phone",
			Regexp:  regexp.MustCompile(`(?:\+?86[- ]?)?\b1[3-9]\d{9}\b|\+\d{10,14}\b`),
			Replace: keep(3, 4),
		},
		{
			Name:   "email",
			Regexp: regexp.MustCompile(`\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}\b`),
			Replace: func(m string) string {
				at := strings.IndexByte(m, '@')
				return m[:1] + "***" + m[at:]
			},
		},
	}
}

// String masks free text (an error message, a log line).
func (m *Masker) String(s string) string {
	for _, p := range m.Patterns {
		s = p.Regexp.ReplaceAllStringFunc(s, p.Replace)
	}
	return s
}

func (m *Masker) secretKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range m.SecretKeys {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// Value masks a decoded JSON value (maps, slices, strings, numbers) and
// returns the masked copy.
func (m *Masker) Value(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			if m.secretKey(k) && val != nil {
				out[k] = Redacted
				continue
			}
			out[k] = m.Value(val)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, val := range x {
			out[i] = m.Value(val)
		}
		return out
	case string:
		return m.String(x)
	case json.Number:
		// A phone or card number given as a JSON number is still one.
		if s := m.String(x.String()); s != x.String() {
			return s
		}
		return x
	}
	return v
}

// JSON masks a JSON document and reports whether anything changed.
func (m *Masker) JSON(raw json.RawMessage) (json.RawMessage, bool, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return raw, false, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false, fmt.Errorf("mask: %w", err)
	}
	out, err := json.Marshal(m.Value(v))
	if err != nil {
		return nil, false, fmt.Errorf("mask: %w", err)
	}
	// Compare with the canonical form of the input, so that whitespace or
	// key order alone do not count as a change.
	canon, err := json.Marshal(v)
	if err != nil {
		return nil, false, fmt.Errorf("mask: %w", err)
	}
	return out, !bytes.Equal(out, canon), nil
}

// Fields masks log fields.
func (m *Masker) Fields(f map[string]any) map[string]any {
	if len(f) == 0 {
		return f
	}
	return m.Value(f).(map[string]any)
}

// MinTrackedLen is the shortest value WithValuesOf tracks: shorter ones
// ("no", "1") would garble every text they occur in.
const MinTrackedLen = 4

// WithValuesOf returns a Masker that also masks, wherever they appear, the
// values the key rules redact in the JSON document raw (a task's unmasked
// input). A value recognisable only by its key — a password, an account
// reference — is then masked too when a handler repeats it in a log line,
// under another key, or in an error. m is returned as is when raw has no
// such values.
func (m *Masker) WithValuesOf(raw json.RawMessage) *Masker {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return m
	}
	seen := map[string]bool{}
	var walk func(v any, secret bool)
	walk = func(v any, secret bool) {
		switch x := v.(type) {
		case map[string]any:
			for k, val := range x {
				walk(val, secret || m.secretKey(k))
			}
		case []any:
			for _, val := range x {
				walk(val, secret)
			}
		case string:
			if secret && len([]rune(x)) >= MinTrackedLen {
				seen[x] = true
			}
		case json.Number:
			if secret && len(x.String()) >= MinTrackedLen {
				seen[x.String()] = true
			}
		}
	}
	walk(v, false)
	if len(seen) == 0 {
		return m
	}
	values := make([]string, 0, len(seen))
	for s := range seen {
		values = append(values, regexp.QuoteMeta(s))
	}
	// Longest first, so that a value containing another is masked whole.
	sort.Slice(values, func(i, j int) bool { return len(values[i]) > len(values[j]) })
	out := &Masker{SecretKeys: m.SecretKeys}
	out.Patterns = append([]Pattern{{
		Name:    "input-secret",
		Regexp:  regexp.MustCompile(strings.Join(values, "|")),
		Replace: func(string) string { return Redacted },
	}}, m.Patterns...)
	return out
}
