// Package artifact keeps the files tasks read and write — uploaded sources,
// error reports, exports, reports — in a blob store every node reaches (a
// directory, shared by the nodes or in one node's data directory, or
// S3-compatible object storage, through gocloud.dev/blob), each referenced
// by a row of the artifacts table with its owner, kind, size, checksum and
// expiry. It checks that the nodes sharing a database share the store,
// signs short-lived download links and serves them (the store itself is
// never exposed to browsers), and runs the janitor that removes expired
// artifacts.
package artifact

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	entartifact "github.com/taskgraph/taskgraph/ent/artifact"
)

// Kind is what an artifact is.
type Kind = entartifact.Kind

// Kinds.
const (
	KindSource      = entartifact.KindSOURCE
	KindErrorReport = entartifact.KindERROR_REPORT
	KindExport      = entartifact.KindEXPORT
	KindReport      = entartifact.KindREPORT
)

// TTLDefault is how long an artifact is kept when Config.TTL is zero.
const TTLDefault = 7 * 24 * time.Hour

// Config configures a Store.
type Config struct {
	// Client reads and writes artifact rows.
	Client *ent.Client
	// Blobs holds the files.
	Blobs Blobs
	// TTL is how long an artifact is kept. Default: TTLDefault.
	TTL time.Duration
	// Clock returns the current time. Default: time.Now.
	Clock func() time.Time
	// Tx runs writes of artifact rows in a transaction (store.Store.Tx,
	// which serializes them with the store's). Default: Client.Tx.
	Tx func(ctx context.Context, fn func(tx *ent.Tx) error) error
	// Node names this process in the deployment record. Default: "".
	Node string
	// Stored, when set, is told of every artifact written, once its row
	// committed: the type and tenant of the task it was written for
	// (Meta.TaskType, Meta.Tenant), when, and its size. The task history
	// counts it (store.Store.CountStored) as bytes stored.
	Stored func(taskType, tenant string, at time.Time, size int64)
	// Logger receives the store's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Store saves, opens and deletes artifacts.
type Store struct {
	client *ent.Client
	blobs  Blobs
	ttl    time.Duration
	clock  func() time.Time
	tx     func(ctx context.Context, fn func(tx *ent.Tx) error) error
	node   string
	log    *slog.Logger
	stored func(taskType, tenant string, at time.Time, size int64)

	// What the last deployment check found (see deployment.go).
	mu      sync.Mutex
	checked time.Time
	state   error
	logged  int
	created string // the deployment this node recorded, until its marker is written
}

// New validates cfg and returns a Store.
func New(cfg Config) (*Store, error) {
	if cfg.Client == nil || cfg.Blobs == nil {
		return nil, errors.New("artifact: client and blobs are required")
	}
	if cfg.TTL < 0 {
		return nil, errors.New("artifact: TTL must not be negative")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Tx == nil {
		cfg.Tx = func(ctx context.Context, fn func(tx *ent.Tx) error) error {
			tx, err := cfg.Client.Tx(ctx)
			if err != nil {
				return err
			}
			if err := fn(tx); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		}
	}
	return &Store{client: cfg.Client, blobs: cfg.Blobs, ttl: cmp.Or(cfg.TTL, TTLDefault), clock: cfg.Clock, tx: cfg.Tx,
		node: cfg.Node, log: cmp.Or(cfg.Logger, slog.Default()), stored: cfg.Stored}, nil
}

// TTL is how long artifacts are kept.
func (s *Store) TTL() time.Duration { return s.ttl }

// Client is the ent client artifact rows are read with.
func (s *Store) Client() *ent.Client { return s.client }

// Blobs is the storage backend.
func (s *Store) Blobs() Blobs { return s.blobs }

// Location says where this node's files are: the blob store's URL without
// credentials.
func (s *Store) Location() string { return s.blobs.Location() }

// Now is the store's clock in UTC at microsecond precision.
func (s *Store) Now() time.Time { return s.clock().UTC().Truncate(time.Microsecond) }

// NewKey returns a random storage key. Keys are never derived from
// anything a client sends.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Meta describes an artifact to save.
type Meta struct {
	TaskID *int // nil: linked later (an upload before its task exists)
	// Owner, OwnerSource and Tenant are the owner's identity: who
	// uploaded it, or the owner of the task that wrote it.
	Owner       string
	OwnerSource string
	Tenant      string
	// TaskType is the type of the task the artifact is written for (an
	// upload: of the task it is uploaded for): the task history counts its
	// bytes under that type and Tenant.
	TaskType    string
	Kind        Kind
	Filename    string
	ContentType string
	// MaxSize, when positive, bounds the file: writing more fails with a
	// *TooLargeError and leaves nothing behind.
	MaxSize int64
}

// TooLargeError is a file over its size limit.
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the file is larger than the limit of %d bytes", e.Limit)
}

// Save stores what r yields as a new artifact.
func (s *Store) Save(ctx context.Context, m Meta, r io.Reader) (*ent.Artifact, error) {
	return s.Write(ctx, m, func(w io.Writer) error {
		_, err := io.Copy(w, r)
		return err
	})
}

// Write stores what write writes as a new artifact, streaming it to the
// blob store. On any error nothing is left: neither file nor row. A
// failure of the store is returned as the *StoreError it is, whatever
// write made of it.
func (s *Store) Write(ctx context.Context, m Meta, write func(w io.Writer) error) (*ent.Artifact, error) {
	if err := s.Usable(); err != nil {
		return nil, err
	}
	key := NewKey()
	bw, err := s.blobs.Create(ctx, key, m.ContentType)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(bw, h), limit: m.MaxSize}
	if err := write(cw); err != nil {
		bw.Abort()
		var tl *TooLargeError
		if errors.As(err, &tl) {
			return nil, tl
		}
		if serr := bw.Err(); serr != nil && !IsStoreFailure(err) {
			return nil, fmt.Errorf("%w (%v)", serr, err)
		}
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		bw.Abort()
		return nil, err
	}
	if err := bw.Commit(); err != nil {
		return nil, err
	}
	var a *ent.Artifact
	// The file is written: record it even if the caller gives up now.
	wctx := context.WithoutCancel(ctx)
	now := s.Now()
	err = s.tx(wctx, func(tx *ent.Tx) error {
		var err error
		a, err = tx.Artifact.Create().
			SetNillableTaskID(m.TaskID).
			SetOwner(m.Owner).
			SetOwnerSource(m.OwnerSource).
			SetTenant(m.Tenant).
			SetKind(m.Kind).
			SetKey(key).
			SetFilename(m.Filename).
			SetContentType(m.ContentType).
			SetSize(cw.n).
			SetSha256(hex.EncodeToString(h.Sum(nil))).
			SetExpiresAt(now.Add(s.ttl)).
			SetCreatedAt(now).
			Save(wctx)
		return err
	})
	if err != nil {
		_ = s.blobs.Delete(wctx, key)
		return nil, fmt.Errorf("artifact: record: %w", err)
	}
	if s.stored != nil {
		s.stored(m.TaskType, m.Tenant, now, cw.n)
	}
	return a, nil
}

