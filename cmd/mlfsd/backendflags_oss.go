package main

import (
	"fmt"

	"github.com/dustin/go-humanize"
	"github.com/spf13/pflag"

	"github.com/mlfsd/mlfsd/backends/oss"
)

// addOSSFlags registers the OSS backend's flags. Access keys are never
// flags: they come from OSS_ACCESS_KEY_ID / OSS_ACCESS_KEY_SECRET /
// OSS_SESSION_TOKEN or --oss-credentials-file.
func addOSSFlags(fs *pflag.FlagSet, o *oss.Options) {
	fs.StringVar(&o.Endpoint, "oss-endpoint", "", "OSS endpoint when the URI has none (default $OSS_ENDPOINT), e.g. oss-cn-hangzhou.aliyuncs.com or http://127.0.0.1:9000")
	fs.StringVar(&o.CredentialsFile, "oss-credentials-file", "", "file with accessKeyID/accessKeySecret[/stsToken] lines (mode 0600); default: the OSS_ACCESS_KEY_* environment")
	fs.Var(&ossSize{&o.MultipartThreshold}, "oss-multipart-threshold", "OSS writes larger than this use a multipart upload (default 16MiB)")
	fs.Var(&ossSize{&o.PartSize}, "oss-part-size", "OSS multipart part size (default 8MiB)")
	fs.IntVar(&o.Concurrency, "oss-upload-concurrency", 0, "parts of one OSS write uploaded in parallel (default 4)")
	fs.IntVar(&o.Retry.MaxAttempts, "oss-retry-attempts", 0, "tries of one OSS request on 5xx, throttling and connection errors (default 10)")
	fs.DurationVar(&o.Retry.MaxElapsed, "oss-retry-max-time", 0, "time bound on retrying one OSS request (default 2m)")
}

// ossSize is a byte-size flag value ("8MiB", "16MB", "1048576").
type ossSize struct{ v *int64 }

func (s *ossSize) String() string {
	if s.v == nil || *s.v == 0 {
		return ""
	}
	return humanize.IBytes(uint64(*s.v))
}

func (s *ossSize) Set(v string) error {
	n, err := humanize.ParseBytes(v)
	if err != nil || n > 1<<62 {
		return fmt.Errorf("want a size like 8MiB: %q", v)
	}
	*s.v = int64(n)
	return nil
}

func (s *ossSize) Type() string { return "size" }
