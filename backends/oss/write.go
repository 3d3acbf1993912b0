package oss

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"hash/crc64"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/multipart"
)

// Write implements backends.Backend. Up to MultipartThreshold bytes are
// buffered and sent as one PUT at Commit; past it, a multipart upload
// starts and parts go up in the background, Concurrency at a time, while
// the caller keeps writing (multipart.Writer). Nothing is visible under
// key before Commit.
func (b *Backend) Write(ctx context.Context, key string, opt backends.WriteOptions) (backends.Writer, error) {
	if key == "" || strings.HasSuffix(key, "/") {
		return nil, backends.Wrap("write", key, backends.ErrInvalid, errors.New("not an object key"))
	}
	up := &upload{b: b, key: key, crc: crc64.New(crcTable)}
	mw := multipart.New(ctx, multipart.Store[part](up), multipart.Options{
		Key:                 key,
		PartSize:            multipart.PartSizeFor(b.opt.PartSize, opt.SizeHint, maxPartSize, maxParts),
		MaxPartSize:         maxPartSize,
		MaxParts:            maxParts,
		Threshold:           b.opt.MultipartThreshold,
		Concurrency:         b.opt.Concurrency,
		ReaderAtConcurrency: b.opt.StagedConcurrency,
		OnUpload:            opt.OnUpload,
		Retry:               b.retry,
		Wrap:                func(op string, err error) error { return b.wrapErr(op, key, err) },
	})
	return &writer{Writer: mw, up: up}, nil
}

// writer is a write in progress: the shared multipart writer over this
// store's upload.
type writer struct {
	*multipart.Writer[part]
	up *upload
}

// objectCRC is the CRC64 a completed multipart upload was checked
// against, if known.
func (w *writer) objectCRC() (uint64, bool) { return w.up.sum, w.up.sumKnown }

// upload is the OSS API's side of one object's write (multipart.Store):
// one try of each request, with the object's CRC64 checked at the end.
type upload struct {
	b   *Backend
	key string
	// crc hashes the bytes written through Write and ReadFrom
	// (multipart.Observer), in order; one goroutine feeds it.
	crc hash.Hash64
	// sum, sumKnown: the CRC64 Complete checked the object against.
	sum      uint64
	sumKnown bool
}

// part is an uploaded part and the CRC64 the server reported for it
// (which the SDK checked against the bytes it sent), when it reported one.
type part struct {
	alioss.UploadPart
	crc   uint64
	size  int64
	known bool
}

// Observe implements multipart.Observer.
func (u *upload) Observe(p []byte) { u.crc.Write(p) }

func (u *upload) imur(uploadID string) alioss.InitiateMultipartUploadResult {
	// The SDK names the upload by key and ID only.
	return alioss.InitiateMultipartUploadResult{Bucket: u.b.bucketName, Key: u.b.object(u.key), UploadID: uploadID}
}

// Put implements multipart.Store.
func (u *upload) Put(ctx context.Context, data []byte) (backends.ObjectInfo, error) {
	var h http.Header
	// The SDK compares its CRC64 of the body with the server's.
	err := u.b.bucket.PutObject(u.b.object(u.key), bytes.NewReader(data), alioss.WithContext(ctx), alioss.GetResponseHeader(&h))
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	if h.Get("ETag") == "" {
		return backends.ObjectInfo{}, fmt.Errorf("PUT response without ETag: %w", errTruncated)
	}
	return writtenInfo(u.key, h, int64(len(data))), nil
}

// writtenInfo is what a write of size bytes to key stored, from the
// response's headers: the object's Last-Modified is the time the server
// accepted it, its Date header (saving a HEAD per write).
func writtenInfo(key string, h http.Header, size int64) backends.ObjectInfo {
	mt, err := http.ParseTime(h.Get("Date"))
	if err != nil {
		mt = now()
	}
	return backends.ObjectInfo{Key: key, Size: size, ModTime: mt.Truncate(time.Second), Version: strings.Trim(h.Get("ETag"), `"`), Mode: 0o644}
}

// Initiate implements multipart.Store.
func (u *upload) Initiate(ctx context.Context) (string, error) {
	imur, err := u.b.bucket.InitiateMultipartUpload(u.b.object(u.key), alioss.WithContext(ctx))
	return imur.UploadID, err
}

// UploadPart implements multipart.Store.
func (u *upload) UploadPart(ctx context.Context, uploadID string, num int, body io.ReadSeeker, n int64) (part, error) {
	var h http.Header
	p, err := u.b.bucket.UploadPart(u.imur(uploadID), body, n, num, alioss.WithContext(ctx), alioss.GetResponseHeader(&h))
	if err != nil {
		return part{}, err
	}
	if strings.Trim(p.ETag, `"`) == "" {
		return part{}, fmt.Errorf("UploadPart response without ETag: %w", errTruncated)
	}
	crc, perr := strconv.ParseUint(h.Get("x-oss-hash-crc64ecma"), 10, 64)
	return part{UploadPart: p, crc: crc, size: n, known: perr == nil}, nil
}

// objectCRC is the CRC64 of the object, if known: that of everything
// observed, or, when the parts were read from a ReaderAt without our
// seeing them, combined from the parts' CRC64s (instead of a second pass
// over the data; unknown if the server reported none for some part).
func (u *upload) objectCRC(parts []part, observed bool) (uint64, bool) {
	if observed {
		return u.crc.Sum64(), true
	}
	var crc uint64
	for _, p := range parts {
		if !p.known {
			return 0, false
		}
		crc = alioss.CRC64Combine(crc, p.crc, uint64(p.size))
	}
	return crc, true
}

// Complete implements multipart.Store.
func (u *upload) Complete(ctx context.Context, uploadID string, parts []part, c multipart.Completion) (backends.ObjectInfo, error) {
	crc, crcKnown := u.objectCRC(parts, c.Observed)
	sum := strconv.FormatUint(crc, 10)
	ups := make([]alioss.UploadPart, len(parts))
	for i, p := range parts {
		ups[i] = p.UploadPart
	}
	var h http.Header
	res, err := u.b.bucket.CompleteMultipartUpload(u.imur(uploadID), ups, alioss.WithContext(ctx), alioss.GetResponseHeader(&h))
	if err == nil && h.Get("ETag") == "" && res.ETag != "" {
		// OSS may send the ETag only in the XML body.
		h = h.Clone()
		h.Set("ETag", res.ETag)
	}
	if err != nil && c.Retry && isNotFound(err) {
		// An earlier try may have completed the upload and lost its
		// response: the object is ours if its CRC64 is ours.
		if hh, herr := u.b.head(ctx, u.key); herr == nil && crcKnown && hh.Get("x-oss-hash-crc64ecma") == sum {
			h, err = hh, nil
		}
	}
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	if srv := h.Get("x-oss-hash-crc64ecma"); srv != "" && crcKnown && srv != sum {
		// Not a transient error to retry here (the upload is complete),
		// but one for the caller to retry with a new write.
		return backends.ObjectInfo{}, backends.Wrap("write", u.key, backends.ErrTransient,
			fmt.Errorf("multipart object CRC64 %s differs from the data written (%s)", srv, sum))
	}
	u.sum, u.sumKnown = crc, crcKnown
	return writtenInfo(u.key, h, c.Size), nil
}

// Abort implements multipart.Store.
func (u *upload) Abort(ctx context.Context, uploadID string) error {
	return u.b.AbortUpload(ctx, u.key, uploadID)
}
