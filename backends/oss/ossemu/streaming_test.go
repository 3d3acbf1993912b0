package ossemu_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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

// signedTrailerPut sends payload as STREAMING-AWS4-HMAC-SHA256-PAYLOAD-
// TRAILER, built per the AWS spec: the seed signature by aws-sdk-go-v2's
// v4.Signer, the chunk chain by v4.StreamSigner, then the CRC32 trailer
// signed with "AWS4-HMAC-SHA256-TRAILER" (no Go SDK signs trailers, so
// that last step is written here). tamper changes the trailer section
// after signing: "sig" flips the signature, "nosig" leaves it out,
// "extra" adds a trailer line it does not cover.
func signedTrailerPut(t *testing.T, e *emu, key string, chunks [][]byte, tamper string) (int, string) {
	t.Helper()
	ctx := context.Background()
	const mode = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	creds := aws.Credentials{AccessKeyID: ossemutest.AccessKeyID, SecretAccessKey: ossemutest.AccessKeySecret}
	now := time.Now().UTC()
	all := append(append([][]byte{}, chunks...), nil)
	var payload []byte
	for _, c := range chunks {
		payload = append(payload, c...)
	}
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.ChecksumIEEE(payload))
	trailer := "x-amz-checksum-crc32:" + base64.StdEncoding.EncodeToString(sum[:])
	encode := func(chunkSig func(c []byte) string, trailerSig string) []byte {
		var b bytes.Buffer
		for _, c := range all {
			fmt.Fprintf(&b, "%x;chunk-signature=%s\r\n", len(c), chunkSig(c))
			if len(c) > 0 {
				b.Write(c)
				b.WriteString("\r\n")
			}
		}
		b.WriteString(trailer + "\r\n")
		if tamper == "extra" {
			b.WriteString("x-amz-meta-injected:1\r\n")
		}
		if tamper != "nosig" {
			b.WriteString("x-amz-trailer-signature:" + trailerSig + "\r\n")
		}
		b.WriteString("\r\n")
		return b.Bytes()
	}
	zeros := strings.Repeat("0", 64)
	encLen := len(encode(func([]byte) string { return zeros }, zeros))
	req, err := http.NewRequest(http.MethodPut, "http://"+e.addr+"/"+bucketName+"/"+key, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(encLen)
	req.Header.Set("Content-Encoding", "aws-chunked")
	req.Header.Set("X-Amz-Decoded-Content-Length", strconv.Itoa(len(payload)))
	req.Header.Set("X-Amz-Trailer", "x-amz-checksum-crc32")
	req.Header.Set("X-Amz-Content-Sha256", mode)
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, mode, "s3", "us-east-1", now); err != nil {
		t.Fatal(err)
	}
	_, seedHex, _ := strings.Cut(req.Header.Get("Authorization"), "Signature=")
	seed, err := hex.DecodeString(seedHex)
	if err != nil {
		t.Fatalf("no seed signature in %q", req.Header.Get("Authorization"))
	}
	ss := v4.NewStreamSigner(creds, "s3", "us-east-1", seed)
	var last string
	sigs := map[int]string{}
	for i, c := range all {
		s, err := ss.GetSignature(ctx, nil, c, now)
		if err != nil {
			t.Fatal(err)
		}
		sigs[i], last = hex.EncodeToString(s), hex.EncodeToString(s)
	}
	// The trailer's signature: its string to sign chains on from the
	// final (empty) chunk's signature.
	key4 := []byte("AWS4" + creds.SecretAccessKey)
	for _, part := range []string{now.Format("20060102"), "us-east-1", "s3", "aws4_request"} {
		key4 = postHMAC(sha256.New, key4, part)
	}
	th := sha256.Sum256([]byte(trailer + "\n"))
	scope := now.Format("20060102") + "/us-east-1/s3/aws4_request"
	tsig := hex.EncodeToString(postHMAC(sha256.New, key4, "AWS4-HMAC-SHA256-TRAILER\n"+now.Format("20060102T150405Z")+"\n"+scope+"\n"+last+"\n"+hex.EncodeToString(th[:])))
	if tamper == "sig" {
		tsig = tsig[:10] + string("01"[(tsig[10]-'0'+1)%2]) + tsig[11:]
	}
	i := 0
	body := encode(func([]byte) string { s := sigs[i]; i++; return s }, tsig)
	if len(body) != encLen {
		t.Fatalf("encoded body %d bytes, computed %d", len(body), encLen)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestS3SignedTrailer: a signed streaming upload with a signed CRC32
// trailer is stored exactly; a trailer signature changed, left out, or not
// covering a trailer line gets 403 SignatureDoesNotMatch and stores
// nothing.
func TestS3SignedTrailer(t *testing.T) {
	e := start(t, ossemu.Options{})
	payload := randBytes(150000, 9)
	chunks := [][]byte{payload[:65536], payload[65536:]}
	if st, body := signedTrailerPut(t, e, "strailer/ok", chunks, ""); st != http.StatusOK {
		t.Fatalf("signed trailer PUT: %d %s", st, body)
	}
	if got, err := os.ReadFile(e.path("strailer/ok")); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("stored %d bytes (%v), want the %d sent", len(got), err, len(payload))
	}
	for _, tamper := range []string{"sig", "nosig", "extra"} {
		st, body := signedTrailerPut(t, e, "strailer/bad", chunks, tamper)
		if st != http.StatusForbidden || !strings.Contains(body, "<Code>SignatureDoesNotMatch</Code>") {
			t.Errorf("trailer %s: %d %s", tamper, st, body)
		}
		if _, err := os.Stat(e.path("strailer/bad")); err == nil {
			t.Fatalf("trailer %s: object stored", tamper)
		}
	}
}

