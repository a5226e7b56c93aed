// Package mask redacts sensitive values before anything is stored or sent:
// task input, titles, idempotency keys, instance errors, log lines, audit
// details, events, import error reports, exports and upload file names all
// pass through a Masker. Rules match by JSON key name (passwords, PINs,
// tokens, session ids...), by the name of a name/value pair ({"name":
// "password", "value": ...}), inside JSON held in a string, and by the
// shape of a value anywhere in text: mobile numbers (also full-width,
// punctuated or glued to letters), national ID numbers (18 and 15 digits),
// bank cards (in any grouping), e-mail addresses (also at hosts without a
// dot), credentials in URLs (userinfo, secret parameters), Authorization
// values (Bearer, Basic, Token, Digest...) and secrets written key: value.
//
// Masking runs on every task create, so it is built to be cheap: each
// built-in pattern first asks a byte-level question of the text (does it
// have eleven digits, an @, a ://...) and the regular expression runs only
// when the answer allows a match.
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
	"sync"
	"unicode/utf8"
)

// Redacted replaces a value whose key says it is secret.
const Redacted = "******"

// Pattern masks every match of Regexp in a string with Replace.
type Pattern struct {
	Name    string
	Regexp  *regexp.Regexp
	Replace func(match string) string

	// need, when set, says from a scan of the text whether the pattern
	// can match at all; the regexp runs only then.
	need func(*scan) bool
	// bounded, when set, is Regexp followed by a non-digit or the end:
	// such a pattern matches only where no digit touches the match on
	// either side. Letters and _ may (tel_13912345678); digits may not
	// (a longer number is another number).
	bounded *regexp.Regexp
}

// digitBounded makes p match only where no digit touches it.
func digitBounded(p Pattern) Pattern {
	p.bounded = regexp.MustCompile(`(` + p.Regexp.String() + `)(?:[^0-9０-９]|$)`)
	return p
}

// Masker applies key rules and value patterns.
type Masker struct {
	// SecretKeys are substrings of JSON key names whose values are
	// replaced whole by Redacted, compared in lower case without
	// separators (X-Api-Key, api_key and apiKey are one name).
	SecretKeys []string
	// SecretWords are short names that are secret only as a whole word of
	// a key (pin, pinCode, user_pin — not shipping or spinner): camelCase,
	// digits and separators split words.
	SecretWords []string
	// Patterns are applied, in order, to every string value and to free text.
	Patterns []Pattern
	// ByKeyName masks the value of a key whose name says what it holds (a
	// phone, a card, an ID number, an e-mail) whatever the value looks
	// like, keeping what the value patterns would keep of such a value.
	ByKeyName bool

	once  sync.Once
	keys  []string // SecretKeys, normalised
	words map[string]bool
}

// DefaultSecretKeys and DefaultSecretWords are the built-in key rules.
var (
	DefaultSecretKeys = []string{
		"password", "passwd", "passphrase", "passcode", "pwd", "secret", "token", "apikey", "api_key",
		"accesskey", "authorization", "credential", "privatekey", "private_key", "cookie",
		"sessionid", "session_id", "cvv", "cvc", "cvn",
	}
	DefaultSecretWords = []string{"pin", "otp", "sid", "totp", "mfa"}
)

// Default returns the built-in rules.
func Default() *Masker {
	return &Masker{
		SecretKeys:  append([]string(nil), DefaultSecretKeys...),
		SecretWords: append([]string(nil), DefaultSecretWords...),
		Patterns:    DefaultPatterns(),
		ByKeyName:   true,
	}
}

// scan is what the built-in patterns' need functions ask of a text,
// counted in one pass over its bytes.
type scan struct {
	text   string
	digits int // ASCII and full-width digits
	// maxRun is the longest run of digits; maxSpan the most digits in a
	// span where single separators (- . space) may stand between them.
	maxRun, maxSpan int
	at              bool
	colon           bool
	equals          bool
	scheme          bool // "://"
	letter          bool // an ASCII letter
}

// has reports whether the text holds any of words (lower case), in any
// case.
func (sc *scan) has(words ...string) bool {
	return sc.hasThen(nil, words...)
}

