package artifact

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	gcaws "gocloud.dev/aws"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcerrors"
)

// BucketConfig tunes how files are moved; zero fields take the defaults.
type BucketConfig struct {
	// ReadBlockSize is the size of one ranged read behind ReadAt.
	// Default: ReadBlockSizeDefault.
	ReadBlockSize int
	// ReadBlocks is how many blocks one open file caches.
	// Default: ReadBlocksDefault.
	ReadBlocks int
	// PartSize is the part size of a multipart upload (S3's minimum is
	// 5 MiB); a writer holds PartSize × (PartConcurrency+1) bytes at most.
	// Default: PartSizeDefault.
	PartSize int
	// PartConcurrency is how many parts of one file upload at once.
	// Default: PartConcurrencyDefault.
	PartConcurrency int
	// OpTimeout bounds one request that moves no file (a HEAD, a delete,
	// the marker) and one block read. Default: OpTimeoutDefault.
	OpTimeout time.Duration
	// MinFree is the free space under which a directory's disk is full
	// (Probe, and so /readyz). Default: MinFreeDefault. Tests raise it to
	// see a full disk without filling one.
	MinFree uint64
}

// Defaults of BucketConfig.
const (
	ReadBlockSizeDefault   = 1 << 20
	ReadBlocksDefault      = 4
	PartSizeDefault        = 5 << 20
	PartConcurrencyDefault = 2
	OpTimeoutDefault       = time.Minute
	MinFreeDefault         = 1 << 20
)

func (c BucketConfig) withDefaults() BucketConfig {
	c.ReadBlockSize = cmp.Or(c.ReadBlockSize, ReadBlockSizeDefault)
	c.ReadBlocks = cmp.Or(c.ReadBlocks, ReadBlocksDefault)
	c.PartSize = cmp.Or(c.PartSize, PartSizeDefault)
	c.PartConcurrency = cmp.Or(c.PartConcurrency, PartConcurrencyDefault)
	c.OpTimeout = cmp.Or(c.OpTimeout, OpTimeoutDefault)
	c.MinFree = cmp.Or(c.MinFree, MinFreeDefault)
	return c
}

// Bucket keeps files in a gocloud.dev/blob bucket: a directory
// (file:///srv/taskgraph/files: fileblob, which writes a temporary file
// and renames it) or S3-compatible object storage (s3://bucket?...:
// s3blob on aws-sdk-go-v2, multipart uploads).
type Bucket struct {
	b        *blob.Bucket
	location string
	dir      string // a directory's, "" for S3
	cfg      BucketConfig
}

var _ Blobs = (*Bucket)(nil)

// OpenBucket opens the blob store a URL names:
//
//   - file:///srv/taskgraph/files — a directory (created if missing);
//     with several nodes, one they all mount.
//   - s3://bucket?endpoint=http://host:port&region=...&use_path_style=true
//     — S3 or an S3-compatible server. Credentials come from the usual
//     AWS places (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile,
//     an instance role), never from the URL. Parameters: region, endpoint,
//     use_path_style, disable_https, hostname_immutable, profile,
//     anonymous, request_checksum_calculation, response_checksum_validation
//     (see gocloud.dev/aws), and prefix (a key prefix, to share a bucket).
//
// Opening checks the URL, not the store: a store that cannot be reached
// is found by the deployment check.
func OpenBucket(ctx context.Context, rawURL string, cfg BucketConfig) (*Bucket, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("blob URL %q: not a URL such as file:///srv/taskgraph/files or s3://bucket?region=...", redactURL(rawURL))
	}
	if u.User != nil {
		return nil, fmt.Errorf("blob URL %s: credentials do not belong in the URL; use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile or an instance role", redactURL(rawURL))
	}
	q := u.Query()
	prefix := q.Get("prefix")
	q.Del("prefix")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	var b *blob.Bucket
	var location string
	switch u.Scheme {
	case "file":
		b, location, err = openDir(u, q)
	case "s3":
		b, location, err = openS3(ctx, u, q)
	default:
		err = fmt.Errorf("blob URL %s: scheme %q is not file or s3", redactURL(rawURL), u.Scheme)
	}
	if err != nil {
		return nil, err
	}
	if prefix != "" {
		b = blob.PrefixedBucket(b, prefix)
		sep := "?"
		if strings.Contains(location, "?") {
			sep = "&"
		}
		location += sep + "prefix=" + url.QueryEscape(prefix)
	}
	dir := ""
	if u.Scheme == "file" {
		dir = strings.TrimPrefix(location, "file://")
		dir = filepath.FromSlash(dir)
	}
	return &Bucket{b: b, location: location, dir: dir, cfg: cfg.withDefaults()}, nil
}

