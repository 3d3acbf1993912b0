package node

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// jwt is a service-account token expiring at exp (the emulator's STS
// checks its expiry, not its signature).
func jwt(exp time.Time, n int) string {
	enc := base64.RawURLEncoding.EncodeToString
	claims, _ := json.Marshal(map[string]any{"iss": "https://oidc.test", "sub": "system:serviceaccount:ns:sa", "aud": "sts.amazonaws.com", "exp": exp.Unix(), "jti": n})
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(claims) + "." + enc([]byte("sig"))
}

// TestRepublishRefreshesRole: the same mount request with a new token
// assumes the role again on the live mount; one the STS refuses (an
// expired token) is an error naming the role and the STS, never the
// token, and the mount goes on with the keys it had; the node's own
// identity never replaces the pod's.
func TestRepublishRefreshesRole(t *testing.T) {
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
		t.Setenv(k, "")
	}
	const role = "arn:aws:iam::123456789012:role/trainer"
	srv, ep, root := ossemutest.StartBucket(t, "bkt", ossemu.Options{STSDuration: time.Hour, STSRoles: []string{role}})
	os.MkdirAll(filepath.Join(root, "bkt", "d"), 0o755)
	for _, f := range []string{"a", "b"} {
		os.WriteFile(filepath.Join(root, "bkt", "d", f), []byte("file "+f), 0o644)
	}
	n := newTestNode(t, "")
	n.opt.Settings.Identity.S3STSEndpoint = ep
	mnt := t.TempDir()
	req := func(tok string) MountRequest {
		return MountRequest{URI: "s3://bkt/d/?endpoint=" + ep, Target: mnt, ReadOnly: true,
			Credentials: Credentials{S3RoleARN: role, S3WebIdentityToken: tok}}
	}
	if _, err := n.Mount(t.Context(), req(jwt(time.Now().Add(time.Hour), 1))); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(mnt, "a")); string(got) != "file a" {
		t.Errorf("read: %q", got)
	}
	issued := srv.Stats()["sts.issued"]
	if _, err := n.Mount(t.Context(), req(jwt(time.Now().Add(time.Hour), 2))); err != nil {
		t.Fatalf("republish: %v", err)
	}
	if got := srv.Stats()["sts.issued"]; got != issued+1 {
		t.Errorf("republish with a new token: %d keys issued, want %d", got, issued+1)
	}
	expired := jwt(time.Now().Add(-time.Minute), 3)
	_, err := n.Mount(t.Context(), req(expired))
	if err == nil || !strings.Contains(err.Error(), role) || !strings.Contains(err.Error(), ep) || strings.Contains(err.Error(), expired) ||
		!strings.Contains(err.Error(), "keeps the ones it had") {
		t.Errorf("republish with an expired token: %v", err)
	}
	if got := readFile(t, filepath.Join(mnt, "b")); string(got) != "file b" {
		t.Errorf("read after a refused refresh: %q", got)
	}
	if _, err := n.Mount(t.Context(), MountRequest{URI: req("").URI, Target: mnt, ReadOnly: true}); !errors.Is(err, ErrTargetBusy) {
		t.Errorf("the same mount on the node's identity: %v", err)
	}
	if err := n.Unmount(t.Context(), mnt); err != nil {
		t.Fatal(err)
	}
}
