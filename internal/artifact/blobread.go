package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"gocloud.dev/blob"
)

// bucketBlob is an open file of a Bucket. Its two ways of reading suit
// its two readers: ReadAt, for the spreadsheet readers (an xlsx is a zip
// read from its directory at the end, then part by part), goes through a
// few cached blocks, each one ranged read; Read and Seek, for downloads,
// stream one ranged read from the position to the end.
type bucketBlob struct {
	b    *Bucket
	ctx  context.Context
	name string
	size int64

	// ReadAt may be called concurrently: readMu makes the calls take
	// turns (a block's buffer is reused once it leaves the cache).
	readMu sync.Mutex
	blocks []*block // least recently used first

	mu  sync.Mutex
	err error // the first failure of the store

	pos int64
	r   *blob.Reader // streaming from pos, or nil until the next Read
}

type block struct {
	off  int64
	data []byte
}

func (f *bucketBlob) Size() int64 { return f.size }

func (f *bucketBlob) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// failed records the first failure of the store and returns it.
func (f *bucketBlob) failed(op string, err error) error {
	err = f.b.fail(f.ctx, op, err)
	if IsStoreFailure(err) {
		f.mu.Lock()
		if f.err == nil {
			f.err = err
		}
		f.mu.Unlock()
	}
	return err
}

// ReadAt implements io.ReaderAt.
func (f *bucketBlob) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("artifact: negative offset")
	}
	if off >= f.size {
		return 0, io.EOF
	}
	f.readMu.Lock()
	defer f.readMu.Unlock()
	bs := int64(f.b.cfg.ReadBlockSize)
	n := 0
	for n < len(p) && off+int64(n) < f.size {
		at := off + int64(n)
		start := at - at%bs
		b, err := f.block(start)
		if err != nil {
			return n, err
		}
		n += copy(p[n:], b[at-start:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// block returns the cached block at off, reading it if needed. The
// caller holds readMu.
func (f *bucketBlob) block(off int64) ([]byte, error) {
	for i, b := range f.blocks {
		if b.off == off {
			// Most recently used last.
			f.blocks = append(append(f.blocks[:i:i], f.blocks[i+1:]...), b)
			return b.data, nil
		}
	}
	var buf []byte
	if len(f.blocks) >= f.b.cfg.ReadBlocks {
		buf = f.blocks[0].data[:0]
		f.blocks = f.blocks[1:]
	}

	n := min(int64(f.b.cfg.ReadBlockSize), f.size-off)
	if int64(cap(buf)) < n {
		buf = make([]byte, 0, f.b.cfg.ReadBlockSize)
	}
	buf = buf[:n]
	ctx, cancel := context.WithTimeout(f.ctx, f.b.cfg.OpTimeout)
	defer cancel()
	r, err := f.b.b.NewRangeReader(ctx, f.name, off, n, nil)
	if err != nil {
		return nil, f.failed("read", err)
	}
	_, err = io.ReadFull(r, buf)
	_ = r.Close()
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			err = fmt.Errorf("the object is shorter than its %d bytes: %w", f.size, err)
		}
		return nil, f.failed("read", err)
	}
	f.blocks = append(f.blocks, &block{off: off, data: buf})
	return buf, nil
}

// Read implements io.Reader: a stream from the read position.
func (f *bucketBlob) Read(p []byte) (int, error) {
	if f.pos >= f.size {
		return 0, io.EOF
	}
	if f.r == nil {
		r, err := f.b.b.NewRangeReader(f.ctx, f.name, f.pos, f.size-f.pos, nil)
		if err != nil {
			return 0, f.failed("read", err)
		}
		f.r = r
	}
	n, err := f.r.Read(p)
	f.pos += int64(n)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF) && f.pos >= f.size:
	case errors.Is(err, io.EOF):
		return n, f.failed("read", fmt.Errorf("the object ended at %d of its %d bytes: %w", f.pos, f.size, io.ErrUnexpectedEOF))
	default:
		return n, f.failed("read", err)
	}
	return n, err
}

// Seek implements io.Seeker. Reading resumes from the new position with a
// new ranged read.
func (f *bucketBlob) Seek(offset int64, whence int) (int64, error) {
	pos := offset
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		pos += f.pos
	case io.SeekEnd:
		pos += f.size
	default:
		return f.pos, errors.New("artifact: bad whence")
	}
	if pos < 0 {
		return f.pos, errors.New("artifact: negative position")
	}
	if pos != f.pos && f.r != nil {
		_ = f.r.Close()
		f.r = nil
	}
	f.pos = pos
	return pos, nil
}

// Close implements io.Closer.
func (f *bucketBlob) Close() error {
	if f.r != nil {
		_ = f.r.Close()
		f.r = nil
	}
	f.readMu.Lock()
	f.blocks = nil
	f.readMu.Unlock()
	return nil
}
