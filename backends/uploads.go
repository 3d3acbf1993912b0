package backends

import "context"

// UploadAborter is implemented by backends whose writes may leave a
// multipart upload open in the store when the writer dies (OSS). Optional,
// discovered by type assertion.
type UploadAborter interface {
	// AbortUpload discards the multipart upload uploadID of key (as
	// reported by WriteOptions.OnUpload). An upload that is already gone
	// (committed or aborted) is not an error.
	AbortUpload(ctx context.Context, key, uploadID string) error
}
