// Package mask redacts sensitive values before anything is stored or sent:
// task input, instance errors, log lines and events all pass through a
// Masker. Rules match by JSON key name (passwords, tokens...) and by the shape
// of a value anywhere in text (mobile numbers, national ID numbers, bank
// cards, e-mail local parts, bearer tokens, secrets in URLs).
package mask

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
			// Secrets in URLs and query strings: token=..., key=..., sig=...,
			// also as the last word of a longer name (refresh_token=,
			// client_secret=, X-Amz-Signature=, x-api-key=). A bare "key" is
			// one only on its own: sort_key= and monkey= are not secrets.
			Name:   "url-secret",
			Regexp: regexp.MustCompile(`(?i)\b((?:[a-z0-9]+[_-])*(?:access|api|auth)?(?:token|secret|password|passwd|sig|signature)|(?:[a-z0-9]+[_-])*(?:access|api|auth|private|secret)[_-]?key|key)=([^&\s"']+)`),
			Replace: func(m string) string {
				i := strings.IndexByte(m, '=')
				return m[:i+1] + Redacted
			},
		},
		{
			Name:   "bearer",
			Regexp: regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9\-._~+/]+=*`),
			Replace: func(m string) string {
				i := strings.IndexAny(m, "\t\n\f\r ")
				// "basic" is also an English word ("basic checks failed");
				// a plain lower-case word after it is not a credential.
				if strings.EqualFold(m[:i], "basic") && plainWord.MatchString(strings.TrimSpace(m[i:])) {
					return m
				}
				return m[:i+1] + Redacted
			},
		},
		{
			// Chinese resident ID: 17 digits and a digit or X.
			Name:    "national-id",
			Regexp:  regexp.MustCompile(`\b[1-9]\d{5}(?:18|19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\d{3}[\dXx]\b`),
			Replace: keep(3, 4),
		},
		{
			// Bank card numbers: 16 to 19 digits, also in groups of four,
			// that pass the Luhn check (as every card number does), so that
			// most order numbers, snowflake ids and nanosecond timestamps
			// of that length are left alone.
			Name:   "bank-card",
			Regexp: regexp.MustCompile(`\b\d{4}(?:[ -]?\d{4}){3}(?:[ -]?\d{1,3})?\b`),
			Replace: func(m string) string {
				if !luhn(m) {
					return m
				}
				return keep(0, 4)(m)
			},
		},
		{
			// Mobile numbers: Chinese 11-digit (optionally 86 or +86, also
			// written 138 0013 8000 or 138-0013-8000) and other E.164
			// numbers.
			Name:    "phone",
			Regexp:  regexp.MustCompile(`(?:\+86[- ]?|\b86[- ]?|\b)1[3-9]\d(?:\d{4}|-\d{4}-| \d{4} )\d{4}\b|\+\d{10,15}\b`),
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

var plainWord = regexp.MustCompile(`^[A-Za-z][a-z]*$`)

// luhn reports whether the digits of s pass the Luhn check.
func luhn(s string) bool {
	sum, double := 0, false
	for i := len(s) - 1; i >= 0; i-- {
		c := s[i]
		if c < '0' || c > '9' {
			continue
		}
		d := int(c - '0')
		if double {
			if d *= 2; d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
	}
	return sum%10 == 0
}

// String masks free text (an error message, a log line).
func (m *Masker) String(s string) string {
	// Masking one value can expose another to a pattern (the stars of a
	// masked phone end a word, so the digits after it may now read as a
	// card): repeat until nothing changes, so that masking is idempotent.
	for range 8 {
		prev := s
		for _, p := range m.Patterns {
			s = p.Regexp.ReplaceAllStringFunc(s, p.Replace)
		}
		if s == prev {
			break
		}
	}
	return s
}

func (m *Masker) secretKey(k string) bool {
	// Compare without separators, so that X-Api-Key, api_key and apiKey
	// are one name.
	k = keyName(k)
	for _, s := range m.SecretKeys {
		if strings.Contains(k, keyName(s)) {
			return true
		}
	}
	return false
}

func keyName(k string) string {
	return strings.ToLower(strings.NewReplacer("-", "", "_", "", " ", "", ".", "").Replace(k))
}

// Value masks a decoded JSON value (maps, slices, strings, numbers) and
// returns the masked copy. Other Go values (as log fields may be) are masked
// in their JSON form.
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
		return m.number(x.String(), x)
	case nil, bool:
		return v
	case error:
		return m.String(x.Error())
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		b, err := json.Marshal(x)
		if err != nil { // NaN, ±Inf
			return v
		}
		return m.number(string(b), v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return m.String(fmt.Sprint(v))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var d any
	if err := dec.Decode(&d); err != nil {
		return m.String(fmt.Sprint(v))
	}
	return m.Value(d)
}

// number masks an integer written as digits: a phone or card number given
// as a number is still one. The masked value is a string. Fractions and
// exponents are measurements, not identifiers, and are left alone.
func (m *Masker) number(s string, v any) any {
	if strings.ContainsAny(s, ".eE") {
		return v
	}
	if out := m.String(s); out != s {
		return out
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
	// Anything after the first value would be lost from the output.
	if _, err := dec.Token(); err != io.EOF {
		return nil, false, errors.New("mask: invalid JSON: data after the top-level value")
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
