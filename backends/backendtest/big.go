package backendtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/mlfsd/mlfsd/backends"
)

// fillPattern fills p with bytes [off, off+len(p)) of the deterministic
// stream named by seed. Every 8-byte word depends on its position, so a
// byte read from the wrong place (a misordered part, an off-by-one range)
// never matches by accident, and any range can be checked without keeping
// the whole object in memory.
func fillPattern(seed uint64, off int64, p []byte) {
	word := func(i uint64) uint64 {
		// splitmix64 of (seed, index).
		z := i*0x9e3779b97f4a7c15 + seed*0xbf58476d1ce4e5b9
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		return z ^ (z >> 31)
	}
	i := 0
	for ; i < len(p) && (off+int64(i))%8 != 0; i++ {
		pos := uint64(off + int64(i))
		p[i] = byte(word(pos/8) >> (8 * (pos % 8)))
	}
	for ; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], word(uint64(off+int64(i))/8))
	}
	for ; i < len(p); i++ {
		pos := uint64(off + int64(i))
		p[i] = byte(word(pos/8) >> (8 * (pos % 8)))
	}
}

// checkPattern reports the first byte of got that differs from the pattern
// stream at off.
func checkPattern(seed uint64, off int64, got []byte) error {
	want := make([]byte, len(got))
	fillPattern(seed, off, want)
	if bytes.Equal(got, want) {
		return nil
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("byte at offset %d is %#x, want %#x", off+int64(i), got[i], want[i])
		}
	}
	return nil
}

