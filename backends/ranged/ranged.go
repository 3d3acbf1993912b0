// Package ranged is the ranged reader of the object-store backends (oss,
// s3). A failure in the middle of the body (reset, truncation, 5xx on
// resume) is retried by a new ranged GET from the current offset, pinned
// to the version (ETag) of the first response with If-Match: the reader
// never mixes bytes of two versions, and an error that outlasts the
// retries reaches the caller as an error, never as short or wrong data.
// The stores' SDKs differ only in how one GET is made and read, so each
// backend gives that as a Source; the resume loop lives here once.
package ranged

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/mlfsd/mlfsd/backends"
)

// Response is a store's answer to one GET.
type Response struct {
	// Body is the response's body; the reader closes it.
	Body io.ReadCloser
	// Length is the body's length (Content-Length).
	Length int64
	// ContentRange is the Content-Range header ("" if none: the body
	// starts at offset 0).
	ContentRange string
	// Version is the object's version (ETag, unquoted).
	Version string
}

// Source is a store's side of reading one object.
type Source interface {
	// Open issues one GET (one try) of bytes [pos, end) of the object
	// (end < 0: to its end), conditional on version (If-Match) unless it
	// is "".
	Open(ctx context.Context, pos, end int64, version string) (Response, error)
	// PastEnd reports whether err is the store's answer to a range that
	// starts at or past the end of the object (416).
	PastEnd(err error) bool
	// Stat returns the object's info, for a read of no bytes, which
	// sends no GET.
	Stat(ctx context.Context) (backends.ObjectInfo, error)
}

// Checker is implemented by Sources that verify a read end to end (the
// oss store checks a whole-object read against the object's CRC64).
// Optional, discovered by type assertion.
type Checker interface {
	// Delivered is called with every run of bytes the reader delivers,
	// in order.
	Delivered(p []byte)
	// Finish is called when the data ends; the reader returns its error
	// in place of io.EOF when it is not nil.
	Finish() error
}

// Options shape one read.
type Options struct {
	// Key is the object's key, for errors and logs.
	Key string
	// Retry and Transient are the store's retry policy.
	Retry     backends.RetryOptions
	Transient func(error) bool
	// Wrap maps a store error to a backends error for op ("read") on Key.
	Wrap func(op string, err error) error
	// Truncated is the store's error for a response cut short, which
	// Transient must take as transient.
	Truncated error
	// Log, if set, is told of each resumed read, as "<Name>: resuming
	// read".
	Log  *slog.Logger
	Name string
}

// Read opens a read of ro.Length bytes (< 0: to the end) from ro.Offset
// of src's object, pinned to ro.IfVersion if set. The returned reader is
// bound to ctx.
func Read(ctx context.Context, src Source, opt Options, ro backends.ReadOptions) (io.ReadCloser, error) {
	if ro.Offset < 0 {
		return nil, backends.Wrap("read", opt.Key, backends.ErrInvalid, fmt.Errorf("negative offset %d", ro.Offset))
	}
	if ro.Length == 0 {
		info, err := src.Stat(ctx)
		if err != nil {
			return nil, err
		}
		if info.IsDir {
			return nil, backends.Wrap("read", opt.Key, backends.ErrIsDir, nil)
		}
		if ro.IfVersion != "" && info.Version != ro.IfVersion {
			return nil, backends.Wrap("read", opt.Key, backends.ErrVersionMismatch, nil)
		}
		return io.NopCloser(strings.NewReader("")), nil
	}
	r := &reader{src: src, opt: opt, ctx: ctx, etag: ro.IfVersion, pos: ro.Offset, end: -1}
	r.check, _ = src.(Checker)
	if ro.Length > 0 {
		r.end = ro.Offset + ro.Length
	}
	rt := r.retrier()
	for {
		err := r.open()
		if err == nil {
			return r, nil
		}
		if errors.Is(err, errEmpty) {
			return io.NopCloser(strings.NewReader("")), nil
		}
		if !rt.Next(ctx, err) {
			return nil, opt.Wrap("read", err)
		}
	}
}

// errEmpty reports a range starting at or past the end of the object.
var errEmpty = errors.New("range starts past the end of the object")

