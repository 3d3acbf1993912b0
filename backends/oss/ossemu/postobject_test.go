package ossemu_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"hash"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

const postBucket = "forms"

// postPolicyB64 encodes a POST policy expiring at exp.
func postPolicyB64(t *testing.T, exp time.Time, conds ...any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"expiration": exp.UTC().Format("2006-01-02T15:04:05.000Z"), "conditions": conds})
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func postHMAC(h func() hash.Hash, key []byte, s string) []byte {
	m := hmac.New(h, key)
	m.Write([]byte(s))
	return m.Sum(nil)
}

// signOSSV1 adds OSS V1 form fields: Signature = base64(HMAC-SHA1(secret, policy)).
func signOSSV1(fields [][2]string, policy, ak, secret string) [][2]string {
	sig := base64.StdEncoding.EncodeToString(postHMAC(sha1.New, []byte(secret), policy))
	return append(fields, [2]string{"OSSAccessKeyId", ak}, [2]string{"policy", policy}, [2]string{"Signature", sig})
}

// signS3V4 adds SigV4 form fields: x-amz-signature = hex(HMAC-SHA256(signing key, policy)).
// The policy must have been built with the same credential and date.
func signS3V4(fields [][2]string, policy, secret, cred, date string) [][2]string {
	parts := strings.Split(cred, "/")
	k := postHMAC(sha256.New, []byte("AWS4"+secret), parts[1])
	k = postHMAC(sha256.New, k, parts[2])
	k = postHMAC(sha256.New, k, parts[3])
	k = postHMAC(sha256.New, k, "aws4_request")
	sig := hex.EncodeToString(postHMAC(sha256.New, k, policy))
	return append(fields, [2]string{"x-amz-algorithm", "AWS4-HMAC-SHA256"}, [2]string{"x-amz-credential", cred},
		[2]string{"x-amz-date", date}, [2]string{"policy", policy}, [2]string{"x-amz-signature", sig})
}

// signOSSV4 adds OSS V4 form fields: x-oss-signature = hex(HMAC-SHA256(
// aliyun_v4 signing key, policy)).
func signOSSV4(fields [][2]string, policy, secret, cred, date string) [][2]string {
	parts := strings.Split(cred, "/")
	k := postHMAC(sha256.New, []byte("aliyun_v4"+secret), parts[1])
	k = postHMAC(sha256.New, k, parts[2])
	k = postHMAC(sha256.New, k, parts[3])
	k = postHMAC(sha256.New, k, "aliyun_v4_request")
	sig := hex.EncodeToString(postHMAC(sha256.New, k, policy))
	return append(fields, [2]string{"x-oss-signature-version", "OSS4-HMAC-SHA256"}, [2]string{"x-oss-credential", cred},
		[2]string{"x-oss-date", date}, [2]string{"policy", policy}, [2]string{"x-oss-signature", sig})
}

