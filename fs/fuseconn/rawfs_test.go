package fuseconn

import (
	"context"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// gateFS answers GETATTR once released, and counts RELEASEs.
type gateFS struct {
	fuse.RawFileSystem
	entered  chan struct{}
	release  chan struct{}
	releases chan uint64
}

func (g *gateFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	g.entered <- struct{}{}
	<-g.release
	return fuse.OK
}

func (g *gateFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	out.Fh = 7
	return fuse.OK
}

func (g *gateFS) Release(c <-chan struct{}, in *fuse.ReleaseIn) { g.releases <- in.Fh }

// TestHandoverGate: freezing waits for the requests running, holds new
// ones until thawed, fails (thawed) when a request outlives its context;
// opens are tracked, and a RELEASE of a handle never opened here (resent
// after a handover) does not reach go-fuse.
func TestHandoverGate(t *testing.T) {
	g := &gateFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), entered: make(chan struct{}, 4),
		release: make(chan struct{}), releases: make(chan uint64, 4)}
	h := newRawFS(g, nil)

	// A request running: freeze waits for it.
	done := make(chan struct{})
	go func() { h.GetAttr(nil, &fuse.GetAttrIn{}, &fuse.AttrOut{}); close(done) }()
	<-g.entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if err := h.freeze(ctx); err == nil {
		t.Fatal("freeze succeeded with a request running past its context")
	}
	cancel()
	// Thawed by the failure: a second request gets in.
	go h.GetAttr(nil, &fuse.GetAttrIn{}, &fuse.AttrOut{})
	<-g.entered
	g.release <- struct{}{}
	g.release <- struct{}{}
	<-done

	frozen := make(chan error, 1)
	go func() { frozen <- h.freeze(context.Background()) }()
	if err := <-frozen; err != nil {
		t.Fatal(err)
	}
	// Frozen: a new request waits at the gate until thaw.
	got := make(chan struct{})
	go func() { h.GetAttr(nil, &fuse.GetAttrIn{}, &fuse.AttrOut{}); close(got) }()
	select {
	case <-g.entered:
		t.Fatal("a request passed a frozen gate")
	case <-time.After(100 * time.Millisecond):
	}
	h.thaw()
	<-g.entered
	g.release <- struct{}{}
	<-got

	var out fuse.OpenOut
	if st := h.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: 5}, Flags: 0}, &out); !st.Ok() {
		t.Fatal(st)
	}
	if hs := h.openHandles(); len(hs) != 1 || hs[0].Fh != 7 || hs[0].Node != 5 {
		t.Fatalf("tracked handles: %+v", hs)
	}
	h.Release(nil, &fuse.ReleaseIn{Fh: 9})
	h.Release(nil, &fuse.ReleaseIn{Fh: 7})
	if fh := <-g.releases; fh != 7 {
		t.Fatalf("release passed on for handle %d, want only 7", fh)
	}
	select {
	case fh := <-g.releases:
		t.Fatalf("release of unknown handle %d passed on", fh)
	default:
	}
	if hs := h.openHandles(); len(hs) != 0 {
		t.Fatalf("handles after release: %+v", hs)
	}
}

// forgetFS records the FORGETs passed on to go-fuse.
type forgetFS struct {
	fuse.RawFileSystem
	forgot map[uint64]uint64
}

func (f *forgetFS) Forget(id, n uint64) { f.forgot[id] += n }

func (f *forgetFS) Lookup(c <-chan struct{}, hd *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	out.NodeId = 5
	return fuse.OK
}

// TestHandoverLookupDebt: lookups a previous daemon gave the kernel are a
// debt for which go-fuse holds one lookup; FORGETs pay it off, go-fuse
// sees only the last of them (as one) and those of its own lookups, so
// its count reaches zero exactly when the kernel's does.
func TestHandoverLookupDebt(t *testing.T) {
	f := &forgetFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), forgot: map[uint64]uint64{}}
	h := newRawFS(f, nil)
	// Replayed: go-fuse holds 1 of node 5 and 1 of node 6; the kernel 3 and 1.
	h.owe(5, 3)
	h.owe(6, 1)
	// A lookup after the switch: the kernel 4, go-fuse 2.
	if st := h.Lookup(nil, &fuse.InHeader{NodeId: 1}, "x", &fuse.EntryOut{}); !st.Ok() {
		t.Fatal(st)
	}
	if n := h.lookupCount(5); n != 4 {
		t.Fatalf("kernel count of node 5: %d, want 4", n)
	}
	h.Forget(5, 2)
	if f.forgot[5] != 0 {
		t.Fatalf("go-fuse forgot %d of node 5 while the debt is unpaid", f.forgot[5])
	}
	h.Forget(5, 1) // the debt is paid: go-fuse's replay lookup goes
	if f.forgot[5] != 1 {
		t.Fatalf("go-fuse forgot %d of node 5, want 1", f.forgot[5])
	}
	h.Forget(5, 1) // its own lookup
	if f.forgot[5] != 2 || h.lookupCount(5) != 0 {
		t.Fatalf("go-fuse forgot %d of node 5 (want 2), kernel count %d", f.forgot[5], h.lookupCount(5))
	}
	// A batch forget paying more than the debt at once.
	h.Lookup(nil, &fuse.InHeader{NodeId: 1}, "x", &fuse.EntryOut{})
	h.owe(5, 2) // (as if replayed again)
	h.Forget(5, 3)
	if f.forgot[5] != 4 {
		t.Fatalf("go-fuse forgot %d of node 5 in all, want 4", f.forgot[5])
	}
	h.Forget(6, 1)
	if f.forgot[6] != 1 {
		t.Fatalf("go-fuse forgot %d of node 6, want 1", f.forgot[6])
	}
}

// TestHandoverCountsDirPlus: a READDIRPLUS answer gives the kernel one
// lookup of every entry with a node, "." and ".." excepted.
func TestHandoverCountsDirPlus(t *testing.T) {
	h := newRawFS(fuse.NewDefaultRawFileSystem(), nil)
	l := fuse.NewDirEntryList(make([]byte, 4096), 0)
	for _, e := range []struct {
		name string
		id   uint64
	}{{".", 1}, {"..", 1}, {"a", 7}, {"bb", 0}, {"a-name-of-some-length", 9}, {"..x", 11}} {
		out := l.AddDirLookupEntry(fuse.DirEntry{Name: e.name, Ino: e.id, Mode: fuse.S_IFREG})
		if out == nil {
			t.Fatal("no room")
		}
		out.NodeId = e.id
	}
	h.countDirPlus(l.Bytes())
	h.countDirPlus(l.Bytes())
	for id, want := range map[uint64]uint64{1: 0, 7: 2, 9: 2, 11: 2, 0: 0} {
		if got := h.lookupCount(id); got != want {
			t.Errorf("lookups of node %d: %d, want %d", id, got, want)
		}
	}
}
