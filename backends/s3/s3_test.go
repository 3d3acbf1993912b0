package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awscreds "github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/backendtest"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

const (
	testBucket = "bkt"
	// The suite's many-keys and large-write sizes, as the other backends
	// run it.
	conformanceKeys  = 2500
	conformanceLarge = 20<<20 + 3
)

// emu is an emulator (its S3 face) serving a fresh root with one bucket.
type emu struct {
	srv      *ossemu.Server
	endpoint string
	root     string
}

func startEmu(t testing.TB, opt ossemu.Options) *emu {
	t.Helper()
	srv, endpoint, root := ossemutest.StartBucket(t, testBucket, opt)
	return &emu{srv: srv, endpoint: endpoint, root: root}
}

// setCreds sets the credentials the emulator accepts, and clears what
// else in the environment could steer the client.
func setCreds(t testing.TB) {
	t.Setenv("AWS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", ossemutest.AccessKeySecret)
	for _, k := range []string{"AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"} {
		t.Setenv(k, "")
	}
}

// fastRetry keeps retry tests quick while still backing off.
var fastRetry = RetryOptions{MaxAttempts: 10, BaseDelay: 5 * time.Millisecond, MaxDelay: 100 * time.Millisecond, MaxElapsed: 30 * time.Second}

func openURI(t testing.TB, uri string, opt Options) *Backend {
	t.Helper()
	u, err := backends.ParseURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(context.Background(), u, opt, nil)
	if err != nil {
		t.Fatalf("New(%s): %v", uri, err)
	}
	return b.(*Backend)
}

// TestConformance runs the backend conformance suite against the S3 face
// of the emulator, over a real socket, with SigV4 signatures checked.
func TestConformance(t *testing.T) {
	setCreds(t)
	backendtest.RunOptions(t, func(t *testing.T) backends.Backend {
		e := startEmu(t, ossemu.Options{})
		return openURI(t, "s3://"+testBucket+"/data/?endpoint="+e.endpoint, Options{Retry: fastRetry})
	}, backendtest.Options{RequireDirMaker: true, RequireCopier: true, ExclusiveWriter: true, ManyKeys: conformanceKeys, LargeSize: conformanceLarge})
}

// TestConformanceStore runs the suite against a real S3-compatible store
// (MinIO, SeaweedFS) named by MLFSD_TEST_S3_ENDPOINT, in the bucket
// MLFSD_TEST_S3_BUCKET (default mlfsd-test), with the AWS_* credentials of
// the environment. Without MLFSD_TEST_S3_ENDPOINT it is skipped: the
// default test run needs no store but the emulator.
func TestConformanceStore(t *testing.T) {
	ep := os.Getenv("MLFSD_TEST_S3_ENDPOINT")
	if ep == "" {
		t.Skip("MLFSD_TEST_S3_ENDPOINT not set: no S3-compatible store to test against")
	}
	bucket := os.Getenv("MLFSD_TEST_S3_BUCKET")
	if bucket == "" {
		bucket = "mlfsd-test"
	}
	createBucket(t, ep, bucket)
	run := time.Now().UnixNano()
	// The default (no upload checksums with an endpoint) and CRC-32 on
	// every write, which newer stores check and older ones refuse.
	for _, mode := range []string{"off", "crc32"} {
		t.Run(mode, func(t *testing.T) {
			n := 0
			var mu sync.Mutex
			opt := Options{UploadChecksums: mode}
			backendtest.RunOptions(t, func(t *testing.T) backends.Backend {
				mu.Lock()
				n++
				prefix := fmt.Sprintf("conformance-%d/%s/%d/", run, mode, n)
				mu.Unlock()
				b := openURI(t, "s3://"+bucket+"/"+prefix+"?endpoint="+ep, opt)
				t.Cleanup(func() { purge(t, b) })
				return b
			}, backendtest.Options{RequireDirMaker: true, RequireCopier: true, ExclusiveWriter: true, ManyKeys: conformanceKeys, LargeSize: conformanceLarge})
			t.Run("WriteExclusiveRace", func(t *testing.T) {
				b := openURI(t, fmt.Sprintf("s3://%s/conformance-%d/%s/race/?endpoint=%s", bucket, run, mode, ep), opt)
				t.Cleanup(func() { purge(t, b) })
				raceExclusive(t, b, 8)
			})
			t.Run("ControlCharacterKeys", func(t *testing.T) {
				b := openURI(t, fmt.Sprintf("s3://%s/conformance-%d/%s/cc/?endpoint=%s", bucket, run, mode, ep), opt)
				t.Cleanup(func() { purge(t, b) })
				controlCharacterKeys(t, b)
			})
		})
	}
}

