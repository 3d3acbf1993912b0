package ossemu_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// s3Client is an AWS SDK for Go v2 client of e's S3 face.
func s3Client(e *emu) *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String("http://" + e.addr), UsePathStyle: true, Region: "us-east-1",
		Credentials:      credentials.NewStaticCredentialsProvider(ossemutest.AccessKeyID, ossemutest.AccessKeySecret, ""),
		RetryMaxAttempts: 1,
	})
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// TestS3IfNoneMatch: a PUT with If-None-Match: * stores a new key, and on
// an existing key (an object or a directory marker) fails with 412
// PreconditionFailed and leaves the object as it was; so do CopyObject and
// CompleteMultipartUpload, whose upload then stays open for an abort. Any
// other If-None-Match on a write is refused with 501, not ignored. OSS
// requests are not conditioned by it.
func TestS3IfNoneMatch(t *testing.T) {
	e := start(t, ossemu.Options{})
	c := s3Client(e)
	ctx := t.Context()
	put := func(key, body, inm string) error {
		in := &s3.PutObjectInput{Bucket: aws.String(bucketName), Key: aws.String(key), Body: strings.NewReader(body)}
		if inm != "" {
			in.IfNoneMatch = aws.String(inm)
		}
		_, err := c.PutObject(ctx, in)
		return err
	}
	if err := put("k", "first", "*"); err != nil {
		t.Fatalf("If-None-Match on a new key: %v", err)
	}
	if err := put("k", "second", "*"); apiCode(err) != "PreconditionFailed" {
		t.Fatalf("If-None-Match on an existing key: %v, want PreconditionFailed", err)
	}
	if got, _ := os.ReadFile(e.path("k")); string(got) != "first" {
		t.Errorf("after a failed conditional PUT the object holds %q", got)
	}
	if err := put("k", "third", `"0123456789abcdef0123456789abcdef"`); apiCode(err) != "NotImplemented" {
		t.Errorf("If-None-Match with an ETag on a PUT: %v, want NotImplemented", err)
	}
	if err := put("k", "plain", ""); err != nil {
		t.Errorf("unconditional overwrite: %v", err)
	}
	// Directory markers.
	if err := put("d/", "", "*"); err != nil {
		t.Fatalf("If-None-Match on a new marker: %v", err)
	}
	if err := put("d/", "", "*"); apiCode(err) != "PreconditionFailed" {
		t.Errorf("If-None-Match on an existing marker: %v, want PreconditionFailed", err)
	}
	// A new key in a new directory; a key whose name is a directory of
	// other keys conflicts as a plain PUT does.
	if err := put("new/dir/k", "x", "*"); err != nil {
		t.Errorf("If-None-Match in a new directory: %v", err)
	}
	if err := put("new/dir", "x", "*"); apiCode(err) == "PreconditionFailed" || err == nil {
		t.Errorf("If-None-Match on a name that is a directory: %v, want the conflict a plain PUT gets", err)
	}

	// CopyObject takes the condition for its destination.
	cp := func(dst string) error {
		_, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(bucketName), Key: aws.String(dst),
			CopySource: aws.String(bucketName + "/k"), IfNoneMatch: aws.String("*")})
		return err
	}
	if err := cp("copy"); err != nil {
		t.Errorf("conditional copy to a new key: %v", err)
	}
	if err := cp("copy"); apiCode(err) != "PreconditionFailed" {
		t.Errorf("conditional copy to an existing key: %v, want PreconditionFailed", err)
	}

	// Multipart: the condition is checked at completion.
	mp := func(key, inm string) (string, error) {
		cu, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucketName), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		up, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(bucketName), Key: aws.String(key), UploadId: cu.UploadId,
			PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("multipart " + key))})
		if err != nil {
			t.Fatal(err)
		}
		in := &s3.CompleteMultipartUploadInput{Bucket: aws.String(bucketName), Key: aws.String(key), UploadId: cu.UploadId,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: up.ETag, PartNumber: aws.Int32(1)}}}}
		if inm != "" {
			in.IfNoneMatch = aws.String(inm)
		}
		_, err = c.CompleteMultipartUpload(ctx, in)
		return aws.ToString(cu.UploadId), err
	}
	if _, err := mp("m", "*"); err != nil {
		t.Fatalf("conditional completion of a new key: %v", err)
	}
	id, err := mp("m", "*")
	if apiCode(err) != "PreconditionFailed" {
		t.Fatalf("conditional completion of an existing key: %v, want PreconditionFailed", err)
	}
	if got, _ := os.ReadFile(e.path("m")); string(got) != "multipart m" {
		t.Errorf("after a failed conditional completion the object holds %q", got)
	}
	if _, err := c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(bucketName), Key: aws.String("m"), UploadId: aws.String(id)}); err != nil {
		t.Errorf("abort after a failed conditional completion: %v", err)
	}

	// OSS has its own header (x-oss-forbid-overwrite): If-None-Match is
	// not S3's condition there.
	if err := e.bucket.PutObject("k", strings.NewReader("oss"), alioss.SetHeader("If-None-Match", "*")); err != nil {
		t.Errorf("OSS PUT with If-None-Match: %v", err)
	}
	if st := e.srv.Stats(); st["PreconditionFailed"] != 4 {
		t.Errorf("PreconditionFailed count %d, want 4", st["PreconditionFailed"])
	}
}

