// Package pgdsn reads and amends PostgreSQL connection strings in both
// forms libpq and lib/pq accept: a URL (postgres://user@host:5432/db?k=v,
// postgres:///db?host=/var/run/postgresql for a Unix socket) and a
// key=value string (host=127.0.0.1 dbname=db, host=/var/run/postgresql).
// Every place that adds a parameter to a DSN (the relay's
// application_name, the store's jit, a test's search_path) goes through
// here, so that no form is taken for the other.
package pgdsn

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// IsURL reports whether dsn is in the URL form.
func IsURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// pair is one key=value of the key=value form.
type pair struct{ key, value string }

// ErrSyntax is the error of a key=value string that does not parse.
var ErrSyntax = errors.New("not a key=value PostgreSQL DSN")

// parseKV splits a key=value string the way libpq does: keys, optional
// spaces around '=', values bare (a backslash escapes the next character)
// or in single quotes (\' and \\ inside).
func parseKV(s string) ([]pair, error) {
	var out []pair
	i := 0
	skip := func() {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
	}
	for {
		skip()
		if i >= len(s) {
			return out, nil
		}
		start := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[start:i]
		skip()
		if i >= len(s) || s[i] != '=' || key == "" {
			return nil, fmt.Errorf("%w: missing \"=\" after %q", ErrSyntax, key)
		}
		i++
		skip()
		var v strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			closed := false
			for i < len(s) {
				c := s[i]
				if c == '\\' && i+1 < len(s) {
					v.WriteByte(s[i+1])
					i += 2
					continue
				}
				i++
				if c == '\'' {
					closed = true
					break
				}
				v.WriteByte(c)
			}
			if !closed {
				return nil, fmt.Errorf("%w: unterminated quoted value of %q", ErrSyntax, key)
			}
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				v.WriteByte(s[i])
				i++
			}
		}
		out = append(out, pair{key, v.String()})
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// quote writes a value so that parseKV reads it back.
func quote(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n\r\f\v'\\") {
		return v
	}
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	return "'" + r.Replace(v) + "'"
}

func formatKV(ps []pair) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.key + "=" + quote(p.value)
	}
	return strings.Join(parts, " ")
}

// Get returns the value of key in dsn ("" when it is not set). In the URL
// form the host, port, user, password and dbname come from the URL's
// parts unless a query parameter of that name is given.
func Get(dsn, key string) string {
	v, _ := lookup(dsn, key)
	return v
}

// Has reports whether dsn sets key.
func Has(dsn, key string) bool {
	_, ok := lookup(dsn, key)
	return ok
}

func lookup(dsn, key string) (string, bool) {
	if IsURL(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", false
		}
		if q := u.Query(); q.Has(key) {
			return q.Get(key), true
		}
		switch key {
		case "host":
			return u.Hostname(), u.Hostname() != ""
		case "port":
			return u.Port(), u.Port() != ""
		case "user":
			return u.User.Username(), u.User.Username() != ""
		case "password":
			return u.User.Password()
		case "dbname":
			db := strings.TrimPrefix(u.Path, "/")
			return db, db != ""
		}
		return "", false
	}
	ps, err := parseKV(dsn)
	if err != nil {
		return "", false
	}
	v, ok := "", false
	for _, p := range ps {
		if p.key == key {
			v, ok = p.value, true // the last one wins, as in libpq
		}
	}
	return v, ok
}

// Set returns dsn with key set to value, in dsn's own form.
func Set(dsn, key, value string) (string, error) {
	if IsURL(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("database URL: %w", err)
		}
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	ps, err := parseKV(dsn)
	if err != nil {
		return "", err
	}
	out := ps[:0]
	for _, p := range ps {
		if p.key != key {
			out = append(out, p)
		}
	}
	return formatKV(append(out, pair{key, value})), nil
}

// WithDefault returns dsn with key set to value unless dsn sets key
// already (the user's choice wins).
func WithDefault(dsn, key, value string) (string, error) {
	if Has(dsn, key) {
		return dsn, nil
	}
	return Set(dsn, key, value)
}

// Redact returns dsn without its password, for logs and messages.
func Redact(dsn string) string {
	if IsURL(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return "postgres://(unparsable URL)"
		}
		if q := u.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	ps, err := parseKV(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	for i := range ps {
		if ps[i].key == "password" {
			ps[i].value = "xxxxx"
		}
	}
	return formatKV(ps)
}

// Where names the server dsn connects to, for messages: host:port, or the
// socket directory (a host starting with "/"), with libpq's defaults.
func Where(dsn string) string {
	host := Get(dsn, "host")
	if host == "" {
		host = "localhost"
	}
	port := Get(dsn, "port")
	if port == "" {
		port = "5432"
	}
	if strings.HasPrefix(host, "/") {
		return host + "/.s.PGSQL." + port
	}
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}
