package sharedcache

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/backends/s3"
	"github.com/mlfsd/mlfsd/sharedcache/sharedtest"
)

// s3Store is a bucket of the emulator's S3 face over a real socket (an
// in-cluster MinIO or SeaweedFS stands there in production), opened with
// the few retries a node gives its tier's store.
func s3Store(t *testing.T) backends.Backend {
	t.Helper()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "tier"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, endpoint := ossemutest.Start(t, root, ossemu.Options{})
	t.Setenv("AWS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", ossemutest.AccessKeySecret)
	t.Setenv("AWS_SESSION_TOKEN", "")
	u, err := backends.ParseURI("s3://tier/shared/?endpoint=" + endpoint)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s3.New(t.Context(), u, s3.Options{Retry: s3.RetryOptions{MaxAttempts: 1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConformanceS3 runs the tier conformance suite with the tier on s3://.
func TestConformanceS3(t *testing.T) { sharedtest.Run(t, harness(s3Store, nil)) }