// hasThen reports whether the text holds any of words (lower-case ASCII),
// in any case, followed by what next accepts (nil: anything). It compares
// in place: no lower-case copy of the text is made.
func (sc *scan) hasThen(next func(rest string) bool, words ...string) bool {
	if !sc.letter {
		return false
	}
	t := sc.text
	for i := 0; i < len(t); i++ {
		c := t[i] | 0x20 // lower case, for letters
		for _, w := range words {
			if c != w[0] || !foldedAt(t, i, w) {
				continue
			}
			if next == nil || next(t[i+len(w):]) {
				return true
			}
		}
	}
	return false
}

// foldedAt reports whether t holds w (lower-case ASCII) at i, ignoring
// the case of letters.
func foldedAt(t string, i int, w string) bool {
	if len(t)-i < len(w) {
		return false
	}
	for k := 0; k < len(w); k++ {
		c := t[i+k]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[k] {
			return false
		}
	}
	return true
}

// blankNext: a blank follows (an Authorization scheme and its credential).
func blankNext(r string) bool { return r != "" && (r[0] == ' ' || r[0] == '\t') }

// colonNext: an optional quote, blanks and a colon follow (key: value).
func colonNext(r string) bool {
	if r != "" && (r[0] == '"' || r[0] == '\'') {
		r = r[1:]
	}
	r = strings.TrimLeft(r, " \t")
	return r != "" && r[0] == ':'
}

func scanText(s string) scan {
	sc := scan{text: s}
	run, span, sep := 0, 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		digit := c >= '0' && c <= '9'
		if c == 0xEF && i+2 < len(s) && s[i+1] == 0xBC && s[i+2] >= 0x90 && s[i+2] <= 0x99 {
			digit = true // a full-width digit, U+FF10..U+FF19
			i += 2
		}
		if digit {
			sc.digits++
			run++
			span++
			sep = false
			sc.maxRun, sc.maxSpan = max(sc.maxRun, run), max(sc.maxSpan, span)
			continue
		}
		run = 0
		if (c == '-' || c == '.' || c == ' ') && span > 0 && !sep {
			sep = true
		} else {
			span, sep = 0, false
		}
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			sc.letter = true
		case c == '@':
			sc.at = true
		case c == ':':
			sc.colon = true
			if i+2 < len(s) && s[i+1] == '/' && s[i+2] == '/' {
				sc.scheme = true
			}
		case c == '=':
			sc.equals = true
		}
	}
	return sc
}

// d is a digit, ASCII or full-width.
const d = `[0-9０-９]`

// keepRunes keeps head and tail runes of a match and stars the rest.
func keepRunes(head, tail int) func(string) string {
	return func(s string) string {
		r := []rune(s)
		if len(r) <= head+tail {
			return strings.Repeat("*", len(r))
		}
		return string(r[:head]) + strings.Repeat("*", len(r)-head-tail) + string(r[len(r)-tail:])
	}
}

// redactAfter keeps what precedes the first sep and redacts what follows.
func redactAfter(sep string) func(string) string {
	return func(m string) string {
		i := strings.Index(m, sep)
		return m[:i+len(sep)] + Redacted
	}
}

