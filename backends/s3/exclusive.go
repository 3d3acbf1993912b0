package s3

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/mlfsd/mlfsd/backends"
)

// WriteExclusive implements backends.ExclusiveWriter with a PUT carrying
// If-None-Match: * (S3 conditional writes, which current MinIO and the
// emulator's S3 face honour too). The store decides atomically: of
// racing writers the first to finish wins, the others get 412
// PreconditionFailed, reported as ErrExist. A 409 ConditionalRequestConflict
// (the key changed while the PUT was in flight) is retried, as S3 asks,
// and the condition then decides.
//
// A store that ignores If-None-Match (older releases of S3-compatible stores)
// would let every racer win: the first WriteExclusive of a backend proves
// the store honours it, on a probe object next to key, and WriteExclusive
// fails with ErrUnsupported where it does not.
//
// A retry after a lost response may find the object our own earlier try
// wrote: a 412 on a retry is ours, not a loss, when the object's ETag is
// the MD5 of our data. (A racer that wrote the very same bytes cannot be
// told apart; leases and claims name their holder, so theirs differ.)
func (b *Backend) WriteExclusive(ctx context.Context, key string, data []byte) (backends.ObjectInfo, error) {
	if key == "" || strings.HasSuffix(key, "/") {
		return backends.ObjectInfo{}, backends.Wrap("write", key, backends.ErrInvalid, errors.New("not an object key"))
	}
	if int64(len(data)) > maxPartSize {
		return backends.ObjectInfo{}, backends.Wrap("write", key, backends.ErrInvalid, fmt.Errorf("%d bytes is more than one PUT takes", len(data)))
	}
	if err := b.checkConditional(ctx, key); err != nil {
		return backends.ObjectInfo{}, err
	}
	out, lost, tries, err := b.putIfAbsent(ctx, key, data)
	if err == nil {
		return backends.ObjectInfo{Key: key, Size: int64(len(data)), ModTime: respDate(out.ResultMetadata), Version: etagOf(out.ETag), Mode: 0o644}, nil
	}
	st, code := statusOf(err)
	if lost && tries > 1 {
		if h, herr := b.head(ctx, key); herr == nil && strings.EqualFold(etagOf(h.ETag), fmt.Sprintf("%x", md5.Sum(data))) && aws.ToInt64(h.ContentLength) == int64(len(data)) {
			return backends.ObjectInfo{Key: key, Size: int64(len(data)), ModTime: aws.ToTime(h.LastModified), Version: etagOf(h.ETag), Mode: 0o644}, nil
		}
	}
	if st == http.StatusPreconditionFailed || st == http.StatusConflict && code == "ConditionalRequestConflict" {
		return backends.ObjectInfo{}, backends.Wrap("write", key, backends.ErrExist, err)
	}
	return backends.ObjectInfo{}, b.wrapErr("write", key, err)
}

// putIfAbsent PUTs data under key with If-None-Match: *, retrying. lost
// reports a 412 on some try; tries counts them.
func (b *Backend) putIfAbsent(ctx context.Context, key string, data []byte) (out *s3.PutObjectOutput, lost bool, tries int, err error) {
	err = b.retry(ctx, func() error {
		tries++
		var err error
		out, err = b.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &b.bucket, Key: aws.String(b.object(key)),
			Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))), IfNoneMatch: aws.String("*")})
		if err == nil && etagOf(out.ETag) == "" {
			return fmt.Errorf("PUT response without ETag: %w", errTruncated)
		}
		if st, _ := statusOf(err); st == http.StatusPreconditionFailed {
			lost = true
		}
		return err
	})
	return out, lost, tries, err
}

// conditional records whether the store honours If-None-Match on PUT.
type conditional struct {
	mu      sync.Mutex
	checked bool  // GUARDED_BY(mu)
	err     error // GUARDED_BY(mu): ErrUnsupported when it does not
}

// checkConditional proves, once per backend, that a second PUT with
// If-None-Match: * of one key fails, on a probe object next to key.
// Failures to reach the store are not remembered.
func (b *Backend) checkConditional(ctx context.Context, key string) error {
	b.cond.mu.Lock()
	defer b.cond.mu.Unlock()
	if b.cond.checked {
		return b.cond.err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	probe := fmt.Sprintf("%s.mlfsd-if-none-match-probe-%x", key, rnd)
	if _, _, _, err := b.putIfAbsent(ctx, probe, nil); err != nil {
		return b.wrapErr("write", key, fmt.Errorf("probing If-None-Match support: %w", err))
	}
	_, lost, _, err := b.putIfAbsent(ctx, probe, nil)
	if derr := b.deleteObject(ctx, b.object(probe)); derr != nil {
		b.log.Warn("s3: removing the If-None-Match probe object", "key", probe, "err", derr)
	}
	switch {
	case err == nil:
		b.cond.err = backends.Wrap("write", key, backends.ErrUnsupported,
			fmt.Errorf("the store at %s ignores If-None-Match on PUT (an older S3-compatible store?): create-if-absent cannot be made safe there", b.where()))
	case !lost:
		return b.wrapErr("write", key, fmt.Errorf("probing If-None-Match support: %w", err))
	}
	b.cond.checked = true
	return b.cond.err
}
