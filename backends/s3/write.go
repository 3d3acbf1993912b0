package s3

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/mlfsd/mlfsd/backends"
)

// Write implements backends.Backend. Up to MultipartThreshold bytes are
// buffered and sent as one PUT at Commit; past it, a multipart upload
// starts and parts go up in the background, Concurrency at a time, while
// the caller keeps writing. Nothing is visible under key before Commit.
func (b *Backend) Write(ctx context.Context, key string, opt backends.WriteOptions) (backends.Writer, error) {
	if key == "" || strings.HasSuffix(key, "/") {
		return nil, backends.Wrap("write", key, backends.ErrInvalid, errors.New("not an object key"))
	}
	partSize := b.opt.PartSize
	if opt.SizeHint > 0 {
		// Stay well inside the 10000-part limit.
		partSize = max(partSize, (opt.SizeHint+maxParts*9/10-1)/(maxParts*9/10))
		partSize = min(partSize, maxPartSize)
	}
	wctx, cancel := context.WithCancel(ctx)
	return &writer{
		b: b, ctx: wctx, cancel: cancel, key: key, partSize: partSize, onUpload: opt.OnUpload,
		sem: make(chan struct{}, b.opt.Concurrency),
	}, nil
}

// writer is a write in progress. Its methods are called by one goroutine;
// part uploads run in background goroutines that only touch the fields
// under mu.
type writer struct {
	b        *Backend
	ctx      context.Context // lives until Commit or Abort; cancels part uploads
	cancel   context.CancelFunc
	key      string
	partSize int64
	onUpload func(uploadID string) // WriteOptions.OnUpload

	buf  []byte
	size int64

	uploadID string // the multipart upload, once started
	nextPart int32
	sem      chan struct{}
	wg       sync.WaitGroup

	// whole: WriteReaderAt gave the whole content; nothing more is written.
	whole bool

	mu      sync.Mutex
	parts   []types.CompletedPart // GUARDED_BY(mu)
	partErr error                 // GUARDED_BY(mu): the first part failure

	done      bool
	committed *backends.ObjectInfo
}

func (w *writer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.partErr
}

// usable says whether more data may be written.
func (w *writer) usable() error {
	if w.done {
		return backends.Wrap("write", w.key, backends.ErrInvalid, errors.New("write after commit or abort"))
	}
	if w.whole {
		return backends.Wrap("write", w.key, backends.ErrInvalid, errors.New("write after WriteReaderAt"))
	}
	return w.failed()
}

