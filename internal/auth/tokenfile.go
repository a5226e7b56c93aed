package auth

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// TokenPrefix starts every token NewToken makes, so that a leaked one is
// easy to recognise (and to grep for).
const TokenPrefix = "tg_"

// NewToken returns a new random token (256 bits).
func NewToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// HashToken is what a token file stores of a token: the SHA-256 of the
// whole token, in lower-case hex. (`printf %s "$TOKEN" | sha256sum` gives
// the same.)
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// TokenLine is the token file line for a token.
func TokenLine(token string, v Viewer) string {
	role := string(v.Role)
	if v.Role == RoleWorker {
		role += ":" + strings.Join(v.Types, ",")
	}
	line := HashToken(token) + " " + v.User + " " + role
	if v.Tenant != "" {
		line += " " + v.Tenant
	}
	return line
}

// ParseTokenFile reads a token file: one token a line,
//
//	<sha256 of the token, hex> <user> <role> [tenant]
//
// with fields separated by spaces or tabs; blank lines and lines starting
// with # are ignored. Roles are admin, operator, viewer and
// worker:<type>[,<type>...] (a worker of those task types).
func ParseTokenFile(data []byte) (map[string]Viewer, error) {
	out := map[string]Viewer{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 || len(f) > 4 {
			return nil, fmt.Errorf("line %d: want <sha256-hex> <user> <role> [tenant], got %d fields", n, len(f))
		}
		hash := strings.ToLower(f[0])
		if b, err := hex.DecodeString(hash); err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("line %d: %q is not a SHA-256 in hex (64 characters); store the hash of a token, never the token", n, short(f[0]))
		}
		role, types, err := ParseScopedRole(f[2])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		v := Viewer{User: f[1], Role: role, Source: SourceToken, Types: types}
		if len(f) == 4 {
			v.Tenant = f[3]
		}
		if _, dup := out[hash]; dup {
			return nil, fmt.Errorf("line %d: the same token hash appears twice", n)
		}
		out[hash] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12] + "..."
	}
	return s
}

// tokenFile is a token file, read again whenever it changes on disk, so
// that adding or revoking a token needs no restart.
type tokenFile struct {
	path string
	log  *slog.Logger
	// changed is called after the file was read again (not at the first
	// read), outside the lock.
	changed func()

	mu      sync.Mutex
	tokens  map[string]Viewer
	modTime time.Time
	size    int64
}

func openTokenFile(path string, log *slog.Logger) (*tokenFile, error) {
	f := &tokenFile{path: path, log: log}
	if err := f.load(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *tokenFile) load() error {
	st, err := os.Stat(f.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	tokens, err := ParseTokenFile(data)
	if err != nil {
		return fmt.Errorf("token file %s: %w", f.path, err)
	}
	f.tokens, f.modTime, f.size = tokens, st.ModTime(), st.Size()
	return nil
}

// lookup returns the viewer of token. A file that changed is read again
// first; if it no longer parses, the tokens read last stay in force and the
// problem is logged on every request until it is fixed.
func (f *tokenFile) lookup(token string) (Viewer, bool) {
	f.refresh()
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.tokens[HashToken(token)]
	return v, ok
}

// holds reports whether some viewer of the file (read again if it
// changed) satisfies match.
func (f *tokenFile) holds(match func(Viewer) bool) bool {
	f.refresh()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.tokens {
		if match(v) {
			return true
		}
	}
	return false
}

// refresh reads the file again when it changed on disk.
func (f *tokenFile) refresh() {
	f.mu.Lock()
	reloaded := false
	if st, err := os.Stat(f.path); err != nil || !st.ModTime().Equal(f.modTime) || st.Size() != f.size {
		if err := f.load(); err != nil {
			f.log.Error("token file not reloaded; the previous tokens stay in force", "err", err)
		} else {
			reloaded = true
		}
	}
	f.mu.Unlock()
	if reloaded && f.changed != nil {
		f.changed()
	}
}
