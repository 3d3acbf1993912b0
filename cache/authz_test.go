package cache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// asPrincipal is one client's backend over a shared fake store: the same
// ID (so the cache keeps one copy for every client), its own answer from
// the store, and its own count of requests.
type asPrincipal struct {
	*fakeBackend
	deny         bool // the store refuses this client reads and HEADs
	stats, reads atomic.Int64
}

func (p *asPrincipal) Stat(ctx context.Context, key string) (backends.ObjectInfo, error) {
	p.stats.Add(1)
	if p.deny {
		return backends.ObjectInfo{}, backends.Wrap("stat", key, backends.ErrPermission, nil)
	}
	return p.fakeBackend.Stat(ctx, key)
}

func (p *asPrincipal) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	p.reads.Add(1)
	if p.deny {
		return nil, backends.Wrap("read", key, backends.ErrPermission, nil)
	}
	return p.fakeBackend.Read(ctx, key, opt)
}

// readAs reads the whole object through v as one reader would, and
// returns what it got and the first error.
func readAs(v *View, b backends.Backend, info backends.ObjectInfo) ([]byte, error) {
	ctx := context.Background()
	h, err := v.Open(ctx, b, info)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	out := make([]byte, 0, info.Size)
	buf := make([]byte, 128<<10)
	for off := int64(0); ; {
		n, err := h.ReadAt(ctx, buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// TestCacheHitNeedsPrincipalAuthorized: blocks one principal fetched are
// served to another only after the store authorized that one for the
// object version. B, whom the store refuses, gets ErrPermission and not a
// byte, from memory, from disk and at the open of a complete file (which
// would hand the kernel the file); C, whom the store allows, is served
// after one Stat per object, and then never asks again; A, who fetched the
// objects, reads them again without any request.
func TestCacheHitNeedsPrincipalAuthorized(t *testing.T) {
	for _, noPT := range []bool{false, true} {
		f := newFake("fake://shared/")
		small := randomData(1, 300<<10)
		smallInfo := f.put("small", small)
		big := randomData(2, 9*MiB+5)
		bigInfo := f.put("big", big)
		c := newTestCache(t, Options{Dir: t.TempDir(), NoPassthrough: noPT})
		a, b, cc := &asPrincipal{fakeBackend: f}, &asPrincipal{fakeBackend: f, deny: true}, &asPrincipal{fakeBackend: f}
		va, vb, vc := c.ViewAs("A"), c.ViewAs("B"), c.ViewAs("C")

		for _, o := range []struct {
			info backends.ObjectInfo
			data []byte
		}{{smallInfo, small}, {bigInfo, big}} {
			if got, err := readAs(va, a, o.info); err != nil || !bytes.Equal(got, o.data) {
				t.Fatalf("A reads %s: %v", o.info.Key, err)
			}
		}
		if a.stats.Load() != 0 {
			t.Fatalf("A, reading what it fetched itself, sent %d HEADs", a.stats.Load())
		}
		c.quiesce() // the disk copies are complete
		readsBefore := a.reads.Load()

		for _, info := range []backends.ObjectInfo{smallInfo, bigInfo} {
			got, err := readAs(vb, b, info)
			if !errors.Is(err, backends.ErrPermission) || len(got) != 0 {
				t.Fatalf("passthrough off=%v: B, refused by the store, read %d bytes of cached %s: %v", noPT, len(got), info.Key, err)
			}
		}
		if b.reads.Load() != 0 || b.stats.Load() != 2 {
			t.Fatalf("B sent %d reads and %d HEADs; want 0 and one HEAD per object", b.reads.Load(), b.stats.Load())
		}

		for i := 0; i < 2; i++ {
			for _, o := range []struct {
				info backends.ObjectInfo
				data []byte
			}{{smallInfo, small}, {bigInfo, big}} {
				if got, err := readAs(vc, cc, o.info); err != nil || !bytes.Equal(got, o.data) {
					t.Fatalf("C reads %s: %v", o.info.Key, err)
				}
			}
		}
		if cc.stats.Load() != 2 || cc.reads.Load() != 0 {
			t.Fatalf("C, allowed, sent %d HEADs and %d reads for two cached objects read twice; want 2 and 0", cc.stats.Load(), cc.reads.Load())
		}
		for _, info := range []backends.ObjectInfo{smallInfo, bigInfo} {
			if _, err := readAs(va, a, info); err != nil {
				t.Fatal(err)
			}
		}
		if a.stats.Load() != 0 || a.reads.Load() != readsBefore {
			t.Fatalf("A, reading its cached objects again, sent %d HEADs and %d reads", a.stats.Load(), a.reads.Load()-readsBefore)
		}
		if st := c.Stats(); st.AuthRequests != 4 || st.AuthDenied != 2 {
			t.Fatalf("Stats: %d authorization requests, %d denied; want 4 and 2", st.AuthRequests, st.AuthDenied)
		}
	}
}

// TestFetchInFlightNotSharedUnauthorized: a principal whose read joins
// another's fetch in flight (no request of its own was sent) is asked for
// before the fetched bytes reach it; refused, it gets none.
func TestFetchInFlightNotSharedUnauthorized(t *testing.T) {
	f := newFake("fake://shared/")
	data := randomData(3, 200<<10)
	info := f.put("f", data)
	f.gate = make(chan struct{})
	c := newTestCache(t, Options{Dir: t.TempDir()})
	a, b := &asPrincipal{fakeBackend: f}, &asPrincipal{fakeBackend: f, deny: true}
	ha, err := c.ViewAs("A").Open(context.Background(), a, info) // starts the whole-file fetch, held at the gate
	if err != nil {
		t.Fatal(err)
	}
	defer ha.Close()
	type result struct {
		got []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := readAs(c.ViewAs("B"), b, info)
		done <- result{got, err}
	}()
	close(f.gate)
	r := <-done
	if !errors.Is(r.err, backends.ErrPermission) || len(r.got) != 0 {
		t.Fatalf("B joined A's fetch and read %d bytes: %v", len(r.got), r.err)
	}
	if b.reads.Load() != 0 {
		t.Fatalf("B sent %d reads of its own; the test wants it to join A's fetch", b.reads.Load())
	}
	got := make([]byte, len(data))
	if n, err := ha.ReadAt(context.Background(), got, 0); n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("A reads its own fetch: %d bytes, %v", n, err)
	}
	if a.stats.Load() != 0 {
		t.Fatalf("A sent %d HEADs for the object it fetched", a.stats.Load())
	}
}

// TestOwnFetchRefused: a principal the store refuses gets the store's
// refusal for an object nobody cached: its own GET is the check.
func TestOwnFetchRefused(t *testing.T) {
	f := newFake("fake://shared/")
	info := f.put("f", randomData(4, 3*MiB))
	c := newTestCache(t, Options{Dir: t.TempDir()})
	b := &asPrincipal{fakeBackend: f, deny: true}
	got, err := readAs(c.ViewAs("B"), b, info)
	if !errors.Is(err, backends.ErrPermission) || len(got) != 0 {
		t.Fatalf("B read %d bytes: %v", len(got), err)
	}
	if b.reads.Load() == 0 {
		t.Fatal("B's read sent no GET")
	}
}

// TestConcurrentReadersShareOneHEAD: parallel readers of one principal
// opening an object another principal cached ask the store once.
func TestConcurrentReadersShareOneHEAD(t *testing.T) {
	f := newFake("fake://shared/")
	data := randomData(5, 2*MiB+9)
	info := f.put("f", data)
	c := newTestCache(t, Options{Dir: t.TempDir(), NoPassthrough: true})
	if got, err := readAs(c.ViewAs("A"), &asPrincipal{fakeBackend: f}, info); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("A reads: %v", err)
	}
	c.quiesce() // on disk: B's readers find every block
	b := &asPrincipal{fakeBackend: f}
	v := c.ViewAs("B")
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			got, err := readAs(v, b, info)
			if err == nil && !bytes.Equal(got, data) {
				err = errors.New("wrong bytes")
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatalf("B reads: %v", err)
		}
	}
	if n := b.stats.Load(); n != 1 {
		t.Fatalf("8 readers of B sent %d HEADs; want 1", n)
	}
}

// TestAuthorizationIsPerVersion: a principal asking for a cached version
// the store no longer has gets ErrVersionMismatch and no bytes, and is
// not taken as authorized for it.
func TestAuthorizationIsPerVersion(t *testing.T) {
	f := newFake("fake://shared/")
	old := f.put("f", randomData(6, 300<<10))
	c := newTestCache(t, Options{Dir: t.TempDir()})
	if _, err := readAs(c.ViewAs("A"), &asPrincipal{fakeBackend: f}, old); err != nil {
		t.Fatal(err)
	}
	c.quiesce()
	f.put("f", randomData(7, 300<<10)) // a new version; B still lists the old one
	b := &asPrincipal{fakeBackend: f}
	for i := 0; i < 2; i++ {
		got, err := readAs(c.ViewAs("B"), b, old)
		if !errors.Is(err, backends.ErrVersionMismatch) || len(got) != 0 {
			t.Fatalf("B read %d bytes of a version the store no longer has: %v", len(got), err)
		}
	}
	if n := b.stats.Load(); n != 2 {
		t.Fatalf("B sent %d HEADs for two reads of a gone version; want 2 (never taken as authorized)", n)
	}
}
