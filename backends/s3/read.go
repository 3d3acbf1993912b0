package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/mlfsd/mlfsd/backends"
)

// Read implements backends.Backend. The returned reader is bound to ctx.
// A failure in the middle of the body (reset, truncation, 5xx on resume)
// is retried by a new ranged GET from the current offset, pinned to the
// ETag of the first response with If-Match: the reader never mixes bytes of
// two versions, and an error that outlasts the retries reaches the caller
// as an error, never as short or wrong data.
func (b *Backend) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	if opt.Offset < 0 {
		return nil, backends.Wrap("read", key, backends.ErrInvalid, fmt.Errorf("negative offset %d", opt.Offset))
	}
	if opt.Length == 0 {
		info, err := b.Stat(ctx, key)
		if err != nil {
			return nil, err
		}
		if info.IsDir {
			return nil, backends.Wrap("read", key, backends.ErrIsDir, nil)
		}
		if opt.IfVersion != "" && info.Version != opt.IfVersion {
			return nil, backends.Wrap("read", key, backends.ErrVersionMismatch, nil)
		}
		return io.NopCloser(strings.NewReader("")), nil
	}
	r := &reader{b: b, ctx: ctx, key: key, etag: opt.IfVersion, pos: opt.Offset, end: -1}
	if opt.Length > 0 {
		r.end = opt.Offset + opt.Length
	}
	rt := newRetrier(b.opt.Retry)
	for {
		err := r.open()
		if err == nil {
			return r, nil
		}
		if errors.Is(err, errEmpty) {
			return io.NopCloser(strings.NewReader("")), nil
		}
		if !rt.Next(ctx, err) {
			return nil, b.wrapErr("read", key, err)
		}
	}
}

// errEmpty reports a range starting at or past the end of the object.
var errEmpty = errors.New("range starts past the end of the object")

type reader struct {
	b      *Backend
	ctx    context.Context
	key    string
	etag   string // pinned version ("" until the first response)
	pos    int64  // next offset to deliver
	end    int64  // exclusive end, -1 until known
	body   io.ReadCloser
	opened bool // a first response was received
	closed bool
}

// open issues a GET for [pos, end). A whole-object read (from 0, to the
// end) sends no Range, so that an empty object reads as empty rather than
// as an unsatisfiable range, and the SDK can check the object's checksum.
func (r *reader) open() error {
	in := &s3.GetObjectInput{Bucket: &r.b.bucket, Key: aws.String(r.b.object(r.key))}
	ranged := r.pos > 0 || r.end >= 0
	if ranged {
		if r.end >= 0 {
			in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", r.pos, r.end-1))
		} else {
			in.Range = aws.String(fmt.Sprintf("bytes=%d-", r.pos))
		}
	}
	if r.etag != "" {
		in.IfMatch = aws.String(`"` + r.etag + `"`)
	}
	out, err := r.b.client.GetObject(r.ctx, in)
	if err != nil {
		if st, _ := statusOf(err); st == http.StatusRequestedRangeNotSatisfiable && !r.opened {
			// The version matched (If-Match is checked first) and the
			// range starts at or past the end: an empty read.
			return errEmpty
		}
		return err
	}
	n := aws.ToInt64(out.ContentLength)
	if out.ContentLength == nil || n < 0 {
		out.Body.Close()
		return fmt.Errorf("GET without Content-Length: %w", errTruncated)
	}
	start := int64(0)
	if cr := aws.ToString(out.ContentRange); cr != "" {
		var e, total int64
		if _, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &start, &e, &total); err != nil || e-start+1 != n {
			out.Body.Close()
			return fmt.Errorf("malformed Content-Range %q", cr)
		}
	}
	if start != r.pos {
		// The store ignored our range (and sent the whole object):
		// never deliver it as ours.
		out.Body.Close()
		return backends.Wrap("read", r.key, backends.ErrInvalid, fmt.Errorf("asked for bytes from %d, got from %d", r.pos, start))
	}
	etag := etagOf(out.ETag)
	if r.etag != "" && !strings.EqualFold(etag, r.etag) {
		out.Body.Close()
		return backends.Wrap("read", r.key, backends.ErrVersionMismatch, fmt.Errorf("version %s, want %s", etag, r.etag))
	}
	r.etag = etag
	r.opened = true
	if r.end < 0 || r.pos+n < r.end {
		// The first response fixes the end (a range past the end of the
		// object is cut short by the store: a short read, not an error).
		r.end = r.pos + n
	}
	r.body = out.Body
	return nil
}

// Read implements io.Reader.
func (r *reader) Read(p []byte) (int, error) {
	if r.closed {
		return 0, fmt.Errorf("read %q: reader closed", r.key)
	}
	rt := newRetrier(r.b.opt.Retry)
	for {
		if r.pos >= r.end {
			return 0, io.EOF
		}
		if r.body == nil {
			if err := r.open(); err != nil {
				if errors.Is(err, errEmpty) {
					err = fmt.Errorf("object shrank at offset %d: %w", r.pos, errTruncated)
				}
				if rt.Next(r.ctx, err) {
					continue
				}
				return 0, r.b.wrapErr("read", r.key, err)
			}
		}
		want := min(int64(len(p)), r.end-r.pos)
		n, err := r.body.Read(p[:want])
		r.pos += int64(n)
		if err == io.EOF && r.pos < r.end {
			err = errTruncated
		}
		if err != nil && err != io.EOF {
			r.body.Close()
			r.body = nil
			if !isTransient(err) {
				// A checksum the SDK found wrong, say: not to be resumed
				// past, even with the last bytes delivered.
				return n, r.b.wrapErr("read", r.key, err)
			}
			if n > 0 {
				// Deliver what arrived; the next call resumes.
				return n, nil
			}
			if !rt.Next(r.ctx, err) {
				return 0, r.b.wrapErr("read", r.key, err)
			}
			r.b.log.Debug("s3: resuming read", "key", r.key, "offset", r.pos, "err", err)
			continue
		}
		if n > 0 {
			return n, nil
		}
		if err == io.EOF {
			return 0, io.EOF
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
