package sharedcache

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// TestKeyRequired: a tier without a key, or with a short one, does not
// start, and says which flag gives it.
func TestKeyRequired(t *testing.T) {
	store := nasStore(t)
	t.Cleanup(func() { store.Close() })
	for _, c := range []struct {
		key  []byte
		want string
	}{
		{nil, "--shared-cache-key-file"},
		{[]byte("short"), "at least 16"},
	} {
		tier, err := New(nopClose{store}, Options{Key: c.key})
		if err == nil {
			tier.Close()
			t.Fatalf("New with a key of %d bytes started", len(c.key))
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("New with a key of %d bytes: %v; want it to say %q", len(c.key), err, c.want)
		}
	}
}

// TestLoadKey: a missing, empty or short key file is an error naming the
// file and never its content; a key with a trailing newline (a secret
// written by hand) is the key without it.
func TestLoadKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		path, want string
	}{
		{filepath.Join(dir, "missing"), "no such file"},
		{write("empty", "\n"), "is empty"},
		{write("short", "s3cr3t-but-short\n"[:10]), "at least 16"},
	} {
		key, err := LoadKey(c.path)
		if err == nil {
			t.Fatalf("LoadKey(%s) = %d bytes, no error", c.path, len(key))
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("LoadKey(%s): %v; want it to name the file and say %q", c.path, err, c.want)
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("LoadKey(%s): the error shows the key: %v", c.path, err)
		}
	}
	if _, err := LoadKey(""); err == nil {
		t.Error("LoadKey of no path: no error")
	}
	key, err := LoadKey(write("good", "  0123456789abcdef0123\n"))
	if err != nil || string(key) != "0123456789abcdef0123" {
		t.Fatalf("LoadKey of a good key file: %q, %v", key, err)
	}
}

// sizeStore keeps the bytes its blocks take, by key, as its writes
// commit and its deletes return, and the most they ever took.
type sizeStore struct {
	backends.Backend
	mu     sync.Mutex
	sizes  map[string]int64
	total  int64
	most   int64
	writes int
}

func (s *sizeStore) Close() error { return nil }

func (s *sizeStore) Unwrap() backends.Backend { return s.Backend }

func (s *sizeStore) Write(ctx context.Context, key string, opt backends.WriteOptions) (backends.Writer, error) {
	w, err := s.Backend.Write(ctx, key, opt)
	if err != nil || !strings.HasPrefix(key, blocksPrefix) {
		return w, err
	}
	return &sizeWriter{Writer: w, s: s, key: key}, nil
}

func (s *sizeStore) Delete(ctx context.Context, key string) error {
	err := s.Backend.Delete(ctx, key)
	if err == nil {
		s.mu.Lock()
		s.total -= s.sizes[key]
		delete(s.sizes, key)
		s.mu.Unlock()
	}
	return err
}

type sizeWriter struct {
	backends.Writer
	s   *sizeStore
	key string
}

func (w *sizeWriter) Commit(ctx context.Context) (backends.ObjectInfo, error) {
	info, err := w.Writer.Commit(ctx)
	if err == nil {
		s := w.s
		s.mu.Lock()
		s.total += info.Size - s.sizes[w.key]
		s.sizes[w.key] = info.Size
		s.most = max(s.most, s.total)
		s.writes++
		s.mu.Unlock()
	}
	return info, err
}

