package oss

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/backendtest"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

const testBucket = "bkt"

// emu is an emulator serving a fresh root with one bucket.
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

// setCreds sets the credentials the emulator accepts.
func setCreds(t testing.TB) {
	t.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	t.Setenv("OSS_SESSION_TOKEN", "")
	t.Setenv("OSS_ENDPOINT", "")
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

func TestConformance(t *testing.T) {
	setCreds(t)
	backendtest.RunOptions(t, func(t *testing.T) backends.Backend {
		e := startEmu(t, ossemu.Options{})
		return openURI(t, "oss://"+testBucket+"/data/", Options{Endpoint: e.endpoint, Retry: fastRetry})
	}, backendtest.Options{RequireDirMaker: true, RequireCopier: true, RequireLinker: true, ManyKeys: conformanceKeys, LargeSize: conformanceLarge, ExclusiveWriter: true})
}

func newDebugLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestReadEdges: reads at and past the end, with and without a version,
// are empty; a stale version fails with ErrVersionMismatch.
func TestReadEdges(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{})
	b := openURI(t, "oss://"+testBucket+"/data/", Options{Endpoint: e.endpoint, Retry: fastRetry})
	w, _ := b.Write(t.Context(), "f", backends.WriteOptions{})
	w.Write([]byte("0123456789"))
	info, err := w.Commit(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, ro := range []backends.ReadOptions{
		{Offset: 10, Length: -1}, {Offset: 10, Length: 5, IfVersion: info.Version}, {Offset: 99, Length: -1, IfVersion: info.Version},
	} {
		r, err := b.Read(t.Context(), "f", ro)
		if err != nil {
			t.Errorf("%+v: %v", ro, err)
			continue
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || len(got) != 0 {
			t.Errorf("%+v: %q, %v; want empty", ro, got, err)
		}
	}
	r, err := b.Read(t.Context(), "f", backends.ReadOptions{Offset: 8, Length: 100, IfVersion: info.Version})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if string(got) != "89" {
		t.Errorf("short read %q", got)
	}
	if _, err := b.Read(t.Context(), "f", backends.ReadOptions{Length: -1, IfVersion: "stale"}); !errors.Is(err, backends.ErrVersionMismatch) {
		t.Errorf("stale version: %v", err)
	}
}

// TestWholeReadCRCMismatch: when the bytes of a whole-object read do not
// match the object's x-oss-hash-crc64ecma, the reader ends with an error,
// not io.EOF.
func TestWholeReadCRCMismatch(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{})
	b := openURI(t, "oss://"+testBucket+"/data/", Options{Endpoint: e.endpoint, Retry: fastRetry})
	w, _ := b.Write(t.Context(), "f", backends.WriteOptions{})
	w.Write([]byte("some bytes"))
	if _, err := w.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Corrupt the CRC the emulator keeps for the object.
	p := e.disk("f")
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(p, "user.ossemu.meta", buf)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(buf[:n]))
	dec.UseNumber() // keep mtime_ns exact, or the record reads as stale
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	m["crc64"] = 12345
	nb, _ := json.Marshal(m)
	if err := unix.Setxattr(p, "user.ossemu.meta", nb, 0); err != nil {
		t.Fatal(err)
	}
	r, err := b.Read(t.Context(), "f", backends.ReadOptions{Length: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(r)
	r.Close()
	if !errors.Is(err, backends.ErrTransient) || !strings.Contains(err.Error(), "CRC64") {
		t.Errorf("read with a wrong CRC: %v, want a CRC error", err)
	}
}

// TestReadFromMatchesWrite: a write fed by ReadFrom (as writeback feeds
// staged files) stores the same object as one fed by Write, across the
// single-PUT threshold and part edges, with the threshold below and above
// the part size, from a reader whose reads end anywhere; a failing reader
// fails the write.
func TestReadFromMatchesWrite(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{})
	const part = 256 << 10
	for _, threshold := range []int64{part / 2, 3 * part} {
		b := openURI(t, "oss://"+testBucket+"/data/", Options{Endpoint: e.endpoint, Retry: fastRetry,
			PartSize: part, MultipartThreshold: threshold, Concurrency: 3})
		for _, size := range []int{0, 1, int(threshold), int(threshold) + 1, 5*part + 17, 8 * part} {
			data := patterned(size, uint64(size))
			key := fmt.Sprintf("rf/%d-%d", threshold, size)
			w, err := b.Write(t.Context(), key, backends.WriteOptions{SizeHint: int64(size)})
			if err != nil {
				t.Fatal(err)
			}
			n, err := w.(io.ReaderFrom).ReadFrom(&choppyReader{data: data})
			if err != nil || n != int64(size) {
				t.Fatalf("threshold %d, size %d: ReadFrom = %d, %v", threshold, size, n, err)
			}
			info, err := w.Commit(t.Context())
			if err != nil || info.Size != int64(size) {
				t.Fatalf("threshold %d, size %d: Commit = %+v, %v", threshold, size, info, err)
			}
			if got, err := os.ReadFile(e.disk(key)); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("threshold %d, size %d: stored object differs (%d bytes, %v)", threshold, size, len(got), err)
			}
		}
		w, err := b.Write(t.Context(), "rf/broken", backends.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		boom := errors.New("staging disk failed")
		if _, err := w.(io.ReaderFrom).ReadFrom(io.MultiReader(bytes.NewReader(patterned(4*part, 1)), iotest.ErrReader(boom))); !errors.Is(err, boom) {
			t.Fatalf("ReadFrom of a failing reader = %v, want %v", err, boom)
		}
		w.Abort(t.Context())
		if _, err := b.Stat(t.Context(), "rf/broken"); !errors.Is(err, backends.ErrNotExist) {
			t.Fatalf("an aborted write left an object: %v", err)
		}
	}
}

// choppyReader returns its data in reads of varying, odd sizes.
type choppyReader struct {
	data []byte
	n    int
}

func (r *choppyReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	r.n++
	k := min(len(p), len(r.data), 1+(r.n*7919)%100_003)
	copy(p, r.data[:k])
	r.data = r.data[k:]
	return k, nil
}

// TestWriteReaderAt: an object taken from a ReaderAt (a staged file) in
// parallel parts is stored byte for byte, below and above the multipart
// threshold, with retried parts reading their range again under injected
// faults; the object's CRC64 combined from the parts' is the CRC64 of the
// data; nothing can be written after it, and a short source fails.
func TestWriteReaderAt(t *testing.T) {
	setCreds(t)
	const part = 256 << 10
	for _, faults := range []float64{0, 0.05} {
		e := startEmu(t, ossemu.Options{ErrorRate: faults, Seed: 21})
		b := openURI(t, "oss://"+testBucket+"/data/", Options{Endpoint: e.endpoint, Retry: fastRetry,
			PartSize: part, MultipartThreshold: part, Concurrency: 4})
		for _, size := range []int{0, 1, part, part + 1, 7*part + 4321, 40 * part} {
			data := patterned(size, uint64(size)+3)
			key := fmt.Sprintf("ra/%v-%d", faults, size)
			w, err := b.Write(t.Context(), key, backends.WriteOptions{SizeHint: int64(size)})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.(backends.ReaderAtWriter).WriteReaderAt(bytes.NewReader(data), int64(size)); err != nil {
				t.Fatalf("faults %v, size %d: WriteReaderAt: %v", faults, size, err)
			}
			if _, err := w.Write([]byte("x")); !errors.Is(err, backends.ErrInvalid) {
				t.Fatalf("Write after WriteReaderAt = %v, want ErrInvalid", err)
			}
			info, err := w.Commit(t.Context())
			if err != nil || info.Size != int64(size) {
				t.Fatalf("faults %v, size %d: Commit = %+v, %v", faults, size, info, err)
			}
			if got, err := os.ReadFile(e.disk(key)); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("faults %v, size %d: stored object differs (%d bytes, %v)", faults, size, len(got), err)
			}
			if crc, ok := w.(*writer).objectCRC(); size > part && (!ok || crc != crc64.Checksum(data, crcTable)) {
				t.Fatalf("size %d: combined CRC64 %d (known %v), want %d", size, crc, ok, crc64.Checksum(data, crcTable))
			}
		}
		w, err := b.Write(t.Context(), "ra/short", backends.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		short := patterned(3*part, 5)
		err = w.(backends.ReaderAtWriter).WriteReaderAt(bytes.NewReader(short), 4*part)
		if err == nil {
			_, err = w.Commit(t.Context())
		}
		if err == nil {
			t.Fatalf("faults %v: a source shorter than its size was stored", faults)
		}
		w.Abort(t.Context())
		if _, err := b.Stat(t.Context(), "ra/short"); !errors.Is(err, backends.ErrNotExist) {
			t.Fatalf("a failed write left an object: %v", err)
		}
	}
}

// The suite's listing and streaming tests are sized to prove paging and
// multipart boundaries, not volume: 2,500 keys are 3 pages of the stores'
// 1,000-key page (and 4 of 777), 20 MiB+3 are 3 OSS parts (20 HDFS blocks)
// with an odd tail. The defaults (10,000 keys, 64 MiB) took 5 to 8 minutes
// each on a loaded 2-core machine.
const (
	conformanceKeys  = 2500
	conformanceLarge = 20<<20 + 3
)