// TestS3IfNoneMatchRace: of 16 clients racing conditional PUTs of one key,
// each with its own content, exactly one succeeds and the object holds its
// bytes; every other gets 412.
func TestS3IfNoneMatchRace(t *testing.T) {
	e := start(t, ossemu.Options{})
	c := s3Client(e)
	for round := range 10 {
		key := fmt.Sprintf("race/%d", round)
		const n = 16
		errs := make([]error, n)
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				_, errs[i] = c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucketName), Key: aws.String(key),
					Body: strings.NewReader(fmt.Sprintf("writer %d", i)), IfNoneMatch: aws.String("*")})
			}()
		}
		close(gate)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: writers %d and %d both won", round, winner, i)
			case err == nil:
				winner = i
			case apiCode(err) != "PreconditionFailed":
				t.Fatalf("round %d: writer %d: %v", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody won", round)
		}
		if got, _ := os.ReadFile(e.path(key)); string(got) != fmt.Sprintf("writer %d", winner) {
			t.Fatalf("round %d: object holds %q, winner was %d", round, got, winner)
		}
	}
}

// TestS3UploadPartCopyConditions: UploadPartCopy honours
// x-amz-copy-source-if-match (412 on another version) and answers a
// missing source with 404 NoSuchKey, as S3 does.
func TestS3UploadPartCopyConditions(t *testing.T) {
	e := start(t, ossemu.Options{})
	c := s3Client(e)
	ctx := t.Context()
	put, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucketName), Key: aws.String("src"), Body: strings.NewReader("source bytes")})
	if err != nil {
		t.Fatal(err)
	}
	cu, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucketName), Key: aws.String("dst")})
	if err != nil {
		t.Fatal(err)
	}
	copyPart := func(src, ifMatch string) error {
		in := &s3.UploadPartCopyInput{Bucket: aws.String(bucketName), Key: aws.String("dst"), UploadId: cu.UploadId,
			PartNumber: aws.Int32(1), CopySource: aws.String(bucketName + "/" + src)}
		if ifMatch != "" {
			in.CopySourceIfMatch = aws.String(ifMatch)
		}
		_, err := c.UploadPartCopy(ctx, in)
		return err
	}
	if err := copyPart("src", aws.ToString(put.ETag)); err != nil {
		t.Errorf("copy of the version named: %v", err)
	}
	if err := copyPart("src", `"0123456789abcdef0123456789abcdef"`); apiCode(err) != "PreconditionFailed" {
		t.Errorf("copy of another version: %v, want PreconditionFailed", err)
	}
	if err := copyPart("nosuch", ""); apiCode(err) != "NoSuchKey" {
		t.Errorf("copy of a missing source: %v, want NoSuchKey", err)
	}
}
