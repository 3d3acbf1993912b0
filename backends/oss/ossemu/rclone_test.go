package ossemu_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// rclone runs the real rclone (Debian package rclone) against the
// emulator as a path-style S3 endpoint.
func rclone(t *testing.T, e *emu, args ...string) (string, error) {
	t.Helper()
	return rcloneWith(t, e, ossemutest.AccessKeySecret, args...)
}

// rcloneWith runs rclone signing with secret.
func rcloneWith(t *testing.T, e *emu, secret string, args ...string) (string, error) {
	t.Helper()
	path, err := exec.LookPath("rclone")
	if err != nil {
		t.Fatalf("rclone is needed for this test (apt-get install rclone): %v", err)
	}
	cmd := exec.Command(path, append([]string{"--config", filepath.Join(t.TempDir(), "none.conf")}, args...)...)
	for _, kv := range os.Environ() {
		// rclone 1.60 cannot combine AWS_CA_BUNDLE with its own transport.
		if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "RCLONE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		"RCLONE_CONFIG_EMU_TYPE=s3", "RCLONE_CONFIG_EMU_PROVIDER=Other",
		"RCLONE_CONFIG_EMU_ENDPOINT=http://"+e.addr, "RCLONE_CONFIG_EMU_FORCE_PATH_STYLE=true",
		"RCLONE_CONFIG_EMU_ACCESS_KEY_ID="+ossemutest.AccessKeyID, "RCLONE_CONFIG_EMU_SECRET_ACCESS_KEY="+secret)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String() + errb.String(), err
	}
	return out.String(), nil
}

// TestRclone: the real rclone lists, uploads (multipart), server-side
// moves, downloads (checking MD5s) and checks data served by the emulator,
// seeded files included.
func TestRclone(t *testing.T) {
	e := start(t, ossemu.Options{})
	os.MkdirAll(e.path("seeded/sub"), 0o755)
	os.WriteFile(e.path("seeded/sub/a b+c.txt"), []byte("seeded with cp"), 0o644)
	os.WriteFile(e.path("seeded/big.bin"), randBytes(3<<20, 5), 0o644)
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "up.bin"), randBytes(12<<20+3, 6), 0o644)

	if out, err := rclone(t, e, "copy", local, "emu:"+bucketName+"/up", "--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M"); err != nil {
		t.Fatalf("rclone copy up: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(e.path("up/up.bin")); !bytes.Equal(got, randBytes(12<<20+3, 6)) {
		t.Fatal("multipart upload by rclone differs")
	}
	if e.srv.Stats()["UploadPart"] < 3 {
		t.Errorf("rclone did not upload in parts: %v", e.srv.Stats())
	}
	if out, err := rclone(t, e, "moveto", "emu:"+bucketName+"/seeded/sub/a b+c.txt", "emu:"+bucketName+"/seeded/sub/moved+d e.txt"); err != nil {
		t.Fatalf("rclone moveto: %v\n%s", err, out)
	}
	out, err := rclone(t, e, "lsf", "-R", "--files-only", "emu:"+bucketName)
	if err != nil {
		t.Fatalf("rclone lsf: %v\n%s", err, out)
	}
	if want := "seeded/big.bin\nseeded/sub/moved+d e.txt\nup/up.bin\n"; out != want {
		t.Errorf("rclone lsf:\n%s\nwant:\n%s", out, want)
	}
	down := t.TempDir()
	if out, err := rclone(t, e, "copy", "emu:"+bucketName, down); err != nil {
		t.Fatalf("rclone copy down: %v\n%s", err, out)
	}
	if out, err := exec.Command("diff", "-r", filepath.Join(e.root, bucketName), down).CombinedOutput(); err != nil {
		t.Errorf("diff -r bucket rclone-download: %v\n%s", err, out)
	}
	if out, err := rclone(t, e, "check", filepath.Join(e.root, bucketName), "emu:"+bucketName); err != nil {
		t.Errorf("rclone check: %v\n%s", err, out)
	}
}

// TestRcloneSignatures: rclone's S3 V2 signatures pass as its V4 ones do
// (TestRclone); a wrong secret is refused with SignatureDoesNotMatch and
// uploads nothing.
func TestRcloneSignatures(t *testing.T) {
	e := start(t, ossemu.Options{})
	os.MkdirAll(e.path("d"), 0o755)
	os.WriteFile(e.path("d/seeded.txt"), []byte("seeded"), 0o644)
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "v2.txt"), []byte("signed with v2"), 0o644)
	if out, err := rclone(t, e, "copy", "--s3-v2-auth", local, "emu:"+bucketName+"/d"); err != nil {
		t.Fatalf("rclone copy with V2 signatures: %v\n%s", err, out)
	}
	out, err := rclone(t, e, "lsf", "--s3-v2-auth", "emu:"+bucketName+"/d")
	if err != nil || out != "seeded.txt\nv2.txt\n" {
		t.Fatalf("rclone lsf with V2 signatures: %v\n%s", err, out)
	}
	os.WriteFile(filepath.Join(local, "bad.txt"), []byte("x"), 0o644)
	out, err = rcloneWith(t, e, "wrong-secret", "copy", "--retries", "1", "--low-level-retries", "1", local, "emu:"+bucketName+"/bad")
	if err == nil || !strings.Contains(out, "SignatureDoesNotMatch") {
		t.Fatalf("rclone with a wrong secret: %v\n%s", err, out)
	}
	if _, err := os.Stat(e.path("bad")); !os.IsNotExist(err) {
		t.Fatalf("a refused rclone upload left data: %v", err)
	}
}
