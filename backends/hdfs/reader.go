package hdfs

import (
	"context"
	"errors"
	"io"
	"time"

	hdfs "github.com/colinmarc/hdfs/v2"

	"github.com/mlfsd/mlfsd/backends"
)

// Read buffer bounds. The library must never be handed a buffer smaller
// than one checksum chunk (512 bytes): on that path it reports a DataNode
// that drops the connection mid-chunk as a clean end of block, and its
// FileReader then reconnects for the same chunk forever.
const (
	minReadBuf = 4 << 10
	maxReadBuf = 256 << 10
)

// Read opens a ranged reader. The reader survives a DataNode that fails or
// drops the connection mid-stream: it reopens the file at the offset it
// reached (up to Options.Retries times without progress), and fails with
// ErrVersionMismatch if the file changed in between.
func (b *backend) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	if err := checkKey("read", key, false); err != nil {
		return nil, err
	}
	if opt.Offset < 0 {
		return nil, backends.Wrap("read", key, backends.ErrInvalid, errors.New("negative offset"))
	}
	r := &reader{b: b, ctx: ctx, key: key, pos: opt.Offset, fpos: opt.Offset, want: opt.IfVersion}
	if err := b.retry(ctx, "read", key, r.open); err != nil {
		return nil, err
	}
	r.end = r.size
	if opt.Length >= 0 && opt.Offset+opt.Length < r.size {
		r.end = opt.Offset + opt.Length
	}
	if r.pos >= r.end {
		r.Close()
		return io.NopCloser(eofReader{}), nil
	}
	r.buf = make([]byte, min(maxReadBuf, max(minReadBuf, r.end-r.pos)))
	return r, nil
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

type reader struct {
	b    *backend
	ctx  context.Context
	key  string
	want string // version the reader is pinned to ("" until opened)

	c    *hdfs.Client     // the client f came from
	f    *hdfs.FileReader // nil between a failure and the reopen
	size int64
	pos  int64 // next offset handed to the caller
	fpos int64 // next offset f delivers (pos + len(pending))
	end  int64 // offset to stop at

	buf     []byte
	pending []byte // fetched, not yet handed out
}

// open (re)opens the file at r.fpos, checking the version.
func (r *reader) open() error {
	c, err := r.b.shared()
	if err != nil {
		return err
	}
	f, err := c.Open(r.b.abs(r.key))
	if err != nil {
		if brokenConn(err) {
			r.b.discard(c)
		}
		return err
	}
	fi := f.Stat()
	if fi.IsDir() {
		f.Close()
		return backends.ErrIsDir
	}
	v := version(fi)
	if r.want != "" && v != r.want {
		f.Close()
		return backends.ErrVersionMismatch
	}
	r.want, r.size = v, fi.Size()
	if r.fpos < r.size {
		if _, err := f.Seek(r.fpos, io.SeekStart); err != nil {
			f.Close()
			return err
		}
	}
	r.c, r.f = c, f
	return nil
}

func (r *reader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, &backends.OpError{Op: "read", Key: r.key, Err: err}
	}
	if r.pos >= r.end {
		return 0, io.EOF
	}
	if len(r.pending) == 0 {
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	r.pos += int64(n)
	return n, nil
}

// fill fetches the next bytes into r.pending, retrying (from r.fpos) when
// the connection fails.
func (r *reader) fill() error {
	err := r.b.retry(r.ctx, "read", r.key, func() error {
		if r.f == nil {
			if err := r.open(); err != nil {
				return err
			}
		}
		if r.fpos >= r.size {
			return errEOF // the file shrank under a reopen: a short read
		}
		r.f.SetDeadline(time.Now().Add(r.b.opt.IOTimeout))
		n, err := r.f.Read(r.buf)
		if n > 0 {
			r.fpos += int64(n)
			r.pending = r.buf[:min(int64(n), r.end-r.pos)]
			if err != nil && err != io.EOF {
				r.fail(err) // reopen at r.fpos next time
			}
			return nil
		}
		if (err == nil || err == io.EOF) && r.fpos >= r.size {
			return errEOF
		}
		if err == nil || err == io.EOF {
			// The library passes a NameNode connection closed under a
			// call (getBlockLocations) up as a bare io.EOF: short of the
			// file's size, an EOF is a failure.
			err = io.ErrUnexpectedEOF
		}
		r.fail(err)
		return err
	})
	if errors.Is(err, errEOF) {
		r.end = r.pos // nothing more to come
		return io.EOF
	}
	return err
}

// errEOF carries the end of the file through retry, which would take a
// bare io.EOF for a dropped connection.
var errEOF = errors.New("end of file")

// fail drops the file after err, and the shared client too when err
// leaves its NameNode connection unusable.
func (r *reader) fail(err error) {
	if brokenConn(err) && r.c != nil {
		r.b.discard(r.c)
	}
	r.drop()
}

func (r *reader) drop() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

func (r *reader) Close() error {
	r.drop()
	r.pending = nil
	return nil
}
