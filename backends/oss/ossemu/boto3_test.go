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

// pythonsWithBoto3 lists the interpreters to drive boto3 with: python3 on
// PATH and Debian's /usr/bin/python3 (package python3-boto3) when that is
// a different one, so both a current boto3 and Debian's are exercised.
func pythonsWithBoto3(t *testing.T) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	for _, name := range []string{"python3", "/usr/bin/python3"} {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		if exec.Command(p, "-c", "import boto3").Run() == nil {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		t.Fatal("boto3 is needed for this test (apt-get install python3-boto3)")
	}
	return out
}

// TestBoto3: the real boto3 drives the emulator as an S3 endpoint with
// SigV4 and SigV2: put/get (with Range), head ETag = MD5, paged
// list_objects_v2, multipart (complete and abort), copy, delete_objects,
// ACL and tags, and a wrong secret refused (testdata/boto3_check.py). The
// files stored are then compared with the bytes boto3 sent.
func TestBoto3(t *testing.T) {
	data := t.TempDir()
	small := []byte("hello from boto3\n")
	big := randBytes(5<<20+123457, 7)
	if err := os.WriteFile(filepath.Join(data, "small"), small, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("testdata/boto3_check.py")
	if err != nil {
		t.Fatal(err)
	}
	for _, py := range pythonsWithBoto3(t) {
		for _, sig := range []string{"s3v4", "s3"} {
			t.Run(filepath.Base(filepath.Dir(filepath.Dir(py)))+"/"+sig, func(t *testing.T) {
				e := start(t, ossemu.Options{})
				cmd := exec.Command(py, script, "http://"+e.addr, bucketName, sig, data)
				cmd.Env = append(os.Environ(), "EMU_AK="+ossemutest.AccessKeyID, "EMU_SK="+ossemutest.AccessKeySecret,
					"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s %s: %v\n%s", py, sig, err, out)
				}
				t.Logf("%s: %s", py, strings.TrimSpace(string(out)))
				stored := map[string][]byte{"small": small, "big": big, "copy": small}
				if sig == "s3v4" {
					stored["mp"] = big // multipart runs with SigV4 only (see the script)
				}
				for key, want := range stored {
					got, err := os.ReadFile(e.path(sig + "/" + key))
					if err != nil || !bytes.Equal(got, want) {
						t.Fatalf("stored %s/%s: %d bytes, want %d (%v)", sig, key, len(got), len(want), err)
					}
				}
				if _, err := os.Stat(e.path(sig + "/forged")); err == nil {
					t.Fatal("the wrong secret's object was stored")
				}
			})
		}
	}
}
