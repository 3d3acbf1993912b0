package ossemu_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// sdkBucket opens bucketName on e with the real SDK and extra options.
func sdkBucket(t *testing.T, e *emu, id, secret string, opts ...alioss.ClientOption) *alioss.Bucket {
	t.Helper()
	c, err := alioss.New("http://"+e.addr, id, secret, append([]alioss.ClientOption{alioss.ForcePathStyle(true), alioss.EnableCRC(true)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Bucket(bucketName)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ossCode(t *testing.T, err error) (int, string) {
	t.Helper()
	var se alioss.ServiceError
	if !errors.As(err, &se) {
		t.Fatalf("want an OSS service error, got %v", err)
	}
	return se.StatusCode, se.Code
}

// TestSignatures: the SDK's V1 and V4 signatures (header and presigned
// URL) pass; a wrong secret, an unknown key and an unsigned PUT get 403
// with the store's codes, and leave nothing behind; --anonymous takes all.
func TestSignatures(t *testing.T) {
	e := start(t, ossemu.Options{})
	v4 := sdkBucket(t, e, ossemutest.AccessKeyID, ossemutest.AccessKeySecret, alioss.AuthVersion(alioss.AuthV4), alioss.Region("cn-hangzhou"))
	for name, b := range map[string]*alioss.Bucket{"v1": e.bucket, "v4": v4} {
		key := "sig/" + name + "/a b+c%.txt"
		if err := b.PutObject(key, strings.NewReader(name), alioss.Meta("M", "x y")); err != nil {
			t.Fatalf("%s put: %v", name, err)
		}
		if _, err := b.ListObjectsV2(alioss.Prefix("sig/"), alioss.Delimiter("/")); err != nil {
			t.Fatalf("%s list: %v", name, err)
		}
		u, err := b.SignURL(key, alioss.HTTPGet, 600)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != name {
			t.Fatalf("%s presigned GET: %d %q", name, resp.StatusCode, got)
		}
		// The same URL for another key is not valid.
		resp, err = http.Get(strings.Replace(u, "a%20b", "zz", 1))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s tampered presigned URL: status %d, want 403", name, resp.StatusCode)
		}
	}
	for _, tc := range []struct {
		name, id, secret, code string
		opts                   []alioss.ClientOption
	}{
		{"v1 wrong secret", ossemutest.AccessKeyID, "wrong", "SignatureDoesNotMatch", nil},
		{"v4 wrong secret", ossemutest.AccessKeyID, "wrong", "SignatureDoesNotMatch", []alioss.ClientOption{alioss.AuthVersion(alioss.AuthV4), alioss.Region("cn-hangzhou")}},
		{"unknown key", "someone-else", ossemutest.AccessKeySecret, "InvalidAccessKeyId", nil},
	} {
		b := sdkBucket(t, e, tc.id, tc.secret, tc.opts...)
		err := b.PutObject("sig/refused", strings.NewReader("x"))
		if st, code := ossCode(t, err); st != 403 || code != tc.code {
			t.Fatalf("%s: %d %s, want 403 %s", tc.name, st, code, tc.code)
		}
	}
	req, _ := http.NewRequest(http.MethodPut, "http://"+e.addr+"/"+bucketName+"/sig/refused", strings.NewReader("x"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(body), "<Code>AccessDenied</Code>") {
		t.Fatalf("unsigned PUT: %d %s", resp.StatusCode, body)
	}
	if _, err := os.Stat(e.path("sig/refused")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused PUT left an object: %v", err)
	}

	anon := start(t, ossemu.Options{Anonymous: true})
	req, _ = http.NewRequest(http.MethodPut, "http://"+anon.addr+"/"+bucketName+"/open", strings.NewReader("x"))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("unsigned PUT to an anonymous emulator: %d", resp.StatusCode)
	}
	if err := sdkBucket(t, anon, "any", "thing").PutObject("open2", strings.NewReader("y")); err != nil {
		t.Fatalf("any key on an anonymous emulator: %v", err)
	}
}

// TestMultipartListings: ListParts and ListMultipartUploads as the SDK
// reads them (paging with markers, CRC64 per part), and Abort.
func TestMultipartListings(t *testing.T) {
	e := start(t, ossemu.Options{})
	b := e.bucket
	var ups []alioss.InitiateMultipartUploadResult
	for _, k := range []string{"mp/a", "mp/b", "mp/b", "mp/d/x", "other"} {
		imur, err := b.InitiateMultipartUpload(k)
		if err != nil {
			t.Fatal(err)
		}
		ups = append(ups, imur)
	}
	part := randBytes(100<<10, 3)
	for n := 1; n <= 5; n++ {
		if _, err := b.UploadPart(ups[0], bytes.NewReader(part[:100<<10-n]), int64(100<<10-n), n); err != nil {
			t.Fatal(err)
		}
	}
	lp, err := b.ListUploadedParts(ups[0], alioss.MaxParts(2))
	if err != nil {
		t.Fatal(err)
	}
	if !lp.IsTruncated || len(lp.UploadedParts) != 2 || lp.NextPartNumberMarker != "2" || lp.UploadedParts[1].Size != 100<<10-2 {
		t.Fatalf("first page of parts: %+v", lp)
	}
	if want := fmt.Sprintf("%X", md5.Sum(part[:100<<10-2])); strings.Trim(lp.UploadedParts[1].ETag, `"`) != want {
		t.Fatalf("part 2 ETag %s, want %s", lp.UploadedParts[1].ETag, want)
	}
	lp, err = b.ListUploadedParts(ups[0], alioss.PartNumberMarker(2))
	if err != nil {
		t.Fatal(err)
	}
	if lp.IsTruncated || len(lp.UploadedParts) != 3 || lp.UploadedParts[0].PartNumber != 3 {
		t.Fatalf("second page of parts: %+v", lp)
	}
	// The raw XML carries HashCrc64ecma per part, as OSS sends it.
	u, _ := b.SignURL("mp/a", alioss.HTTPGet, 600, alioss.AddParam("uploadId", ups[0].UploadID))
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf("<HashCrc64ecma>%d</HashCrc64ecma>", crcOf(part[:100<<10-1]))
	if !strings.Contains(string(raw), want) || !strings.Contains(string(raw), "<StorageClass>Standard</StorageClass>") {
		t.Fatalf("ListParts XML lacks %s:\n%s", want, raw)
	}

	// Uploads: by key, then in initiation order; paging with both markers.
	var got []string
	var opts []alioss.Option
	for pages := 0; ; pages++ {
		lu, err := b.ListMultipartUploads(append(opts, alioss.MaxUploads(2), alioss.Prefix("mp/"))...)
		if err != nil {
			t.Fatal(err)
		}
		for _, up := range lu.Uploads {
			got = append(got, up.Key+"#"+up.UploadID)
		}
		if !lu.IsTruncated {
			break
		}
		if pages > 5 {
			t.Fatal("uploads listing does not end")
		}
		opts = []alioss.Option{alioss.KeyMarker(lu.NextKeyMarker), alioss.UploadIDMarker(lu.NextUploadIDMarker)}
	}
	var wantUps []string
	for _, u := range ups[:4] {
		wantUps = append(wantUps, u.Key+"#"+u.UploadID)
	}
	if strings.Join(got, " ") != strings.Join(wantUps, " ") {
		t.Fatalf("uploads listed:\n%v\nwant:\n%v", got, wantUps)
	}
	lu, err := b.ListMultipartUploads(alioss.Prefix("mp/"), alioss.Delimiter("/"))
	if err != nil {
		t.Fatal(err)
	}
	if err != nil || len(lu.Uploads) != 3 || len(lu.CommonPrefixes) != 1 || lu.CommonPrefixes[0] != "mp/d/" {
		t.Fatalf("uploads with delimiter: %+v %v", lu, err)
	}

	// Abort removes the upload and its parts; a second abort is NoSuchUpload.
	if err := b.AbortMultipartUpload(ups[0]); err != nil {
		t.Fatal(err)
	}
	if st, code := ossCode(t, b.AbortMultipartUpload(ups[0])); st != 404 || code != "NoSuchUpload" {
		t.Fatalf("second abort: %d %s", st, code)
	}
	if _, err := b.ListUploadedParts(ups[0]); err == nil {
		t.Fatal("parts of an aborted upload listed")
	}
	lu, err = b.ListMultipartUploads()
	if err != nil || len(lu.Uploads) != 4 {
		t.Fatalf("after abort: %+v %v", lu, err)
	}
}

// TestPartLimits: every part but the last must be 100 KiB (OSS); a
// Content-MD5 or CRC64 that does not match the body is refused and nothing
// is stored.
func TestPartLimits(t *testing.T) {
	e := start(t, ossemu.Options{})
	b := e.bucket
	imur, err := b.InitiateMultipartUpload("small")
	if err != nil {
		t.Fatal(err)
	}
	var parts []alioss.UploadPart
	for n, size := range []int{100<<10 - 1, 10} {
		p, err := b.UploadPart(imur, bytes.NewReader(make([]byte, size)), int64(size), n+1)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	_, err = b.CompleteMultipartUpload(imur, parts)
	if st, code := ossCode(t, err); st != 400 || code != "EntityTooSmall" {
		t.Fatalf("complete with a small part: %d %s", st, code)
	}
	// The last part alone may be small.
	if _, err := b.CompleteMultipartUpload(imur, parts[:1]); err != nil {
		t.Fatalf("one small (last) part: %v", err)
	}

	sum := md5.Sum([]byte("other"))
	err = b.PutObject("digest", strings.NewReader("data"), alioss.ContentMD5(base64.StdEncoding.EncodeToString(sum[:])))
	if st, code := ossCode(t, err); st != 400 || code != "InvalidDigest" {
		t.Fatalf("wrong Content-MD5: %d %s", st, code)
	}
	err = b.PutObject("digest", strings.NewReader("data"), alioss.SetHeader("x-oss-hash-crc64ecma", "12345"))
	if st, code := ossCode(t, err); st != 400 || code != "InvalidDigest" {
		t.Fatalf("wrong CRC64: %d %s", st, code)
	}
	if _, err := os.Stat(e.path("digest")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused PUT left an object: %v", err)
	}
	sum = md5.Sum([]byte("data"))
	if err := b.PutObject("digest", strings.NewReader("data"), alioss.ContentMD5(base64.StdEncoding.EncodeToString(sum[:])),
		alioss.SetHeader("x-oss-hash-crc64ecma", fmt.Sprint(crcOf([]byte("data"))))); err != nil {
		t.Fatalf("matching digests: %v", err)
	}
}

// TestAppendObject: the SDK's AppendObject creates an Appendable object,
// appends at the next position (checking the CRC64 of the whole object),
// and is refused with PositionNotEqualToLength (saying where to append)
// or ObjectNotAppendable.
func TestAppendObject(t *testing.T) {
	e := start(t, ossemu.Options{})
	b := e.bucket
	var want []byte
	pos := int64(0)
	for i := range 4 {
		chunk := randBytes(1000+i*777, uint64(i))
		next, err := b.AppendObject("log.txt", bytes.NewReader(chunk), pos, alioss.InitCRC(crcOf(want)))
		if err != nil {
			t.Fatalf("append %d at %d: %v", i, pos, err)
		}
		want = append(want, chunk...)
		if next != int64(len(want)) {
			t.Fatalf("next position %d, want %d", next, len(want))
		}
		pos = next
	}
	if got, _ := os.ReadFile(e.path("log.txt")); !bytes.Equal(got, want) {
		t.Fatal("appended object differs")
	}
	h, err := b.GetObjectDetailedMeta("log.txt")
	if err != nil {
		t.Fatal(err)
	}
	if h.Get("x-oss-object-type") != "Appendable" || h.Get("x-oss-next-append-position") != fmt.Sprint(len(want)) {
		t.Fatalf("object headers: %v", h)
	}
	r, err := b.GetObject("log.txt") // whole read: the SDK checks the CRC64
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back: %d bytes, %v", len(got), err)
	}

	_, err = b.AppendObject("log.txt", strings.NewReader("late"), 5)
	if st, code := ossCode(t, err); st != 409 || code != "PositionNotEqualToLength" {
		t.Fatalf("append at a wrong position: %d %s", st, code)
	}
	// The refusal says where to append.
	u, _ := b.SignURL("log.txt", alioss.HTTPPost, 600, alioss.AddParam("append", ""), alioss.AddParam("position", "5"))
	resp, err := http.Post(u, "", strings.NewReader("late"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if np := resp.Header.Get("x-oss-next-append-position"); resp.StatusCode != 409 || np != fmt.Sprint(len(want)) {
		t.Fatalf("refused append: %d, x-oss-next-append-position %q, want %d", resp.StatusCode, np, len(want))
	}
	if got, _ := os.ReadFile(e.path("log.txt")); !bytes.Equal(got, want) {
		t.Fatal("a refused append changed the object")
	}
	if err := b.PutObject("normal", strings.NewReader("n")); err != nil {
		t.Fatal(err)
	}
	_, err = b.AppendObject("normal", strings.NewReader("x"), 1)
	if st, code := ossCode(t, err); st != 409 || code != "ObjectNotAppendable" {
		t.Fatalf("append to a Normal object: %d %s", st, code)
	}
	_, err = b.AppendObject("new", strings.NewReader("x"), 3)
	if st, code := ossCode(t, err); st != 409 || code != "PositionNotEqualToLength" {
		t.Fatalf("append to a missing key at 3: %d %s", st, code)
	}
}

// TestVirtualHostedAndSeededETag: a client addressing the bucket as
// bucket.localhost:PORT (no path style) reads and writes the same data;
// a file seeded with ordinary tools has its content's MD5 as ETag, in
// HEAD and in listings alike.
func TestVirtualHostedAndSeededETag(t *testing.T) {
	e := start(t, ossemu.Options{})
	_, port, _ := net.SplitHostPort(e.addr)
	// Every host name dials the emulator, as DNS would for *.localhost.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, e.addr)
	}}}
	c, err := alioss.New("http://localhost:"+port, ossemutest.AccessKeyID, ossemutest.AccessKeySecret, alioss.HTTPClient(hc), alioss.EnableCRC(true))
	if err != nil {
		t.Fatal(err)
	}
	vb, err := c.Bucket(bucketName)
	if err != nil {
		t.Fatal(err)
	}
	if err := vb.PutObject("vh/obj", strings.NewReader("virtual")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(e.path("vh/obj")); string(got) != "virtual" {
		t.Fatalf("virtual-hosted PUT stored %q", got)
	}
	os.MkdirAll(e.path("seed"), 0o755)
	data := randBytes(3<<20+5, 9)
	os.WriteFile(e.path("seed/f.bin"), data, 0o644)
	want := fmt.Sprintf(`"%X"`, md5.Sum(data))
	lr, err := vb.ListObjectsV2(alioss.Prefix("seed/"))
	if err != nil || len(lr.Objects) != 1 || lr.Objects[0].ETag != want {
		t.Fatalf("virtual-hosted listing: %+v %v, want ETag %s", lr.Objects, err, want)
	}
	h, err := e.bucket.GetObjectMeta("seed/f.bin")
	if err != nil || h.Get("ETag") != want {
		t.Fatalf("seeded HEAD ETag %q (%v), want %s", h.Get("ETag"), err, want)
	}
}

// TestUnknownRequests: operations the stores have but a new bucket has no
// setting for answer as the store does; a method the store does not
// define gets 405 MethodNotAllowed, not 501.
func TestUnknownRequests(t *testing.T) {
	e := start(t, ossemu.Options{})
	c, err := alioss.New("http://"+e.addr, ossemutest.AccessKeyID, ossemutest.AccessKeySecret, alioss.ForcePathStyle(true))
	if err != nil {
		t.Fatal(err)
	}
	acl, err := c.GetBucketACL(bucketName)
	if err != nil || acl.ACL != "private" {
		t.Fatalf("bucket ACL: %+v %v", acl, err)
	}
	if _, err := c.GetBucketLifecycle(bucketName); err == nil {
		t.Fatal("lifecycle of a new bucket: no error")
	} else if st, code := ossCode(t, err); st != 404 || code != "NoSuchLifecycle" {
		t.Fatalf("lifecycle: %d %s", st, code)
	}
	if err := e.bucket.PutObject("o", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	oacl, err := e.bucket.GetObjectACL("o")
	if err != nil || oacl.ACL != "default" {
		t.Fatalf("object ACL: %+v %v", oacl, err)
	}
	u, _ := e.bucket.SignURL("o", "PATCH", 600)
	req, _ := http.NewRequest("PATCH", u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(string(body), "<Code>MethodNotAllowed</Code>") {
		t.Fatalf("PATCH: %d %s", resp.StatusCode, body)
	}
}
