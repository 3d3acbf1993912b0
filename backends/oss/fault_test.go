package oss

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// patterned returns n deterministic pseudo-random bytes.
func patterned(n int, seed uint64) []byte {
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 1})
	b := make([]byte, n)
	_, _ = r.Read(b)
	return b
}

// seed writes data as the object key under the backend prefix "data/",
// with ordinary file I/O (as a user seeding the emulator would).
func (e *emu) seed(t testing.TB, key string, data []byte) {
	t.Helper()
	p := filepath.Join(e.root, testBucket, "data", filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *emu) disk(key string) string {
	return filepath.Join(e.root, testBucket, "data", filepath.FromSlash(key))
}

func wantAllFaults(t *testing.T, st map[string]int64) {
	t.Helper()
	for _, k := range ossemu.AllFaultKinds() {
		if st["fault."+string(k)] == 0 {
			t.Errorf("no %s fault was injected (stats %v): the test proved nothing about it", k, st)
		}
	}
}

// TestFaultyRead64MiB: with 5% of requests failing with every kind of
// fault, a 64 MiB object reads back byte-identical, whole (CRC-checked)
// and in ranges, over several seeds. Faults strike per request, so the
// ranges are 256 KiB: as many requests (256 per seed) as 1 MiB ranges of
// 256 MiB made, for a quarter of the bytes (the 256 MiB version took four
// minutes on a loaded 2-core machine).
func TestFaultyRead64MiB(t *testing.T) {
	setCreds(t)
	const size = 64 << 20
	data := patterned(size, 1)
	want := sha256.Sum256(data)
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			e := startEmu(t, ossemu.Options{ErrorRate: 0.05, Seed: seed})
			e.seed(t, "big.bin", data)
			b := openURI(t, "oss://"+testBucket+"/data/", Options{Endpoint: e.endpoint, Retry: fastRetry})
			ctx := t.Context()
			info, err := b.Stat(ctx, "big.bin")
			if err != nil || info.Size != size {
				t.Fatalf("Stat: %+v %v", info, err)
			}
			// Whole object, streamed.
			r, err := b.Read(ctx, "big.bin", backends.ReadOptions{Length: -1})
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.New()
			n, err := io.Copy(h, r)
			r.Close()
			if err != nil || n != size {
				t.Fatalf("whole read: %d bytes, %v", n, err)
			}
			if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
				t.Fatal("whole read: bytes differ")
			}
			// 256 KiB ranges, 8 readers, pinned to the version.
			const chunk = 256 << 10
			var wg sync.WaitGroup
			errs := make(chan error, size/chunk)
			sem := make(chan struct{}, 8)
			for off := int64(0); off < size; off += chunk {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer func() { <-sem; wg.Done() }()
					r, err := b.Read(ctx, "big.bin", backends.ReadOptions{Offset: off, Length: chunk, IfVersion: info.Version})
					if err != nil {
						errs <- err
						return
					}
					defer r.Close()
					got, err := io.ReadAll(r)
					if err != nil {
						errs <- fmt.Errorf("range %d: %w", off, err)
						return
					}
					if !bytes.Equal(got, data[off:off+chunk]) {
						errs <- fmt.Errorf("range %d: bytes differ", off)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			wantAllFaults(t, e.srv.Stats())
		})
	}
}

