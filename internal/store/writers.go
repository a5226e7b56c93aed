package store

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// writers makes the processes sharing one SQLite file take turns at
// writing. SQLite lets one write at a time and makes the others poll for
// the lock (busy_timeout), sleeping longer the longer they wait, up to
// 100 ms between tries: a process that writes often (claims every poll,
// heartbeats, outcomes) leaves gaps shorter than that, and another one
// waits seconds for a transaction, then fails with "database is locked".
//
// So a writing transaction first takes two OS file locks next to the
// database (flock: released by the kernel when a process dies, and one
// per open file, so two stores in one process take turns too): the queue
// lock, then the write lock, and lets the queue lock go; it lets the write
// lock go when it ends. A process waiting for the write lock holds the
// queue lock, so the one that just wrote cannot take the write lock again
// before it: under contention they alternate. The kernel wakes a waiter as
// soon as a lock is free; no one polls.
//
// Within a process, the store's writeMu lets one transaction at a time
// reach these locks. On systems without flock (writers_other.go) writers
// is nil and SQLite's own lock alone serializes writes.
type writers struct {
	queue, write *os.File
	closed       bool // by close; both read and written under the store's writeMu
}

// openWriters opens (creating them) the lock files of the SQLite database
// at path: path + "-queue.lock" and path + "-write.lock". An in-memory
// database has none.
func openWriters(path string) (*writers, error) {
	if path == ":memory:" || !flockSupported {
		return nil, nil
	}
	q, err := os.OpenFile(path+"-queue.lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("writers' lock: %w", err)
	}
	w, err := os.OpenFile(path+"-write.lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		_ = q.Close()
		return nil, fmt.Errorf("writers' lock: %w", err)
	}
	return &writers{queue: q, write: w}, nil
}

// acquire takes the write lock, in turn. When it fails — ctx ended first,
// or a lock could not be taken — it returns the error and calls failed
// once none of the locks it was after is held any more: at once, or when
// ctx ended, once the locks it was waiting for are taken and let go again
// (the caller's writeMu must stay held until then, or another transaction
// of this store would take a lock this one then lets go).
func (w *writers) acquire(ctx context.Context, failed func()) error {
	if w.closed {
		failed()
		return errors.New("writers' lock: the store is closed")
	}
	got := make(chan error, 1)
	go func() {
		if err := flock(w.queue, true); err != nil {
			got <- err
			return
		}
		err := flock(w.write, true)
		if uerr := flock(w.queue, false); err == nil && uerr != nil {
			_ = flock(w.write, false)
			err = uerr
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			failed()
			return fmt.Errorf("writers' lock: %w", err)
		}
		return nil
	case <-ctx.Done():
		go func() {
			if err := <-got; err == nil {
				_ = flock(w.write, false)
			}
			failed()
		}()
		return ctx.Err()
	}
}

// release lets the write lock go.
func (w *writers) release() error { return flock(w.write, false) }

// close closes the lock files; again, it does nothing. The caller holds
// the store's writeMu: no transaction, nor an acquire given up on, uses
// them meanwhile.
func (w *writers) close() error {
	if w == nil || w.closed {
		return nil
	}
	w.closed = true
	err := w.queue.Close()
	if werr := w.write.Close(); err == nil {
		err = werr
	}
	return err
}