type countingWriter struct {
	w     io.Writer
	n     int64
	limit int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.limit > 0 && c.n+int64(len(b)) > c.limit {
		return 0, &TooLargeError{Limit: c.limit}
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// Open opens an artifact's file; ctx bounds the reads. A file missing from
// the store is a *MissingError (errors.Is ErrNoBlob); a store that fails
// is a *StoreError; a node whose store is not the deployment's says so
// (a *MisconfiguredError) rather than that the file is missing.
func (s *Store) Open(ctx context.Context, a *ent.Artifact) (Blob, error) {
	if err := s.Usable(); err != nil {
		return nil, err
	}
	return s.blobs.Open(ctx, a.Key)
}

// Get reads an artifact row.
func (s *Store) Get(ctx context.Context, id int) (*ent.Artifact, error) {
	return s.client.Artifact.Get(ctx, id)
}

// Link attaches an artifact saved before its task existed to the task.
func (s *Store) Link(ctx context.Context, id, taskID int) error {
	var n int
	err := s.tx(ctx, func(tx *ent.Tx) error {
		var err error
		n, err = tx.Artifact.Update().
			Where(entartifact.ID(id), entartifact.Or(entartifact.TaskIDIsNil(), entartifact.TaskID(taskID))).
			SetTaskID(taskID).
			Save(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("artifact: link to task %d: %w", taskID, err)
	}
	if n != 1 {
		return fmt.Errorf("artifact %d belongs to another task", id)
	}
	return nil
}

// Latest returns the newest artifact of a kind of a task, or a
// *ent.NotFoundError.
func (s *Store) Latest(ctx context.Context, taskID int, kind Kind) (*ent.Artifact, error) {
	return s.client.Artifact.Query().
		Where(entartifact.TaskID(taskID), entartifact.KindEQ(kind)).
		Order(ent.Desc(entartifact.FieldID)).
		First(ctx)
}

// Replace deletes a task's artifacts of a kind other than keep: a re-run
// task's new report supersedes the old one.
func (s *Store) Replace(ctx context.Context, taskID int, kind Kind, keep ...int) error {
	old, err := s.client.Artifact.Query().
		Where(entartifact.TaskID(taskID), entartifact.KindEQ(kind), entartifact.IDNotIn(keep...)).
		All(ctx)
	if err != nil {
		return fmt.Errorf("artifact: list superseded: %w", err)
	}
	return s.delete(ctx, old)
}

// Delete removes an artifact: its file, then its row.
func (s *Store) Delete(ctx context.Context, a *ent.Artifact) error {
	return s.delete(ctx, []*ent.Artifact{a})
}

func (s *Store) delete(ctx context.Context, as []*ent.Artifact) error {
	if len(as) == 0 {
		return nil
	}
	// A store that is not the deployment's has none of these files:
	// "deleting" them there would drop the rows of files that live on.
	if err := s.Usable(); err != nil {
		return err
	}
	ids := make([]int, 0, len(as))
	var errs []error
	for _, a := range as {
		// The file first: a row without a file is a 404 on download; a file
		// without a row would never be found again.
		if err := s.blobs.Delete(ctx, a.Key); err != nil {
			errs = append(errs, err)
			continue
		}
		ids = append(ids, a.ID)
	}
	if len(ids) > 0 {
		if err := s.tx(ctx, func(tx *ent.Tx) error {
			_, err := tx.Artifact.Delete().Where(entartifact.IDIn(ids...)).Exec(ctx)
			return err
		}); err != nil {
			errs = append(errs, fmt.Errorf("artifact: delete rows: %w", err))
		}
	}
	return errors.Join(errs...)
}
