package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
)

func patterned(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestFaults: with a fifth of all requests failing (500, 503 SlowDown,
// connection resets, bodies cut short), single-PUT and multipart writes,
// WriteReaderAt, whole and ranged reads, listings and deletes all succeed
// with the right bytes: every request is retried, and a read cut short
// resumes where it stopped.
func TestFaults(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{Seed: 42})
	// S3 (and the emulator's S3 face) takes parts of at least 5 MiB.
	b := openURI(t, "s3://"+testBucket+"/f/?endpoint="+e.endpoint, Options{Retry: fastRetry, Concurrency: 3, PartSize: 5 << 20, MultipartThreshold: 5 << 20})
	e.srv.SetFaults(0.2)
	ctx := t.Context()
	sizes := []int{0, 1000, 5 << 20, 5<<20 + 1, 11<<20 + 17}
	for _, n := range sizes {
		data := patterned(n, uint64(n))
		key := fmt.Sprintf("w/%d", n)
		w, err := b.Write(ctx, key, backends.WriteOptions{SizeHint: -1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatalf("write %d bytes: %v", n, err)
		}
		if _, err := w.Commit(ctx); err != nil {
			t.Fatalf("commit %d bytes: %v", n, err)
		}
		w, _ = b.Write(ctx, key+".ra", backends.WriteOptions{SizeHint: int64(n)})
		if err := w.(backends.ReaderAtWriter).WriteReaderAt(bytes.NewReader(data), int64(n)); err != nil {
			t.Fatalf("WriteReaderAt %d bytes: %v", n, err)
		}
		if _, err := w.Commit(ctx); err != nil {
			t.Fatalf("commit WriteReaderAt %d bytes: %v", n, err)
		}
		for _, k := range []string{key, key + ".ra"} {
			if got := readAll(t, b, k); !bytes.Equal(got, data) {
				t.Fatalf("%s: read %d bytes, not the %d written", k, len(got), n)
			}
		}
		if n > 10 {
			off, l := int64(n/3), int64(n/2)
			r, err := b.Read(ctx, key, backends.ReadOptions{Offset: off, Length: l})
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, data[off:off+l]) {
				t.Fatalf("%s [%d, +%d): %d bytes, %v", key, off, l, len(got), err)
			}
		}
	}
	var keys int
	for tok := ""; ; {
		p, err := b.List(ctx, backends.ListOptions{Prefix: "w/", MaxKeys: 3, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		keys += len(p.Objects)
		if tok = p.NextToken; tok == "" {
			break
		}
	}
	if keys != 2*len(sizes) {
		t.Errorf("listed %d keys, want %d", keys, 2*len(sizes))
	}
	if err := b.Delete(ctx, "w/0"); err != nil {
		t.Errorf("delete: %v", err)
	}
	st := e.srv.Stats()
	if st["fault.500"]+st["fault.503"]+st["fault.reset"]+st["fault.truncate"] == 0 {
		t.Errorf("no fault was injected: %v", st)
	}
	t.Logf("faults: 500 %d, 503 %d, reset %d, truncate %d", st["fault.500"], st["fault.503"], st["fault.reset"], st["fault.truncate"])
}

// TestFaultsOutlastRetries: a store that always fails makes calls fail
// with ErrTransient once the retries are spent, never hang or succeed.
func TestFaultsOutlastRetries(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{})
	b := openURI(t, "s3://"+testBucket+"/f/?endpoint="+e.endpoint, Options{Retry: RetryOptions{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}})
	e.srv.SetFaults(1, ossemu.Fault503)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := b.Stat(ctx, "x"); !errors.Is(err, backends.ErrTransient) {
		t.Errorf("Stat on a failing store: %v", err)
	}
	if _, err := b.WriteExclusive(ctx, "x", []byte("y")); !errors.Is(err, backends.ErrTransient) {
		t.Errorf("WriteExclusive on a failing store: %v", err)
	}
	if got := e.srv.Stats()["fault.503"]; got < 6 {
		t.Errorf("%d requests reached the store, want 3 tries of each call", got)
	}
}

// TestStalledBody: a store that sends part of a body and then nothing
// fails the read within the response timeout (after the reader's retries,
// each resuming where the last stopped), rather than holding it forever;
// a store that recovers meanwhile serves the rest, and the bytes are right.
func TestStalledBody(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{})
	data := patterned(4<<20, 11)
	if err := os.WriteFile(filepath.Join(e.root, testBucket, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(e.endpoint)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var stalls, after atomic.Int32
	stalls.Store(2)
	after.Store(1 << 20)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/f") && stalls.Add(-1) >= 0 {
			// Headers and some of the body, then silence until the
			// client gives up.
			proxy.ServeHTTP(&stallWriter{ResponseWriter: w, left: int(after.Load()), done: r.Context().Done()}, r)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	b := openURI(t, "s3://"+testBucket+"/?endpoint="+front.URL, Options{Retry: fastRetry, ResponseTimeout: 300 * time.Millisecond})
	start := time.Now()
	if got := readAll(t, b, "f"); !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes through two stalls, not the %d stored", len(got), len(data))
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("two stalls of a 300ms timeout took %v", d)
	}
	// A store that never sends a byte of body: the read fails, transient.
	// (One that sends some each time is making progress, and is waited for.)
	stalls.Store(1000)
	after.Store(0)
	r, err := b.Read(t.Context(), "f", backends.ReadOptions{Length: -1})
	if err == nil {
		_, err = io.ReadAll(r)
		r.Close()
	}
	if !errors.Is(err, backends.ErrTransient) {
		t.Errorf("read from a store that always stalls: %v, want ErrTransient", err)
	}
}

// stallWriter passes left bytes of a body and then blocks until done.
type stallWriter struct {
	http.ResponseWriter
	left int
	done <-chan struct{}
}

func (s *stallWriter) Write(p []byte) (int, error) {
	if s.left <= 0 {
		<-s.done
		return 0, errors.New("client gone")
	}
	n := min(len(p), s.left)
	s.left -= n
	n, err := s.ResponseWriter.Write(p[:n])
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	return n, err
}

// TestUploadChecksums: with an endpoint, writes carry no checksum header
// or trailer unless asked ("crc32"); with it, the store checks the CRC-32
// of single PUTs and parts, over plain HTTP and over TLS (trailers), and
// the bytes land right either way.
func TestUploadChecksums(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{})
	var mu sync.Mutex
	seen := map[string]bool{}
	record := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut {
				mu.Lock()
				seen[r.Header.Get("X-Amz-Checksum-Crc32")+r.Header.Get("X-Amz-Trailer")] = true
				mu.Unlock()
			}
			next.ServeHTTP(w, r)
		})
	}
	target, _ := url.Parse(e.endpoint)
	plain := httptest.NewServer(record(httputil.NewSingleHostReverseProxy(target)))
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(record(httputil.NewSingleHostReverseProxy(target)))
	defer tlsSrv.Close()
	data := patterned(11<<20+5, 8)
	for _, c := range []struct {
		ep, mode string
		checked  bool
	}{
		{plain.URL, "", false}, {plain.URL, "off", false}, {plain.URL, "crc32", true}, {tlsSrv.URL, "crc32", true},
	} {
		mu.Lock()
		clear(seen)
		mu.Unlock()
		opt := Options{Retry: fastRetry, UploadChecksums: c.mode, PartSize: 5 << 20, MultipartThreshold: 5 << 20}
		if c.ep == tlsSrv.URL {
			opt.tlsConfig = tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig
		}
		b := openURI(t, "s3://"+testBucket+"/ck/?endpoint="+c.ep, opt)
		for _, n := range []int{1000, len(data)} {
			if _, err := putAll(t.Context(), b, "f", data[:n]); err != nil {
				t.Fatalf("%s %q: write %d bytes: %v", c.ep, c.mode, n, err)
			}
			if got := readAll(t, b, "f"); !bytes.Equal(got, data[:n]) {
				t.Fatalf("%s %q: %d bytes read back, not the %d written", c.ep, c.mode, len(got), n)
			}
		}
		mu.Lock()
		checked := false
		for k := range seen {
			checked = checked || k != ""
		}
		mu.Unlock()
		if checked != c.checked {
			t.Errorf("%s %q: checksums sent %v (%v), want %v", c.ep, c.mode, checked, seen, c.checked)
		}
	}
}
