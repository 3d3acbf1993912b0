package oss

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc64"
	"net/http"
	"strconv"
	"strings"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends"
)

var _ backends.ExclusiveWriter = (*Backend)(nil)

// WriteExclusive implements backends.ExclusiveWriter with one PUT carrying
// x-oss-forbid-overwrite: true, which OSS refuses with 409
// FileAlreadyExists when the key exists, atomically on the server.
//
// A retried PUT whose first try succeeded with its answer lost meets its
// own object and a 409: the object's CRC64 then tells whether it is ours
// (the same bytes) or another writer's.
func (b *Backend) WriteExclusive(ctx context.Context, key string, data []byte) (backends.ObjectInfo, error) {
	if key == "" || strings.HasSuffix(key, "/") {
		return backends.ObjectInfo{}, backends.Wrap("write", key, backends.ErrInvalid, errors.New("not an object key"))
	}
	sum := strconv.FormatUint(crc64.Checksum(data, crcTable), 10)
	var h http.Header
	tries := 0
	err := b.retry(ctx, func() error {
		tries++
		err := b.bucket.PutObject(b.object(key), bytes.NewReader(data), alioss.ForbidOverWrite(true),
			alioss.WithContext(ctx), alioss.GetResponseHeader(&h))
		if st, code := statusOf(err); st == http.StatusConflict && code == "FileAlreadyExists" && tries > 1 {
			if hh, herr := b.head(ctx, key); herr == nil && hh.Get("x-oss-hash-crc64ecma") == sum {
				h = hh
				return nil
			}
		}
		if err == nil && h.Get("ETag") == "" {
			return fmt.Errorf("PUT response without ETag: %w", errTruncated)
		}
		return err
	})
	if err != nil {
		return backends.ObjectInfo{}, b.wrapErr("write", key, err)
	}
	return writtenInfo(key, h, int64(len(data))), nil
}
