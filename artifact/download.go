package artifact

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"taskgraph/ent"
)

// LinkTTLDefault is how long a download link works.
const LinkTTLDefault = 15 * time.Minute

// Links signs and checks download links: HMAC-SHA256, under a key derived
// from the server's secret key, over the artifact id, the expiry and the
// user the link was made for.
type Links struct {
	key   []byte
	ttl   time.Duration
	store *Store
	// User returns the user a download request acts as; the link must have
	// been made for the same user.
	user func(ctx context.Context) string
	log  *slog.Logger
}

// NewLinks derives the signing key from secret.
func NewLinks(secret []byte, s *Store, ttl time.Duration, user func(context.Context) string, log *slog.Logger) *Links {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("taskgraph download links v1"))
	if ttl <= 0 {
		ttl = LinkTTLDefault
	}
	if log == nil {
		log = slog.Default()
	}
	return &Links{key: m.Sum(nil), ttl: ttl, store: s, user: user, log: log}
}

// Link is a signed download path and when it stops working.
type Link struct {
	Path      string // /download/<token>
	ExpiresAt time.Time
}

// Sign returns a link to artifact a for user, valid for the links' TTL
// (never past the artifact's own expiry).
func (l *Links) Sign(a *ent.Artifact, user string) Link {
	exp := l.store.Now().Add(l.ttl).Truncate(time.Second)
	if a.ExpiresAt.Before(exp) {
		exp = a.ExpiresAt.Truncate(time.Second)
	}
	payload := strconv.Itoa(a.ID) + "." + strconv.FormatInt(exp.Unix(), 10)
	return Link{Path: "/download/" + payload + "." + l.mac(payload, user), ExpiresAt: exp}
}

func (l *Links) mac(payload, user string) string {
	m := hmac.New(sha256.New, l.key)
	m.Write([]byte(payload))
	m.Write([]byte{0})
	m.Write([]byte(user))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

var errBadLink = errors.New("invalid or expired download link")

// verify returns the artifact id a token grants to user now.
func (l *Links) verify(token, user string) (int, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return 0, errBadLink
	}
	payload := parts[0] + "." + parts[1]
	if !hmac.Equal([]byte(l.mac(payload, user)), []byte(parts[2])) {
		return 0, errBadLink
	}
	id, err1 := strconv.Atoi(parts[0])
	exp, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || id <= 0 {
		return 0, errBadLink
	}
	if !l.store.Now().Before(time.Unix(exp, 0)) {
		return 0, errBadLink
	}
	return id, nil
}

// ServeHTTP serves GET /download/{token}: the file as an attachment, or 403
// for a tampered, foreign or expired link, 404 when the artifact is gone.
// The token is only ever parsed as numbers and a MAC; the file is found by
// its row's server-generated key.
func (l *Links) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token := r.PathValue("token")
	id, err := l.verify(token, l.user(r.Context()))
	if err != nil {
		http.Error(w, errBadLink.Error(), http.StatusForbidden)
		return
	}
	a, err := l.store.Get(r.Context(), id)
	if ent.IsNotFound(err) {
		http.Error(w, "the file no longer exists", http.StatusNotFound)
		return
	}
	if err != nil {
		l.log.ErrorContext(r.Context(), "download: read artifact", "artifact_id", id, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	if !l.store.Now().Before(a.ExpiresAt) {
		http.Error(w, "the file has expired", http.StatusNotFound)
		return
	}
	f, err := l.store.Open(a)
	if errors.Is(err, ErrNoBlob) {
		http.Error(w, "the file no longer exists", http.StatusNotFound)
		return
	}
	if err != nil {
		l.log.ErrorContext(r.Context(), "download: open artifact", "artifact_id", id, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", a.ContentType)
	h.Set("Content-Disposition", ContentDisposition(a.Filename))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "private, no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	http.ServeContent(w, r, "", a.CreatedAt, f)
}

// ContentDisposition is an attachment header offering name, with an ASCII
// fallback for old clients and the UTF-8 name (RFC 6266, RFC 5987).
func ContentDisposition(name string) string {
	fallback := strings.Map(func(r rune) rune {
		if r < 0x20 || r >= 0x7f || r == '"' || r == '\\' || r == '/' {
			return '_'
		}
		return r
	}, name)
	return mime.FormatMediaType("attachment", map[string]string{"filename": fallback}) +
		"; filename*=UTF-8''" + pathEscape(name)
}

// pathEscape percent-encodes everything but RFC 5987 attr-chars.
func pathEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$&+-.^_`|~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}
