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

// SecretEnv returns the environment variables that hold a store secret
// (a key, a session token) for a scheme's backend: what `mlfsd run`
// withholds from the job, which reaches storage through its mounts only.
// HDFS (SIMPLE authentication: a user name) and NAS read none.
func SecretEnv(scheme string) []string {
	switch scheme {
	case backends.SchemeOSS:
		return oss.SecretEnv()
	case backends.SchemeS3:
		return s3.SecretEnv()
	}
	return nil
}

// AllSecretEnv is SecretEnv of every scheme.
func AllSecretEnv() []string {
	var out []string
	for _, s := range []string{backends.SchemeOSS, backends.SchemeHDFS, backends.SchemeNAS, backends.SchemeS3} {
		out = append(out, SecretEnv(s)...)
	}
	return out
}
