package s3

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"

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
	return multipart.New(ctx, multipart.Store[types.CompletedPart](upload{b: b, key: key}), multipart.Options{
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
	}), nil
}

// upload is the S3 API's side of one object's write (multipart.Store):
// one try of each request, the SDK's answers checked for what a truncated
// response would lack.
type upload struct {
	b   *Backend
	key string
}

// info is what a PUT or a completed upload stored: the object's
// Last-Modified is the time the store accepted it, its Date header
// (sparing a HEAD per write).
func (u upload) info(size int64, etag *string, md middleware.Metadata) backends.ObjectInfo {
	return backends.ObjectInfo{Key: u.key, Size: size, ModTime: respDate(md), Version: etagOf(etag), Mode: 0o644}
}

// Put implements multipart.Store.
func (u upload) Put(ctx context.Context, data []byte) (backends.ObjectInfo, error) {
	out, err := u.b.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &u.b.bucket, Key: aws.String(u.b.object(u.key)),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data)))})
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	if etagOf(out.ETag) == "" {
		return backends.ObjectInfo{}, fmt.Errorf("PUT response without ETag: %w", errTruncated)
	}
	return u.info(int64(len(data)), out.ETag, out.ResultMetadata), nil
}

// Initiate implements multipart.Store.
func (u upload) Initiate(ctx context.Context) (string, error) {
	out, err := u.b.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &u.b.bucket, Key: aws.String(u.b.object(u.key))})
	if err != nil {
		return "", err
	}
	if aws.ToString(out.UploadId) == "" {
		return "", fmt.Errorf("CreateMultipartUpload response without UploadId: %w", errTruncated)
	}
	return aws.ToString(out.UploadId), nil
}

// UploadPart implements multipart.Store.
func (u upload) UploadPart(ctx context.Context, uploadID string, num int, body io.ReadSeeker, n int64) (types.CompletedPart, error) {
	out, err := u.b.client.UploadPart(ctx, &s3.UploadPartInput{Bucket: &u.b.bucket, Key: aws.String(u.b.object(u.key)),
		UploadId: aws.String(uploadID), PartNumber: aws.Int32(int32(num)), Body: body, ContentLength: aws.Int64(n)})
	if err != nil {
		return types.CompletedPart{}, err
	}
	if etagOf(out.ETag) == "" {
		return types.CompletedPart{}, fmt.Errorf("UploadPart response without ETag: %w", errTruncated)
	}
	return types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(int32(num))}, nil
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

// Complete implements multipart.Store.
func (u upload) Complete(ctx context.Context, uploadID string, parts []types.CompletedPart, c multipart.Completion) (backends.ObjectInfo, error) {
	out, err := u.b.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &u.b.bucket, Key: aws.String(u.b.object(u.key)),
		UploadId: aws.String(uploadID), MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	if err == nil {
		if etagOf(out.ETag) == "" {
			return backends.ObjectInfo{}, fmt.Errorf("CompleteMultipartUpload response without ETag: %w", errTruncated)
		}
		return u.info(c.Size, out.ETag, out.ResultMetadata), nil
	}
	if want, known := multipartETag(parts); c.Retry && isNotFound(err) && known {
		// An earlier try may have completed the upload and lost its
		// response: the object is ours if its ETag is the one our
		// parts make.
		if h, herr := u.b.head(ctx, u.key); herr == nil && strings.EqualFold(etagOf(h.ETag), want) && aws.ToInt64(h.ContentLength) == c.Size {
			return backends.ObjectInfo{Key: u.key, Size: c.Size, ModTime: aws.ToTime(h.LastModified), Version: etagOf(h.ETag), Mode: 0o644}, nil
		}
	}
	return backends.ObjectInfo{}, err
}

// Abort implements multipart.Store.
func (u upload) Abort(ctx context.Context, uploadID string) error {
	return u.b.AbortUpload(ctx, u.key, uploadID)
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
	mw := w.(*multipart.Writer[types.CompletedPart])
	uploadID, partSize, err := mw.Start()
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	fail := func(err error) (backends.ObjectInfo, error) {
		_ = mw.Abort(context.WithoutCancel(ctx))
		return backends.ObjectInfo{}, b.wrapErr("copy", from, err)
	}
	var parts []types.CompletedPart
	for off, num := int64(0), int32(1); off < src.Size; num++ {
		n := min(partSize, src.Size-off)
		var etag *string
		err := b.retry(ctx, func() error {
			out, err := b.client.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: &b.bucket, Key: aws.String(b.object(to)),
				UploadId: aws.String(uploadID), PartNumber: aws.Int32(num), CopySource: aws.String(source),
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
	if _, err := mw.CommitParts(ctx, parts, src.Size); err != nil {
		return backends.ObjectInfo{}, err
	}
	return b.Stat(ctx, to)
}
