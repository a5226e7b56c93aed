package artifact

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/outage"
)

// LinkTTLDefault is how long a download link works.
const LinkTTLDefault = 15 * time.Minute

// Links signs and checks download links: HMAC-SHA256, under a key derived
// from the server's secret key, over the artifact id, the expiry and the
// viewer (identity — source, tenant, user — and role) the link was made for. A link is a credential of
// its own — a browser following it sends no bearer token — and it is bound
// to that viewer: at download time the viewer must still be allowed to see
// the artifact's task, or the link no longer works.
type Links struct {
	key   []byte
	ttl   time.Duration
	store *Store
	cfg   LinksConfig
	log   *slog.Logger
}

// LinksConfig says who may download what, and who hears of it.
type LinksConfig struct {
	// TTL is how long a link works. Default: LinkTTLDefault.
	TTL time.Duration
	// Authorize, when set, is asked at every download whether the viewer
	// the link was made for may still read the artifact (its task still
	// visible to it). ctx carries that viewer.
	Authorize func(ctx context.Context, a *ent.Artifact) error
	// Downloaded, when set, is told about every download attempt with a
	// valid link, granted (err nil) or refused (the audit log), before the
	// file is sent. A granted download it cannot record is refused: it
	// answers 503 (an outage) or 500 rather than serve an unrecorded file.
	Downloaded func(ctx context.Context, a *ent.Artifact, err error) error
	// Outages, when set, counts failures caused by an outage (the database
	// unreachable, the disk full) instead of logging each one.
	Outages *outage.Monitor
	Logger  *slog.Logger
}

// NewLinks derives the signing key from secret.
func NewLinks(secret []byte, s *Store, cfg LinksConfig) *Links {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("taskgraph download links v3"))
	if cfg.TTL <= 0 {
		cfg.TTL = LinkTTLDefault
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Links{key: m.Sum(nil), ttl: cfg.TTL, store: s, cfg: cfg, log: log}
}

// Link is a signed download path and when it stops working.
type Link struct {
	Path      string // /download/<token>
	ExpiresAt time.Time
}

// Sign returns a link to artifact a for viewer v, valid for the links' TTL
// (never past the artifact's own expiry).
func (l *Links) Sign(a *ent.Artifact, v auth.Viewer) Link {
	exp := l.store.Now().Add(l.ttl).Truncate(time.Second)
	if a.ExpiresAt.Before(exp) {
		exp = a.ExpiresAt.Truncate(time.Second)
	}
	if !v.Expires.IsZero() && v.Expires.Before(exp) {
		// Nor past its viewer's credentials (a JWT's expiry), which a
		// download cannot look up again.
		exp = v.Expires.Truncate(time.Second)
	}
	payload := strings.Join([]string{
		strconv.Itoa(a.ID), strconv.FormatInt(exp.Unix(), 10),
		encodeIdentity(v.Identity()), string(v.Role),
	}, ".")
	return Link{Path: "/download/" + payload + "." + l.mac(payload), ExpiresAt: exp}
}