// TestFaultyMultipartWrite: with 5% of requests failing, a multipart write
// with parallel parts (and a single-PUT write) lands byte-identical.
func TestFaultyMultipartWrite(t *testing.T) {
	setCreds(t)
	const size = 24<<20 + 12_345
	data := patterned(size, 2)
	total := map[string]int64{}
	defer func() { wantAllFaults(t, total) }() // over all seeds
	for _, seed := range []uint64{11, 12, 13} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			e := startEmu(t, ossemu.Options{ErrorRate: 0.05, Seed: seed})
			b := openURI(t, "oss://"+testBucket+"/data/", Options{Endpoint: e.endpoint, Retry: fastRetry,
				PartSize: 128 << 10, MultipartThreshold: 1 << 20, Concurrency: 4})
			ctx := t.Context()
			w, err := b.Write(ctx, "out/ckpt.bin", backends.WriteOptions{SizeHint: -1})
			if err != nil {
				t.Fatal(err)
			}
			// Odd-sized writes, so no write lines up with a part.
			for off := 0; off < size; {
				n := min(size-off, 333_333)
				if _, err := w.Write(data[off : off+n]); err != nil {
					t.Fatalf("write at %d: %v", off, err)
				}
				off += n
			}
			info, err := w.Commit(ctx)
			if err != nil {
				t.Fatalf("Commit: %v", err)
			}
			if info.Size != size {
				t.Errorf("Commit size %d", info.Size)
			}
			got, err := os.ReadFile(e.disk("out/ckpt.bin"))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("object on disk differs (err %v, %d bytes)", err, len(got))
			}
			st, err := b.Stat(ctx, "out/ckpt.bin")
			if err != nil || st.Version != info.Version {
				t.Errorf("Stat version %q, Commit version %q, err %v", st.Version, info.Version, err)
			}
			small := data[:500_000]
			w, err = b.Write(ctx, "out/small.bin", backends.WriteOptions{SizeHint: int64(len(small))})
			if err != nil {
				t.Fatal(err)
			}
			w.Write(small)
			if _, err := w.Commit(ctx); err != nil {
				t.Fatalf("small Commit: %v", err)
			}
			if got, _ := os.ReadFile(e.disk("out/small.bin")); !bytes.Equal(got, small) {
				t.Fatal("small object differs")
			}
			s := e.srv.Stats()
			if s["UploadPart"] < size/(128<<10) {
				t.Errorf("UploadPart requests %d: the write was not multipart", s["UploadPart"])
			}
			for k, v := range s {
				total[k] += v
			}
			if ups, _ := os.ReadDir(filepath.Join(e.root, ".ossemu", "uploads")); len(ups) != 0 {
				t.Errorf("%d multipart uploads left staged", len(ups))
			}
		})
	}
}

// TestRetriesExhausted: an error that outlasts the retries reaches the
// reader as an error (ErrTransient), never as wrong or silently short data;
// a write that cannot land leaves nothing visible.
func TestRetriesExhausted(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{Seed: 5})
	data := patterned(4<<20, 3)
	e.seed(t, "obj", data)
	retry := RetryOptions{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}
	b := openURI(t, "oss://"+testBucket+"/data/", Options{Endpoint: e.endpoint, Retry: retry, PartSize: 1 << 20, MultipartThreshold: 1 << 20})
	ctx := t.Context()
	info, err := b.Stat(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ossemu.AllFaultKinds() {
		for _, ro := range []backends.ReadOptions{{Length: -1}, {Offset: 1000, Length: 2 << 20, IfVersion: info.Version}} {
			e.srv.SetFaults(1, k)
			var got []byte
			r, err := b.Read(ctx, "obj", ro)
			if err == nil {
				got, err = io.ReadAll(r)
				r.Close()
			}
			if err == nil {
				t.Errorf("%s %+v: read succeeded with every request failing", k, ro)
				continue
			}
			if !errors.Is(err, backends.ErrTransient) {
				t.Errorf("%s %+v: err %v, want ErrTransient", k, ro, err)
			}
			if want := data[ro.Offset:]; len(got) > len(want) || !bytes.Equal(got, want[:len(got)]) {
				t.Errorf("%s %+v: the %d bytes delivered before the error are wrong", k, ro, len(got))
			}
		}
	}
	for _, size := range []int{1000, 3 << 20} {
		e.srv.SetFaults(0)
		w, err := b.Write(ctx, "never", backends.WriteOptions{SizeHint: int64(size)})
		if err != nil {
			t.Fatal(err)
		}
		e.srv.SetFaults(1, ossemu.Fault503)
		_, werr := w.Write(data[:size])
		_, err = w.Commit(ctx)
		if werr == nil && err == nil {
			t.Errorf("%d bytes: write and commit succeeded with every request failing", size)
		}
		if _, err := os.Stat(e.disk("never")); !os.IsNotExist(err) {
			t.Errorf("%d bytes: failed write is visible: %v", size, err)
		}
	}
	e.srv.SetFaults(0)
}

