package cache

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// fakeBackend is an in-memory store that records every ranged read, so tests
// can count what the cache fetched. gate, when set, holds every read until
// it is closed.
type fakeBackend struct {
	id string

	mu      sync.Mutex
	objects map[string]fakeObject
	reads   []readRec
	gate    chan struct{}
	ttfb    time.Duration
	lists   int // List calls
}

type fakeObject struct {
	data    []byte
	version string
}

type readRec struct {
	key         string
	off, length int64
}

func newFake(id string) *fakeBackend {
	return &fakeBackend{id: id, objects: map[string]fakeObject{}}
}

// put stores data under key with a version derived from a counter, so every
// put is a new version.
func (f *fakeBackend) put(key string, data []byte) backends.ObjectInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := fmt.Sprintf("v%d-%d", len(f.objects), time.Now().UnixNano())
	f.objects[key] = fakeObject{data: data, version: v}
	return backends.ObjectInfo{Key: key, Size: int64(len(data)), Version: v}
}

func (f *fakeBackend) info(key string) backends.ObjectInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.objects[key]
	return backends.ObjectInfo{Key: key, Size: int64(len(o.data)), Version: o.version}
}

func (f *fakeBackend) readLog() []readRec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]readRec(nil), f.reads...)
}

func (f *fakeBackend) resetLog() {
	f.mu.Lock()
	f.reads = nil
	f.mu.Unlock()
}

func (f *fakeBackend) listCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

func (f *fakeBackend) fetchedBytes() int64 {
	var n int64
	for _, r := range f.readLog() {
		n += r.length
	}
	return n
}

// refetched describes the blocks (of bs bytes) that were read from the
// backend more than once, with the reads that covered them, so a test that
// finds too many bytes fetched says which blocks and how.
func (f *fakeBackend) refetched(bs int64) string {
	type blk struct {
		key string
		i   int64
	}
	count := map[blk]int{}
	var order []blk
	for _, r := range f.readLog() {
		for i := r.off / bs; i*bs < r.off+r.length; i++ {
			b := blk{r.key, i}
			if count[b]++; count[b] == 2 {
				order = append(order, b)
			}
		}
	}
	var sb strings.Builder
	for _, b := range order {
		fmt.Fprintf(&sb, "block %d of %s fetched %d times; ", b.i, b.key, count[b])
	}
	return sb.String()
}

func (f *fakeBackend) ID() string { return f.id }

func (f *fakeBackend) Stat(_ context.Context, key string) (backends.ObjectInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.objects[key]
	if !ok {
		return backends.ObjectInfo{}, backends.Wrap("stat", key, backends.ErrNotExist, nil)
	}
	return backends.ObjectInfo{Key: key, Size: int64(len(o.data)), Version: o.version}, nil
}

func (f *fakeBackend) List(_ context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	var p backends.ListPage
	seen := map[string]bool{}
	for k, o := range f.objects {
		if !strings.HasPrefix(k, opt.Prefix) {
			continue
		}
		if rest := k[len(opt.Prefix):]; !opt.Recursive && strings.Contains(rest, "/") {
			d := opt.Prefix + rest[:strings.IndexByte(rest, '/')]
			if !seen[d] {
				seen[d] = true
				p.Prefixes = append(p.Prefixes, d)
			}
			continue
		}
		p.Objects = append(p.Objects, backends.ObjectInfo{Key: k, Size: int64(len(o.data)), Version: o.version})
	}
	sort.Slice(p.Objects, func(i, j int) bool { return p.Objects[i].Key < p.Objects[j].Key })
	sort.Strings(p.Prefixes)
	return p, nil
}

func (f *fakeBackend) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	f.mu.Lock()
	o, ok := f.objects[key]
	gate, ttfb := f.gate, f.ttfb
	f.mu.Unlock()
	if !ok {
		return nil, backends.Wrap("read", key, backends.ErrNotExist, nil)
	}
	if opt.IfVersion != "" && opt.IfVersion != o.version {
		return nil, backends.Wrap("read", key, backends.ErrVersionMismatch, nil)
	}
	end := int64(len(o.data))
	if opt.Length >= 0 && opt.Offset+opt.Length < end {
		end = opt.Offset + opt.Length
	}
	start := min(opt.Offset, int64(len(o.data)))
	f.mu.Lock()
	f.reads = append(f.reads, readRec{key: key, off: start, length: end - start})
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if ttfb > 0 {
		time.Sleep(ttfb) // the injected time to first byte: the behaviour under test
	}
	return io.NopCloser(bytes.NewReader(o.data[start:end])), nil
}

func (f *fakeBackend) Write(context.Context, string, backends.WriteOptions) (backends.Writer, error) {
	return nil, backends.ErrUnsupported
}

func (f *fakeBackend) Delete(context.Context, string) error { return backends.ErrUnsupported }

func (f *fakeBackend) Close() error { return nil }

// randomData returns n reproducible pseudo-random bytes.
func randomData(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func describeReads(rs []readRec) string {
	var sb strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&sb, "[%s %d+%d] ", r.key, r.off, r.length)
	}
	return sb.String()
}

// dupFd duplicates fd, so the test can wrap it in an *os.File without
// taking ownership of the cache's descriptor.
func dupFd(t *testing.T, fd int) int {
	t.Helper()
	d, err := syscall.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