// Write implements io.Writer.
func (w *writer) Write(p []byte) (int, error) {
	if err := w.usable(); err != nil {
		return 0, err
	}
	w.size += int64(len(p))
	if w.buf == nil {
		w.buf = w.newPart()
	}
	w.buf = append(w.buf, p...)
	if err := w.sendParts(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ReadFrom implements io.ReaderFrom: it reads straight into part buffers,
// sparing a copy of every byte through the caller's buffer.
func (w *writer) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		if err := w.usable(); err != nil {
			return total, err
		}
		if w.buf == nil {
			w.buf = w.newPart()
		}
		if len(w.buf) == cap(w.buf) {
			// Only before a multipart upload starts, when the threshold
			// is above the part size.
			w.buf = slices.Grow(w.buf, int(w.partSize))
		}
		n, err := r.Read(w.buf[len(w.buf):cap(w.buf)])
		if n > 0 {
			w.size += int64(n)
			w.buf = w.buf[:len(w.buf)+n]
			total += int64(n)
			if serr := w.sendParts(); serr != nil {
				return total, serr
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// sendParts starts the multipart upload once the buffer passes the
// threshold, and then sends every whole part the buffer holds.
func (w *writer) sendParts() error {
	if w.uploadID == "" && int64(len(w.buf)) > w.b.opt.MultipartThreshold {
		if err := w.initiate(); err != nil {
			return err
		}
	}
	if w.uploadID == "" {
		return nil
	}
	for int64(len(w.buf)) >= w.partSize {
		part := w.buf[:w.partSize:w.partSize]
		w.buf = append(w.newPart(), w.buf[w.partSize:]...)
		if err := w.dispatch(part); err != nil {
			return err
		}
	}
	return nil
}

// newPart returns an empty buffer with room for a whole part, so that
// filling it never reallocates. Part buffers are not reused: the HTTP
// transport may still hold a part's body after its request returns.
func (w *writer) newPart() []byte { return make([]byte, 0, w.partSize) }

func (w *writer) initiate() error {
	var id string
	err := w.b.retry(w.ctx, func() error {
		out, err := w.b.client.CreateMultipartUpload(w.ctx, &s3.CreateMultipartUploadInput{Bucket: &w.b.bucket, Key: aws.String(w.b.object(w.key))})
		if err == nil && aws.ToString(out.UploadId) == "" {
			return fmt.Errorf("CreateMultipartUpload response without UploadId: %w", errTruncated)
		}
		if err == nil {
			id = aws.ToString(out.UploadId)
		}
		return err
	})
	if err != nil {
		return w.b.wrapErr("write", w.key, err)
	}
	w.uploadID = id
	if w.onUpload != nil {
		w.onUpload(id)
	}
	return nil
}

// dispatch uploads one part from memory in the background.
func (w *writer) dispatch(data []byte) error {
	return w.dispatchPart(int64(len(data)), func() io.ReadSeeker { return bytes.NewReader(data) })
}

// dispatchPart uploads the next part, n bytes that body returns (afresh
// for each try; seekable, as the SDK signs and checksums it), in the
// background, waiting for a free slot.
func (w *writer) dispatchPart(n int64, body func() io.ReadSeeker) error {
	select {
	case w.sem <- struct{}{}:
	case <-w.ctx.Done():
		return backends.Wrap("write", w.key, nil, w.ctx.Err())
	}
	w.nextPart++
	num := w.nextPart
	if num%1000 == 0 && w.partSize < maxPartSize {
		w.partSize = min(w.partSize*2, maxPartSize) // unknown size: grow to fit 10000 parts
	}
	w.wg.Add(1)
	go func() {
		defer func() { <-w.sem; w.wg.Done() }()
		var etag *string
		err := w.b.retry(w.ctx, func() error {
			out, err := w.b.client.UploadPart(w.ctx, &s3.UploadPartInput{Bucket: &w.b.bucket, Key: aws.String(w.b.object(w.key)),
				UploadId: aws.String(w.uploadID), PartNumber: aws.Int32(num), Body: body(), ContentLength: aws.Int64(n)})
			if err == nil && etagOf(out.ETag) == "" {
				return fmt.Errorf("UploadPart response without ETag: %w", errTruncated)
			}
			if err == nil {
				etag = out.ETag
			}
			return err
		})
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			if w.partErr == nil {
				w.partErr = w.b.wrapErr("write", w.key, fmt.Errorf("part %d: %w", num, err))
				w.cancel() // stop the other parts early
			}
			return
		}
		w.parts = append(w.parts, types.CompletedPart{ETag: etag, PartNumber: aws.Int32(num)})
	}()
	return nil
}

// WriteReaderAt implements backends.ReaderAtWriter. Up to the multipart
// threshold it reads r like ReadFrom; past it every part is read from r by
// its own upload, Concurrency at a time, with no copy through our memory.
func (w *writer) WriteReaderAt(r io.ReaderAt, size int64) error {
	if err := w.usable(); err != nil {
		return err
	}
	if w.size != 0 || w.buf != nil {
		return backends.Wrap("write", w.key, backends.ErrInvalid, errors.New("WriteReaderAt after Write"))
	}
	if size <= w.b.opt.MultipartThreshold {
		n, err := w.ReadFrom(io.NewSectionReader(r, 0, size))
		if err == nil && n != size {
			err = backends.Wrap("write", w.key, backends.ErrInvalid, fmt.Errorf("source gave %d of %d bytes", n, size))
		}
		w.whole = true
		return err
	}
	if err := w.initiate(); err != nil {
		return err
	}
	w.whole = true
	w.size = size
	for off := int64(0); off < size; {
		n, at := min(w.partSize, size-off), off
		if err := w.dispatchPart(n, func() io.ReadSeeker { return io.NewSectionReader(r, at, n) }); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// Commit implements backends.Writer.
func (w *writer) Commit(ctx context.Context) (backends.ObjectInfo, error) {
	if w.committed != nil {
		return *w.committed, nil
	}
	if w.done {
		return backends.ObjectInfo{}, backends.Wrap("commit", w.key, backends.ErrInvalid, errors.New("write was aborted"))
	}
	var info backends.ObjectInfo
	var err error
	if w.uploadID == "" {
		info, err = w.put(ctx)
	} else {
		info, err = w.complete(ctx)
	}
	if err != nil {
		_ = w.Abort(context.WithoutCancel(ctx))
		return backends.ObjectInfo{}, err
	}
	w.done = true
	w.committed = &info
	w.cancel()
	w.buf = nil
	return info, nil
}

func (w *writer) put(ctx context.Context) (backends.ObjectInfo, error) {
	var out *s3.PutObjectOutput
	err := w.b.retry(ctx, func() error {
		var err error
		out, err = w.b.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &w.b.bucket, Key: aws.String(w.b.object(w.key)),
			Body: bytes.NewReader(w.buf), ContentLength: aws.Int64(int64(len(w.buf)))})
		if err == nil && etagOf(out.ETag) == "" {
			return fmt.Errorf("PUT response without ETag: %w", errTruncated)
		}
		return err
	})
	if err != nil {
		return backends.ObjectInfo{}, w.b.wrapErr("write", w.key, err)
	}
	return backends.ObjectInfo{Key: w.key, Size: w.size, ModTime: respDate(out.ResultMetadata), Version: etagOf(out.ETag), Mode: 0o644}, nil
}

// multipartETag is the ETag S3 gives an object completed from parts with
// these ETags (when each is its part's MD5, as without SSE-KMS): the MD5 of
// the parts' binary MD5s, a dash, the number of parts.
func multipartETag(parts []types.CompletedPart) (string, bool) {
	h := md5.New()
	for _, p := range parts {
		sum, err := hex.DecodeString(etagOf(p.ETag))
		if err != nil || len(sum) != md5.Size {
			return "", false
		}
		h.Write(sum)
	}
	return fmt.Sprintf("%x-%d", h.Sum(nil), len(parts)), true
}

func (w *writer) complete(ctx context.Context) (backends.ObjectInfo, error) {
	if len(w.buf) > 0 || w.nextPart == 0 {
		last := w.buf
		w.buf = nil
		if err := w.dispatch(last); err != nil {
			return backends.ObjectInfo{}, err
		}
	}
	w.wg.Wait()
	if err := w.failed(); err != nil {
		return backends.ObjectInfo{}, err
	}
	w.mu.Lock()
	parts := append([]types.CompletedPart(nil), w.parts...)
	w.mu.Unlock()
	sort.Slice(parts, func(i, j int) bool { return aws.ToInt32(parts[i].PartNumber) < aws.ToInt32(parts[j].PartNumber) })
	want, wantKnown := multipartETag(parts)
	var info backends.ObjectInfo
	tries := 0
	err := w.b.retry(ctx, func() error {
		tries++
		out, err := w.b.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &w.b.bucket, Key: aws.String(w.b.object(w.key)),
			UploadId: aws.String(w.uploadID), MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
		if err == nil {
			if etagOf(out.ETag) == "" {
				return fmt.Errorf("CompleteMultipartUpload response without ETag: %w", errTruncated)
			}
			info = backends.ObjectInfo{Key: w.key, Size: w.size, ModTime: respDate(out.ResultMetadata), Version: etagOf(out.ETag), Mode: 0o644}
			return nil
		}
		if tries > 1 && isNotFound(err) && wantKnown {
			// An earlier try may have completed the upload and lost its
			// response: the object is ours if its ETag is the one our
			// parts make.
			if h, herr := w.b.head(ctx, w.key); herr == nil && strings.EqualFold(etagOf(h.ETag), want) && aws.ToInt64(h.ContentLength) == w.size {
				info = backends.ObjectInfo{Key: w.key, Size: w.size, ModTime: aws.ToTime(h.LastModified), Version: etagOf(h.ETag), Mode: 0o644}
				return nil
			}
		}
		return err
	})
	if err != nil {
		return backends.ObjectInfo{}, w.b.wrapErr("write", w.key, err)
	}
	w.uploadID = "" // completed: nothing to abort
	return info, nil
}

// Abort implements backends.Writer.
func (w *writer) Abort(ctx context.Context) error {
	if w.done {
		return nil
	}
	w.done = true
	w.cancel()
	w.wg.Wait()
	w.buf = nil
	if w.uploadID == "" {
		return nil
	}
	id := w.uploadID
	w.uploadID = ""
	return w.b.AbortUpload(ctx, w.key, id)
}

// AbortUpload implements backends.UploadAborter (AbortMultipartUpload).
func (b *Backend) AbortUpload(ctx context.Context, key, uploadID string) error {
	err := b.retry(ctx, func() error {
		_, err := b.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &b.bucket, Key: aws.String(b.object(key)), UploadId: aws.String(uploadID)})
		return err
	})
	if err != nil && !isNotFound(err) {
		return b.wrapErr("abort", key, err)
	}
	return nil
}

// copyParts copies an object larger than CopyObject allows with a
// multipart upload of UploadPartCopy parts, pinned to the source's ETag.
func (b *Backend) copyParts(ctx context.Context, from, to, source string, src backends.ObjectInfo) (backends.ObjectInfo, error) {
	w, err := b.Write(ctx, to, backends.WriteOptions{SizeHint: src.Size})
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	mw := w.(*writer)
	if err := mw.initiate(); err != nil {
		return backends.ObjectInfo{}, err
	}
	fail := func(err error) (backends.ObjectInfo, error) {
		_ = mw.Abort(context.WithoutCancel(ctx))
		return backends.ObjectInfo{}, b.wrapErr("copy", from, err)
	}
	var parts []types.CompletedPart
	for off, num := int64(0), int32(1); off < src.Size; num++ {
		n := min(mw.partSize, src.Size-off)
		var etag *string
		err := b.retry(ctx, func() error {
			out, err := b.client.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: &b.bucket, Key: aws.String(b.object(to)),
				UploadId: aws.String(mw.uploadID), PartNumber: aws.Int32(num), CopySource: aws.String(source),
				CopySourceRange: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1)), CopySourceIfMatch: aws.String(`"` + src.Version + `"`)})
			if err == nil && (out.CopyPartResult == nil || etagOf(out.CopyPartResult.ETag) == "") {
				return fmt.Errorf("UploadPartCopy response without ETag: %w", errTruncated)
			}
			if err == nil {
				etag = out.CopyPartResult.ETag
			}
			return err
		})
		if err != nil {
			return fail(err)
		}
		parts = append(parts, types.CompletedPart{ETag: etag, PartNumber: aws.Int32(num)})
		off += n
	}
	mw.mu.Lock()
	mw.parts = parts
	mw.mu.Unlock()
	mw.nextPart = int32(len(parts))
	mw.size = src.Size
	if _, err := mw.Commit(ctx); err != nil {
		return backends.ObjectInfo{}, err
	}
	return b.Stat(ctx, to)
}
