package ossemu_test

import (
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
)

// keyBucket is a client of the emulator signing with another key pair.
func keyBucket(t *testing.T, e *emu, id, secret string) *alioss.Bucket {
	t.Helper()
	c, err := alioss.New("http://"+e.addr, id, secret, alioss.ForcePathStyle(true))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Bucket(bucketName)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wantDenied(t *testing.T, what string, err error) {
	t.Helper()
	var se alioss.ServiceError
	if !errors.As(err, &se) || se.StatusCode != http.StatusForbidden || se.Code != "AccessDenied" {
		t.Fatalf("%s: %v; want 403 AccessDenied", what, err)
	}
}

// TestAccessRules: a key with rules does what they allow and nothing else,
// refused with 403 AccessDenied as OSS refuses a RAM user: "lister" may
// list train/ but not read or write it; "reader" may list and read train/
// but not val/, nor write; the primary key may do anything. Unknown keys
// and bad rules are refused by name.
func TestAccessRules(t *testing.T) {
	e := start(t, ossemu.Options{Keys: []ossemu.Key{
		{ID: "lister", Secret: "s1", Allow: []ossemu.Rule{{Bucket: bucketName, Prefix: "train/", Actions: []ossemu.Action{ossemu.ActionList}}}},
		{ID: "reader", Secret: "s2", Allow: []ossemu.Rule{{Bucket: bucketName, Prefix: "train/", Actions: []ossemu.Action{ossemu.ActionList, ossemu.ActionGet}}}},
	}})
	for _, k := range []string{"train/a", "val/b"} {
		if err := e.bucket.PutObject(k, strings.NewReader("data of "+k)); err != nil {
			t.Fatal(err)
		}
	}
	lister := keyBucket(t, e, "lister", "s1")
	reader := keyBucket(t, e, "reader", "s2")

	for name, b := range map[string]*alioss.Bucket{"lister": lister, "reader": reader} {
		res, err := b.ListObjectsV2(alioss.Prefix("train/"))
		if err != nil || len(res.Objects) != 1 || res.Objects[0].Key != "train/a" {
			t.Fatalf("%s lists train/: %v %+v", name, err, res.Objects)
		}
		_, err = b.ListObjectsV2(alioss.Prefix("val/"))
		wantDenied(t, name+" lists val/", err)
		_, err = b.ListObjectsV2()
		wantDenied(t, name+" lists the whole bucket", err)
		wantDenied(t, name+" puts train/new", b.PutObject("train/new", strings.NewReader("x")))
		wantDenied(t, name+" deletes train/a", b.DeleteObject("train/a"))
	}
	_, err := lister.GetObject("train/a")
	wantDenied(t, "lister gets train/a", err)
	_, err = lister.GetObjectDetailedMeta("train/a")
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("lister HEADs train/a: %v; want 403", err)
	}
	r, err := reader.GetObject("train/a")
	if err != nil {
		t.Fatalf("reader gets train/a: %v", err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(got) != "data of train/a" {
		t.Fatalf("reader got %q, %v", got, err)
	}
	if _, err := reader.GetObjectDetailedMeta("train/a"); err != nil {
		t.Fatalf("reader HEADs train/a: %v", err)
	}
	_, err = reader.GetObject("val/b")
	wantDenied(t, "reader gets val/b", err)
	_, err = reader.CopyObject("train/a", "train/copy")
	wantDenied(t, "reader copies within train/", err)
	if n := e.srv.Stats()["AccessDenied"]; n < 10 {
		t.Fatalf("AccessDenied counted %d times", n)
	}
	if _, err := e.bucket.GetObject("val/b"); err != nil {
		t.Fatalf("the primary key gets val/b: %v", err)
	}

	_, err = keyBucket(t, e, "nobody", "x").GetObject("train/a")
	var se alioss.ServiceError
	if !errors.As(err, &se) || se.Code != "InvalidAccessKeyId" {
		t.Fatalf("unknown key: %v; want InvalidAccessKeyId", err)
	}
	_, err = keyBucket(t, e, "reader", "wrong").GetObject("train/a")
	if !errors.As(err, &se) || se.Code != "SignatureDoesNotMatch" {
		t.Fatalf("reader's id with a wrong secret: %v; want SignatureDoesNotMatch", err)
	}

	for _, bad := range [][]ossemu.Key{
		{{ID: "k", Allow: []ossemu.Rule{{Actions: []ossemu.Action{ossemu.ActionGet}}}}},
		{{ID: "k", Secret: "s", Allow: []ossemu.Rule{{Actions: []ossemu.Action{"read"}}}}},
		{{ID: "k", Secret: "s", Allow: []ossemu.Rule{{Prefix: "p/"}}}},
		{{ID: ossemu.DefaultAccessKeyID, Secret: "s"}},
	} {
		if _, err := ossemu.New(t.TempDir(), ossemu.Options{Keys: bad}); err == nil {
			t.Fatalf("keys %+v accepted", bad)
		}
	}
}

// TestLoadKeys: the --access-rules file is read into Keys; a file with an
// unknown field or no keys is refused naming the file.
func TestLoadKeys(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "rules.json")
	if err := os.WriteFile(good, []byte(`{"keys": [{"id": "reader", "secret": "s", "allow": [{"bucket": "data", "prefix": "train/", "actions": ["list", "get"]}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := ossemu.LoadKeys(good)
	if err != nil || len(keys) != 1 || keys[0].ID != "reader" || keys[0].Allow[0].Prefix != "train/" || len(keys[0].Allow[0].Actions) != 2 {
		t.Fatalf("LoadKeys: %+v, %v", keys, err)
	}
	for _, body := range []string{`{"keys": []}`, `{"keys": [{"id": "k", "secret": "s", "rules": []}]}`, `not json`} {
		bad := filepath.Join(dir, "bad.json")
		if err := os.WriteFile(bad, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ossemu.LoadKeys(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Fatalf("LoadKeys(%s): %v", body, err)
		}
	}
}