func openDir(u *url.URL, q url.Values) (*blob.Bucket, string, error) {
	if len(q) > 0 {
		return nil, "", fmt.Errorf("blob URL %s: a file URL takes no parameters but prefix", u.Redacted())
	}
	path := u.Path
	switch u.Host {
	case "", "localhost":
	case ".":
		path = strings.TrimPrefix(path, "/")
	default:
		return nil, "", fmt.Errorf("blob URL %s: write a directory as file:///absolute/path (three slashes)", u.Redacted())
	}
	if path == "" {
		return nil, "", fmt.Errorf("blob URL %s: no directory", u.Redacted())
	}
	abs, err := filepath.Abs(filepath.FromSlash(path))
	if err != nil {
		return nil, "", fmt.Errorf("blob URL %s: %w", u.Redacted(), err)
	}
	b, err := fileblob.OpenBucket(abs, &fileblob.Options{
		CreateDir:   true,
		DirFileMode: 0o750,
		// Temporary files next to their final name: os.TempDir may be
		// another file system than a shared mount, and a rename across
		// file systems fails.
		NoTempDir: true,
		// Type, size and checksum are in the artifact's row.
		Metadata: fileblob.MetadataDontWrite,
	})
	if err != nil {
		return nil, "", fmt.Errorf("blob store directory %s: %w", abs, err)
	}
	return b, "file://" + filepath.ToSlash(abs), nil
}

func openS3(ctx context.Context, u *url.URL, q url.Values) (*blob.Bucket, string, error) {
	if u.Host == "" {
		return nil, "", fmt.Errorf("blob URL %s: no bucket (s3://bucket?region=...)", u.Redacted())
	}
	location := (&url.URL{Scheme: "s3", Host: u.Host, RawQuery: q.Encode()}).String()
	var opts []func(*s3.Options)
	for _, key := range []string{"use_path_style", "s3ForcePathStyle", "disable_https"} {
		v := q.Get(key)
		if v == "" {
			continue
		}
		q.Del(key)
		on, err := strconv.ParseBool(v)
		if err != nil {
			return nil, "", fmt.Errorf("blob URL %s: %s=%q is not true or false", location, key, v)
		}
		if key == "disable_https" {
			opts = append(opts, func(o *s3.Options) { o.EndpointOptions.DisableHTTPS = on })
		} else {
			opts = append(opts, func(o *s3.Options) { o.UsePathStyle = on })
		}
	}
	cfg, err := gcaws.V2ConfigFromURLParams(ctx, q)
	if err != nil {
		return nil, "", fmt.Errorf("blob URL %s: %w", location, err)
	}
	// A store that stops answering must fail the request, not hang the
	// import that made it: bounded connects, bounded waits for headers,
	// and a bound on silence while a body streams (not on its length).
	cfg.HTTPClient = awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = 10 * time.Second }).
		WithTransportOptions(func(t *http.Transport) { t.ResponseHeaderTimeout = 30 * time.Second }).
		WithReadTimeout(30 * time.Second)
	client := s3.NewFromConfig(cfg, opts...)
	b, err := s3blob.OpenBucket(ctx, client, u.Host, &s3blob.Options{RequestChecksumCalculation: cfg.RequestChecksumCalculation})
	if err != nil {
		return nil, "", fmt.Errorf("blob URL %s: %w", location, err)
	}
	return b, location, nil
}