// createBucket creates bucket at the store ep unless it exists.
func createBucket(t *testing.T, ep, bucket string) {
	t.Helper()
	e, err := resolveEndpoint(ep, "", "", "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	c := s3.New(s3.Options{Region: e.region, BaseEndpoint: aws.String(e.url), UsePathStyle: e.pathStyle,
		Credentials: awscreds.NewStaticCredentialsProvider(os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), os.Getenv("AWS_SESSION_TOKEN"))})
	_, err = c.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	if code := apiCode(err); err != nil && code != "BucketAlreadyOwnedByYou" && code != "BucketAlreadyExists" {
		t.Fatalf("create bucket %s at %s: %v", bucket, ep, err)
	}
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// purge deletes everything under b's root.
func purge(t *testing.T, b *Backend) {
	ctx := context.Background()
	token := ""
	for {
		p, err := b.List(ctx, backends.ListOptions{Recursive: true, Token: token})
		if err != nil {
			t.Logf("purge: %v", err)
			return
		}
		for _, o := range p.Objects {
			k := o.Key
			if o.IsDir {
				k += "/"
			}
			if err := b.deleteObject(ctx, b.object(k)); err != nil {
				t.Logf("purge %q: %v", k, err)
			}
		}
		if token = p.NextToken; token == "" {
			return
		}
	}
}

// raceExclusive has n goroutines race WriteExclusive on one key, each with
// its own content: exactly one wins, the others get ErrExist, and the key
// holds the winner's bytes. Then a later writer loses too.
func raceExclusive(t *testing.T, b *Backend, n int) {
	t.Helper()
	ctx := t.Context()
	start := make(chan struct{})
	errs := make([]error, n)
	infos := make([]backends.ObjectInfo, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			infos[i], errs[i] = b.WriteExclusive(ctx, "lease", fmt.Appendf(nil, "holder %d", i))
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("writers %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, backends.ErrExist):
			t.Errorf("writer %d: %v, want an error wrapping ErrExist", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer won: %v", errs)
	}
	want := fmt.Appendf(nil, "holder %d", winner)
	if got := readAll(t, b, "lease"); !bytes.Equal(got, want) {
		t.Errorf("lease holds %q, want the winner's %q", got, want)
	}
	if st, err := b.Stat(ctx, "lease"); err != nil || st.Version != infos[winner].Version || st.Size != int64(len(want)) {
		t.Errorf("Stat(lease) = %+v, %v; the winner was told %+v", st, err, infos[winner])
	}
	if _, err := b.WriteExclusive(ctx, "lease", []byte("late")); !errors.Is(err, backends.ErrExist) {
		t.Errorf("a late WriteExclusive: %v, want ErrExist", err)
	}
	// Gone, the key can be taken again.
	if err := b.Delete(ctx, "lease"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteExclusive(ctx, "lease", []byte("again")); err != nil {
		t.Errorf("WriteExclusive after Delete: %v", err)
	}
}

func readAll(t *testing.T, b backends.Backend, key string) []byte {
	t.Helper()
	r, err := b.Read(t.Context(), key, backends.ReadOptions{Length: -1})
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	return data
}

// TestWriteExclusiveRace: eight writers race on one key through the
// emulator's S3 face (If-None-Match: *); exactly one wins.
func TestWriteExclusiveRace(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{})
	for round := range 5 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			b := openURI(t, fmt.Sprintf("s3://%s/race%d/?endpoint=%s", testBucket, round, e.endpoint), Options{Retry: fastRetry})
			raceExclusive(t, b, 8)
		})
	}
	if st := e.srv.Stats(); st["PutObject"] == 0 {
		t.Errorf("no PutObject reached the emulator: %v", st)
	}
}

// TestCopyInParts: an object larger than one CopyObject takes is copied
// with UploadPartCopy parts, server-side, byte for byte; a missing source
// is ErrNotExist.
func TestCopyInParts(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{})
	b := openURI(t, "s3://"+testBucket+"/c/?endpoint="+e.endpoint, Options{Retry: fastRetry, PartSize: 5 << 20})
	b.copyLimit = 6 << 20
	data := patterned(11<<20+17, 3)
	w, err := b.Write(t.Context(), "src", backends.WriteOptions{SizeHint: int64(len(data))})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	if _, err := w.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	info, err := b.Copy(t.Context(), "src", "dst")
	if err != nil {
		t.Fatal(err)
	}
	if info.Key != "dst" || info.Size != int64(len(data)) {
		t.Errorf("Copy reported %+v", info)
	}
	if got := readAll(t, b, "dst"); !bytes.Equal(got, data) {
		t.Errorf("the copy holds %d bytes, not the source's %d", len(got), len(data))
	}
	if n := e.srv.Stats()["UploadPartCopy"]; n != 3 {
		t.Errorf("%d UploadPartCopy requests, want 3 parts of at most 5 MiB", n)
	}
	if _, err := b.Copy(t.Context(), "nosuch", "x"); !errors.Is(err, backends.ErrNotExist) {
		t.Errorf("copy of a missing object: %v", err)
	}
}

