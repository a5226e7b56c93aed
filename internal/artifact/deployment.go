package artifact

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/internal/auth"
)

// Nodes sharing a database must share their blob store: a file uploaded
// through one node is read by whichever node runs the import, and its
// report downloaded through a third. Nothing in a node's own configuration
// can tell it that it is alone with its files, so the deployment says
// where they are: the database holds one deployment record with a random
// id, and the blob store holds a marker object with the same id. The first
// node to start records the deployment and writes the marker; every node
// then checks that its store holds that marker. One that does not (its own
// empty data directory, another bucket) says so at start, in one line
// naming --blob-url, and /readyz reports it, instead of an import failing
// later with a missing file.

// CheckInterval is how long the result of a deployment check stands
// before Ready checks again.
const CheckInterval = 5 * time.Second

// startRace is how long, after the deployment was recorded, a starting
// node waits for the recording node to write the marker.
const startRace = 5 * time.Second

// MisconfiguredError says this node's blob store is not the deployment's.
type MisconfiguredError struct {
	Location string // this node's store
	Recorded string // where the deployment's files were last confirmed
	Node     string // by which node
	Foreign  string // the marker found instead, when another deployment's
}

func (e *MisconfiguredError) Error() string {
	if e.Foreign != "" {
		return fmt.Sprintf("this node's blob store %s holds another deployment's files (marker %s): give each deployment its own --blob-url (TASKGRAPH_BLOB_URL), or a prefix= of its own", e.Location, e.Foreign)
	}
	return fmt.Sprintf("this node's blob store %s does not hold this deployment's files (they were last confirmed at %s by node %s): every node sharing a database must run with the same --blob-url (TASKGRAPH_BLOB_URL)", e.Location, e.Recorded, e.Node)
}

// Verify checks, at start, that this node's blob store is the
// deployment's (recording the deployment if this node is the first), and
// logs one line saying what it found. It returns nil, a
// *MisconfiguredError, a *StoreError (the store did not answer), or a
// database error. Ready and the file operations use its verdict.
func (s *Store) Verify(ctx context.Context) error {
	err := s.check(ctx, true)
	s.settle(err)
	return err
}

// Ready reports whether this node can use its blob store: nil, a
// *MisconfiguredError or a *StoreError. It checks again when the last
// verdict is older than CheckInterval.
func (s *Store) Ready(ctx context.Context) error {
	s.mu.Lock()
	if time.Since(s.checked) < CheckInterval {
		err := s.state
		s.mu.Unlock()
		return err
	}
	s.checked = time.Now() // one check at a time is enough
	s.mu.Unlock()
	err := s.check(ctx, false)
	s.settle(err)
	return err
}

// Usable returns a *MisconfiguredError when the last check found this
// node's store not to be the deployment's (checking again if that verdict
// is stale), nil otherwise: a store that did not answer may answer now.
func (s *Store) Usable() error {
	s.mu.Lock()
	err, stale := s.state, time.Since(s.checked) >= CheckInterval
	s.mu.Unlock()
	var me *MisconfiguredError
	if !errors.As(err, &me) {
		return nil
	}
	if stale {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err = s.Ready(ctx); err == nil || !errors.As(err, &me) {
			return nil
		}
	}
	return me
}

// settle records a verdict and logs it when it changes (the first one
// always: the one line at start).
func (s *Store) settle(err error) {
	s.mu.Lock()
	prev, first := s.state, s.logged == 0
	s.state, s.checked = err, time.Now()
	s.logged++
	s.mu.Unlock()
	if !first && fmt.Sprint(prev) == fmt.Sprint(err) {
		return
	}
	var me *MisconfiguredError
	switch {
	case err == nil:
		s.log.Info("blob store ready", "blob_store", s.Location())
	case errors.As(err, &me):
		s.log.Error(err.Error(), "blob_store", s.Location())
	default:
		s.log.Error("blob store not usable: "+err.Error(), "blob_store", s.Location())
	}
}

func (s *Store) check(ctx context.Context, starting bool) error {
	ctx = auth.NewSystemContext(ctx) // the node itself reads its deployment
	d, created, err := s.record(ctx)
	if err != nil {
		return fmt.Errorf("artifact: read the deployment record: %w", err)
	}
	s.mu.Lock()
	if created {
		s.created = d.UID
	}
	mine := s.created == d.UID
	s.mu.Unlock()
	waited := time.Now() // the wait below is this node's own (monotonic)
	for {
		m, err := s.blobs.Marker(ctx)
		if err != nil {
			return err
		}
		switch {
		case m == d.UID:
			// Reading is not writing: a full disk, a read-only mount or
			// credentials that may only read refuse uploads.
			if err := s.blobs.Probe(ctx); err != nil {
				return err
			}
			if d.BlobLocation != s.Location() || d.BlobNode != s.node {
				// Where the files were last seen, for the message other
				// nodes give; a lost race here loses nothing.
				_ = s.tx(ctx, func(tx *ent.Tx) error {
					return tx.Deployment.UpdateOneID(d.ID).SetBlobLocation(s.Location()).SetBlobNode(s.node).Exec(ctx)
				})
			}
			return nil
		case m != "":
			return &MisconfiguredError{Location: s.Location(), Foreign: m}
		case mine:
			// This node recorded the deployment: its store is the
			// deployment's by definition.
			if err := s.blobs.SetMarker(ctx, d.UID); err != nil {
				return err
			}
			s.mu.Lock()
			s.created = ""
			s.mu.Unlock()
			return s.blobs.Probe(ctx)
		case starting && s.Now().Sub(d.CreatedAt) < startRace && time.Since(waited) < startRace: // the record's time is the cluster's
			// Nodes started together: the one that recorded the
			// deployment may not have written its marker yet.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		default:
			return &MisconfiguredError{Location: s.Location(), Recorded: d.BlobLocation, Node: d.BlobNode}
		}
	}
}

// record reads the deployment record, creating it if there is none; created
// says this call created it.
func (s *Store) record(ctx context.Context) (*ent.Deployment, bool, error) {
	d, err := s.client.Deployment.Query().Only(ctx)
	if err == nil || !ent.IsNotFound(err) {
		return d, false, err
	}
	err = s.tx(ctx, func(tx *ent.Tx) error {
		var err error
		d, err = tx.Deployment.Create().
			SetSingleton(1).
			SetCreatedAt(s.Now()).
			SetUID(NewKey()).
			SetBlobLocation(s.Location()).
			SetBlobNode(s.node).
			Save(ctx)
		return err
	})
	if err == nil {
		return d, true, nil
	}
	if !ent.IsConstraintError(err) {
		return nil, false, err
	}
	// Another node recorded it first.
	d, err = s.client.Deployment.Query().Only(ctx)
	return d, false, err
}
