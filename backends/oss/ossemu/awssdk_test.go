package ossemu_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// TestAWSSDKChecksums: the AWS SDK for Go v2's S3 client uploads with each
// flexible checksum it offers (CRC32, CRC32C, CRC64NVME, SHA1, SHA256),
// over plain HTTP (the checksum in a header) and over TLS (in an
// aws-chunked trailer); the stored bytes are the ones sent. A checksum
// that does not match the body gets 400 BadDigest and stores nothing.
func TestAWSSDKChecksums(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, bucketName), 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := ossemu.New(root, ossemu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	modes := map[string]bool{} // "X-Amz-Content-Sha256 X-Amz-Trailer" of the PUTs
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			mu.Lock()
			modes[r.Header.Get("X-Amz-Content-Sha256")+" "+r.Header.Get("X-Amz-Trailer")] = true
			mu.Unlock()
		}
		srv.ServeHTTP(w, r)
	})
	plain, tlsSrv := httptest.NewServer(h), httptest.NewTLSServer(h)
	defer plain.Close()
	defer tlsSrv.Close()
	payload := randBytes(300000, 11)
	ctx := context.Background()
	for _, ep := range []*httptest.Server{plain, tlsSrv} {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		c := s3.New(s3.Options{
			BaseEndpoint: aws.String(ep.URL), UsePathStyle: true, Region: "us-east-1", HTTPClient: hc,
			Credentials:      credentials.NewStaticCredentialsProvider(ossemutest.AccessKeyID, ossemutest.AccessKeySecret, ""),
			RetryMaxAttempts: 1,
		})
		scheme := strings.SplitN(ep.URL, ":", 2)[0]
		for _, alg := range []types.ChecksumAlgorithm{types.ChecksumAlgorithmCrc32, types.ChecksumAlgorithmCrc32c,
			types.ChecksumAlgorithmCrc64nvme, types.ChecksumAlgorithmSha1, types.ChecksumAlgorithmSha256} {
			key := "sdk/" + scheme + "/" + strings.ToLower(string(alg))
			if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucketName), Key: aws.String(key),
				Body: bytes.NewReader(payload), ChecksumAlgorithm: alg}); err != nil {
				t.Fatalf("%s %s: %v", scheme, alg, err)
			}
			got, err := os.ReadFile(filepath.Join(root, bucketName, filepath.FromSlash(key)))
			if err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("%s %s: stored %d bytes (%v), want %d", scheme, alg, len(got), err, len(payload))
			}
		}
		// A precomputed checksum of other bytes.
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucketName), Key: aws.String("sdk/bad"),
			Body: bytes.NewReader(payload), ChecksumCRC64NVME: aws.String("AAAAAAAAAAA=")})
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "BadDigest" {
			t.Fatalf("%s: wrong CRC64NVME: %v", scheme, err)
		}
		if _, err := os.Stat(filepath.Join(root, bucketName, "sdk", "bad")); err == nil {
			t.Fatalf("%s: wrong CRC64NVME: object stored", scheme)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("PUT modes: %v", modes)
	if !modes["STREAMING-UNSIGNED-PAYLOAD-TRAILER x-amz-checksum-crc64nvme"] {
		t.Error("the SDK sent no CRC64NVME trailer over TLS")
	}
}