// proxyEmu serves the emulator through handler, which gets the emulator's
// own handler to forward to.
func proxyEmu(t *testing.T, e *emu, handler func(next http.Handler) http.Handler) string {
	t.Helper()
	target, _ := url.Parse(e.endpoint)
	front := httptest.NewServer(handler(httputil.NewSingleHostReverseProxy(target)))
	t.Cleanup(front.Close)
	return front.URL
}

// TestWriteExclusiveWhereIgnored: on a store that ignores If-None-Match
// (here a proxy drops the header), WriteExclusive fails with
// ErrUnsupported rather than letting every racer win, and leaves no probe
// object behind.
func TestWriteExclusiveWhereIgnored(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{Anonymous: true})
	ep := proxyEmu(t, e, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Header.Del("If-None-Match")
			next.ServeHTTP(w, r)
		})
	})
	b := openURI(t, "s3://"+testBucket+"/x/?endpoint="+ep, Options{Retry: fastRetry})
	for range 2 { // the verdict is remembered
		if _, err := b.WriteExclusive(t.Context(), "lease", []byte("a")); !errors.Is(err, backends.ErrUnsupported) {
			t.Fatalf("WriteExclusive where If-None-Match is ignored: %v, want ErrUnsupported", err)
		}
	}
	p, err := b.List(t.Context(), backends.ListOptions{Recursive: true})
	if err != nil || len(p.Objects) != 0 {
		t.Errorf("left behind: %+v, %v", p.Objects, err)
	}
	if n := e.srv.Stats()["PutObject"]; n != 2 {
		t.Errorf("%d PUTs, want the probe's two only", n)
	}
}

// TestWriteExclusiveLostResponse: a conditional PUT that takes effect but
// whose response is lost is retried; the retry's 412 is recognised as the
// caller's own object (same bytes), so the caller wins, once; a racer that
// wrote other bytes meanwhile is not mistaken for us.
func TestWriteExclusiveLostResponse(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{Anonymous: true})
	var lose atomic.Int32
	ep := proxyEmu(t, e, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut && r.Header.Get("If-None-Match") != "" && !strings.Contains(r.URL.Path, "probe") && lose.Add(-1) >= 0 {
				// Forward, then cut the connection instead of answering.
				next.ServeHTTP(httptest.NewRecorder(), r)
				c, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					c.Close()
				}
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	b := openURI(t, "s3://"+testBucket+"/x/?endpoint="+ep, Options{Retry: fastRetry})
	lose.Store(1)
	info, err := b.WriteExclusive(t.Context(), "lease", []byte("mine"))
	if err != nil {
		t.Fatalf("WriteExclusive whose first response was lost: %v", err)
	}
	if st, err := b.Stat(t.Context(), "lease"); err != nil || st.Version != info.Version {
		t.Errorf("Stat = %+v, %v; WriteExclusive said %+v", st, err, info)
	}
	if _, err := b.WriteExclusive(t.Context(), "lease", []byte("mine")); !errors.Is(err, backends.ErrExist) {
		t.Errorf("a second WriteExclusive of the same bytes, no response lost: %v, want ErrExist", err)
	}
	lose.Store(1)
	if _, err := b.WriteExclusive(t.Context(), "lease", []byte("other")); !errors.Is(err, backends.ErrExist) {
		t.Errorf("WriteExclusive of other bytes over a taken key, response lost: %v, want ErrExist", err)
	}
	if got := readAll(t, b, "lease"); string(got) != "mine" {
		t.Errorf("lease holds %q", got)
	}
}

// TestControlCharacterKeys: keys holding bytes XML 1.0 cannot carry (a
// control character, a newline) list, stat, read and delete right: the
// listing is asked for URL-encoded and decoded here.
func TestControlCharacterKeys(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{})
	controlCharacterKeys(t, openURI(t, "s3://"+testBucket+"/cc/?endpoint="+e.endpoint, Options{Retry: fastRetry}))
}

func controlCharacterKeys(t *testing.T, b *Backend) {
	t.Helper()
	ctx := t.Context()
	keys := []string{"bell\x07", "new\nline", "dir\x01/f", "tab\tand space+plus%25"}
	for _, k := range keys {
		if _, err := putAll(ctx, b, k, []byte(k)); err != nil {
			t.Fatalf("write %q: %v", k, err)
		}
	}
	p, err := b.List(ctx, backends.ListOptions{Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range p.Objects {
		got = append(got, o.Key)
		if string(readAll(t, b, o.Key)) != o.Key {
			t.Errorf("%q reads wrong", o.Key)
		}
	}
	want := append([]string(nil), keys...)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("listed %q, want %q", got, want)
	}
	p, err = b.List(ctx, backends.ListOptions{})
	if err != nil || !slices.Contains(p.Prefixes, "dir\x01") {
		t.Errorf("delimited listing: prefixes %q, %v", p.Prefixes, err)
	}
	for _, k := range keys {
		if err := b.Delete(ctx, k); err != nil {
			t.Errorf("delete %q: %v", k, err)
		}
	}
}
