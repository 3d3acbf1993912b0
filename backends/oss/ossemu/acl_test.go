package ossemu_test

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"strings"
	"testing"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// TestObjectACLAndTags: the SDK's SetObjectACL, Put/Get/DeleteObjectTagging
// and the ACL and tagging headers of PutObject, multipart and copy behave as
// in OSS, without touching the object's data or ETag; bad values get the
// store's 400s and change nothing.
func TestObjectACLAndTags(t *testing.T) {
	e := start(t, ossemu.Options{})
	b := e.bucket
	data := []byte("acl and tags")
	if err := b.PutObject("o", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	h0, err := b.GetObjectDetailedMeta("o")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetObjectACL("o", alioss.ACLPublicRead); err != nil {
		t.Fatal(err)
	}
	if acl, err := b.GetObjectACL("o"); err != nil || acl.ACL != "public-read" {
		t.Fatalf("ACL after SetObjectACL: %+v %v", acl, err)
	}
	// An invalid ACL is refused and the old one stays.
	err = b.SetObjectACL("o", alioss.ACLType("everyone"))
	if st, code := ossCode(t, err); st != 400 || code != "InvalidArgument" {
		t.Fatalf("invalid ACL: %d %s", st, code)
	}
	if acl, _ := b.GetObjectACL("o"); acl.ACL != "public-read" {
		t.Fatalf("ACL after a refused change: %q", acl.ACL)
	}

	tags := alioss.Tagging{Tags: []alioss.Tag{{Key: "team", Value: "ml"}, {Key: "stage", Value: "raw data"}}}
	if err := b.PutObjectTagging("o", tags); err != nil {
		t.Fatal(err)
	}
	got, err := b.GetObjectTagging("o")
	if err != nil || !sameTags(got.Tags, tags.Tags) {
		t.Fatalf("tags: %+v %v", got, err)
	}
	h1, err := b.GetObjectDetailedMeta("o")
	if err != nil {
		t.Fatal(err)
	}
	if h1.Get("x-oss-tagging-count") != "2" || h1.Get("ETag") != h0.Get("ETag") || h1.Get("Last-Modified") != h0.Get("Last-Modified") {
		t.Fatalf("HEAD after tagging: count %q etag %q/%q mtime %q/%q", h1.Get("x-oss-tagging-count"), h1.Get("ETag"), h0.Get("ETag"), h1.Get("Last-Modified"), h0.Get("Last-Modified"))
	}
	rd, err := b.GetObject("o")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(rd)
	rd.Close()
	if err != nil || !bytes.Equal(body, data) {
		t.Fatalf("data after ACL and tags: %q %v", body, err)
	}
	// Eleven tags: more than an object may have.
	var many alioss.Tagging
	for i := range 11 {
		many.Tags = append(many.Tags, alioss.Tag{Key: string(rune('a' + i)), Value: "v"})
	}
	if st, code := ossCode(t, b.PutObjectTagging("o", many)); st != 400 || code != "InvalidTag" {
		t.Fatalf("11 tags: %d %s", st, code)
	}
	if err := b.DeleteObjectTagging("o"); err != nil {
		t.Fatal(err)
	}
	if got, err := b.GetObjectTagging("o"); err != nil || len(got.Tags) != 0 {
		t.Fatalf("tags after delete: %+v %v", got, err)
	}
	if acl, _ := b.GetObjectACL("o"); acl.ACL != "public-read" {
		t.Fatalf("ACL after tag delete: %q", acl.ACL)
	}
	// Missing objects: 404 NoSuchKey.
	if st, code := ossCode(t, b.SetObjectACL("missing", alioss.ACLPrivate)); st != 404 || code != "NoSuchKey" {
		t.Fatalf("ACL of a missing object: %d %s", st, code)
	}
	if st, code := ossCode(t, b.PutObjectTagging("missing", tags)); st != 404 || code != "NoSuchKey" {
		t.Fatalf("tags of a missing object: %d %s", st, code)
	}

	// Headers at creation: PutObject, multipart, copy.
	if err := b.PutObject("h", strings.NewReader("x"), alioss.ObjectACL(alioss.ACLPrivate), alioss.SetTagging(alioss.Tagging{Tags: []alioss.Tag{{Key: "k", Value: "v 1"}}})); err != nil {
		t.Fatal(err)
	}
	if acl, err := b.GetObjectACL("h"); err != nil || acl.ACL != "private" {
		t.Fatalf("ACL from PutObject header: %+v %v", acl, err)
	}
	if got, err := b.GetObjectTagging("h"); err != nil || !sameTags(got.Tags, []alioss.Tag{{Key: "k", Value: "v 1"}}) {
		t.Fatalf("tags from PutObject header: %+v %v", got, err)
	}
	err = b.PutObject("bad", strings.NewReader("x"), alioss.ObjectACL(alioss.ACLType("nope")))
	if st, code := ossCode(t, err); st != 400 || code != "InvalidArgument" {
		t.Fatalf("PutObject with a bad ACL: %d %s", st, code)
	}
	if ok, err := b.IsObjectExist("bad"); err != nil || ok {
		t.Fatalf("PutObject with a bad ACL left an object: %v %v", ok, err)
	}
	imu, err := b.InitiateMultipartUpload("mp", alioss.ObjectACL(alioss.ACLPublicReadWrite), alioss.SetTagging(alioss.Tagging{Tags: []alioss.Tag{{Key: "mp", Value: "1"}}}))
	if err != nil {
		t.Fatal(err)
	}
	part, err := b.UploadPart(imu, strings.NewReader("part"), 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CompleteMultipartUpload(imu, []alioss.UploadPart{part}); err != nil {
		t.Fatal(err)
	}
	if acl, err := b.GetObjectACL("mp"); err != nil || acl.ACL != "public-read-write" {
		t.Fatalf("ACL from InitiateMultipartUpload: %+v %v", acl, err)
	}
	if got, err := b.GetObjectTagging("mp"); err != nil || len(got.Tags) != 1 || got.Tags[0].Key != "mp" {
		t.Fatalf("tags from InitiateMultipartUpload: %+v %v", got, err)
	}
	// A copy keeps the source's tags (directive Copy) but not its ACL;
	// REPLACE takes the request's tags.
	if _, err := b.CopyObject("h", "c1"); err != nil {
		t.Fatal(err)
	}
	if acl, _ := b.GetObjectACL("c1"); acl.ACL != "default" {
		t.Fatalf("copy's ACL: %q", acl.ACL)
	}
	if got, _ := b.GetObjectTagging("c1"); len(got.Tags) != 1 || got.Tags[0].Key != "k" {
		t.Fatalf("copy's tags: %+v", got)
	}
	if _, err := b.CopyObject("h", "c2", alioss.TaggingDirective(alioss.TaggingReplace), alioss.SetTagging(alioss.Tagging{Tags: []alioss.Tag{{Key: "new", Value: "2"}}})); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.GetObjectTagging("c2"); len(got.Tags) != 1 || got.Tags[0].Key != "new" {
		t.Fatalf("copy's replaced tags: %+v", got)
	}
}

// TestBucketACLTagsInfoStat: SetBucketACL, bucket tagging, GetBucketInfo,
// GetBucketStat and GetBucketLocation through the SDK's client calls.
func TestBucketACLTagsInfoStat(t *testing.T) {
	e := start(t, ossemu.Options{})
	c, err := alioss.New("http://"+e.addr, ossemutest.AccessKeyID, ossemutest.AccessKeySecret, alioss.ForcePathStyle(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetBucketACL(bucketName, alioss.ACLPublicRead); err != nil {
		t.Fatal(err)
	}
	if acl, err := c.GetBucketACL(bucketName); err != nil || acl.ACL != "public-read" {
		t.Fatalf("bucket ACL: %+v %v", acl, err)
	}
	if st, code := ossCode(t, c.SetBucketACL(bucketName, alioss.ACLType("default"))); st != 400 || code != "InvalidArgument" {
		t.Fatalf("bucket ACL default: %d %s", st, code)
	}
	if err := c.CreateBucket("second", alioss.ACL(alioss.ACLPublicReadWrite)); err != nil {
		t.Fatal(err)
	}
	if acl, err := c.GetBucketACL("second"); err != nil || acl.ACL != "public-read-write" {
		t.Fatalf("ACL from CreateBucket: %+v %v", acl, err)
	}

	tags := alioss.Tagging{Tags: []alioss.Tag{{Key: "owner", Value: "pai"}, {Key: "cost", Value: "x1"}}}
	if err := c.SetBucketTagging(bucketName, tags); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetBucketTagging(bucketName)
	if err != nil || !sameTags(got.Tags, tags.Tags) {
		t.Fatalf("bucket tags: %+v %v", got, err)
	}
	if err := c.DeleteBucketTagging(bucketName); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetBucketTagging(bucketName); err != nil || len(got.Tags) != 0 {
		t.Fatalf("bucket tags after delete: %+v %v", got, err)
	}

	for i, sz := range []int{10, 20, 30} {
		if err := e.bucket.PutObject("d/"+string(rune('a'+i)), bytes.NewReader(make([]byte, sz))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.bucket.InitiateMultipartUpload("pending"); err != nil {
		t.Fatal(err)
	}
	info, err := c.GetBucketInfo(bucketName)
	if err != nil {
		t.Fatal(err)
	}
	bi := info.BucketInfo
	if bi.Name != bucketName || bi.ACL != "public-read" || bi.Location != "oss-local" || bi.StorageClass != "Standard" || bi.CreationDate.IsZero() {
		t.Fatalf("bucket info: %+v", bi)
	}
	stat, err := c.GetBucketStat(bucketName)
	if err != nil {
		t.Fatal(err)
	}
	if stat.Storage != 60 || stat.ObjectCount != 3 || stat.MultipartUploadCount != 1 || stat.LastModifiedTime == 0 {
		t.Fatalf("bucket stat: %+v", stat)
	}
	if loc, err := c.GetBucketLocation(bucketName); err != nil || loc != "oss-local" {
		t.Fatalf("bucket location: %q %v", loc, err)
	}
	if _, err := c.GetBucketInfo("nobucket"); err == nil {
		t.Fatal("info of a missing bucket: no error")
	} else if st, code := ossCode(t, err); st != 404 || code != "NoSuchBucket" {
		t.Fatalf("info of a missing bucket: %d %s", st, code)
	}
}

// TestNoNotImplemented: requests the stores define for objects and buckets
// never get 501 (the emulator has no such answer left): PostObject, the
// last one, stores the form's file; a POST to a bucket that is no known
// operation gets the stores' 405.
func TestNoNotImplemented(t *testing.T) {
	e := start(t, ossemu.Options{Anonymous: true})
	resp, err := http.Post("http://"+e.addr+"/"+bucketName+"/?unknown", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST bucket: %d %s", resp.StatusCode, body)
	}
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	if err := mw.WriteField("key", "posted"); err != nil {
		t.Fatal(err)
	}
	fw, err := mw.CreateFormFile("file", "posted")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write([]byte("form data"))
	mw.Close()
	resp, err = http.Post("http://"+e.addr+"/"+bucketName, mw.FormDataContentType(), &form)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PostObject: %d %s", resp.StatusCode, body)
	}
	if got, err := os.ReadFile(e.path("posted")); err != nil || string(got) != "form data" {
		t.Fatalf("PostObject stored %q %v", got, err)
	}
}

// sameTags compares tags by key and value, in order.
func sameTags(a, b []alioss.Tag) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || a[i].Value != b[i].Value {
			return false
		}
	}
	return true
}
