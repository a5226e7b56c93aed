package app

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/lib/pq"

	"github.com/taskgraph/taskgraph/internal/store"
)

// dbShape is what --db accepts, for error messages.
const dbShape = "a PostgreSQL URL (postgres://user@host:5432/name), a PostgreSQL key=value DSN (host=... dbname=...), or a SQLite file path or file: URL"

// schemeRE finds a URL scheme ("mysql:", "postgress:"). One letter is a
// Windows drive, not a scheme.
var schemeRE = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.\-]+):`)

// parseDB accepts what store.Open opens and refuses, with a suggestion,
// what would otherwise open a SQLite file named after a typo: another
// database's URL (mysql://), a misspelt scheme (postgress://), a
// misspelt key in a PostgreSQL DSN (dbnmae=).
func parseDB(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", nil
	}
	if store.IsPostgres(s) {
		return s, checkPostgres(s)
	}
	m := schemeRE.FindStringSubmatch(s)
	if m == nil {
		return s, nil // a SQLite file path
	}
	scheme := strings.ToLower(m[1])
	rest := strings.TrimPrefix(s[len(m[0]):], "//")
	switch {
	case scheme == "file" || scheme == "sqlite":
		return s, nil
	case near(scheme, "postgres", "postgresql", "pgsql", "psql", "pg", "postgre"):
		return "", fmt.Errorf("not a database URL taskgraph knows: did you mean postgres://%s? (want %s)", rest, dbShape)
	case near(scheme, "sqlite", "sqlite3"):
		return "", fmt.Errorf("not a database URL taskgraph knows: did you mean file:%s? (want %s)", rest, dbShape)
	default:
		return "", fmt.Errorf("not a database taskgraph can use: %s is not supported; want %s", scheme, dbShape)
	}
}

// pqKeys are libpq's connection keywords. lib/pq sends any other key to
// the server as a run-time parameter (search_path=...), so an unknown key
// is refused only when it looks like a misspelt keyword.
var pqKeys = []string{
	"host", "hostaddr", "port", "dbname", "user", "password", "passfile", "connect_timeout",
	"client_encoding", "options", "application_name", "fallback_application_name",
	"keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout",
	"sslmode", "sslcert", "sslkey", "sslrootcert", "sslcrl", "sslsni", "sslpassword", "sslinline",
	"sslnegotiation", "requiressl", "gssencmode", "krbsrvname", "service", "target_session_attrs",
	"load_balance_hosts", "min_protocol_version", "max_protocol_version", "replication",
}

var kvKeyRE = regexp.MustCompile(`(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)\s*=`)

func checkPostgres(s string) error {
	if _, err := pq.NewConfig(s); err != nil {
		return fmt.Errorf("not a valid PostgreSQL DSN (%v); want %s", err, dbShape)
	}
	var keys []string
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return fmt.Errorf("not a valid PostgreSQL URL (%v)", err)
		}
		for k := range u.Query() {
			keys = append(keys, k)
		}
	} else {
		for _, m := range kvKeyRE.FindAllStringSubmatch(s, -1) {
			keys = append(keys, m[1])
		}
	}
	for _, k := range keys {
		if slices.Contains(pqKeys, k) || k == "search_path" || strings.EqualFold(k, "timezone") {
			continue
		}
		for _, known := range pqKeys {
			if k != known && editDistance(k, known) <= 2 && len(k) > 3 {
				return fmt.Errorf("not a valid PostgreSQL DSN: %q is not a connection keyword; did you mean %q?", k, known)
			}
		}
	}
	return nil
}

// near reports whether s is one of words or within two edits of one.
func near(s string, words ...string) bool {
	for _, w := range words {
		// One edit for short words (mysql is not pgsql), two for long ones.
		if s == w || strings.HasPrefix(s, w) || editDistance(s, w) <= 1+len(w)/6 {
			return true
		}
	}
	return false
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
