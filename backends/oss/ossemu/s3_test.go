package ossemu_test

import (
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
)

// s3Do sends a request the way an S3 client (SigV4, x-amz-* headers) does,
// with a made-up signature: the emulator must accept anonymous requests.
func s3Do(t *testing.T, e *emu, method, path string, body io.Reader, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+e.addr+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0")
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

type s3List struct {
	Contents []struct {
		Key string `xml:"Key"`
	} `xml:"Contents"`
	CommonPrefixes []struct {
		Prefix string `xml:"Prefix"`
	} `xml:"CommonPrefixes"`
	IsTruncated           bool   `xml:"IsTruncated"`
	NextContinuationToken string `xml:"NextContinuationToken"`
	KeyCount              int    `xml:"KeyCount"`
}

// TestS3Protocol: the same data answers S3 clients: aws-chunked PUT with
// x-amz-meta-*, ListObjectsV2 paging with URL-encoded keys, copy via
// x-amz-copy-source, 416 for unsatisfiable ranges, HEAD bucket.
func TestS3Protocol(t *testing.T) {
	e := start(t, ossemu.Options{Anonymous: true})
	// aws-chunked streaming upload (as aws-sdk-go signs them).
	payload := "hello, s3 world"
	chunked := fmt.Sprintf("%x;chunk-signature=abc\r\n%s\r\n0;chunk-signature=def\r\n\r\n", len(payload), payload)
	resp := s3Do(t, e, "PUT", "/"+bucketName+"/s3/a+b c.txt", strings.NewReader(chunked), map[string]string{
		"X-Amz-Content-Sha256":         "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
		"Content-Encoding":             "aws-chunked",
		"X-Amz-Decoded-Content-Length": fmt.Sprint(len(payload)),
		"X-Amz-Meta-Mtime":             "12345",
	})
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chunked PUT: %s", resp.Status)
	}
	if got, _ := os.ReadFile(e.path("s3/a+b c.txt")); string(got) != payload {
		t.Fatalf("chunked PUT stored %q", got)
	}
	resp = s3Do(t, e, "HEAD", "/"+bucketName+"/s3/a+b%20c.txt", nil, nil)
	resp.Body.Close()
	if resp.Header.Get("X-Amz-Meta-Mtime") != "12345" {
		t.Errorf("x-amz-meta-mtime = %q", resp.Header.Get("X-Amz-Meta-Mtime"))
	}
	// Copy (the key escaped as rclone escapes paths: '+' stays literal).
	resp = s3Do(t, e, "PUT", "/"+bucketName+"/s3/copy", nil, map[string]string{"X-Amz-Copy-Source": "/" + bucketName + "/s3/a+b%20c.txt"})
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("copy: %s", resp.Status)
	}
	if got, _ := os.ReadFile(e.path("s3/copy")); string(got) != payload {
		t.Errorf("copy stored %q", got)
	}
	for i := range 5 {
		resp = s3Do(t, e, "PUT", fmt.Sprintf("/%s/s3/d%d/f", bucketName, i), strings.NewReader("x"), nil)
		resp.Body.Close()
	}
	// ListObjectsV2 in pages of 2 with a delimiter.
	var keys, prefixes []string
	token := ""
	for range 10 {
		q := url.Values{"list-type": {"2"}, "prefix": {"s3/"}, "delimiter": {"/"}, "max-keys": {"2"}, "encoding-type": {"url"}}
		if token != "" {
			q.Set("continuation-token", token)
		}
		resp = s3Do(t, e, "GET", "/"+bucketName+"?"+q.Encode(), nil, nil)
		var l s3List
		err := xml.NewDecoder(resp.Body).Decode(&l)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range l.Contents {
			k, _ := url.QueryUnescape(c.Key)
			keys = append(keys, k)
		}
		for _, p := range l.CommonPrefixes {
			prefixes = append(prefixes, p.Prefix)
		}
		if l.KeyCount != len(l.Contents)+len(l.CommonPrefixes) {
			t.Errorf("KeyCount %d", l.KeyCount)
		}
		if !l.IsTruncated {
			break
		}
		token = l.NextContinuationToken
	}
	if want := []string{"s3/a+b c.txt", "s3/copy"}; !slices.Equal(keys, want) {
		t.Errorf("keys %q, want %q", keys, want)
	}
	if want := []string{"s3/d0/", "s3/d1/", "s3/d2/", "s3/d3/", "s3/d4/"}; !slices.Equal(prefixes, want) {
		t.Errorf("prefixes %q, want %q", prefixes, want)
	}
	resp = s3Do(t, e, "GET", "/"+bucketName+"/s3/copy", nil, map[string]string{"Range": "bytes=100-200"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("S3 unsatisfiable range: %s, want 416", resp.Status)
	}
	resp = s3Do(t, e, "HEAD", "/"+bucketName, nil, nil)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("HEAD bucket: %s", resp.Status)
	}
	resp = s3Do(t, e, "HEAD", "/nosuchbucket", nil, nil)
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("HEAD missing bucket: %s", resp.Status)
	}
}