// DefaultPatterns are the built-in value patterns.
func DefaultPatterns() []Pattern {
	return []Pattern{
		{
			// A header line whose whole value is a credential:
			// "Authorization: Token abc", "Cookie: sid=1; theme=dark".
			Name:    "credential-header",
			Regexp:  regexp.MustCompile(`(?i)\b(?:proxy-)?(?:authorization|set-cookie|cookie)[ \t]*:[ \t]*[^\s"'](?:[^\r\n"']|"[^"\r\n]*")*`),
			Replace: redactHeader,
			need:    func(s *scan) bool { return s.colon && s.has("authorization", "cookie") },
		},
		{
			// Userinfo of a URL: scheme://user:password@host keeps the user;
			// a long user alone (https://<token>@host) is a credential too.
			Name:   "url-userinfo",
			Regexp: regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.\-]*://(?:[^/\s:@"'<>]*:[^/\s@"'<>]+|[A-Za-z0-9_\-.~%]{16,})@`),
			Replace: func(m string) string {
				start := strings.Index(m, "://") + 3
				info := m[start : len(m)-1]
				if i := strings.IndexByte(info, ':'); i >= 0 {
					return m[:start+i+1] + Redacted + "@"
				}
				return m[:start] + Redacted + "@"
			},
			need: func(s *scan) bool { return s.scheme && s.at },
		},
		{
			// Secrets in URLs and query strings: token=..., key=..., sig=...,
			// also as the last word of a longer name (refresh_token=,
			// client_secret=, X-Amz-Signature=, X-Amz-Credential=,
			// x-api-key=). A bare "key" is one only on its own: sort_key=
			// and monkey= are not secrets.
			Name: "url-secret",
			// (The name is matched from its secret word on: what precedes
			// it is kept anyway, and a leading [a-z0-9_-]* would cost a
			// scan per position.)
			Regexp:  regexp.MustCompile(`(?i)(?:\b|[_-])(?:(?:access|api|auth)?(?:token|secret|password|passwd|passphrase|passcode|pwd|sig|signature|credential|session[_-]?id)|(?:access|api|auth|private|secret)[_-]?key)=[^&\s"']+|\bkey=[^&\s"']+`),
			Replace: redactAfter("="),
			need: func(s *scan) bool {
				return s.equals && s.has("token=", "secret=", "password=", "passwd=", "passphrase=", "passcode=", "pwd=", "sig=", "signature=",
					"credential=", "sessionid=", "session_id=", "session-id=", "key=")
			},
		},
		{
			// Short parameter names that are secrets in a query string
			// only (after ?, & or ;): an OAuth code=, auth=, pin=, otp=,
			// a session id.
			Name:    "query-secret",
			Regexp:  regexp.MustCompile(`(?i)[?&;#](?:code|auth|pin|otp|sid|pass|pw|ticket|jsessionid|phpsessid|aspsessionid)=[^&\s"'#]+`),
			Replace: redactAfter("="),
			need: func(s *scan) bool {
				return s.equals && s.has("code=", "auth=", "pin=", "otp=", "sid=", "pass=", "pw=", "ticket=", "sessionid=", "sessid=")
			},
		},
		{
			// A secret written key: value, in text or in JSON held in text:
			// password: hunter2, "api_key": "k1", X-Access-Key: abc.
			Name:    "key-value-secret",
			Regexp:  regexp.MustCompile(`(?i)(?:password|passwd|passphrase|passcode|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|session[_-]?id|credential|authorization|cookie)["']?[ \t]*:[ \t]*(?:"(?:[^"\\\r\n]|\\.)*"|'[^'\r\n]*'|[^\s,;"'{}\[\]]+)`),
			Replace: redactKeyValue,
			need: func(s *scan) bool {
				return s.colon && s.hasThen(colonNext, "password", "passwd", "passphrase", "passcode", "pwd", "secret", "token", "key",
					"sessionid", "session_id", "session-id", "credential", "authorization", "cookie")
			},
		},
		{
			// Digest credentials: every parameter after the scheme.
			Name:    "digest",
			Regexp:  regexp.MustCompile(`(?i)\bdigest[ \t]+[a-z_]+[ \t]*=[ \t]*(?:"[^"]*"|[^\s,"]+)(?:[ \t]*,[ \t]*[a-z_]+[ \t]*=[ \t]*(?:"[^"]*"|[^\s,"]+))*`),
			Replace: redactScheme,
			need:    func(s *scan) bool { return s.equals && s.has("digest") },
		},
		{
			// Authorization schemes with their credentials.
			Name:    "bearer",
			Regexp:  regexp.MustCompile(`(?i)\b(?:bearer|basic|token|negotiate|apikey|api-key)[ \t]+[A-Za-z0-9\-._~+/]+=*`),
			Replace: redactCredential,
			need: func(s *scan) bool {
				return s.hasThen(blankNext, "bearer", "basic", "token", "negotiate", "apikey", "api-key")
			},
		},
		digitBounded(Pattern{
			// Chinese resident ID: 17 digits and a digit or X; the old
			// 15-digit form (two-digit year, no check digit).
			Name:    "national-id",
			Regexp:  regexp.MustCompile(`[1-9１-９]` + d + `{5}(?:(?:18|19|20)` + d + `{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]` + d + `|3[01])` + d + `{3}[0-9０-９Xx]|` + d + `{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]` + d + `|3[01])` + d + `{3})`),
			Replace: keepRunes(3, 4),
			need:    func(s *scan) bool { return s.maxRun >= 15 },
		}),
		digitBounded(Pattern{
			// Bank card numbers: 15 to 19 digits, in one run or in groups
			// (4-4-4-4, 4-6-5, 6-6-7...), that pass the Luhn check (as
			// every card number does), so that most order numbers,
			// snowflake ids and timestamps of that length are left alone.
			Name:   "bank-card",
			Regexp: regexp.MustCompile(d + `{4,6}(?:[ -]` + d + `{3,7}){1,4}|` + d + `{15,19}`),
			Replace: func(m string) string {
				if n := countDigits(m); n < 15 || n > 19 || !luhn(m) {
					return m
				}
				return keepRunes(0, 4)(m)
			},
			need: func(s *scan) bool { return s.maxSpan >= 15 },
		}),
		digitBounded(Pattern{
			// Mobile numbers: Chinese 11-digit (optionally 86, +86 or
			// 0086), also written 138 0013 8000, 138-0013-8000 or
			// 138.0013.8000, in full-width digits, or glued to letters
			// (tel_13800138000); and other E.164 numbers.
			Name:    "phone",
			Regexp:  regexp.MustCompile(`(?:(?:\+|＋|00)?86[- ]?)?[1１][3-9３-９]` + d + `[-. ]?` + d + `{4}[-. ]?` + d + `{4}|(?:\+|＋)` + d + `{10,15}`),
			Replace: keepRunes(3, 4),
			need:    func(s *scan) bool { return s.maxSpan >= 10 },
		}),
		{
			// E-mail addresses, also at hosts without a dot (alice@intranet).
			// The host starts with a letter: lodash@4.17 is a version.
			Name:   "email",
			Regexp: regexp.MustCompile(`\b[A-Za-z0-9._%+\-]+@[A-Za-z][A-Za-z0-9\-]*(?:\.[A-Za-z0-9\-]+)*\b`),
			Replace: func(m string) string {
				at := strings.IndexByte(m, '@')
				return m[:1] + "***" + m[at:]
			},
			need: func(s *scan) bool { return s.at },
		},
	}
}

