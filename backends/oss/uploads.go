package oss

import (
	"context"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends"
)

var _ backends.UploadAborter = (*Backend)(nil)

// AbortUpload implements backends.UploadAborter (AbortMultipartUpload).
func (b *Backend) AbortUpload(ctx context.Context, key, uploadID string) error {
	imur := alioss.InitiateMultipartUploadResult{Bucket: b.bucketName, Key: b.object(key), UploadID: uploadID}
	err := b.retry(ctx, func() error {
		return b.bucket.AbortMultipartUpload(imur, alioss.WithContext(ctx))
	})
	if err != nil && !isNotFound(err) {
		return b.wrapErr("abort", key, err)
	}
	return nil
}