func (l *Links) mac(payload string) string {
	m := hmac.New(sha256.New, l.key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

var errBadLink = errors.New("invalid or expired download link")

// verify returns the artifact id a token grants now, and to whom.
func (l *Links) verify(token string) (int, auth.Viewer, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 5 {
		return 0, auth.Viewer{}, errBadLink
	}
	payload := strings.Join(parts[:4], ".")
	if !hmac.Equal([]byte(l.mac(payload)), []byte(parts[4])) {
		return 0, auth.Viewer{}, errBadLink
	}
	id, err1 := strconv.Atoi(parts[0])
	exp, err2 := strconv.ParseInt(parts[1], 10, 64)
	who, err3 := decodeIdentity(parts[2])
	role := auth.Role(parts[3])
	_, err4 := auth.ParseRole(parts[3])
	if err4 != nil && role == auth.RolePlatform {
		err4 = nil // granted by the server, and the MAC says it did
	}
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || id <= 0 || who.User == "" {
		return 0, auth.Viewer{}, errBadLink
	}
	if !l.store.Now().Before(time.Unix(exp, 0)) {
		return 0, auth.Viewer{}, errBadLink
	}
	return id, auth.Viewer{User: who.User, Source: who.Source, Tenant: who.Tenant, Role: role}, nil
}

// encodeIdentity writes who a link is for — source, tenant and user, as a
// JSON array, so that no two identities encode alike — as one URL-safe
// field: a user of another source or tenant with the same name is someone
// else, and their links differ.
func encodeIdentity(id auth.Identity) string {
	b, _ := json.Marshal([3]string{id.Source, id.Tenant, id.User})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeIdentity(s string) (auth.Identity, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return auth.Identity{}, err
	}
	var parts [3]string
	if err := json.Unmarshal(b, &parts); err != nil {
		return auth.Identity{}, errBadLink
	}
	return auth.Identity{Source: parts[0], Tenant: parts[1], User: parts[2]}, nil
}

// ServeHTTP serves GET /download/{token}: the file as an attachment
// (streamed from the blob store, with Range requests), or 403 for a
// tampered, foreign or expired link, 404 when the artifact is gone, 503
// when the blob store cannot serve it.
// The token is only ever parsed as numbers and a MAC; the file is found by
// its row's server-generated key.
func (l *Links) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token := r.PathValue("token")
	id, viewer, err := l.verify(token)
	if err != nil {
		http.Error(w, errBadLink.Error(), http.StatusForbidden)
		return
	}
	// The row is read by the process; whether the link's viewer may have
	// it is Authorize's call.
	ctx := auth.WithClientAddr(auth.NewContext(r.Context(), viewer), clientIP(r))
	a, err := l.store.Get(auth.NewSystemContext(ctx), id)
	if ent.IsNotFound(err) {
		http.Error(w, "the file no longer exists", http.StatusNotFound)
		return
	}
	if err != nil {
		l.fail(w, r, "download: read artifact", id, err)
		return
	}
	if !l.store.Now().Before(a.ExpiresAt) {
		http.Error(w, "the file has expired", http.StatusNotFound)
		return
	}
	if l.cfg.Authorize != nil {
		if err := l.cfg.Authorize(ctx, a); err != nil {
			if l.cfg.Downloaded != nil {
				_ = l.cfg.Downloaded(ctx, a, err) // refused either way
			}
			http.Error(w, "this link no longer grants access to the file", http.StatusForbidden)
			return
		}
	}
	f, err := l.store.Open(r.Context(), a)
	var me *MisconfiguredError
	switch {
	case errors.Is(err, ErrNoBlob):
		// The row says the file exists and has not expired: the store
		// lost it. Whoever runs the server needs to know where.
		l.log.ErrorContext(r.Context(), "download: the file is missing from the blob store", "artifact_id", id, "blob_store", l.store.Location())
		http.Error(w, "the file was not found in the blob store", http.StatusNotFound)
		return
	case errors.As(err, &me):
		l.log.ErrorContext(r.Context(), "download: "+me.Error(), "artifact_id", id)
		http.Error(w, "this server cannot reach the files (its blob store is misconfigured); try another server", http.StatusServiceUnavailable)
		return
	case IsStoreFailure(err):
		l.log.ErrorContext(r.Context(), "download: open artifact", "artifact_id", id, "err", err)
		w.Header().Set("Retry-After", "30")
		http.Error(w, "the file store is unavailable; try again later", http.StatusServiceUnavailable)
		return
	case err != nil:
		l.fail(w, r, "download: open artifact", id, err)
		return
	}
	defer f.Close()
	if l.cfg.Downloaded != nil {
		if err := l.cfg.Downloaded(ctx, a, nil); err != nil {
			l.fail(w, r, "download: record it", id, err)
			return
		}
	}
	h := w.Header()
	h.Set("Content-Type", a.ContentType)
	h.Set("Content-Disposition", ContentDisposition(a.Filename))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "private, no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	http.ServeContent(w, r, "", a.CreatedAt, f)
}

// fail answers a download that failed for the server's reasons: 503 with
// Retry-After during an outage (counted, not logged one by one), 500 with
// a logged error otherwise.
func (l *Links) fail(w http.ResponseWriter, r *http.Request, what string, id int, err error) {
	if o := l.cfg.Outages.Failed("download", err); o != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(o.Kind.RetryAfter()/time.Second)))
		http.Error(w, o.Kind.Message(), http.StatusServiceUnavailable)
		return
	}
	l.log.ErrorContext(r.Context(), what, "artifact_id", id, "err", err)
	http.Error(w, "internal error", http.StatusInternalServerError)
}

// clientIP is the request's peer address (a download link is not behind
// the API's middleware, which knows about trusted proxies).
func clientIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
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