// testListManyKeys: thousands of keys in one directory (with a few
// sub-directories interleaved in key order) list completely, in order and
// without duplicates, in pages of several sizes, with and without a
// delimiter, and through a prefix that matches a slice of them.
func testListManyKeys(t *testing.T, s *suite) {
	b := s.open(t)
	n := s.opt.ManyKeys
	keys := make([]string, 0, n)
	var dirs []string
	for i := range n {
		keys = append(keys, fmt.Sprintf("many/k%05d", i))
	}
	// Sub-directories sort between files: "k00000" < "k00000-dir/" < "k00001".
	for i := 0; i < n; i += max(n/10, 1) {
		d := fmt.Sprintf("many/k%05d-dir", i)
		dirs = append(dirs, d)
		keys = append(keys, d+"/leaf")
	}
	g, ctx := errgroup.WithContext(t.Context())
	g.SetLimit(s.opt.Parallelism)
	for _, k := range keys {
		g.Go(func() error {
			_, err := tryPut(ctx, b, k, []byte(k), int64(len(k)))
			if err != nil {
				return fmt.Errorf("write %q: %w", k, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	var flat []string
	for _, k := range keys {
		if k[len(k)-5:] != "/leaf" {
			flat = append(flat, k)
		}
	}

	for _, max := range []int{0, 1000, 777} {
		l := listAll(t, b, backends.ListOptions{Prefix: "many/", MaxKeys: max})
		wantKeys(t, fmt.Sprintf("files of many/ (MaxKeys=%d)", max), l.fileKeys(), flat)
		wantKeys(t, fmt.Sprintf("directories of many/ (MaxKeys=%d)", max), l.dirs, dirs)
		if max > 0 && l.pages < (len(flat)+len(dirs))/max {
			t.Errorf("MaxKeys=%d: %d pages for %d entries", max, l.pages, len(flat)+len(dirs))
		}
		for _, f := range l.files {
			if f.Size != int64(len(f.Key)) {
				t.Errorf("listed size of %q = %d, want %d", f.Key, f.Size, len(f.Key))
				break
			}
		}
	}
	l := listAll(t, b, backends.ListOptions{Prefix: "many/", Recursive: true, MaxKeys: 1000})
	wantKeys(t, "recursive listing of many/", l.fileKeys(), keys)
	wantRecursiveDirs(t, "recursive listing of many/", l)

	// The root holds one directory; a prefix that ends inside the names
	// selects a run of them.
	l = listAll(t, b, backends.ListOptions{})
	wantKeys(t, "root directories", l.dirs, []string{"many"})
	if n >= 1000 {
		want := flat[slices.Index(flat, "many/k00990"):slices.Index(flat, "many/k01000")]
		l = listAll(t, b, backends.ListOptions{Prefix: "many/k0099", MaxKeys: 3})
		wantKeys(t, "files with prefix many/k0099", l.fileKeys(), want)
	}
	// Spot-check that listed names and content agree.
	for _, k := range []string{keys[0], keys[len(keys)/2], keys[len(keys)-1]} {
		wantContent(t, b, k, []byte(k))
	}
}

// testLargeStreamingWrite: a write of more than 64 MiB in uneven chunks,
// with no size hint, reads back with the same SHA-256, and ranged reads
// across likely part boundaries return the right bytes.
func testLargeStreamingWrite(t *testing.T, s *suite) {
	b := s.open(t)
	ctx := t.Context()
	size := s.opt.LargeSize
	const seed = 64
	w, err := b.Write(ctx, "large/blob", backends.WriteOptions{SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.New()
	buf := make([]byte, 3<<20)
	chunks := []int{1 << 20, 1<<20 + 1, 4095, 3 << 20, 17, 2<<20 - 3}
	var off int64
	for i := 0; off < size; i++ {
		n := int(min(int64(chunks[i%len(chunks)]), size-off))
		fillPattern(seed, off, buf[:n])
		sum.Write(buf[:n])
		if m, err := w.Write(buf[:n]); err != nil || m != n {
			_ = w.Abort(ctx)
			t.Fatalf("Write at offset %d = %d, %v", off, m, err)
		}
		off += int64(n)
	}
	info, err := w.Commit(ctx)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	checkCommitInfo(t, "large/blob", info, size)
	want := sum.Sum(nil)

	r, err := b.Read(ctx, "large/blob", backends.ReadOptions{Length: -1, IfVersion: info.Version})
	if err != nil {
		t.Fatal(err)
	}
	sum.Reset()
	n, err := io.Copy(sum, &patternChecker{t: t, seed: seed, r: r})
	r.Close()
	if err != nil || n != size {
		t.Fatalf("read back %d bytes, %v; want %d", n, err, size)
	}
	if got := sum.Sum(nil); !bytes.Equal(got, want) {
		t.Fatalf("SHA-256 of the read-back object %x, written %x", got, want)
	}

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, edge := range []int64{1 << 20, 5 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20, size - 1} {
		if edge >= size {
			continue
		}
		g.Go(func() error {
			from := max(edge-1000, 0)
			got, err := readRange(gctx, b, "large/blob", backends.ReadOptions{Offset: from, Length: 2000})
			if err != nil {
				return fmt.Errorf("ranged read at %d: %w", from, err)
			}
			if wantLen := min(2000, size-from); int64(len(got)) != wantLen {
				return fmt.Errorf("ranged read at %d: %d bytes, want %d", from, len(got), wantLen)
			}
			return checkPattern(seed, from, got)
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// patternChecker passes a stream through while checking it against the
// pattern, so a mismatch names its offset.
type patternChecker struct {
	t      *testing.T
	seed   uint64
	r      io.Reader
	off    int64
	failed bool
}

func (p *patternChecker) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if !p.failed {
		if cerr := checkPattern(p.seed, p.off, b[:n]); cerr != nil {
			p.t.Errorf("streamed read: %v", cerr)
			p.failed = true
		}
	}
	p.off += int64(n)
	return n, err
}

// testConcurrentReaders: many goroutines reading random ranges of the same
// objects at once all get the right bytes.
func testConcurrentReaders(t *testing.T, s *suite) {
	b := s.open(t)
	const size = 4 << 20
	data := make([]byte, size)
	for i := range 4 {
		fillPattern(uint64(100+i), 0, data)
		put(t, b, fmt.Sprintf("obj%d", i), data)
	}
	g, ctx := errgroup.WithContext(t.Context())
	for r := range 32 {
		g.Go(func() error {
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			for range 12 {
				i := rng.IntN(4)
				off := rng.Int64N(size + 100)
				n := rng.Int64N(256 << 10)
				got, err := readRange(ctx, b, fmt.Sprintf("obj%d", i), backends.ReadOptions{Offset: off, Length: n})
				if err != nil {
					return fmt.Errorf("read obj%d [%d,+%d): %w", i, off, n, err)
				}
				if want := max(0, min(n, size-off)); int64(len(got)) != want {
					return fmt.Errorf("read obj%d [%d,+%d): %d bytes, want %d", i, off, n, len(got), want)
				}
				if err := checkPattern(uint64(100+i), off, got); err != nil {
					return fmt.Errorf("read obj%d [%d,+%d): %w", i, off, n, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// testConcurrentWritersSameKey: writers racing on one key leave exactly one
// writer's whole content, whose Commit version is the one Stat reports;
// writers on distinct keys at the same time all land.
func testConcurrentWritersSameKey(t *testing.T, s *suite) {
	b := s.open(t)
	const writers = 8
	const size = 256 << 10
	var (
		mu       sync.Mutex
		versions = map[byte]string{}
	)
	g, ctx := errgroup.WithContext(t.Context())
	for i := range writers {
		g.Go(func() error {
			w, err := b.Write(ctx, "contended", backends.WriteOptions{SizeHint: size})
			if err != nil {
				return err
			}
			chunk := bytes.Repeat([]byte{byte('a' + i)}, 16<<10)
			for range size / len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					_ = w.Abort(ctx)
					return err
				}
			}
			info, err := w.Commit(ctx)
			if err != nil {
				return fmt.Errorf("writer %d: Commit: %w", i, err)
			}
			mu.Lock()
			versions[byte('a'+i)] = info.Version
			mu.Unlock()
			_, err = tryPut(ctx, b, fmt.Sprintf("own/%d", i), chunk, int64(len(chunk)))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	got := get(t, b, "contended")
	if len(got) != size || len(bytes.Trim(got, string(got[:1]))) != 0 {
		t.Fatalf("contended key holds %d bytes, not one writer's %d uniform bytes", len(got), size)
	}
	if st := stat(t, b, "contended"); st.Version != versions[got[0]] {
		t.Errorf("Stat version %q, but the winning writer %q committed version %q", st.Version, got[0], versions[got[0]])
	}
	l := listAll(t, b, backends.ListOptions{Prefix: "own/"})
	if len(l.files) != writers {
		t.Errorf("%d of %d distinct keys written concurrently are listed", len(l.files), writers)
	}
}