// credentialVars is what an S3 node's credentials are read from.
const credentialVars = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE with a shared credentials file)"

// setup recognises the errors of an S3 store that mean its setup is wrong,
// not that it failed: nil for any other error.
func (b *Bucket) setup(err error) *SetupError {
	if !strings.HasPrefix(b.location, "s3://") {
		return nil
	}
	bucket := strings.TrimPrefix(b.location, "s3://")
	if i := strings.IndexAny(bucket, "?/"); i >= 0 {
		bucket = bucket[:i]
	}
	var api smithy.APIError
	if b.b.ErrorAs(err, &api) {
		switch code := api.ErrorCode(); code {
		case "NoSuchBucket":
			return &SetupError{What: fmt.Sprintf("the bucket %q does not exist (%s)", bucket, code),
				Set: "create it, or set --blob-url (TASKGRAPH_BLOB_URL) to a bucket that exists", Err: err}
		case "SignatureDoesNotMatch", "InvalidAccessKeyId", "InvalidClientTokenId", "InvalidToken", "ExpiredToken", "AccessDenied", "AllAccessDisabled":
			return &SetupError{What: fmt.Sprintf("the S3 server refused this node's credentials for the bucket %q (%s)", bucket, code),
				Set: "set " + credentialVars + " to a key that may read and write it", Err: err}
		}
		return nil
	}
	// No answer at all: the SDK found no credentials to sign with.
	msg := err.Error()
	for _, s := range []string{"failed to retrieve credentials", "failed to refresh cached credentials", "no EC2 IMDS role found", "static credentials are empty", "anonymous credentials"} {
		if strings.Contains(msg, s) {
			return &SetupError{What: "this node has no S3 credentials", Set: "set " + credentialVars, Err: err}
		}
	}
	return nil
}

// redactURL drops the user information of a URL that may carry it.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	u.User = nil
	return u.String()
}

// Location implements Blobs.
func (b *Bucket) Location() string { return b.location }

// Close implements Blobs.
func (b *Bucket) Close() error { return b.b.Close() }

// fail turns an error of the bucket into ours: a missing object, the
// caller giving up (its context), or a failure of the store (one of its
// setup said as such: setup).
func (b *Bucket) fail(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if se := b.setup(err); se != nil {
		return &StoreError{Op: op, Location: b.location, Err: se}
	}
	switch {
	case gcerrors.Code(err) == gcerrors.NotFound:
		return &MissingError{Location: b.location}
	case ctx.Err() != nil:
		return fmt.Errorf("blob store %s: %s: %w", b.location, op, context.Cause(ctx))
	}
	return &StoreError{Op: op, Location: b.location, Err: err}
}

// Create implements Blobs.
func (b *Bucket) Create(ctx context.Context, key, contentType string) (BlobWriter, error) {
	name, err := objectName(key)
	if err != nil {
		return nil, err
	}
	// Cancelling wctx is how a gocloud writer is aborted: the temporary
	// file is removed, the multipart upload aborted.
	wctx, cancel := context.WithCancel(ctx)
	w, err := b.b.NewWriter(wctx, name, &blob.WriterOptions{
		ContentType:                 cmp.Or(contentType, "application/octet-stream"),
		DisableContentTypeDetection: true,
		BufferSize:                  b.cfg.PartSize,
		MaxConcurrency:              b.cfg.PartConcurrency,
	})
	if err != nil {
		cancel()
		return nil, b.fail(ctx, "write", err)
	}
	return &bucketWriter{b: b, ctx: ctx, w: w, cancel: cancel}, nil
}

type bucketWriter struct {
	b      *Bucket
	ctx    context.Context
	w      *blob.Writer
	cancel context.CancelFunc
	err    error
	done   bool
}

