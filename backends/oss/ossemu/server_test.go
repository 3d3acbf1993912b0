package ossemu_test

import (
	"bytes"
	"crypto/md5"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

const bucketName = "bkt"

type emu struct {
	srv    *ossemu.Server
	addr   string
	root   string
	bucket *alioss.Bucket
}

func start(t testing.TB, opt ossemu.Options) *emu {
	t.Helper()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, bucketName), 0o755); err != nil {
		t.Fatal(err)
	}
	srv, endpoint := ossemutest.Start(t, root, opt)
	client, err := alioss.New(endpoint, ossemutest.AccessKeyID, ossemutest.AccessKeySecret, alioss.ForcePathStyle(true), alioss.EnableCRC(true))
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.Bucket(bucketName)
	if err != nil {
		t.Fatal(err)
	}
	return &emu{srv: srv, addr: strings.TrimPrefix(endpoint, "http://"), root: root, bucket: b}
}

func (e *emu) path(key string) string {
	return filepath.Join(e.root, bucketName, filepath.FromSlash(key))
}

func crcOf(b []byte) uint64 { return crc64.Checksum(b, crc64.MakeTable(crc64.ECMA)) }

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestPutGetHeaders: an SDK PutObject lands as a plain file; GetObject and
// HEAD serve its bytes with ETag (MD5), x-oss-hash-crc64ecma, the request id
// and the x-oss-meta-* headers it was written with.
func TestPutGetHeaders(t *testing.T) {
	e := start(t, ossemu.Options{})
	data := randBytes(300_001, 1)
	if err := e.bucket.PutObject("dir/obj.bin", bytes.NewReader(data), alioss.Meta("Owner", "Alice Smith"), alioss.ContentType("text/x-test")); err != nil {
		t.Fatal(err)
	}
	disk, err := os.ReadFile(e.path("dir/obj.bin"))
	if err != nil || !bytes.Equal(disk, data) {
		t.Fatalf("file on disk: err %v, equal %v", err, bytes.Equal(disk, data))
	}
	h, err := e.bucket.GetObjectDetailedMeta("dir/obj.bin")
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(data)
	if got, want := h.Get("ETag"), fmt.Sprintf(`"%X"`, sum[:]); got != want {
		t.Errorf("ETag %s, want %s", got, want)
	}
	if got, want := h.Get("X-Oss-Hash-Crc64ecma"), strconv.FormatUint(crcOf(data), 10); got != want {
		t.Errorf("crc64 %s, want %s", got, want)
	}
	if h.Get("X-Oss-Request-Id") == "" {
		t.Error("no x-oss-request-id")
	}
	if got := h.Get("X-Oss-Meta-Owner"); got != "Alice Smith" {
		t.Errorf("x-oss-meta-owner = %q", got)
	}
	if got := h.Get("Content-Type"); got != "text/x-test" {
		t.Errorf("Content-Type = %q", got)
	}
	if got := h.Get("Content-Length"); got != strconv.Itoa(len(data)) {
		t.Errorf("Content-Length = %q", got)
	}
	res, err := e.bucket.DoGetObject(&alioss.GetObjectRequest{ObjectKey: "dir/obj.bin"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(res.Response.Body)
	res.Response.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("GetObject: err %v, equal %v", err, bytes.Equal(got, data))
	}
	if res.ServerCRC != crcOf(data) || res.ClientCRC.Sum64() != res.ServerCRC {
		t.Errorf("SDK CRC: server %d client %d want %d", res.ServerCRC, res.ClientCRC.Sum64(), crcOf(data))
	}
	// Ranged reads, including one running past the end.
	for _, r := range [][2]int64{{0, 0}, {1, 1000}, {299_000, 400_000}} {
		body, err := e.bucket.GetObject("dir/obj.bin", alioss.Range(r[0], r[1]))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(body)
		body.Close()
		end := min(r[1]+1, int64(len(data)))
		if err != nil || !bytes.Equal(got, data[r[0]:end]) {
			t.Errorf("range %v: err %v, %d bytes, equal %v", r, err, len(got), bytes.Equal(got, data[r[0]:end]))
		}
	}
	// Nothing but the object in the bucket tree.
	var files []string
	filepath.Walk(filepath.Join(e.root, bucketName), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 1 {
		t.Errorf("bucket tree holds %q, want only the object", files)
	}
}

// TestRangeBehavior: a range past the end is ignored by default (as OSS
// does) and refused with 416 under x-oss-range-behavior: standard.
func TestRangeBehavior(t *testing.T) {
	e := start(t, ossemu.Options{})
	if err := e.bucket.PutObject("small", strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	body, err := e.bucket.GetObject("small", alioss.Range(10, 20))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(body)
	body.Close()
	if string(got) != "hello" {
		t.Errorf("default range behavior: got %q, want the whole object", got)
	}
	_, err = e.bucket.GetObject("small", alioss.Range(10, 20), alioss.RangeBehavior("standard"))
	var se alioss.ServiceError
	if !errors.As(err, &se) || se.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("standard range behavior: err %v, want 416", err)
	}
	_, err = e.bucket.GetObject("small", alioss.IfMatch(`"nope"`))
	if !errors.As(err, &se) || se.StatusCode != http.StatusPreconditionFailed {
		t.Errorf("If-Match mismatch: err %v, want 412", err)
	}
	_, err = e.bucket.GetObject("missing")
	if !errors.As(err, &se) || se.StatusCode != http.StatusNotFound || se.Code != "NoSuchKey" {
		t.Errorf("missing key: err %v, want 404 NoSuchKey", err)
	}
}

// TestSeededFiles: files written with ordinary tools are objects; their
// CRC is computed once, and a file changed on disk gets a new ETag and CRC.
func TestSeededFiles(t *testing.T) {
	e := start(t, ossemu.Options{})
	p := e.path("seed/a.txt")
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	h1, err := e.bucket.GetObjectDetailedMeta("seed/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got := h1.Get("X-Oss-Hash-Crc64ecma"); got != strconv.FormatUint(crcOf([]byte("first")), 10) {
		t.Errorf("seeded crc %s", got)
	}
	time.Sleep(10 * time.Millisecond) // a later mtime: the change the emulator must see
	if err := os.WriteFile(p, []byte("second!"), 0o644); err != nil {
		t.Fatal(err)
	}
	h2, err := e.bucket.GetObjectDetailedMeta("seed/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	if h1.Get("ETag") == h2.Get("ETag") {
		t.Errorf("ETag unchanged after the file changed: %s", h2.Get("ETag"))
	}
	if got := h2.Get("X-Oss-Hash-Crc64ecma"); got != strconv.FormatUint(crcOf([]byte("second!")), 10) {
		t.Errorf("crc after change %s", got)
	}
	body, err := e.bucket.GetObject("seed/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(body)
	body.Close()
	if string(got) != "second!" {
		t.Errorf("got %q", got)
	}
}

// TestListing: keys with '%', '+', spaces and unicode list back exactly
// (encoding-type=url) with V1 and V2, paged by NextMarker and continuation
// tokens, with and without a delimiter.
func TestListing(t *testing.T) {
	e := start(t, ossemu.Options{})
	keys := []string{"a+b", "a b", "a%20b", "a%b", "ü/x", "d/1", "d/2", "d/e/3", "d.txt", "d0", "z/", "plus+/q"}
	for _, k := range keys {
		if err := e.bucket.PutObject(k, strings.NewReader("")); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
	}
	sorted := slices.Clone(keys)
	sort.Strings(sorted)

	// V1, no delimiter, pages of 3 via NextMarker.
	var got []string
	marker := ""
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatal("V1 listing does not end")
		}
		res, err := e.bucket.ListObjects(alioss.Marker(marker), alioss.MaxKeys(3))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range res.Objects {
			got = append(got, o.Key)
		}
		if !res.IsTruncated {
			break
		}
		if res.NextMarker == "" {
			t.Fatal("truncated V1 page without NextMarker")
		}
		marker = res.NextMarker
	}
	if !slices.Equal(got, sorted) {
		t.Errorf("V1 keys\n got %q\nwant %q", got, sorted)
	}

	// V2 with a delimiter, pages of 2.
	var objs, prefixes []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatal("V2 listing does not end")
		}
		opts := []alioss.Option{alioss.Delimiter("/"), alioss.MaxKeys(2)}
		if token != "" {
			opts = append(opts, alioss.ContinuationToken(token))
		}
		res, err := e.bucket.ListObjectsV2(opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range res.Objects {
			objs = append(objs, o.Key)
		}
		prefixes = append(prefixes, res.CommonPrefixes...)
		if !res.IsTruncated {
			break
		}
		token = res.NextContinuationToken
	}
	wantObjs := []string{"a b", "a%20b", "a%b", "a+b", "d.txt", "d0"}
	wantPrefixes := []string{"d/", "plus+/", "z/", "ü/"}
	if !slices.Equal(objs, wantObjs) || !slices.Equal(prefixes, wantPrefixes) {
		t.Errorf("V2 delimiter listing\n objects %q want %q\nprefixes %q want %q", objs, wantObjs, prefixes, wantPrefixes)
	}

	// Inside a prefix.
	res, err := e.bucket.ListObjectsV2(alioss.Prefix("d/"), alioss.Delimiter("/"))
	if err != nil {
		t.Fatal(err)
	}
	var in []string
	for _, o := range res.Objects {
		in = append(in, o.Key)
	}
	if !slices.Equal(in, []string{"d/1", "d/2"}) || !slices.Equal(res.CommonPrefixes, []string{"d/e/"}) {
		t.Errorf("prefix d/: objects %q prefixes %q", in, res.CommonPrefixes)
	}
}

