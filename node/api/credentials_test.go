package api

import (
	"context"
	"fmt"
	"log/slog"
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
	os.WriteFile(filepath.Join(root, "bkt", "data", "f2"), []byte("more s3 data"), 0o644)
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
	// The same mount again with keys the store refuses (a Secret rotated
	// to a key that does not exist): refused, and the mount keeps the keys
	// it had. (Another key ID: the SDK's signer keeps a signing key per
	// key ID and day, so a changed secret alone is not seen at once.)
	wrong := node.Credentials{S3AccessKeyID: "AKIA-not-a-key", S3SecretAccessKey: "not-the-secret"}
	_, err = c.Mount(t.Context(), node.MountRequest{URI: uri, Target: target, ReadOnly: true, Credentials: wrong})
	if err == nil || !strings.Contains(err.Error(), "keeps the ones it had") || strings.Contains(err.Error(), "not-the-secret") {
		t.Errorf("refresh with a wrong secret: %v", err)
	}
	out, err = exec.Command("cat", filepath.Join(target, "f2")).CombinedOutput()
	if err != nil || string(out) != "more s3 data" {
		t.Errorf("a first read from the store after a refused refresh: %q, %v", out, err)
	}
	if _, err := c.Mount(t.Context(), node.MountRequest{URI: uri, Target: target, ReadOnly: true, Credentials: good}); err != nil {
		t.Errorf("the same request again: %v", err)
	}
	if err := c.Unmount(t.Context(), target); err != nil {
		t.Fatal(err)
	}
}

// TestAPINeverLogsCredentials: mount requests bringing every kind of
// credential (accepted, and refused) leave no secret in the daemon's log
// (at debug level) nor in its answers.
func TestAPINeverLogsCredentials(t *testing.T) {
	var logs strings.Builder
	n := testNode(t)
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(n, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		<-done
		n.Close(context.Background())
	})
	c := NewClient(sock)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	secrets := []string{"oss-s3cret", "oss-sts-t0ken", "eyJ-oidc-t0ken", "s3-s3cret", "s3-sess-t0ken", "eyJ-web-t0ken"}
	for i, cr := range []node.Credentials{
		{OSSAccessKeyID: "LTAI-id", OSSAccessKeySecret: secrets[0], OSSSecurityToken: secrets[1],
			S3RoleARN: "arn:aws:iam::1:role/r", S3WebIdentityToken: secrets[5], HDFSUser: "alice"},
		{OSSRoleARN: "acs:ram::1:role/r", OSSOIDCProviderARN: "acs:ram::1:oidc-provider/p", OSSOIDCToken: secrets[2],
			S3AccessKeyID: "AKIA-id", S3SecretAccessKey: secrets[3], S3SessionToken: secrets[4]},
	} {
		target := t.TempDir()
		var answers []string
		if _, err := c.Mount(t.Context(), node.MountRequest{URI: "nas://" + src + "/", Target: target, ReadOnly: true, Credentials: cr}); err != nil {
			t.Fatalf("mount %d: %v", i, err)
		}
		// A refused one: half an identity.
		half := cr
		half.OSSAccessKeyID, half.OSSRoleARN, half.S3AccessKeyID, half.S3RoleARN = "", "", "", ""
		if _, err := c.Mount(t.Context(), node.MountRequest{URI: "nas://" + src + "/", Target: t.TempDir(), ReadOnly: true, Credentials: half}); err == nil {
			t.Errorf("half an identity accepted")
		} else {
			answers = append(answers, err.Error())
		}
		st, err := c.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, fmt.Sprintf("%+v", st))
		if err := c.Unmount(t.Context(), target); err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			for _, out := range append(answers, logs.String()) {
				if strings.Contains(out, s) {
					t.Errorf("secret %q in %s", s, out)
				}
			}
		}
	}
	if !strings.Contains(logs.String(), "LTAI-id") {
		t.Errorf("the mount requests were not logged (with their public fields):\n%s", logs.String())
	}
}
