package sharedcache

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/nas"
)

// TestForgetDeletesADatasetsBlocks: Forget deletes the tier's blocks of
// the objects given, and no others; the tier's count drops by them; a
// read afterwards misses the tier and still reads right.
func TestForgetDeletesADatasetsBlocks(t *testing.T) {
	srcDir := t.TempDir()
	a := bytes.Repeat([]byte("a"), 2<<20+100) // 3 blocks of 1 MiB
	b := bytes.Repeat([]byte("b"), 5000)      // 1 block
	os.WriteFile(filepath.Join(srcDir, "a"), a, 0o644)
	os.WriteFile(filepath.Join(srcDir, "b"), b, 0o644)
	u, err := backends.ParseURI("nas://" + srcDir + "/")
	if err != nil {
		t.Fatal(err)
	}
	src, err := nas.New(t.Context(), u, nas.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	tier, err := New(nasStore(t), Options{Key: testKey, MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	through := tier.Through(src)
	read := func(key string, want []byte) {
		t.Helper()
		info, err := src.Stat(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		r, err := through.Read(t.Context(), key, backends.ReadOptions{Length: info.Size, IfVersion: info.Version})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read %s through the tier: %d bytes, %v", key, len(got), err)
		}
	}
	read("a", a)
	read("b", b)
	if err := tier.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	used := tier.Used()
	ai, _ := src.Stat(t.Context(), "a")
	res, err := tier.Forget(context.Background(), src.ID(), []backends.ObjectInfo{ai})
	if err != nil {
		t.Fatal(err)
	}
	if res.Blocks != 3 || res.Bytes < int64(len(a)) {
		t.Errorf("Forget(a): %+v; want its 3 blocks, >= %d bytes", res, len(a))
	}
	if got := tier.Used(); got != used-res.Bytes {
		t.Errorf("the tier's count: %d after deleting %d of %d", got, res.Bytes, used)
	}
	hits, misses := tier.Stats().Hits, tier.Stats().Misses
	read("b", b)
	read("a", a)
	st := tier.Stats()
	if st.Hits-hits != 1 || st.Misses-misses < 1 {
		t.Errorf("after forgetting a: %d hits (b's block), %d misses; want 1 and a's", st.Hits-hits, st.Misses-misses)
	}
	if err := tier.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if res, err := tier.Forget(context.Background(), "nas:///elsewhere/", []backends.ObjectInfo{ai}); err != nil || res.Blocks != 0 {
		t.Errorf("Forget of another source's object: %+v, %v; want nothing deleted", res, err)
	}
}