// TestDirectoryMarkers: "k/" objects are directories; deleting the last
// object of an implicit directory removes it, but not a marker.
func TestDirectoryMarkers(t *testing.T) {
	e := start(t, ossemu.Options{})
	if err := e.bucket.PutObject("m/", strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(e.path("m")); err != nil || !fi.IsDir() {
		t.Fatalf("marker m/ is not a directory: %v", err)
	}
	for _, k := range []string{"m/x", "i/j/y"} {
		if err := e.bucket.PutObject(k, strings.NewReader("1")); err != nil {
			t.Fatal(err)
		}
		if err := e.bucket.DeleteObject(k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(e.path("m")); err != nil {
		t.Errorf("marker directory m vanished with its last child: %v", err)
	}
	if _, err := os.Stat(e.path("i")); !os.IsNotExist(err) {
		t.Errorf("implicit directory i left behind: %v", err)
	}
	if ok, err := e.bucket.IsObjectExist("m/"); err != nil || !ok {
		t.Errorf("m/ exists = %v, %v", ok, err)
	}
	if err := e.bucket.DeleteObject("m/"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.path("m")); !os.IsNotExist(err) {
		t.Errorf("deleted marker still on disk: %v", err)
	}
	// A conflicting key is refused, not half-written.
	if err := e.bucket.PutObject("f", strings.NewReader("file")); err != nil {
		t.Fatal(err)
	}
	if err := e.bucket.PutObject("f/child", strings.NewReader("x")); err == nil {
		t.Error("putting f/child under file f succeeded")
	}
}

// TestCopy: x-oss-copy-source copies data and metadata, keys with '+' and
// spaces included; REPLACE takes the new metadata.
func TestCopy(t *testing.T) {
	e := start(t, ossemu.Options{})
	if err := e.bucket.PutObject("src a+b", strings.NewReader("payload"), alioss.Meta("k", "v1")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.bucket.CopyObject("src a+b", "dst/c d+e"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(e.path("dst/c d+e"))
	if err != nil || string(got) != "payload" {
		t.Fatalf("copy on disk: %q %v", got, err)
	}
	h, _ := e.bucket.GetObjectDetailedMeta("dst/c d+e")
	if h.Get("X-Oss-Meta-K") != "v1" {
		t.Errorf("copied meta = %q", h.Get("X-Oss-Meta-K"))
	}
	if _, err := e.bucket.CopyObject("src a+b", "src a+b", alioss.MetadataDirective(alioss.MetaReplace), alioss.Meta("k", "v2")); err != nil {
		t.Fatal(err)
	}
	h, _ = e.bucket.GetObjectDetailedMeta("src a+b")
	if h.Get("X-Oss-Meta-K") != "v2" {
		t.Errorf("replaced meta = %q", h.Get("X-Oss-Meta-K"))
	}
	if got, _ := os.ReadFile(e.path("src a+b")); string(got) != "payload" {
		t.Errorf("copy onto itself changed data: %q", got)
	}
}

// TestMultipart: parts uploaded in parallel complete into one file whose
// CRC and bytes match; parts never show in the bucket; abort cleans up.
func TestMultipart(t *testing.T) {
	e := start(t, ossemu.Options{})
	data := randBytes(3*256<<10+777, 2)
	imur, err := e.bucket.InitiateMultipartUpload("big/obj")
	if err != nil {
		t.Fatal(err)
	}
	const ps = 256 << 10
	var mu sync.Mutex
	var parts []alioss.UploadPart
	var wg sync.WaitGroup
	for i := 0; i*ps < len(data); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			chunk := data[i*ps : min((i+1)*ps, len(data))]
			p, err := e.bucket.UploadPart(imur, bytes.NewReader(chunk), int64(len(chunk)), i+1)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			parts = append(parts, p)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res, err := e.bucket.ListObjects()
	if err != nil || len(res.Objects) != 0 {
		t.Errorf("objects visible before complete: %v %v", res.Objects, err)
	}
	var h http.Header
	if _, err := e.bucket.CompleteMultipartUpload(imur, parts, alioss.GetResponseHeader(&h)); err != nil {
		t.Fatal(err)
	}
	if got := h.Get("X-Oss-Hash-Crc64ecma"); got != strconv.FormatUint(crcOf(data), 10) {
		t.Errorf("complete crc %s, want %d", got, crcOf(data))
	}
	disk, err := os.ReadFile(e.path("big/obj"))
	if err != nil || !bytes.Equal(disk, data) {
		t.Fatalf("completed object differs (err %v)", err)
	}
	imur2, err := e.bucket.InitiateMultipartUpload("big/aborted")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.bucket.UploadPart(imur2, bytes.NewReader(data[:1000]), 1000, 1); err != nil {
		t.Fatal(err)
	}
	if err := e.bucket.AbortMultipartUpload(imur2); err != nil {
		t.Fatal(err)
	}
	if ups, _ := os.ReadDir(filepath.Join(e.root, ".ossemu", "uploads")); len(ups) != 0 {
		t.Errorf("upload staging left after abort and complete: %d entries", len(ups))
	}
	if _, err := os.Stat(e.path("big/aborted")); !os.IsNotExist(err) {
		t.Errorf("aborted upload visible: %v", err)
	}
	lb, err := e.bucket.Client.ListBuckets()
	if err != nil {
		t.Fatal(err)
	}
	if len(lb.Buckets) != 1 || lb.Buckets[0].Name != bucketName {
		t.Errorf("buckets %+v, want only %s", lb.Buckets, bucketName)
	}
}

// TestFaults: each injected kind reaches an SDK client as the failure it
// names, and the counters (API and HTTP endpoint) record them.
func TestFaults(t *testing.T) {
	e := start(t, ossemu.Options{Seed: 7})
	data := randBytes(1<<20, 3)
	if err := e.bucket.PutObject("obj", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	var se alioss.ServiceError
	e.srv.SetFaults(1, ossemu.Fault500)
	if _, err := e.bucket.GetObject("obj"); !errors.As(err, &se) || se.StatusCode != 500 {
		t.Errorf("500: got %v", err)
	}
	e.srv.SetFaults(1, ossemu.Fault503)
	if err := e.bucket.PutObject("obj2", strings.NewReader("x")); !errors.As(err, &se) || se.StatusCode != 503 {
		t.Errorf("503: got %v", err)
	}
	if _, err := os.Stat(e.path("obj2")); !os.IsNotExist(err) {
		t.Errorf("a PUT failed with 503 landed: %v", err)
	}
	for _, k := range []ossemu.FaultKind{ossemu.FaultReset, ossemu.FaultTruncate} {
		e.srv.SetFaults(1, k)
		body, err := e.bucket.GetObject("obj")
		if err == nil {
			got, rerr := io.ReadAll(body)
			body.Close()
			if rerr == nil || len(got) >= len(data) {
				t.Errorf("%s: read %d bytes, err %v; want a short read with an error", k, len(got), rerr)
			}
			if !bytes.Equal(got, data[:len(got)]) {
				t.Errorf("%s: the bytes before the fault are wrong", k)
			}
		}
	}
	e.srv.SetFaults(0)
	st := e.srv.Stats()
	for _, k := range []string{"fault.500", "fault.503", "fault.reset", "fault.truncate", "GetObject", "PutObject"} {
		if st[k] == 0 {
			t.Errorf("stats[%s] = 0; stats %v", k, st)
		}
	}
	resp, err := http.Get("http://" + e.addr + ossemu.StatsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var js map[string]int64
	if err := json.NewDecoder(resp.Body).Decode(&js); err != nil {
		t.Fatal(err)
	}
	if js["fault.500"] != st["fault.500"] || js["PutObject"] != st["PutObject"] {
		t.Errorf("stats endpoint %v differs from Stats() %v", js, st)
	}
}

// TestLatencyAndBandwidth: the time to first byte and the per-connection
// bandwidth limit are applied (lower bounds only: the machine may be slow).
func TestLatencyAndBandwidth(t *testing.T) {
	e := start(t, ossemu.Options{TTFB: 150 * time.Millisecond, ConnBandwidth: 2 << 20})
	data := randBytes(1<<20, 4)
	p := e.path("obj")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := e.bucket.GetObjectDetailedMeta("obj"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 150*time.Millisecond {
		t.Errorf("HEAD took %v, want at least the 150ms time to first byte", d)
	}
	t0 = time.Now()
	body, err := e.bucket.GetObject("obj")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(body)
	body.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read: %v", err)
	}
	// 1 MiB at 2 MiB/s: at least ~0.5s plus the TTFB.
	if d := time.Since(t0); d < 600*time.Millisecond {
		t.Errorf("1 MiB at 2 MiB/s took %v", d)
	}
}

// TestStreamsLargeObjects: a 512 MiB object goes up and comes back with
// the emulator (in this process) allocating a small fraction of it.
func TestStreamsLargeObjects(t *testing.T) {
	if testing.Short() {
		t.Skip("large object in -short mode")
	}
	e := start(t, ossemu.Options{Anonymous: true})
	const size = 512 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req, _ := http.NewRequest(http.MethodPut, "http://"+e.addr+"/"+bucketName+"/large", io.LimitReader(zeroReader{}, size))
	req.ContentLength = size
	req.Header.Set("Authorization", "OSS id:sig")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT status %d", resp.StatusCode)
	}
	req, _ = http.NewRequest(http.MethodGet, "http://"+e.addr+"/"+bucketName+"/large", nil)
	req.Header.Set("Authorization", "OSS id:sig")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != size {
		t.Fatalf("GET: %d bytes, %v", n, err)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("moving 2 x 512 MiB allocated %d MiB in this process", alloc>>20)
	}
	if fi, err := os.Stat(e.path("large")); err != nil || fi.Size() != size {
		t.Errorf("large object on disk: %v", err)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestDeleteObjects: the SDK's multi-delete (keys URL-encoded) removes
// every key, awkward names included.
func TestDeleteObjects(t *testing.T) {
	e := start(t, ossemu.Options{})
	keys := []string{"x/a+b", "x/c d", "x/e%f", "x/ü"}
	for _, k := range keys {
		if err := e.bucket.PutObject(k, strings.NewReader(k)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := e.bucket.DeleteObjects(keys)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(slices.Values(res.DeletedObjects)); !slices.Equal(got, keys) {
		t.Errorf("deleted %q, want %q", got, keys)
	}
	if _, err := os.Stat(e.path("x")); !os.IsNotExist(err) {
		t.Errorf("directory x left after deleting its objects: %v", err)
	}
}

// TestUploadPartCopy: parts copied from ranges of an existing object (as
// s3fs renames large files, and the SDK's CopyFile) assemble into a copy.
func TestUploadPartCopy(t *testing.T) {
	e := start(t, ossemu.Options{})
	data := randBytes(700_000, 8)
	if err := e.bucket.PutObject("src", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	imur, err := e.bucket.InitiateMultipartUpload("dst")
	if err != nil {
		t.Fatal(err)
	}
	var parts []alioss.UploadPart
	for i, r := range [][2]int64{{0, 300_000}, {300_000, 700_000}} {
		p, err := e.bucket.UploadPartCopy(imur, bucketName, "src", r[0], r[1]-r[0], i+1)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	if _, err := e.bucket.CompleteMultipartUpload(imur, parts); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(e.path("dst")); !bytes.Equal(got, data) {
		t.Error("copy by parts differs")
	}
	if e.srv.Stats()["UploadPartCopy"] != 2 {
		t.Errorf("stats %v", e.srv.Stats())
	}
}