var plainWord = regexp.MustCompile(`^[A-Za-z][a-z]*$`)

// redactHeader redacts a header's value, keeping an Authorization
// scheme (Bearer, Digest...) when the value starts with one.
func redactHeader(m string) string {
	i := strings.IndexByte(m, ':')
	j := i + 1
	for j < len(m) && (m[j] == ' ' || m[j] == '\t') {
		j++
	}
	if w := scheme.FindString(m[j:]); w != "" {
		j += len(w)
	}
	return m[:j] + Redacted
}

// scheme is a word and the blanks after it, followed by more.
var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]*[ \t]+`)

// redactKeyValue keeps the key and separator, and redacts the value,
// keeping its quotes (JSON in text stays JSON) and an Authorization scheme.
// An unquoted Authorization or Cookie value runs to the end of the line:
// credential-header redacts it whole.
func redactKeyValue(m string) string {
	i := strings.IndexByte(m, ':')
	j := i + 1
	for j < len(m) && (m[j] == ' ' || m[j] == '\t') {
		j++
	}
	header := strings.Contains(strings.ToLower(m[:i]), "authorization") || strings.Contains(strings.ToLower(m[:i]), "cookie")
	q := m[j]
	if q != '"' && q != '\'' {
		if header {
			return m
		}
		return m[:j] + Redacted
	}
	j++
	if header {
		if w := scheme.FindString(m[j:]); w != "" {
			j += len(w)
		}
	}
	return m[:j] + Redacted + string(q)
}

// redactScheme keeps an Authorization scheme and redacts what follows.
func redactScheme(m string) string {
	i := strings.IndexAny(m, " \t")
	return m[:i+1] + Redacted
}

// redactCredential redacts the credential after a scheme, unless the
// "credential" is a plain word: "basic" and "token" are also English
// ("basic checks failed", "token expired").
func redactCredential(m string) string {
	i := strings.IndexAny(m, " \t")
	scheme, cred := m[:i], strings.TrimLeft(m[i:], " \t")
	switch strings.ToLower(scheme) {
	case "basic", "token":
		if plainWord.MatchString(cred) {
			return m
		}
	}
	return m[:i+1] + Redacted
}

func countDigits(s string) int {
	n := 0
	for _, r := range s {
		if isDigit(r) {
			n++
		}
	}
	return n
}

func isDigit(r rune) bool { return r >= '0' && r <= '9' || r >= '０' && r <= '９' }

// luhn reports whether the digits of s pass the Luhn check.
func luhn(s string) bool {
	r := []rune(s)
	sum, double := 0, false
	for i := len(r) - 1; i >= 0; i-- {
		c := r[i]
		if !isDigit(c) {
			continue
		}
		d := int(c - '0')
		if c >= '０' {
			d = int(c - '０')
		}
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

// String masks free text (an error message, a log line, a title).
func (m *Masker) String(s string) string {
	// Masking one value can expose another to a pattern (the stars of a
	// masked phone end a number, so the digits after it may now read as a
	// card): repeat until nothing changes, so that masking is idempotent.
	for range 8 {
		prev := s
		sc := scanText(s)
		for i := range m.Patterns {
			p := &m.Patterns[i]
			if p.need != nil && !p.need(&sc) {
				continue
			}
			out := p.apply(s)
			if out != s {
				s = out
				sc = scanText(s)
			}
		}
		if s == prev {
			break
		}
	}
	return s
}

func (p *Pattern) apply(s string) string {
	if p.bounded == nil {
		return p.Regexp.ReplaceAllStringFunc(s, p.Replace)
	}
	// The regexp checks what follows a match (and backtracks to another
	// alternative or length when a digit follows); what precedes it is
	// checked here: a match that starts inside a run of digits is none,
	// nor is any other start in that run.
	var b strings.Builder
	last, pos := 0, 0
	for pos < len(s) {
		loc := p.bounded.FindStringSubmatchIndex(s[pos:])
		if loc == nil {
			break
		}
		start, end := pos+loc[2], pos+loc[3]
		if r, _ := utf8.DecodeLastRuneInString(s[:start]); start > 0 && isDigit(r) {
			pos = start
			for pos < len(s) {
				r, n := utf8.DecodeRuneInString(s[pos:])
				if !isDigit(r) && pos > start {
					break
				}
				pos += n
			}
			continue
		}
		b.WriteString(s[last:start])
		b.WriteString(p.Replace(s[start:end]))
		last, pos = end, end
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func (m *Masker) compile() {
	m.once.Do(func() {
		m.keys = make([]string, 0, len(m.SecretKeys))
		for _, k := range m.SecretKeys {
			if k = keyName(k); k != "" {
				m.keys = append(m.keys, k)
			}
		}
		m.words = make(map[string]bool, len(m.SecretWords))
		for _, w := range m.SecretWords {
			m.words[strings.ToLower(w)] = true
		}
	})
}

// secretKey reports whether a key names a secret.
func (m *Masker) secretKey(k string) bool {
	m.compile()
	n := keyName(k)
	for _, s := range m.keys {
		if strings.Contains(n, s) {
			return true
		}
	}
	if len(m.words) == 0 {
		return false
	}
	found := false
	eachWord(k, func(w string) bool {
		found = m.words[w]
		return !found
	})
	return found
}

// keyName is a key in lower case without separators.
func keyName(k string) string {
	var b []byte
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == '-' || c == '_' || c == ' ' || c == '.':
			if b == nil {
				b = []byte(k[:i])
			}
		case c >= 'A' && c <= 'Z':
			if b == nil {
				b = []byte(k[:i])
			}
			b = append(b, c+'a'-'A')
		default:
			if b != nil {
				b = append(b, c)
			}
		}
	}
	if b == nil {
		return k
	}
	return string(b)
}

// eachWord calls fn with each word of a key, in lower case, until fn
// returns false. Words are split at anything that is not a letter or digit,
// between letters and digits, at a lower-to-upper change (userPin) and
// before the last capital of a run followed by a lower case letter
// (OTPSecret: OTP, Secret).
func eachWord(k string, fn func(string) bool) {
	kind := func(c byte) int {
		switch {
		case c >= 'a' && c <= 'z':
			return 1
		case c >= 'A' && c <= 'Z':
			return 2
		case c >= '0' && c <= '9':
			return 3
		}
		return 0
	}
	start := -1
	emit := func(end int) bool {
		if start < 0 || end <= start {
			return true
		}
		w := strings.ToLower(k[start:end])
		start = -1
		return fn(w)
	}
	for i := 0; i < len(k); i++ {
		c := kind(k[i])
		if c == 0 {
			if !emit(i) {
				return
			}
			continue
		}
		if start < 0 {
			start = i
			continue
		}
		p := kind(k[i-1])
		split := p == 3 && c != 3 || p != 3 && c == 3 || // digits
			p == 1 && c == 2 || // userPin
			p == 2 && c == 2 && i+1 < len(k) && kind(k[i+1]) == 1 // OTPSecret
		if split {
			if !emit(i) {
				return
			}
			start = i
		}
	}
	emit(len(k))
}

// nameKeys are the members that name a name/value pair ({"name":
// "password", "value": "x"}), valueKeys the members holding its value.
var (
	nameKeys  = map[string]bool{"name": true, "key": true, "field": true, "header": true, "param": true, "parameter": true}
	valueKeys = map[string]bool{"value": true, "values": true, "val": true}
)

// Value masks a decoded JSON value (maps, slices, strings, numbers) and
// returns the masked copy. Other Go values (as log fields may be) are masked
// in their JSON form.
func (m *Masker) Value(v any) any {
	switch x := v.(type) {
	case map[string]any:
		pair := false
		for k, val := range x {
			if s, ok := val.(string); ok && nameKeys[strings.ToLower(k)] && m.secretKey(s) {
				pair = true
				break
			}
		}
		out := make(map[string]any, len(x))
		for k, val := range x {
			if val != nil && (m.secretKey(k) || pair && valueKeys[strings.ToLower(k)]) {
				out[k] = Redacted
				continue
			}
			if systemID(k, val) {
				out[k] = val // the system's own identifier, never a phone
				continue
			}
			if c := m.classOf(k); c != nil && val != nil {
				out[k] = m.byClass(c, val)
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
		if out, ok := m.embeddedJSON(x); ok {
			return out
		}
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

// embeddedJSON masks a string that holds a JSON object or array (a request
// body kept as text) by its structure, keys included. ok is false when s
// is not such a document. A document with nothing to mask is returned as
// it was written.
func (m *Masker) embeddedJSON(s string) (string, bool) {
	t := strings.TrimSpace(s)
	if len(t) < 2 || !(t[0] == '{' && t[len(t)-1] == '}' || t[0] == '[' && t[len(t)-1] == ']') {
		return "", false
	}
	dec := json.NewDecoder(strings.NewReader(t))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() {
		return "", false
	}
	masked, err := json.Marshal(m.Value(v))
	if err != nil {
		return "", false
	}
	canon, err := json.Marshal(v)
	if err != nil || bytes.Equal(masked, canon) {
		return s, true
	}
	return string(masked), true
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

// systemIDKeys are the keys under which the system records its own
// identifiers (an audit record's task, artifact, schedule...), in keyName's
// form: an integer there is an id, which masking by value would take for
// a phone or a card ("artifact": 17179869193) and make unreadable.
var systemIDKeys = map[string]bool{
	"id": true, "ids": true, "taskid": true, "taskids": true, "task": true, "artifact": true, "artifactid": true,
	"schedule": true, "scheduleid": true, "instanceid": true, "workflow": true, "workflowid": true, "rule": true,
	"ruleid": true, "incident": true, "incidentid": true, "channel": true, "channelid": true, "parentid": true, "childid": true,
}

// systemID reports whether val, under key k, is one of the system's own
// identifiers: an integer (or a list of them) under a key of systemIDKeys.
func systemID(k string, val any) bool {
	if !systemIDKeys[keyName(k)] {
		return false
	}
	isInt := func(v any) bool {
		switch n := v.(type) {
		case json.Number:
			_, err := n.Int64()
			return err == nil
		case int, int32, int64, uint, uint32, uint64:
			return true
		}
		return false
	}
	if l, ok := val.([]any); ok {
		for _, v := range l {
			if !isInt(v) {
				return false
			}
		}
		return true
	}
	if l, ok := val.([]int); ok {
		return l != nil
	}
	return isInt(val)
}

// class is a kind of sensitive value a key's name may say it holds: its
// value is masked whatever it looks like (a phone written with letters, a
// card number with a typo), by keeping only what mask says.
type class struct {
	name string
	mask func(string) string
}

var (
	classPhone = &class{"phone", keepRunes(3, 4)}
	classCard  = &class{"card", keepRunes(0, 4)}
	classID    = &class{"id number", keepRunes(3, 4)}
	classEmail = &class{"e-mail", func(s string) string {
		if i := strings.LastIndex(s, "@"); i > 0 {
			return keepRunes(1, 0)(s[:i]) + s[i:]
		}
		return keepRunes(1, 0)(s)
	}}
)

// classKeys name, in keyName's form, what a key holds; classWords are
// whole words of a key (tel, not hotel).
var (
	classKeys = []struct {
		sub string
		c   *class
	}{
		{"idcard", classID}, {"idnumber", classID}, {"nationalid", classID}, {"passport", classID}, {"ssn", classID},
		{"phone", classPhone}, {"mobile", classPhone},
		{"cardno", classCard}, {"cardnumber", classCard}, {"creditcard", classCard}, {"bankcard", classCard}, {"iban", classCard},
		{"email", classEmail},
	}
	classWords = map[string]*class{"tel": classPhone, "pan": classCard, "mail": classEmail, "card": classCard}
)

// classOf is the class of value key k says it holds, or nil (always
// without ByKeyName).
func (m *Masker) classOf(k string) *class {
	if !m.ByKeyName {
		return nil
	}
	n := keyName(k)
	for _, ck := range classKeys {
		if strings.Contains(n, ck.sub) {
			return ck.c
		}
	}
	var found *class
	eachWord(k, func(w string) bool {
		found = classWords[w]
		return found == nil
	})
	return found
}

// byClass masks val, held under a key of class c: a string or a number by
// the value patterns, then by c's rule; anything else as any value.
func (m *Masker) byClass(c *class, val any) any {
	var s string
	switch x := val.(type) {
	case string:
		s = x
	case json.Number:
		s = x.String()
	case int, int32, int64, uint, uint32, uint64:
		s = fmt.Sprint(x)
	default:
		return m.Value(val)
	}
	if s == "" {
		return s
	}
	// The value patterns first (they may mask more of it), then the
	// class's rule over what they left: masking what is masked already
	// changes nothing (a card number the patterns kept the head of loses
	// it at once, not at the next pass).
	return c.mask(m.String(s))
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

// JSONDecoded masks a JSON document as JSON does, given it decoded (v, as
// encoding/json decodes with UseNumber) and in its canonical form (canon:
// json.Marshal of v), for a caller that has both: the answer is JSON's on
// canon, without decoding and encoding it again.
func (m *Masker) JSONDecoded(v any, canon json.RawMessage) (json.RawMessage, bool, error) {
	out, err := json.Marshal(m.Value(v))
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
			if secret && utf8.RuneCountInString(x) >= MinTrackedLen {
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
	out := &Masker{SecretKeys: m.SecretKeys, SecretWords: m.SecretWords, ByKeyName: m.ByKeyName}
	out.Patterns = append([]Pattern{{
		Name:    "input-secret",
		Regexp:  regexp.MustCompile(strings.Join(values, "|")),
		Replace: func(string) string { return Redacted },
	}}, m.Patterns...)
	return out
}