// boundRun reads 48 (and, once a sweep ran, 4 more) one-block objects through a tier bounded to 16 blocks,
// one at a time, each block settled in the tier before the next read, and
// returns the most the tier's blocks ever took, the bound, the size of
// one block object, and the tier's stats.
func boundRun(t *testing.T, noBound bool) (most, maxBytes, blockObj int64, st Stats) {
	const bs = 64 << 10
	src := nasStore(t)
	t.Cleanup(func() { src.Close() })
	base := nasStore(t)
	t.Cleanup(func() { base.Close() })
	store := &sizeStore{Backend: base, sizes: map[string]int64{}}
	blockObj = bs + 512 // a block and its header (JSON of a short key: well under 512 bytes)
	maxBytes = 16 * blockObj
	every := time.Second // sweeps the bound asks for: at most every 100 ms
	if noBound {
		every = time.Hour // the sweep alone, and not within the run
	}
	tier, err := New(store, Options{Key: testKey, BlockSize: bs, MaxBytes: maxBytes,
		SweepEvery: every, LeaseTTL: time.Hour, noBound: noBound})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tier.Close() })
	read := func(i int) {
		key := fmt.Sprintf("obj-%d", i)
		data := bytes.Repeat([]byte{byte(i)}, bs)
		w, err := src.Write(t.Context(), key, backends.WriteOptions{SizeHint: bs})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		info, err := w.Commit(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		r, err := tier.Through(src).Read(t.Context(), key, backends.ReadOptions{Length: bs, IfVersion: info.Version})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, bs+1)
		n, _ := r.Read(got)
		for n < bs {
			k, err := r.Read(got[n:])
			n += k
			if err != nil {
				break
			}
		}
		r.Close()
		if !bytes.Equal(got[:n], data) {
			t.Fatalf("object %d: read %d bytes, not its %d", i, n, bs)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		if err := tier.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 48 {
		read(i)
	}
	if !noBound {
		// The sweep the bound asked for runs behind the reads: wait for
		// it, then read on: writing must go on.
		testwait.Eventually(t, func() bool { return tier.Stats().Sweeps > 0 }, "the sweep the bound asked for")
		for i := 48; i < 52; i++ {
			read(i)
		}
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	return store.most, maxBytes, blockObj, tier.Stats()
}

// TestBoundKeptAtWriteTime: a tier bounded to 16 blocks, read through
// for 48, never holds more than its bound (and one block) at any moment:
// the blocks past the bound are not written (counted as Full) and a sweep
// runs at once, after which writing goes on. Without the write-time bound
// (the sweep alone, the old tier) the same reads take it to three times
// the bound.
func TestBoundKeptAtWriteTime(t *testing.T) {
	t.Parallel()
	most, maxBytes, blockObj, st := boundRun(t, false)
	if most > maxBytes+blockObj {
		t.Errorf("the tier's blocks took %d bytes at most; the bound is %d", most, maxBytes)
	}
	if st.Full == 0 || st.Sweeps == 0 {
		t.Errorf("48 blocks through a tier of 16: %d not written at the bound, %d sweeps; want both > 0 (%+v)", st.Full, st.Sweeps, st)
	}
	if st.Writes <= 16 {
		t.Errorf("%d blocks written: writing stopped at the bound, the sweeps made no room (%+v)", st.Writes, st)
	}

	most, maxBytes, blockObj, _ = boundRun(t, true)
	if most <= maxBytes+blockObj {
		t.Errorf("without the write-time bound the tier took %d bytes at most, within its bound %d: the test proves nothing", most, maxBytes)
	}
}

// TestForgedBlockCountedAndReplaced: a block rewritten with other bytes, a
// valid header and CRC and a MAC under another key is not served: the
// reader gets the source's bytes, the block is counted as corrupt and
// unauthenticated (in Stats and on the node's metrics), and the reader's
// fetch replaces it, so the next node reads it from the tier.
func TestForgedBlockCountedAndReplaced(t *testing.T) {
	const bs = 64 << 10
	src := nasStore(t)
	t.Cleanup(func() { src.Close() })
	store := nasStore(t)
	t.Cleanup(func() { store.Close() })
	data := bytes.Repeat([]byte("source bytes "), bs/13+1)[:bs]
	w, err := src.Write(t.Context(), "obj", backends.WriteOptions{SizeHint: bs})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	info, err := w.Commit(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	opt := testOptions(bs)
	opt.NoSingleFlight = true // no claim markers: the second node reads at once
	node := func() *Tier {
		tier, err := New(nopClose{store}, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tier.Close() })
		return tier
	}
	read := func(tier *Tier) []byte {
		r, err := tier.Through(src).Read(t.Context(), "obj", backends.ReadOptions{Length: bs, IfVersion: info.Version})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		got := make([]byte, 0, bs)
		buf := make([]byte, bs)
		for {
			n, err := r.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		if err := tier.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		return got
	}
	read(node())
	name := blockName(src.ID(), "obj", info.Version, 0)
	r, err := store.Read(t.Context(), name, backends.ReadOptions{Length: -1})
	if err != nil {
		t.Fatalf("the block was not written to the tier: %v", err)
	}
	obj := make([]byte, 0, 2*bs)
	for buf := make([]byte, bs); ; {
		n, err := r.Read(buf)
		obj = append(obj, buf[:n]...)
		if err != nil {
			break
		}
	}
	r.Close()
	forgedObj := forge(obj, bs, false, func(d []byte) []byte { return bytes.Repeat([]byte("X"), len(d)) })
	fw, err := store.Write(t.Context(), name, backends.WriteOptions{SizeHint: int64(len(forgedObj))})
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(forgedObj)
	if _, err := fw.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}

	second := node()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(second.Collector())
	if got := read(second); !bytes.Equal(got, data) {
		t.Fatalf("read over a forged block: %.20q..., want the source's %.20q...", got, data)
	}
	if st := second.Stats(); st.Corrupt != 1 || st.Unauthenticated != 1 || st.Hits != 0 || st.Writes != 1 {
		t.Errorf("after one forged block: %+v; want 1 corrupt, 1 unauthenticated, no hit, 1 write (the replacement)", st)
	}
	want := strings.NewReader(fmt.Sprintf(`# HELP %s Blocks of the shared cache tier whose MAC did not verify under the cluster's key: forged, or written by another cluster (counted in corrupt blocks too).
# TYPE %s counter
%s{store=%q} 1
`, MetricUnauthenticated, MetricUnauthenticated, MetricUnauthenticated, store.ID()))
	if err := testutil.GatherAndCompare(reg, want, MetricUnauthenticated); err != nil {
		t.Error(err)
	}

	third := node()
	if got := read(third); !bytes.Equal(got, data) {
		t.Fatal("read after the forged block was replaced: not the source's bytes")
	}
	if st := third.Stats(); st.Hits != 1 || st.Corrupt != 0 {
		t.Errorf("the node after the replacement: %+v; want the block from the tier (1 hit, none corrupt)", st)
	}
}
