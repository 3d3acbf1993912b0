package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/nas"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

func nasBackend(t *testing.T, dir string) backends.Backend {
	t.Helper()
	u, err := backends.ParseURI("nas://" + dir + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := nas.New(context.Background(), u, nas.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestBackendFSReadAhead reads files whose sizes fall on and around chunk
// boundaries through the read-ahead, with reads of an odd size.
func TestBackendFSReadAhead(t *testing.T) {
	dir := t.TempDir()
	const chunk = 64 << 10
	sizes := []int64{0, 1, firstChunk - 1, firstChunk, firstChunk + 1, firstChunk + 2*chunk, firstChunk + 5*chunk + 77}
	for i, n := range sizes {
		b := make([]byte, n)
		Content{Seed: uint64(i)}.Fill(b, 0)
		if err := os.WriteFile(filepath.Join(dir, string(rune('a'+i))), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fsys := &BackendFS{B: nasBackend(t, dir), Name: "nas", Chunk: chunk, Parallel: 3}
	ctx := context.Background()
	for i, n := range sizes {
		f, err := fsys.Open(ctx, string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		buf := make([]byte, 7777)
		for {
			k, err := f.Read(buf)
			got.Write(buf[:k])
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("size %d: %v", n, err)
			}
		}
		want := make([]byte, n)
		Content{Seed: uint64(i)}.Fill(want, 0)
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("size %d: read %d bytes, not the file", n, got.Len())
		}
		if n > 10 {
			p := make([]byte, 10)
			if k, err := f.ReadAt(p, n-5); k != 5 || !errors.Is(err, io.EOF) || !bytes.Equal(p[:5], want[n-5:]) {
				t.Errorf("size %d: ReadAt over the end = %d, %v", n, k, err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	f, _ := fsys.Open(ctx, "missing")
	if _, err := f.Read(make([]byte, 10)); !errors.Is(err, backends.ErrNotExist) {
		t.Errorf("read of a missing object: %v", err)
	}
	f.Close()
}

func TestRunOverBackend(t *testing.T) {
	dir, m := prepare(t, tiny, 21)
	fsys := &BackendFS{B: nasBackend(t, dir), Name: "nas://" + dir + "/"}
	opt := runOpts("")
	rep, err := Run(context.Background(), fsys, opt)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Path != fsys.Name {
		t.Errorf("report path %q", rep.Path)
	}
	if s := result(t, rep, "seqN", CacheWarm).Runs[0]; s.Bytes != sumSize(m.Shards) {
		t.Errorf("seqN read %d bytes", s.Bytes)
	}
	if s := result(t, rep, "epoch", CacheWarm).Runs[0]; s.Files != int64(len(m.Small)) {
		t.Errorf("epoch read %d files", s.Files)
	}
	if s := result(t, rep, "list", CacheWarm).Runs[0]; s.Files != int64(m.MetaEntries) {
		t.Errorf("list saw %d entries", s.Files)
	}
	if s := result(t, rep, "stat", CacheWarm).Runs[0]; s.Files != int64(m.MetaEntries) {
		t.Errorf("stat saw %d entries", s.Files)
	}

	// Wrong bytes read through a backend fail the run too.
	p := filepath.Join(dir, filepath.FromSlash(m.Shards[0].Path))
	b, _ := os.ReadFile(p)
	b[len(b)-3] ^= 1
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	opt.Workloads = []string{"seq1"}
	_, err = Run(context.Background(), fsys, opt)
	var me *MismatchError
	if !errors.As(err, &me) || me.File != m.Shards[0].Path || me.Offset != int64(len(b)-3) {
		t.Fatalf("seq1 over a flipped byte through the backend: %v", err)
	}
}

// TestRunOverOSSEmulator measures the dataset served by the OSS emulator
// and read with the OSS backend: the "direct" limit of bench/compare.
func TestRunOverOSSEmulator(t *testing.T) {
	root := t.TempDir()
	p := tiny
	p.MetaEntries = 1500 // more than one listing page
	m, err := Prepare(context.Background(), filepath.Join(root, "bench"), PrepareOptions{Profile: p, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, endpoint := ossemutest.Start(t, root, ossemu.Options{})
	ctx := context.Background()
	t.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	u, err := backends.ParseURI("oss://bench/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := oss.New(ctx, u, oss.Options{Endpoint: endpoint}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	opt := runOpts("")
	opt.Workloads = []string{"seq1", "epoch", "random", "list", "stat"}
	rep, err := Run(ctx, &BackendFS{B: b, Name: u.String()}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if s := result(t, rep, "seq1", CacheWarm).Runs[0]; s.Bytes != sumSize(m.Shards) {
		t.Errorf("seq1 read %d bytes", s.Bytes)
	}
	if s := result(t, rep, "epoch", CacheWarm).Runs[0]; s.Files != int64(len(m.Small)) {
		t.Errorf("epoch read %d files", s.Files)
	}
	if s := result(t, rep, "list", CacheWarm).Runs[0]; s.Files != 1500 {
		t.Errorf("list saw %d entries", s.Files)
	}
}