type reader struct {
	src    Source
	check  Checker // src's, or nil
	opt    Options
	ctx    context.Context
	etag   string // pinned version ("" until the first response)
	pos    int64  // next offset to deliver
	end    int64  // exclusive end, -1 until known
	body   io.ReadCloser
	opened bool // a first response was received
	closed bool
}

func (r *reader) retrier() *backends.Retrier {
	return backends.NewRetrier(r.opt.Retry, r.opt.Transient)
}

// open issues a GET for [pos, end) and checks that the answer is the
// range asked for, of the version pinned.
func (r *reader) open() error {
	res, err := r.src.Open(r.ctx, r.pos, r.end, r.etag)
	if err != nil {
		if r.src.PastEnd(err) && !r.opened {
			// The version matched (If-Match is checked first) and the
			// range starts at or past the end: an empty read.
			return errEmpty
		}
		return err
	}
	n := res.Length
	start := int64(0)
	if cr := res.ContentRange; cr != "" {
		var e, total int64
		if _, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &start, &e, &total); err != nil || e-start+1 != n {
			res.Body.Close()
			return fmt.Errorf("malformed Content-Range %q", cr)
		}
	}
	if start != r.pos {
		// The store ignored our range (and sent the whole object):
		// never deliver it as ours.
		res.Body.Close()
		return backends.Wrap("read", r.opt.Key, backends.ErrInvalid, fmt.Errorf("asked for bytes from %d, got from %d", r.pos, start))
	}
	if r.etag != "" && !strings.EqualFold(res.Version, r.etag) {
		res.Body.Close()
		return backends.Wrap("read", r.opt.Key, backends.ErrVersionMismatch, fmt.Errorf("version %s, want %s", res.Version, r.etag))
	}
	r.etag = res.Version
	r.opened = true
	if r.end < 0 || r.pos+n < r.end {
		// The first response fixes the end (a range past the end of the
		// object is cut short by the store: a short read, not an error).
		r.end = r.pos + n
	}
	r.body = res.Body
	return nil
}

// finish ends the data: io.EOF, or what the Checker found wrong.
func (r *reader) finish() error {
	if r.check != nil {
		if err := r.check.Finish(); err != nil {
			return err
		}
	}
	return io.EOF
}

// Read implements io.Reader.
func (r *reader) Read(p []byte) (int, error) {
	if r.closed {
		return 0, fmt.Errorf("read %q: reader closed", r.opt.Key)
	}
	rt := r.retrier()
	for {
		if r.pos >= r.end {
			return 0, r.finish()
		}
		if r.body == nil {
			if err := r.open(); err != nil {
				if errors.Is(err, errEmpty) {
					err = fmt.Errorf("object shrank at offset %d: %w", r.pos, r.opt.Truncated)
				}
				if rt.Next(r.ctx, err) {
					continue
				}
				return 0, r.opt.Wrap("read", err)
			}
		}
		want := min(int64(len(p)), r.end-r.pos)
		n, err := r.body.Read(p[:want])
		if n > 0 {
			r.pos += int64(n)
			if r.check != nil {
				r.check.Delivered(p[:n])
			}
		}
		if err == io.EOF && r.pos < r.end {
			err = r.opt.Truncated
		}
		if err != nil && err != io.EOF {
			r.body.Close()
			r.body = nil
			if !r.opt.Transient(err) {
				// A checksum the SDK found wrong, or a cancelled
				// context: not to be resumed past, even with the last
				// bytes delivered.
				return n, r.opt.Wrap("read", err)
			}
			if n > 0 {
				// Deliver what arrived; the next call resumes.
				return n, nil
			}
			if !rt.Next(r.ctx, err) {
				return 0, r.opt.Wrap("read", err)
			}
			if r.opt.Log != nil {
				r.opt.Log.Debug(r.opt.Name+": resuming read", "key", r.opt.Key, "offset", r.pos, "err", err)
			}
			continue
		}
		if n > 0 {
			return n, nil
		}
		if err == io.EOF {
			return 0, r.finish()
		}
	}
}

// Close implements io.Closer.
func (r *reader) Close() error {
	r.closed = true
	if r.body != nil {
		err := r.body.Close()
		r.body = nil
		return err
	}
	return nil
}
