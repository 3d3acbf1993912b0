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
	"github.com/mlfsd/mlfsd/backends/ranged"
)

var crcTable = crc64.MakeTable(crc64.ECMA)

// Read implements backends.Backend with a ranged.Read: the returned
// reader is bound to ctx, and resumes after a failure in the middle of
// the body by a ranged GET pinned to the ETag of the first response. A
// whole-object read is also checked against the object's CRC64.
func (b *Backend) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	src := &source{b: b, key: key, whole: opt.Offset == 0 && opt.Length < 0}
	if src.whole {
		src.crc = crc64.New(crcTable)
	}
	return ranged.Read(ctx, src, ranged.Options{
		Key: key, Retry: b.retryOpt, Transient: isTransient, Truncated: errTruncated, Log: b.log, Name: "oss",
		Wrap: func(op string, err error) error { return b.wrapErr(op, key, err) },
	}, opt)
}

// source is the OSS API's side of reading one object (ranged.Source and
// ranged.Checker).
type source struct {
	b   *Backend
	key string

	whole  bool        // reading the whole object: verify the CRC
	crc    hash.Hash64 // of bytes delivered (whole reads)
	srvCRC string      // the server's x-oss-hash-crc64ecma
	sdkCRC bool        // the SDK hashes the current body into crc itself
}

// Stat implements ranged.Source.
func (s *source) Stat(ctx context.Context) (backends.ObjectInfo, error) { return s.b.Stat(ctx, s.key) }

// PastEnd implements ranged.Source.
func (s *source) PastEnd(err error) bool {
	st, _ := statusOf(err)
	return st == http.StatusRequestedRangeNotSatisfiable
}

// Open implements ranged.Source.
func (s *source) Open(ctx context.Context, pos, end int64, version string) (ranged.Response, error) {
	var h http.Header
	opts := []alioss.Option{alioss.WithContext(ctx), alioss.GetResponseHeader(&h)}
	if !s.whole || pos > 0 {
		opts = append(opts, alioss.RangeBehavior("standard"))
		if end >= 0 {
			opts = append(opts, alioss.NormalizedRange(fmt.Sprintf("%d-%d", pos, end-1)))
		} else {
			opts = append(opts, alioss.NormalizedRange(fmt.Sprintf("%d-", pos)))
		}
	}
	if version != "" {
		opts = append(opts, alioss.IfMatch(`"`+version+`"`))
	}
	res, err := s.b.bucket.DoGetObject(&alioss.GetObjectRequest{ObjectKey: s.b.object(s.key)}, opts)
	if err != nil {
		return ranged.Response{}, err
	}
	body := res.Response.Body
	hdr := res.Response.Headers
	n, err := strconv.ParseInt(hdr.Get("Content-Length"), 10, 64)
	if err != nil {
		body.Close()
		return ranged.Response{}, fmt.Errorf("GET without Content-Length")
	}
	cr := hdr.Get("Content-Range")
	if cr == "" && res.Response.StatusCode != http.StatusOK {
		body.Close()
		return ranged.Response{}, fmt.Errorf("unexpected status %d without Content-Range", res.Response.StatusCode)
	}
	if s.whole && s.srvCRC == "" {
		s.srvCRC = hdr.Get("x-oss-hash-crc64ecma")
	}
	// On a GET without Range the SDK already feeds every byte to its own
	// CRC64: adopt that hash instead of computing a second one. Resumed
	// (ranged) GETs are fed to the same hash by Delivered.
	s.sdkCRC = false
	if s.whole && res.ClientCRC != nil && pos == 0 {
		s.crc, s.sdkCRC = res.ClientCRC, true
	}
	return ranged.Response{Body: body, Length: n, ContentRange: cr, Version: strings.Trim(hdr.Get("ETag"), `"`)}, nil
}

// Delivered implements ranged.Checker.
func (s *source) Delivered(p []byte) {
	if s.crc != nil && !s.sdkCRC {
		s.crc.Write(p)
	}
}

// Finish implements ranged.Checker: it verifies a whole-object read at
// its end.
func (s *source) Finish() error {
	if s.crc != nil && s.srvCRC != "" {
		want, err := strconv.ParseUint(s.srvCRC, 10, 64)
		if err == nil && want != s.crc.Sum64() {
			s.crc = nil
			return backends.Wrap("read", s.key, backends.ErrTransient, errCRC)
		}
		s.crc = nil
	}
	return nil
}
