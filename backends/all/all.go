// Package all opens any backend from its URI. It is the one place that knows
// every backend package, so the others stay independent of each other.
package all

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/hdfs"
	"github.com/mlfsd/mlfsd/backends/nas"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/s3"
)

// Options gathers every backend's options.
type Options struct {
	OSS  oss.Options
	HDFS hdfs.Options
	NAS  nas.Options
	S3   s3.Options
}

// Open opens the backend for a directory URI. For a single-object URI it
// opens the containing directory and returns the object's key as well
// ("" for a directory URI).
func Open(ctx context.Context, u backends.URI, opt Options, log *slog.Logger) (b backends.Backend, key string, err error) {
	dir := u.Dir()
	switch u.Scheme {
	case backends.SchemeOSS:
		b, err = oss.New(ctx, dir, opt.OSS, log)
	case backends.SchemeHDFS:
		b, err = hdfs.New(ctx, dir, opt.HDFS, log)
	case backends.SchemeNAS:
		b, err = nas.New(ctx, dir, opt.NAS, log)
	case backends.SchemeS3:
		b, err = s3.New(ctx, dir, opt.S3, log)
	default:
		return nil, "", fmt.Errorf("unknown URI scheme %q", u.Scheme)
	}
	if err != nil {
		return nil, "", fmt.Errorf("open %s: %w", u, err)
	}
	return b, u.Base(), nil
}
