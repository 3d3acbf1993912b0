package s3

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/ranged"
)

// Read implements backends.Backend with a ranged.Read: the returned
// reader is bound to ctx, and resumes after a failure in the middle of
// the body by a ranged GET pinned to the ETag of the first response.
func (b *Backend) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	return ranged.Read(ctx, source{b: b, key: key}, ranged.Options{
		Key: key, Retry: b.opt.Retry, Transient: isTransient, Truncated: errTruncated, Log: b.log, Name: "s3",
		Wrap: func(op string, err error) error { return b.wrapErr(op, key, err) },
	}, opt)
}

// source is the S3 API's side of reading one object (ranged.Source).
type source struct {
	b   *Backend
	key string
}

// Stat implements ranged.Source.
func (s source) Stat(ctx context.Context) (backends.ObjectInfo, error) { return s.b.Stat(ctx, s.key) }

// PastEnd implements ranged.Source.
func (s source) PastEnd(err error) bool {
	st, _ := statusOf(err)
	return st == http.StatusRequestedRangeNotSatisfiable
}

// Open implements ranged.Source. A whole-object read (from 0, to the end)
// sends no Range, so that an empty object reads as empty rather than as an
// unsatisfiable range, and the SDK can check the object's checksum.
func (s source) Open(ctx context.Context, pos, end int64, version string) (ranged.Response, error) {
	in := &s3.GetObjectInput{Bucket: &s.b.bucket, Key: aws.String(s.b.object(s.key))}
	if pos > 0 || end >= 0 {
		if end >= 0 {
			in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", pos, end-1))
		} else {
			in.Range = aws.String(fmt.Sprintf("bytes=%d-", pos))
		}
	}
	if version != "" {
		in.IfMatch = aws.String(`"` + version + `"`)
	}
	out, err := s.b.client.GetObject(ctx, in)
	if err != nil {
		return ranged.Response{}, err
	}
	n := aws.ToInt64(out.ContentLength)
	if out.ContentLength == nil || n < 0 {
		out.Body.Close()
		return ranged.Response{}, fmt.Errorf("GET without Content-Length: %w", errTruncated)
	}
	return ranged.Response{Body: out.Body, Length: n, ContentRange: aws.ToString(out.ContentRange), Version: etagOf(out.ETag)}, nil
}