// TestPermanentErrorsFailFast: a missing bucket, a refused key and a
// missing object fail on the first request, with a message saying what
// to fix.
func TestPermanentErrorsFailFast(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{})
	slow := Options{Endpoint: e.endpoint} // default retries: a retry would take seconds
	u, _ := backends.ParseURI("oss://nosuchbucket/x/")
	before := e.srv.Stats()["requests"]
	_, err := New(t.Context(), u, slow, nil)
	if !errors.Is(err, backends.ErrNotExist) || !strings.Contains(err.Error(), "nosuchbucket") || !strings.Contains(err.Error(), "--oss-endpoint") {
		t.Errorf("missing bucket: %v", err)
	}
	// Counted, not timed: a retry shows as a second request however
	// fast or slow the machine is.
	if n := e.srv.Stats()["requests"] - before; n != 1 {
		t.Errorf("missing bucket: %d requests, want 1 (a permanent error was retried)", n)
	}

	t.Setenv("OSS_ACCESS_KEY_ID", "wrong-id")
	u, _ = backends.ParseURI("oss://" + testBucket + "/data/")
	before = e.srv.Stats()["requests"]
	_, err = New(t.Context(), u, slow, nil)
	if !errors.Is(err, backends.ErrPermission) || !strings.Contains(err.Error(), "OSS_ACCESS_KEY_ID") {
		t.Errorf("wrong key: %v", err)
	}
	if n := e.srv.Stats()["requests"] - before; n != 1 {
		t.Errorf("wrong key: %d requests, want 1", n)
	}
	if strings.Contains(err.Error(), ossemutest.AccessKeySecret) {
		t.Errorf("error reveals the secret: %v", err)
	}

	t.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	b := openURI(t, "oss://"+testBucket+"/data/", slow)
	before = e.srv.Stats()["requests"]
	if _, err := b.Read(t.Context(), "missing", backends.ReadOptions{Length: -1}); !errors.Is(err, backends.ErrNotExist) {
		t.Errorf("missing object: %v", err)
	}
	if _, err := b.Stat(t.Context(), "missing"); !errors.Is(err, backends.ErrNotExist) {
		t.Errorf("missing object: %v", err)
	}
	if n := e.srv.Stats()["requests"] - before; n != 3 { // GET; HEAD + directory probe
		t.Errorf("missing object: %d requests, want 3", n)
	}
}

