package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/outage"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// Blobs is where artifact files live: one store every node reaches (a
// directory, shared or not, or an S3-compatible bucket). Keys are generated
// by this package (NewKey) and checked again by every backend before use:
// nothing a client sends ever becomes a path or an object name.
//
// Failures of the store itself (unreachable, 5xx, slow, credentials
// refused) are *StoreError; a key with no object is a *MissingError.
type Blobs interface {
	// Create starts writing a new file under key. Nothing is visible
	// under the key until Commit; Abort (or a failed Commit) leaves
	// nothing. The file is streamed (a multipart upload to S3), never
	// held whole in memory.
	Create(ctx context.Context, key, contentType string) (BlobWriter, error)
	// Open opens a committed file for ranged reads; ctx bounds them.
	Open(ctx context.Context, key string) (Blob, error)
	// Delete removes a file; a missing file is not an error.
	Delete(ctx context.Context, key string) error
	// Marker reads the deployment marker ("" when there is none);
	// SetMarker writes it.
	Marker(ctx context.Context) (string, error)
	SetMarker(ctx context.Context, deployment string) error
	// Probe writes a small object and deletes it: whether the store takes
	// writes now (a full disk, refused credentials, a read-only mount),
	// which reading the marker does not tell. A directory whose disk has
	// less than BucketConfig.MinFree left is full without writing.
	Probe(ctx context.Context) error
	// Keys lists the keys of every file in the store (not the marker).
	Keys(ctx context.Context) ([]string, error)
	// Location says where the files are, without credentials.
	Location() string
	Close() error
}

// BlobWriter is a file being written.
type BlobWriter interface {
	io.Writer
	// Commit makes the file visible under its key.
	Commit() error
	// Abort discards what was written.
	Abort()
	// Err is the first failure of the store seen while writing, nil if
	// none: what a caller's write function returns may have wrapped it
	// beyond recognition.
	Err() error
}

// Blob is a committed file.
type Blob interface {
	// Read and Seek stream from the read position: one ranged read of the
	// store from there to the end, opened at the first Read after a Seek
	// (downloads, with Range requests).
	io.ReadSeekCloser
	// ReadAt reads through a small cache of blocks, each one ranged read:
	// random access (an xlsx's zip directory, then its parts in order).
	io.ReaderAt
	Size() int64
	// Err is the first failure of the store seen by a read, nil if none:
	// a parser reading the file may have wrapped it beyond recognition.
	Err() error
}

// ErrNoBlob is what a *MissingError is (errors.Is).
var ErrNoBlob = errors.New("not found in the blob store")

// MissingError is a key with no object in the store.
type MissingError struct {
	Location string
}

func (e *MissingError) Error() string { return "not found in the blob store " + e.Location }

// Is makes a *MissingError match ErrNoBlob.
func (e *MissingError) Is(target error) bool { return target == ErrNoBlob }

// SetupError is a blob store that answered and refused this node's
// setup: a bucket that does not exist, no credentials, credentials it
// refused. It says what is wrong and what to set; it is a StoreError's
// Err, so the node starts (and stays) unready, saying so in its log and on
// /readyz, the same way whichever it is, and is ready once it is fixed
// (a bucket created, a key granted) without a restart.
type SetupError struct {
	What string // what is wrong
	Set  string // what to set
	Err  error  // the store's (or the SDK's) own error
}

func (e *SetupError) Error() string { return e.What + ": " + e.Set }

func (e *SetupError) Unwrap() error { return e.Err }

// StoreError is a failure of the blob store itself: unreachable, an error
// status, too slow, credentials refused. Worth another attempt later;
// never the file's fault.
type StoreError struct {
	Op       string // "write", "read", "delete", ...
	Location string
	Err      error
}

func (e *StoreError) Error() string {
	// Object names are the server's business (never shown, like keys).
	return fmt.Sprintf("blob store %s: %s: %s", e.Location, e.Op, objectNameInError.ReplaceAllString(e.Err.Error(), ""))
}

// objectNameInError is how gocloud names the object in its errors.
var objectNameInError = regexp.MustCompile(`blob \(key "[^"]*"\) `)

func (e *StoreError) Unwrap() error { return e.Err }

// OutageKind says that the blob store failed, not the database
// (outage.Component): a network error of S3 is the blob store's.
func (e *StoreError) OutageKind() outage.Kind {
	switch outage.Classify(e.Err) {
	case outage.DiskFull, outage.BlobStoreFull:
		return outage.BlobStoreFull
	}
	return outage.BlobStore
}

// IsStoreFailure reports whether err is (or wraps) a failure of the blob
// store, as opposed to a missing file or a caller's own error.
func IsStoreFailure(err error) bool {
	var se *StoreError
	return errors.As(err, &se)
}

// AsResource marks a failure of the blob store, or this node's store not
// being the deployment's, as a resource error of the execution that met it
// (a later attempt, perhaps on another node, may find a store that
// answers); other errors, and errors already classified otherwise, are
// returned as they are.
func AsResource(err error) error {
	var me *MisconfiguredError
	if (IsStoreFailure(err) || errors.As(err, &me)) && tasktype.Classify(err) == lifecycle.KindRetryable {
		return tasktype.Resource(err)
	}
	return err
}

var keyPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// objectName is where key lives in the store: two levels deep by key
// prefix (a directory of a million files is slow to list), as the
// artifacts directory has always been laid out.
func objectName(key string) (string, error) {
	if !keyPattern.MatchString(key) {
		return "", errors.New("artifact: malformed storage key")
	}
	return key[:2] + "/" + key, nil
}

// markerName is the deployment marker's object: not a key NewKey can make.
const markerName = "taskgraph-deployment"

// probeName is the object Probe writes: not a key either, and not listed
// by Keys (no directory level).
const probeName = "taskgraph-probe"