// TestBoto3TLSTrailer: boto3 over TLS uploads with a flexible checksum
// (STREAMING-UNSIGNED-PAYLOAD-TRAILER and an x-amz-checksum-* trailer) in
// botocore 1.36 and later (checked: such a botocore must send one); the
// object stored is the one sent. An older botocore (Debian's) still uploads.
func TestBoto3TLSTrailer(t *testing.T) {
	script, err := filepath.Abs("testdata/boto3_trailer.py")
	if err != nil {
		t.Fatal(err)
	}
	for _, py := range pythonsWithBoto3(t) {
		t.Run(filepath.Base(filepath.Dir(filepath.Dir(py))), func(t *testing.T) {
			root := t.TempDir()
			if err := os.Mkdir(filepath.Join(root, bucketName), 0o755); err != nil {
				t.Fatal(err)
			}
			srv, err := ossemu.New(root, ossemu.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var modes []string // X-Amz-Content-Sha256 / X-Amz-Trailer of each PUT
			ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPut {
					mu.Lock()
					modes = append(modes, r.Header.Get("X-Amz-Content-Sha256")+" "+r.Header.Get("X-Amz-Trailer"))
					mu.Unlock()
				}
				srv.ServeHTTP(w, r)
			}))
			defer ts.Close()
			cmd := exec.Command(py, script, ts.URL, bucketName)
			cmd.Env = append(os.Environ(), "EMU_AK="+ossemutest.AccessKeyID, "EMU_SK="+ossemutest.AccessKeySecret,
				"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", py, err, out)
			}
			want := bytes.Repeat(func() []byte {
				b := make([]byte, 256)
				for i := range b {
					b[i] = byte(i)
				}
				return b
			}(), 4000)
			if got, err := os.ReadFile(filepath.Join(root, bucketName, "tls", "put")); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("stored %d bytes (%v), want %d", len(got), err, len(want))
			}
			mu.Lock()
			defer mu.Unlock()
			t.Logf("%s: %s; PUT modes %q", py, strings.TrimSpace(string(out)), modes)
			var major, minor int
			if _, err := fmt.Sscanf(string(out), "botocore %d.%d", &major, &minor); err != nil {
				t.Fatalf("no botocore version in %q", out)
			}
			if major == 1 && minor < 36 {
				return // before flexible checksums: nothing to check
			}
			found := false
			for _, m := range modes {
				found = found || strings.HasPrefix(m, "STREAMING-UNSIGNED-PAYLOAD-TRAILER x-amz-checksum-")
			}
			if !found {
				t.Fatalf("botocore %d.%d sent no checksum trailer over TLS", major, minor)
			}
		})
	}
}
