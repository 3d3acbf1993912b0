package oss

import (
	"context"
	"fmt"
	"hash"
	"hash/crc64"
	"io"
	"net/http"
	"strconv"
	"strings"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends"
)

var crcTable = crc64.MakeTable(crc64.ECMA)

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
	r.whole = opt.Offset == 0 && opt.Length < 0
	if r.whole {
		r.crc = crc64.New(crcTable)
	}
	rt := newRetrier(b.retryOpt)
	for {
		err := r.open()
		if err == nil {
			return r, nil
		}
		if err == errEmpty {
			return io.NopCloser(strings.NewReader("")), nil
		}
		if !rt.Next(ctx, err) {
			return nil, b.wrapErr("read", key, err)
		}
	}
}

// errEmpty reports a range starting at or past the end of the object.
var errEmpty = fmt.Errorf("range starts past the end of the object")

type reader struct {
	b    *Backend
	ctx  context.Context
	key  string
	etag string // pinned version ("" until the first response)
	pos  int64  // next offset to deliver
	end  int64  // exclusive end, -1 until known
	body io.ReadCloser

	whole  bool        // reading the whole object: verify the CRC
	crc    hash.Hash64 // of bytes delivered (whole reads)
	srvCRC string      // the server's x-oss-hash-crc64ecma
	opened bool        // a first response was received
	sdkCRC bool        // the SDK hashes the current body into crc itself
	closed bool
}

// open issues a GET for [pos, end).
func (r *reader) open() error {
	var h http.Header
	opts := []alioss.Option{alioss.WithContext(r.ctx), alioss.GetResponseHeader(&h)}
	if !r.whole || r.pos > 0 {
		opts = append(opts, alioss.RangeBehavior("standard"))
		if r.end >= 0 {
			opts = append(opts, alioss.NormalizedRange(fmt.Sprintf("%d-%d", r.pos, r.end-1)))
		} else {
			opts = append(opts, alioss.NormalizedRange(fmt.Sprintf("%d-", r.pos)))
		}
	}
	if r.etag != "" {
		opts = append(opts, alioss.IfMatch(`"`+r.etag+`"`))
	}
	res, err := r.b.bucket.DoGetObject(&alioss.GetObjectRequest{ObjectKey: r.b.object(r.key)}, opts)
	if err != nil {
		if st, _ := statusOf(err); st == http.StatusRequestedRangeNotSatisfiable && !r.opened {
			// The version matched (If-Match is checked first) and the
			// range starts at or past the end: an empty read.
			return errEmpty
		}
		return err
	}
	body := res.Response.Body
	hdr := res.Response.Headers
	n, err := strconv.ParseInt(hdr.Get("Content-Length"), 10, 64)
	if err != nil {
		body.Close()
		return fmt.Errorf("GET without Content-Length")
	}
	start := int64(0)
	if cr := hdr.Get("Content-Range"); cr != "" {
		var e, total int64
		if _, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &start, &e, &total); err != nil || e-start+1 != n {
			body.Close()
			return fmt.Errorf("malformed Content-Range %q", cr)
		}
	} else if res.Response.StatusCode != http.StatusOK {
		body.Close()
		return fmt.Errorf("unexpected status %d without Content-Range", res.Response.StatusCode)
	}
	if start != r.pos {
		// The server ignored our range (an OSS without range-behavior
		// support would send the whole object): never deliver it as ours.
		body.Close()
		return backends.Wrap("read", r.key, backends.ErrInvalid, fmt.Errorf("asked for bytes from %d, got from %d", r.pos, start))
	}
	etag := strings.Trim(hdr.Get("ETag"), `"`)
	if r.etag != "" && !strings.EqualFold(etag, r.etag) {
		body.Close()
		return backends.Wrap("read", r.key, backends.ErrVersionMismatch, fmt.Errorf("version %s, want %s", etag, r.etag))
	}
	r.etag = etag
	r.opened = true
	if r.end < 0 || r.pos+n < r.end {
		// The first response fixes the end (a range past the end of the
		// object is cut short by the server: a short read, not an error).
		r.end = r.pos + n
	}
	if r.whole && r.srvCRC == "" {
		r.srvCRC = hdr.Get("x-oss-hash-crc64ecma")
	}
	// On a GET without Range the SDK already feeds every byte to its own
	// CRC64: adopt that hash instead of computing a second one. Resumed
	// (ranged) GETs are fed to the same hash by Read.
	r.sdkCRC = false
	if r.whole && res.ClientCRC != nil && r.pos == 0 {
		r.crc, r.sdkCRC = res.ClientCRC, true
	}
	r.body = body
	return nil
}

// Read implements io.Reader.
func (r *reader) Read(p []byte) (int, error) {
	if r.closed {
		return 0, fmt.Errorf("read %q: reader closed", r.key)
	}
	rt := newRetrier(r.b.retryOpt)
	for {
		if r.pos >= r.end {
			return 0, r.finish()
		}
		if r.body == nil {
			if err := r.open(); err != nil {
				if err == errEmpty {
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
		if n > 0 {
			r.pos += int64(n)
			if r.crc != nil && !r.sdkCRC {
				r.crc.Write(p[:n])
			}
		}
		if err == io.EOF && r.pos < r.end {
			err = errTruncated
		}
		if err != nil && err != io.EOF {
			r.body.Close()
			r.body = nil
			if n > 0 {
				// Deliver what arrived; the next call resumes.
				return n, nil
			}
			if !rt.Next(r.ctx, err) {
				return 0, r.b.wrapErr("read", r.key, err)
			}
			r.b.log.Debug("oss: resuming read", "key", r.key, "offset", r.pos, "err", err)
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

// finish verifies a whole-object read at its end.
func (r *reader) finish() error {
	if r.crc != nil && r.srvCRC != "" {
		want, err := strconv.ParseUint(r.srvCRC, 10, 64)
		if err == nil && want != r.crc.Sum64() {
			r.crc = nil
			return backends.Wrap("read", r.key, backends.ErrTransient, errCRC)
		}
		r.crc = nil
	}
	return io.EOF
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
