// Package web serves the admin console: the React application in this
// directory, built by Vite into dist/ and committed, so that the binary
// carries it (go:embed) and `go run .` shows it with no Node.js installed.
//
// The console lives under Base. Hashed assets (dist/assets/) are cached for
// a year; index.html is revalidated on every load, so that a new binary's
// console is picked up at once. Paths that are not files fall back to
// index.html, where the client-side router takes over.
package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Base is the URL path the console is served under. Vite's base
// (vite.config.ts) must be the same.
const Base = "/console/"

//go:embed all:dist
var dist embed.FS

// contentTypes are set explicitly: the system's mime table varies between
// machines, and a script served as text/plain is refused by browsers.
var contentTypes = map[string]string{
	".html":  "text/html; charset=utf-8",
	".js":    "text/javascript; charset=utf-8",
	".mjs":   "text/javascript; charset=utf-8",
	".css":   "text/css; charset=utf-8",
	".svg":   "image/svg+xml",
	".json":  "application/json",
	".png":   "image/png",
	".ico":   "image/x-icon",
	".woff2": "font/woff2",
	".txt":   "text/plain; charset=utf-8",
	".map":   "application/json",
}

// compressible are the types worth gzipping.
var compressible = map[string]bool{".html": true, ".js": true, ".mjs": true, ".css": true, ".svg": true, ".json": true, ".map": true, ".txt": true}

// csp allows the bundle's own scripts and styles, inline style attributes
// (React sets widths of progress bars), and websockets to this host.
const csp = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"connect-src 'self' ws: wss:; font-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"

type file struct {
	name    string
	body    []byte
	etag    string
	ctype   string
	gzOnce  sync.Once
	gzipped []byte
}

func (f *file) gz() []byte {
	f.gzOnce.Do(func() {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(f.body)
		_ = zw.Close()
		if buf.Len() < len(f.body) {
			f.gzipped = buf.Bytes()
		}
	})
	return f.gzipped
}

// Handler serves the console. Mount it at Base (it expects full paths).
func Handler() http.Handler {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(fmt.Sprintf("web: embedded dist: %v", err))
	}
	h, err := newHandler(sub)
	if err != nil {
		panic(fmt.Sprintf("web: %v", err))
	}
	return h
}

type handler struct {
	files map[string]*file
}

func newHandler(fsys fs.FS) (*handler, error) {
	h := &handler{files: map[string]*file{}}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ext := path.Ext(p)
		ctype := contentTypes[ext]
		if ctype == "" {
			ctype = mime.TypeByExtension(ext)
		}
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		h.files[p] = &file{name: p, body: body, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, ctype: ctype}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read console bundle: %w", err)
	}
	if h.files["index.html"] == nil {
		return nil, fmt.Errorf("console bundle has no index.html (run npm run build in web/)")
	}
	return h, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rel := strings.TrimPrefix(r.URL.Path, strings.TrimSuffix(Base, "/"))
	rel = strings.TrimPrefix(path.Clean("/"+rel), "/")
	f, ok := h.files[rel]
	switch {
	case ok && rel != "index.html":
		if strings.HasPrefix(rel, "assets/") {
			// Vite puts a content hash in every name under assets/.
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			w.Header().Set("Cache-Control", "no-cache")
		}
	case !ok && looksLikeFile(rel):
		// A missing script or image must fail, not turn into the page.
		w.Header().Set("Cache-Control", "no-store")
		http.NotFound(w, r)
		return
	default:
		// The application shell: index.html for the base and for every
		// client-side route (SPA fallback).
		f = h.files["index.html"]
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Content-Security-Policy", csp)
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("X-Frame-Options", "DENY")
	}
	serve(w, r, f)
}

// looksLikeFile: a last segment with an extension, or anything under
// assets/, names a file rather than a route.
func looksLikeFile(rel string) bool {
	if rel == "" {
		return false
	}
	return strings.HasPrefix(rel, "assets/") || strings.Contains(path.Base(rel), ".")
}

func serve(w http.ResponseWriter, r *http.Request, f *file) {
	hdr := w.Header()
	hdr.Set("Content-Type", f.ctype)
	hdr.Set("X-Content-Type-Options", "nosniff")
	body, etag := f.body, f.etag
	if compressible[path.Ext(f.name)] && acceptsGzip(r) {
		hdr.Add("Vary", "Accept-Encoding")
		if gz := f.gz(); gz != nil {
			body = gz
			etag = strings.TrimSuffix(f.etag, `"`) + `-gz"`
			hdr.Set("Content-Encoding", "gzip")
		}
	}
	hdr.Set("ETag", etag)
	// ServeContent answers If-None-Match (304) and Range; a zero modtime
	// leaves Last-Modified out (the embedded files have none).
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(enc), "gzip") {
			continue
		}
		if v, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q="); ok {
			q, err := strconv.ParseFloat(v, 64)
			return err == nil && q > 0
		}
		return true
	}
	return false
}
