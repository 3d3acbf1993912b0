package ossemu_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// streamingPut sends payload as a SigV4 streaming upload
// (STREAMING-AWS4-HMAC-SHA256-PAYLOAD, aws-chunked) signed by
// aws-sdk-go-v2's signers: the seed signature by v4.Signer, the chunk
// chain by v4.StreamSigner. tamper flips a byte of chunk tamper (-1: none)
// after it is signed.
func streamingPut(t *testing.T, e *emu, key string, chunks [][]byte, tamper int) (int, string) {
	t.Helper()
	ctx := context.Background()
	creds := aws.Credentials{AccessKeyID: ossemutest.AccessKeyID, SecretAccessKey: ossemutest.AccessKeySecret}
	now := time.Now().UTC()
	all := append(append([][]byte{}, chunks...), nil) // the final zero-size chunk
	var encLen, decLen int
	for _, c := range all {
		encLen += len(fmt.Sprintf("%x;chunk-signature=", len(c))) + 64 + 2 + len(c) + 2
		decLen += len(c)
	}
	req, err := http.NewRequest(http.MethodPut, "http://"+e.addr+"/"+bucketName+"/"+key, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(encLen)
	req.Header.Set("Content-Encoding", "aws-chunked")
	req.Header.Set("X-Amz-Decoded-Content-Length", strconv.Itoa(decLen))
	req.Header.Set("X-Amz-Content-Sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "s3", "us-east-1", now); err != nil {
		t.Fatal(err)
	}
	_, seedHex, ok := strings.Cut(req.Header.Get("Authorization"), "Signature=")
	seed, err := hex.DecodeString(seedHex)
	if !ok || err != nil {
		t.Fatalf("no seed signature in %q", req.Header.Get("Authorization"))
	}
	ss := v4.NewStreamSigner(creds, "s3", "us-east-1", seed)
	var body bytes.Buffer
	for i, c := range all {
		sig, err := ss.GetSignature(ctx, nil, c, now)
		if err != nil {
			t.Fatal(err)
		}
		if i == tamper {
			c = bytes.Clone(c)
			c[len(c)/2] ^= 1
		}
		fmt.Fprintf(&body, "%x;chunk-signature=%x\r\n", len(c), sig)
		body.Write(c)
		body.WriteString("\r\n")
	}
	if body.Len() != encLen {
		t.Fatalf("encoded body %d bytes, computed %d", body.Len(), encLen)
	}
	req.Body = io.NopCloser(&body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestS3StreamingChunkSignatures: a SigV4 streaming upload signed by the
// AWS SDK for Go v2 is decoded and every chunk signature checked: the
// stored bytes are exactly the payload; a chunk changed after signing gets
// 403 SignatureDoesNotMatch and stores nothing.
func TestS3StreamingChunkSignatures(t *testing.T) {
	e := start(t, ossemu.Options{})
	payload := randBytes(200000, 3)
	chunks := [][]byte{payload[:65536], payload[65536:131072], payload[131072:]}
	if st, body := streamingPut(t, e, "stream/ok", chunks, -1); st != http.StatusOK {
		t.Fatalf("streaming PUT: %d %s", st, body)
	}
	got, err := os.ReadFile(e.path("stream/ok"))
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("stored %d bytes (%v), want the %d sent", len(got), err, len(payload))
	}
	for _, bad := range []int{0, 2} {
		st, body := streamingPut(t, e, "stream/bad", chunks, bad)
		if st != http.StatusForbidden || !strings.Contains(body, "<Code>SignatureDoesNotMatch</Code>") {
			t.Fatalf("chunk %d tampered: %d %s", bad, st, body)
		}
		if _, err := os.Stat(e.path("stream/bad")); err == nil {
			t.Fatalf("chunk %d tampered: object stored", bad)
		}
	}
}

// trailerPut sends payload as STREAMING-UNSIGNED-PAYLOAD-TRAILER (how
// current AWS SDKs upload over TLS): unsigned chunks, then the CRC32 in
// an x-amz-checksum-crc32 trailer (crc as given).
func trailerPut(t *testing.T, e *emu, key string, chunks [][]byte, crc uint32) (int, string) {
	t.Helper()
	var body bytes.Buffer
	n := 0
	for _, c := range chunks {
		fmt.Fprintf(&body, "%x\r\n", len(c))
		body.Write(c)
		body.WriteString("\r\n")
		n += len(c)
	}
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc)
	fmt.Fprintf(&body, "0\r\nx-amz-checksum-crc32:%s\r\n\r\n", base64.StdEncoding.EncodeToString(sum[:]))
	req, err := http.NewRequest(http.MethodPut, "http://"+e.addr+"/"+bucketName+"/"+key, bytes.NewReader(body.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Encoding", "aws-chunked")
	req.Header.Set("X-Amz-Decoded-Content-Length", strconv.Itoa(n))
	req.Header.Set("X-Amz-Trailer", "x-amz-checksum-crc32")
	req.Header.Set("X-Amz-Content-Sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
	creds := aws.Credentials{AccessKeyID: ossemutest.AccessKeyID, SecretAccessKey: ossemutest.AccessKeySecret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestS3TrailerChecksum: an unsigned-payload streaming upload with a
// CRC32 trailer stores exactly the decoded bytes; a wrong trailer CRC gets
// 400 BadDigest and stores nothing.
func TestS3TrailerChecksum(t *testing.T) {
	e := start(t, ossemu.Options{})
	payload := randBytes(100000, 5)
	chunks := [][]byte{payload[:8192], payload[8192:]}
	crc := crc32.ChecksumIEEE(payload)
	if st, body := trailerPut(t, e, "trailer/ok", chunks, crc); st != http.StatusOK {
		t.Fatalf("trailer PUT: %d %s", st, body)
	}
	got, err := os.ReadFile(e.path("trailer/ok"))
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("stored %d bytes (%v), want the %d sent", len(got), err, len(payload))
	}
	st, body := trailerPut(t, e, "trailer/bad", chunks, crc+1)
	if st != http.StatusBadRequest || !strings.Contains(body, "<Code>BadDigest</Code>") {
		t.Fatalf("wrong trailer CRC: %d %s", st, body)
	}
	if _, err := os.Stat(e.path("trailer/bad")); err == nil {
		t.Fatal("wrong trailer CRC: object stored")
	}
}