// postForm sends fields then the file as multipart/form-data to the bucket.
func postForm(t *testing.T, endpoint string, fields [][2]string, filename string, data []byte) (*http.Response, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range fields {
		if err := mw.WriteField(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	fw, err := mw.CreateFormFile("file", filename)
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(data)
	mw.WriteField("after", "ignored")
	mw.Close()
	// No redirects followed: a 303 is an answer under test.
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Post(endpoint+"/"+postBucket, mw.FormDataContentType(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func errCode(body []byte) string {
	var e struct {
		Code string `xml:"Code"`
	}
	_ = xml.Unmarshal(body, &e)
	return e.Code
}

func TestPostObject(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, postBucket), 0o755); err != nil {
		t.Fatal(err)
	}
	_, endpoint := ossemutest.Start(t, root, ossemu.Options{})
	client, err := alioss.New(endpoint, ossemutest.AccessKeyID, ossemutest.AccessKeySecret, alioss.ForcePathStyle(true))
	if err != nil {
		t.Fatal(err)
	}
	bkt, err := client.Bucket(postBucket)
	if err != nil {
		t.Fatal(err)
	}
	ak, secret := ossemutest.AccessKeyID, ossemutest.AccessKeySecret
	future := time.Now().Add(time.Hour)
	absent := func(key string) {
		t.Helper()
		if _, err := os.Lstat(filepath.Join(root, postBucket, filepath.FromSlash(key))); !os.IsNotExist(err) {
			t.Errorf("%s was stored (%v)", key, err)
		}
	}
	stored := func(key string, data []byte, etag string) {
		t.Helper()
		sum := md5.Sum(data)
		if want := hex.EncodeToString(sum[:]); !strings.EqualFold(strings.Trim(etag, `"`), want) {
			t.Errorf("%s: ETag %s, want %s", key, etag, want)
		}
		if got, err := os.ReadFile(filepath.Join(root, postBucket, filepath.FromSlash(key))); err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s on disk: %q %v", key, got, err)
		}
		rd, err := bkt.GetObject(key)
		if err != nil {
			t.Fatalf("GetObject %s: %v", key, err)
		}
		got, err := io.ReadAll(rd)
		rd.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("GetObject %s: %q %v", key, got, err)
		}
	}

	t.Run("OSSV1_204", func(t *testing.T) {
		data := []byte("hello from a browser form")
		pol := postPolicyB64(t, future, map[string]any{"bucket": postBucket}, []any{"starts-with", "$key", "user/"},
			[]any{"content-length-range", 1, 1024})
		fields := signOSSV1([][2]string{{"key", "user/${filename}"}, {"Content-Type", "text/plain"}, {"x-oss-meta-owner", "eric"}}, pol, ak, secret)
		resp, body := postForm(t, endpoint, fields, "a.txt", data)
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		stored("user/a.txt", data, resp.Header.Get("ETag"))
		m, err := bkt.GetObjectDetailedMeta("user/a.txt")
		if err != nil {
			t.Fatal(err)
		}
		if m.Get("Content-Type") != "text/plain" || m.Get("X-Oss-Meta-Owner") != "eric" {
			t.Errorf("meta: %v", m)
		}
	})

	t.Run("S3V4_201", func(t *testing.T) {
		data := bytes.Repeat([]byte("0123456789"), 1000)
		now := time.Now().UTC()
		date, day := now.Format("20060102T150405Z"), now.Format("20060102")
		cred := ak + "/" + day + "/us-east-1/s3/aws4_request"
		pol := postPolicyB64(t, future, map[string]any{"bucket": postBucket}, []any{"eq", "$key", "s3/obj.bin"},
			[]any{"eq", "$success_action_status", "201"}, map[string]any{"x-amz-algorithm": "AWS4-HMAC-SHA256"},
			map[string]any{"x-amz-credential": cred}, map[string]any{"x-amz-date": date})
		fields := signS3V4([][2]string{{"key", "s3/obj.bin"}, {"success_action_status", "201"}}, pol, secret, cred, date)
		resp, body := postForm(t, endpoint, fields, "obj.bin", data)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		var pr struct {
			Bucket, Key, ETag string
		}
		if err := xml.Unmarshal(body, &pr); err != nil || pr.Bucket != postBucket || pr.Key != "s3/obj.bin" || pr.ETag != resp.Header.Get("ETag") {
			t.Errorf("PostResponse %+v %v: %s", pr, err, body)
		}
		stored("s3/obj.bin", data, resp.Header.Get("ETag"))
	})

	t.Run("WrongSignature", func(t *testing.T) {
		pol := postPolicyB64(t, future)
		fields := signOSSV1([][2]string{{"key", "bad/sig"}}, pol, ak, "not-the-secret")
		resp, body := postForm(t, endpoint, fields, "x", []byte("x"))
		if resp.StatusCode != http.StatusForbidden || errCode(body) != "SignatureDoesNotMatch" {
			t.Errorf("status %d: %s", resp.StatusCode, body)
		}
		absent("bad/sig")
		now := time.Now().UTC()
		cred := ak + "/" + now.Format("20060102") + "/us-east-1/s3/aws4_request"
		fields = signS3V4([][2]string{{"key", "bad/sig4"}}, pol, "nope", cred, now.Format("20060102T150405Z"))
		resp, body = postForm(t, endpoint, fields, "x", []byte("x"))
		if resp.StatusCode != http.StatusForbidden || errCode(body) != "SignatureDoesNotMatch" {
			t.Errorf("V4 status %d: %s", resp.StatusCode, body)
		}
		absent("bad/sig4")
		resp, body = postForm(t, endpoint, [][2]string{{"key", "bad/none"}}, "x", []byte("x"))
		if resp.StatusCode != http.StatusForbidden || errCode(body) != "AccessDenied" {
			t.Errorf("unsigned status %d: %s", resp.StatusCode, body)
		}
		absent("bad/none")
	})

	t.Run("Expired", func(t *testing.T) {
		pol := postPolicyB64(t, time.Now().Add(-time.Minute))
		resp, body := postForm(t, endpoint, signOSSV1([][2]string{{"key", "old"}}, pol, ak, secret), "x", []byte("x"))
		if resp.StatusCode != http.StatusForbidden || errCode(body) != "AccessDenied" || !bytes.Contains(body, []byte("Policy expired")) {
			t.Errorf("status %d: %s", resp.StatusCode, body)
		}
		absent("old")
	})

	t.Run("ContentLengthRange", func(t *testing.T) {
		pol := postPolicyB64(t, future, []any{"content-length-range", 1, 10})
		resp, body := postForm(t, endpoint, signOSSV1([][2]string{{"key", "big"}}, pol, ak, secret), "x", make([]byte, 11))
		if resp.StatusCode != http.StatusBadRequest || errCode(body) != "EntityTooLarge" {
			t.Errorf("status %d: %s", resp.StatusCode, body)
		}
		absent("big")
		resp, body = postForm(t, endpoint, signOSSV1([][2]string{{"key", "small"}}, pol, ak, secret), "x", nil)
		if resp.StatusCode != http.StatusBadRequest || errCode(body) != "EntityTooSmall" {
			t.Errorf("status %d: %s", resp.StatusCode, body)
		}
		absent("small")
	})

	t.Run("KeyStartsWith", func(t *testing.T) {
		pol := postPolicyB64(t, future, []any{"starts-with", "$key", "user/"})
		resp, body := postForm(t, endpoint, signOSSV1([][2]string{{"key", "other/x"}}, pol, ak, secret), "x", []byte("x"))
		if resp.StatusCode != http.StatusForbidden || errCode(body) != "AccessDenied" {
			t.Errorf("status %d: %s", resp.StatusCode, body)
		}
		absent("other/x")
	})
	t.Run("OSSV4_ACL", func(t *testing.T) {
		data := []byte("signed with OSS V4")
		now := time.Now().UTC()
		date := now.Format("20060102T150405Z")
		cred := ak + "/" + now.Format("20060102") + "/cn-hangzhou/oss/aliyun_v4_request"
		pol := postPolicyB64(t, future, map[string]any{"bucket": postBucket}, []any{"eq", "$key", "v4/obj"},
			map[string]any{"x-oss-signature-version": "OSS4-HMAC-SHA256"}, map[string]any{"x-oss-credential": cred},
			map[string]any{"x-oss-date": date})
		fields := signOSSV4([][2]string{{"key", "v4/obj"}, {"x-oss-object-acl", "public-read"}}, pol, secret, cred, date)
		resp, body := postForm(t, endpoint, fields, "obj", data)
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		stored("v4/obj", data, resp.Header.Get("ETag"))
		acl, err := bkt.GetObjectACL("v4/obj")
		if err != nil || acl.ACL != "public-read" {
			t.Errorf("ACL %q %v", acl.ACL, err)
		}
		// The same form signed with another secret, and with the policy
		// changed after signing: refused, nothing stored.
		bad := signOSSV4([][2]string{{"key", "v4/bad"}}, pol, "nope", cred, date)
		resp, body = postForm(t, endpoint, bad, "obj", data)
		if resp.StatusCode != http.StatusForbidden || errCode(body) != "SignatureDoesNotMatch" {
			t.Errorf("wrong secret: %d %s", resp.StatusCode, body)
		}
		fields = signOSSV4([][2]string{{"key", "v4/bad"}}, pol, secret, cred, date)
		for i := range fields {
			if fields[i][0] == "policy" {
				fields[i][1] = postPolicyB64(t, future)
			}
		}
		resp, body = postForm(t, endpoint, fields, "obj", data)
		if resp.StatusCode != http.StatusForbidden || errCode(body) != "SignatureDoesNotMatch" {
			t.Errorf("policy changed after signing: %d %s", resp.StatusCode, body)
		}
		absent("v4/bad")
	})

	t.Run("Redirect", func(t *testing.T) {
		pol := postPolicyB64(t, future)
		fields := signOSSV1([][2]string{{"key", "redir"}, {"success_action_redirect", "http://app.example/done?x=1"}}, pol, ak, secret)
		resp, body := postForm(t, endpoint, fields, "x", []byte("r"))
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		u, err := url.Parse(resp.Header.Get("Location"))
		if err != nil || u.Host != "app.example" || u.Query().Get("x") != "1" || u.Query().Get("bucket") != postBucket ||
			u.Query().Get("key") != "redir" || u.Query().Get("etag") != resp.Header.Get("ETag") {
			t.Errorf("Location %q %v", resp.Header.Get("Location"), err)
		}
		stored("redir", []byte("r"), resp.Header.Get("ETag"))
	})

	t.Run("S3ExtraField", func(t *testing.T) {
		now := time.Now().UTC()
		date := now.Format("20060102T150405Z")
		cred := ak + "/" + now.Format("20060102") + "/us-east-1/s3/aws4_request"
		pol := postPolicyB64(t, future, map[string]any{"key": "s3/extra"}, map[string]any{"x-amz-algorithm": "AWS4-HMAC-SHA256"},
			map[string]any{"x-amz-credential": cred}, map[string]any{"x-amz-date": date})
		fields := signS3V4([][2]string{{"key", "s3/extra"}, {"x-amz-meta-sneaky", "1"}, {"x-ignore-me", "ok"}}, pol, secret, cred, date)
		resp, body := postForm(t, endpoint, fields, "x", []byte("x"))
		if resp.StatusCode != http.StatusForbidden || !bytes.Contains(body, []byte("Extra input fields: x-amz-meta-sneaky<")) {
			t.Errorf("status %d: %s", resp.StatusCode, body)
		}
		absent("s3/extra")
	})

	t.Run("Conditions", func(t *testing.T) {
		for _, c := range []struct {
			name string
			cond any
		}{
			{"bucket", map[string]any{"bucket": "another"}},
			{"eq", []any{"eq", "$Content-Type", "image/png"}},
			{"exact", map[string]any{"x-oss-meta-a": "b"}},
		} {
			pol := postPolicyB64(t, future, c.cond)
			fields := signOSSV1([][2]string{{"key", "cond"}, {"Content-Type", "text/plain"}, {"x-oss-meta-a", "c"}}, pol, ak, secret)
			resp, body := postForm(t, endpoint, fields, "x", []byte("x"))
			if resp.StatusCode != http.StatusForbidden || errCode(body) != "AccessDenied" || !bytes.Contains(body, []byte("Policy Condition failed")) {
				t.Errorf("%s: status %d: %s", c.name, resp.StatusCode, body)
			}
		}
		pol := base64.StdEncoding.EncodeToString([]byte(`{"conditions":[]}`))
		resp, body := postForm(t, endpoint, signOSSV1([][2]string{{"key", "cond"}}, pol, ak, secret), "x", []byte("x"))
		if resp.StatusCode != http.StatusBadRequest || errCode(body) != "InvalidPolicyDocument" {
			t.Errorf("no expiration: status %d: %s", resp.StatusCode, body)
		}
		absent("cond")
	})

	t.Run("MalformedForms", func(t *testing.T) {
		pol := postPolicyB64(t, future)
		big := strings.Repeat("x", 70<<10)
		many := [][2]string{{"key", "many"}}
		for i := 0; i < 5000; i++ {
			many = append(many, [2]string{fmt.Sprintf("x-ignore-%05d", i), ""})
		}
		for _, c := range []struct {
			name, code string
			fields     [][2]string
			noFile     bool
		}{
			{"bigField", "MaxPostPreDataLengthExceeded", [][2]string{{"key", "big"}, {"x-oss-meta-a", big}}, false},
			{"manyFields", "MaxPostPreDataLengthExceeded", many, false},
			{"noKey", "InvalidArgument", nil, false},
			{"noFile", "InvalidArgument", [][2]string{{"key", "nofile"}}, true},
		} {
			fields := signOSSV1(c.fields, pol, ak, secret)
			var resp *http.Response
			var body []byte
			if c.noFile {
				var buf bytes.Buffer
				mw := multipart.NewWriter(&buf)
				for _, f := range fields {
					mw.WriteField(f[0], f[1])
				}
				mw.Close()
				r, err := http.Post(endpoint+"/"+postBucket, mw.FormDataContentType(), &buf)
				if err != nil {
					t.Fatal(err)
				}
				body, _ = io.ReadAll(r.Body)
				r.Body.Close()
				resp = r
			} else {
				resp, body = postForm(t, endpoint, fields, "x", []byte("x"))
			}
			if resp.StatusCode != http.StatusBadRequest || errCode(body) != c.code {
				t.Errorf("%s: %d %s", c.name, resp.StatusCode, body)
			}
		}
		for _, k := range []string{"big", "many", "nofile"} {
			absent(k)
		}
	})

	t.Run("WrongAccessKey", func(t *testing.T) {
		pol := postPolicyB64(t, future)
		resp, body := postForm(t, endpoint, signOSSV1([][2]string{{"key", "wrongak"}}, pol, "someone-else", secret), "x", []byte("x"))
		if resp.StatusCode != http.StatusForbidden || errCode(body) != "InvalidAccessKeyId" {
			t.Errorf("status %d: %s", resp.StatusCode, body)
		}
		absent("wrongak")
	})
}

// TestPostObjectUnsignedOnlyForms: authenticate lets an unsigned
// multipart/form-data POST through only to PostObject (a POST to the
// bucket itself); the same body aimed at other operations is refused
// before anything happens.
func TestPostObjectUnsignedOnlyForms(t *testing.T) {
	e := start(t, ossemu.Options{})
	if err := os.WriteFile(e.path("victim"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mw.WriteField("key", "victim")
	fw, _ := mw.CreateFormFile("file", "x")
	fw.Write([]byte("overwritten"))
	mw.Close()
	for _, target := range []string{"/" + bucketName + "/victim?uploads", "/" + bucketName + "/victim?append&position=4",
		"/" + bucketName + "?delete", "/" + bucketName + "/victim"} {
		for _, method := range []string{http.MethodPost, http.MethodPut} {
			req, err := http.NewRequest(method, "http://"+e.addr+target, bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", mw.FormDataContentType())
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || errCode(body) != "AccessDenied" {
				t.Errorf("%s %s: %d %s", method, target, resp.StatusCode, body)
			}
		}
	}
	resp, err := http.Post("http://"+e.addr+"/"+bucketName, mw.FormDataContentType(), bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || errCode(body) != "AccessDenied" {
		t.Errorf("unsigned form: %d %s", resp.StatusCode, body)
	}
	if got, err := os.ReadFile(e.path("victim")); err != nil || string(got) != "keep" {
		t.Fatalf("victim: %q %v", got, err)
	}
}

// TestPostObjectBoto3: forms made by boto3's generate_presigned_post
// (SigV4 and SigV2 policies), posted by urllib3 as a browser would (testdata/boto3_post.py): stored objects, 201 and 204 answers,
// content-length-range, and a changed key, an extra field, a forged
// signature and an expired policy refused.
func TestPostObjectBoto3(t *testing.T) {
	script, err := filepath.Abs("testdata/boto3_post.py")
	if err != nil {
		t.Fatal(err)
	}
	for _, py := range pythonsWithBoto3(t) {
		for _, sig := range []string{"s3v4", "s3"} {
			t.Run(filepath.Base(filepath.Dir(filepath.Dir(py)))+"/"+sig, func(t *testing.T) {
				e := start(t, ossemu.Options{})
				cmd := exec.Command(py, script, "http://"+e.addr, bucketName, sig)
				cmd.Env = append(os.Environ(), "EMU_AK="+ossemutest.AccessKeyID, "EMU_SK="+ossemutest.AccessKeySecret,
					"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s %s: %v\n%s", py, sig, err, out)
				}
				want := bytes.Repeat([]byte("uploaded from a form\n"), 100)
				if got, err := os.ReadFile(e.path(sig + "/up/form.txt")); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("stored form.txt: %d bytes %v", len(got), err)
				}
				if got, err := os.ReadFile(e.path(sig + "/plain")); err != nil || string(got) != "plain" {
					t.Fatalf("stored plain: %q %v", got, err)
				}
				for _, k := range []string{"big", "fixed", "other", "forged", "expired"} {
					if _, err := os.Lstat(e.path(sig + "/" + k)); !os.IsNotExist(err) {
						t.Errorf("%s/%s was stored (%v)", sig, k, err)
					}
				}
			})
		}
	}
}

func TestPostObjectAnonymous(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, postBucket), 0o755); err != nil {
		t.Fatal(err)
	}
	_, endpoint := ossemutest.Start(t, root, ossemu.Options{Anonymous: true})
	resp, body := postForm(t, endpoint, [][2]string{{"key", "anon"}, {"success_action_status", "200"}}, "x", []byte("free"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got, err := os.ReadFile(filepath.Join(root, postBucket, "anon")); err != nil || string(got) != "free" {
		t.Errorf("stored %q %v", got, err)
	}
}