func (w *bucketWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.w.Write(p)
	if err != nil {
		w.err = w.b.fail(w.ctx, "write", err)
		return n, w.err
	}
	return n, nil
}

func (w *bucketWriter) Commit() error {
	if w.done {
		return errors.New("artifact: already committed or aborted")
	}
	w.done = true
	defer w.cancel()
	if w.err != nil {
		_ = w.w.Close()
		return w.err
	}
	if err := w.w.Close(); err != nil {
		w.err = w.b.fail(w.ctx, "write", err)
		return w.err
	}
	return nil
}

func (w *bucketWriter) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.cancel()
	_ = w.w.Close()
}

func (w *bucketWriter) Err() error { return w.err }

// Open implements Blobs.
func (b *Bucket) Open(ctx context.Context, key string) (Blob, error) {
	name, err := objectName(key)
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, b.cfg.OpTimeout)
	defer cancel()
	attrs, err := b.b.Attributes(octx, name)
	if err != nil {
		return nil, b.fail(ctx, "open", err)
	}
	return &bucketBlob{b: b, ctx: ctx, name: name, size: attrs.Size}, nil
}

// Delete implements Blobs.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	name, err := objectName(key)
	if err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, b.cfg.OpTimeout)
	defer cancel()
	if err := b.fail(ctx, "delete", b.b.Delete(octx, name)); err != nil && !errors.Is(err, ErrNoBlob) {
		return err
	}
	return nil
}

type marker struct {
	Deployment string `json:"deployment"`
}

// Marker implements Blobs.
func (b *Bucket) Marker(ctx context.Context) (string, error) {
	octx, cancel := context.WithTimeout(ctx, b.cfg.OpTimeout)
	defer cancel()
	data, err := b.b.ReadAll(octx, markerName)
	if err := b.fail(ctx, "read the deployment marker", err); err != nil {
		if errors.Is(err, ErrNoBlob) {
			return "", nil
		}
		return "", err
	}
	var m marker
	if err := json.Unmarshal(data, &m); err != nil || m.Deployment == "" {
		return "", fmt.Errorf("blob store %s: the deployment marker %s is not taskgraph's", b.location, markerName)
	}
	return m.Deployment, nil
}

// SetMarker implements Blobs.
func (b *Bucket) SetMarker(ctx context.Context, deployment string) error {
	data, _ := json.Marshal(marker{Deployment: deployment})
	octx, cancel := context.WithTimeout(ctx, b.cfg.OpTimeout)
	defer cancel()
	return b.fail(ctx, "write the deployment marker", b.b.WriteAll(octx, markerName, data, &blob.WriterOptions{ContentType: "application/json"}))
}

// Probe implements Blobs.
func (b *Bucket) Probe(ctx context.Context) error {
	if b.dir != "" {
		if free, err := freeBytes(b.dir); err == nil && free < b.cfg.MinFree {
			return &StoreError{Op: "write", Location: b.location, Err: fmt.Errorf("disk full: %d bytes free (%w)", free, syscall.ENOSPC)}
		}
	}
	octx, cancel := context.WithTimeout(ctx, b.cfg.OpTimeout)
	defer cancel()
	if err := b.fail(ctx, "write a probe", b.b.WriteAll(octx, probeName, []byte("taskgraph\n"), &blob.WriterOptions{ContentType: "text/plain"})); err != nil {
		return err
	}
	if err := b.fail(ctx, "delete a probe", b.b.Delete(octx, probeName)); err != nil && !errors.Is(err, ErrNoBlob) {
		return err
	}
	return nil
}

// Keys lists the keys of every file in the store (for tests and
// operators; the deployment marker is not a file).
func (b *Bucket) Keys(ctx context.Context) ([]string, error) {
	var keys []string
	it := b.b.List(nil)
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return keys, nil
		}
		if err != nil {
			return keys, b.fail(ctx, "list", err)
		}
		if _, k, ok := strings.Cut(o.Key, "/"); ok && keyPattern.MatchString(k) {
			keys = append(keys, k)
		}
	}
}
