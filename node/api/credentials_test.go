package api

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/node"
)

// TestMountCarriesS3Credentials: a client's S3 keys travel in the mount
// request to a daemon that has none of its own, which reads the store
// with them; wrong keys are refused by the store, and the error names the
// store but not the secret.
func TestMountCarriesS3Credentials(t *testing.T) {
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE"} {
		t.Setenv(k, "")
	}
	_, ep, root := ossemutest.StartBucket(t, "bkt", ossemu.Options{})
	os.MkdirAll(filepath.Join(root, "bkt", "data"), 0o755)
	os.WriteFile(filepath.Join(root, "bkt", "data", "f"), []byte("s3 data"), 0o644)
	c, _ := startServer(t)
	target := t.TempDir()
	uri := "s3://bkt/data/?endpoint=" + ep
	bad := node.Credentials{S3AccessKeyID: ossemutest.AccessKeyID, S3SecretAccessKey: "not-the-secret"}
	_, err := c.Mount(t.Context(), node.MountRequest{URI: uri, Target: target, ReadOnly: true, Credentials: bad})
	if err == nil || strings.Contains(err.Error(), "not-the-secret") {
		t.Fatalf("wrong S3 secret: %v", err)
	}
	good := node.Credentials{S3AccessKeyID: ossemutest.AccessKeyID, S3SecretAccessKey: ossemutest.AccessKeySecret}
	if _, err := c.Mount(t.Context(), node.MountRequest{URI: uri, Target: target, ReadOnly: true, Credentials: good}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("cat", filepath.Join(target, "f")).CombinedOutput()
	if err != nil || string(out) != "s3 data" {
		t.Errorf("read through the mount: %q, %v", out, err)
	}
	if err := c.Unmount(t.Context(), target); err != nil {
		t.Fatal(err)
	}
}
