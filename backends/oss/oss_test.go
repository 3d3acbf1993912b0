package oss

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, testBucket), 0o755); err != nil {
		t.Fatal(err)
	}
	srv, endpoint := ossemutest.Start(t, root, opt)
	return &emu{srv: srv, endpoint: endpoint, root: root}
}

// setCreds sets dummy credentials: the emulator accepts any.
func setCreds(t testing.TB) {
	t.Setenv("OSS_ACCESS_KEY_ID", "test-id")
	t.Setenv("OSS_ACCESS_KEY_SECRET", "test-secret")
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
	}, backendtest.Options{RequireDirMaker: true, RequireCopier: true})
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