// TestCredentials: a credentials file others may read is refused; a
// private one works; no credentials is a clear error; secrets never reach
// the log, even at debug level with retries.
func TestCredentials(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{AccessKeyID: "file-id", AccessKeySecret: "s3cr3t-VALUE-never-logged", ErrorRate: 0.3, Seed: 9})
	u, _ := backends.ParseURI("oss://" + testBucket + "/data/")
	f := filepath.Join(t.TempDir(), "creds")
	const secret = "s3cr3t-VALUE-never-logged"
	if err := os.WriteFile(f, []byte("[Credentials]\nendpoint=x\naccessKeyID = file-id\naccessKeySecret = "+secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := New(t.Context(), u, Options{Endpoint: e.endpoint, CredentialsFile: f}, nil)
	if err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable credentials file: %v", err)
	}
	os.Chmod(f, 0o600)
	var logBuf bytes.Buffer
	log := newDebugLogger(&logBuf)
	b, err := New(t.Context(), u, Options{Endpoint: e.endpoint, CredentialsFile: f, Retry: fastRetry}, log)
	if err != nil {
		t.Fatalf("private credentials file: %v", err)
	}
	for i := range 20 {
		w, _ := b.Write(context.Background(), fmt.Sprint("k", i), backends.WriteOptions{})
		w.Write([]byte("x"))
		if _, err := w.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(logBuf.String(), "retrying") {
		t.Errorf("no retry logged at debug level; log:\n%s", logBuf.String())
	}
	if strings.Contains(logBuf.String(), secret) {
		t.Error("the secret reached the log")
	}
	if s := fmt.Sprintf("%v %+v %#v", b, b, b); strings.Contains(s, secret) {
		t.Error("formatting the backend reveals the secret")
	}

	t.Setenv("OSS_ACCESS_KEY_ID", "")
	_, err = New(t.Context(), u, Options{Endpoint: e.endpoint}, nil)
	if err == nil || !strings.Contains(err.Error(), "OSS_ACCESS_KEY_ID") {
		t.Errorf("no credentials: %v", err)
	}
}

// TestEndpoints: the URI's endpoint wins over the option and OSS_ENDPOINT;
// a missing endpoint is a clear error; oss://bucket.endpoint/ works.
func TestEndpoints(t *testing.T) {
	setCreds(t)
	for _, tc := range []struct {
		uri, opt, env, want string
		path                bool
	}{
		{"a:1", "b", "c", "https://a:1", false},
		{"", "127.0.0.1:9000", "c", "http://127.0.0.1:9000", true},
		{"", "", "oss-cn-hangzhou.aliyuncs.com", "https://oss-cn-hangzhou.aliyuncs.com", false},
		{"", "http://localhost:8080/", "", "http://localhost:8080", true},
		{"", "https://[::1]:9", "", "https://[::1]:9", true},
	} {
		t.Setenv("OSS_ENDPOINT", tc.env)
		got, _, path, err := resolveEndpoint(tc.uri, tc.opt)
		if err != nil || got != tc.want || (tc.uri == "" && path != tc.path) {
			t.Errorf("resolveEndpoint(%q, %q) env %q = %q path-style %v, %v; want %q %v", tc.uri, tc.opt, tc.env, got, path, err, tc.want, tc.path)
		}
	}
	t.Setenv("OSS_ENDPOINT", "")
	if _, _, _, err := resolveEndpoint("", ""); err == nil || !strings.Contains(err.Error(), "--oss-endpoint") {
		t.Errorf("no endpoint: %v", err)
	}
	if _, _, _, err := resolveEndpoint("", "ftp://x"); err == nil {
		t.Error("ftp endpoint accepted")
	}
	e := startEmu(t, ossemu.Options{})
	e.seed(t, "f", []byte("via bucket.endpoint"))
	host := strings.TrimPrefix(e.endpoint, "http://")
	b := openURI(t, "oss://"+testBucket+"."+host+"/data/", Options{})
	if want := "oss://" + testBucket + "." + host + "/data/"; b.ID() != want {
		t.Errorf("ID %q, want %q", b.ID(), want)
	}
	r, err := b.Read(t.Context(), "f", backends.ReadOptions{Length: -1})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if string(got) != "via bucket.endpoint" {
		t.Errorf("read %q", got)
	}
}

// TestCompleteResponseLost: when CompleteMultipartUpload takes effect but
// its response is lost, the retry finds the upload gone, checks the
// object's CRC64 against the data written, and reports success.
func TestCompleteResponseLost(t *testing.T) {
	setCreds(t)
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, testBucket), 0o755)
	srv, err := ossemu.New(root, ossemu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	lost := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		drop := r.Method == http.MethodPost && r.URL.Query().Has("uploadId") && lost == 0
		if drop {
			lost++
		}
		mu.Unlock()
		if !drop {
			srv.ServeHTTP(w, r)
			return
		}
		srv.ServeHTTP(httptest.NewRecorder(), r) // takes effect...
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // ...but the client never hears of it
		}
	})
	ts := httptest.NewServer(h)
	defer ts.Close()
	b := openURI(t, "oss://"+testBucket+"/data/", Options{Endpoint: ts.URL, Retry: fastRetry, PartSize: 128 << 10, MultipartThreshold: 128 << 10})
	data := patterned(1<<20+5, 4)
	w, err := b.Write(t.Context(), "obj", backends.WriteOptions{SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	info, err := w.Commit(t.Context())
	if err != nil {
		t.Fatalf("Commit after a lost Complete response: %v", err)
	}
	if lost != 1 {
		t.Fatalf("the Complete response was not dropped (%d)", lost)
	}
	got, err := os.ReadFile(filepath.Join(root, testBucket, "data", "obj"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("object differs: %v", err)
	}
	if st, err := b.Stat(t.Context(), "obj"); err != nil || st.Version != info.Version || info.Version == "" {
		t.Errorf("Stat %+v %v; Commit said %+v", st, err, info)
	}
}
