package writeback

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/nas"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// A crash test snapshots the staging dir and the backend at a crash point
// (from inside the hook, so the disk is exactly as a SIGKILL there would
// leave it), then starts a new Store on the snapshot and checks that every
// key holds its last closed version, or the one being closed at the crash,
// in the backend after a drain and in the Store before it.

// crashModel is what the scenario has closed so far.
type crashModel struct {
	mu     sync.Mutex
	stable map[string][]byte // last closed (or renamed/removed) state; nil = absent
	next   map[string][]byte // the operation in progress may leave these instead
}

func (m *crashModel) begin(k string, v []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next[k] = v
}

func (m *crashModel) done() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, v := range m.next {
		m.stable[k] = v
	}
	m.next = map[string][]byte{}
}

type crashSnap struct {
	point          string
	staging, store string
	allowed        map[string][][]byte
}

// copyTree copies a directory tree (regular files, hard links among them,
// and directories) and returns the change time each file had when it was
// copied.
func copyTree(t *testing.T, from, to string) map[string]int64 {
	t.Helper()
	ctimes := map[string]int64{}
	inodes := map[uint64]string{} // inode copied -> its copy
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // removed while we walked: as if not there
			}
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		defer f.Close()
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			return err
		}
		data, err := io.ReadAll(f)
		if err != nil {
			return err
		}
		ctimes[rel] = st.Ctim.Nano()
		if first, ok := inodes[st.Ino]; ok {
			return os.Link(first, dst)
		}
		inodes[st.Ino] = dst
		return os.WriteFile(dst, data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ctimes
}

// translateCTimes rewrites the journal records of a staging snapshot so
// that a blob unchanged since its seal at the crash is unchanged in the
// copy (copying gives every file a new change time), and a changed one
// stays changed.
func translateCTimes(t *testing.T, ctimes map[string]int64, snap string) {
	t.Helper()
	recs, err := filepath.Glob(filepath.Join(snap, "*", "journal", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range recs {
		data, err := os.ReadFile(p)
		must(t, err)
		var r record
		must(t, json.Unmarshal(data, &r))
		sub := filepath.Base(filepath.Dir(filepath.Dir(p)))
		var sst syscall.Stat_t
		orig, ok := ctimes[filepath.Join(sub, "blobs", r.Blob)]
		if !ok || syscall.Stat(filepath.Join(snap, sub, "blobs", r.Blob), &sst) != nil {
			continue
		}
		if r.CTime == 0 || orig != r.CTime {
			continue
		}
		r.CTime = sst.Ctim.Nano()
		data, err = json.Marshal(r)
		must(t, err)
		must(t, os.WriteFile(p, data, 0o600))
	}
}

func nasAt(t *testing.T, dir string) backends.Backend {
	t.Helper()
	u, err := backends.ParseURI("nas://" + dir + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := nas.New(context.Background(), u, nas.Options{}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// crashScenario is a checkpoint's life: created, overwritten (O_TRUNC),
// overwritten again while the previous passthrough handle is not yet
// released (the kernel releases asynchronously), fsynced and rewritten,
// renamed and removed. pt simulates FUSE passthrough (the kernel writes
// the staging file directly); hold keeps uploads from finishing until
// each step's end, so versions are pending when the next step starts.
func crashScenario(t *testing.T, pt, hold bool, point string) (snaps []crashSnap) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	staging := t.TempDir()
	m := &crashModel{stable: map[string][]byte{}, next: map[string][]byte{}}
	var snapMu sync.Mutex
	hook := func(p string) {
		if hold && p == crashCommitAwaited {
			// An unlink or rename waits for the held publish: let it
			// land (after the snapshot, if this is the point) instead of
			// waiting forever.
			defer f.release()
		}
		if p != point {
			return
		}
		if !hold && (p == crashCommitted || p == crashRecordRemoved || p == crashCommitAwaited) {
			// Called by an uploader, or while one publishes, as the
			// scenario goes on: a copy would not be one instant. With
			// hold, uploads finish while the scenario waits.
			return
		}
		snapMu.Lock()
		defer snapMu.Unlock()
		m.mu.Lock()
		allowed := map[string][][]byte{}
		for k, v := range m.stable {
			allowed[k] = append(allowed[k], v)
		}
		for k, v := range m.next {
			allowed[k] = append(allowed[k], v)
			if _, ok := m.stable[k]; !ok {
				allowed[k] = append(allowed[k], nil)
			}
		}
		m.mu.Unlock()
		sn := crashSnap{point: p, staging: t.TempDir(), store: t.TempDir(), allowed: allowed}
		ctimes := copyTree(t, staging, sn.staging)
		copyTree(t, dir, sn.store)
		translateCTimes(t, ctimes, sn.staging)
		snaps = append(snaps, sn)
	}
	var s *Store
	s = openStore(t, f, staging, func(o *Options) { o.crashHook = hook })
	ctx := context.Background()
	A, B, C, D, E := randBytes(1, 300<<10), randBytes(2, 200<<10), randBytes(3, 250<<10), randBytes(4, 100<<10), randBytes(5, 70<<10)
	F, R := randBytes(6, 90<<10), randBytes(7, 40<<10)
	BX := append([]byte(nil), B...)
	copy(BX, "XXXXXXXXXX")
	CD := append([]byte(nil), C...)
	copy(CD, D)

	open := func(key string, trunc bool) (*Handle, io.WriterAt) {
		h, err := s.Open(ctx, key, nil, OpenFlags{Write: true, Truncate: trunc, Passthrough: pt})
		must(t, err)
		if !pt {
			return h, handleWriter{h}
		}
		fd, ok := h.PassthroughFd()
		if !ok {
			t.Fatal("passthrough not granted")
		}
		kf, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_RDWR, 0)
		must(t, err)
		t.Cleanup(func() { kf.Close() })
		return h, kf
	}
	write := func(w io.WriterAt, data []byte) {
		for off := 0; off < len(data); off += 64 << 10 {
			end := min(off+64<<10, len(data))
			if _, err := w.WriteAt(data[off:end], int64(off)); err != nil {
				t.Fatal(err)
			}
			if pt && off == 64<<10 {
				s.crash(crashStaged) // the kernel wrote; we were not told
			}
		}
	}
	closeAs := func(h *Handle, key string, v []byte) {
		m.begin(key, v)
		must(t, h.Flush(ctx))
		m.done()
	}
	settle := func() {
		if hold {
			f.release()
			drain(t, s)
			f.hold()
		}
	}
	if hold {
		f.hold()
	}

	// A: created and closed; its release is still on its way (the kernel
	// releases asynchronously) when the next open comes.
	h1, w1 := open("ckpt", true)
	write(w1, A)
	closeAs(h1, "ckpt", A)
	settle()

	// B: open(O_TRUNC) before A's release, rewritten, closed.
	h2, w2 := open("ckpt", true)
	must(t, h1.Release())
	write(w2, B)
	closeAs(h2, "ckpt", B)

	// BX: reopened (no truncate) before B's release, ten bytes changed.
	h3, w3 := open("ckpt", false)
	must(t, h2.Release())
	if _, err := w3.WriteAt([]byte("XXXXXXXXXX"), 0); err != nil {
		t.Fatal(err)
	}
	s.crash(crashStaged)
	closeAs(h3, "ckpt", BX)
	settle()

	// C, fsynced (journaled locally) before BX's release; then D written
	// over it, closed.
	h4, w4 := open("ckpt", true)
	must(t, h3.Release())
	write(w4, C)
	m.begin("ckpt", C)
	must(t, h4.Sync(ctx, false))
	m.done()
	write(w4, D)
	closeAs(h4, "ckpt", CD)
	must(t, h4.Release())
	settle()

	// E: closed, then renamed and removed. With hold its publish is in
	// flight at the rename, which waits for it (commit-awaited).
	h5, w5 := open("next", true)
	write(w5, E)
	closeAs(h5, "next", E)
	must(t, h5.Release())
	if hold {
		waitCommit(t, f, "next")
	}
	m.begin("next", nil)
	m.begin("final", E)
	must(t, s.Rename(ctx, "next", "final"))
	m.done()
	m.begin("final", nil)
	must(t, s.Remove(ctx, "final"))
	m.done()

	// F: closed while no upload can start, renamed and removed while its
	// version is pending (rekeyed, unjournaled with a record).
	f.mu.Lock()
	f.startGate = make(chan struct{})
	f.mu.Unlock()
	h6, w6 := open("other", true)
	write(w6, F)
	closeAs(h6, "other", F)
	must(t, h6.Release())
	m.begin("other", nil)
	m.begin("moved", F)
	must(t, s.Rename(ctx, "other", "moved"))
	m.done()
	m.begin("moved", nil)
	must(t, s.Remove(ctx, "moved"))
	m.done()
	f.mu.Lock()
	close(f.startGate)
	f.startGate = nil
	f.mu.Unlock()
	f.release()
	drain(t, s) // returns once every upload's end is recorded, hooks included

	// G: closed and uploaded (its staged copy freed), opened read-only,
	// then removed: the descriptor keeps reading it from a copy fetched
	// before the delete (kept), which nothing ever uploads.
	G := randBytes(8, 120<<10)
	h8, w8 := open("kept", true)
	write(w8, G)
	closeAs(h8, "kept", G)
	must(t, h8.Release())
	f.release()
	drain(t, s)
	info, ok := s.Stat("kept")
	if !ok {
		t.Fatal("Stat(kept): unknown")
	}
	r8, err := s.Open(ctx, "kept", &info, OpenFlags{})
	must(t, err)
	s.mu.Lock()
	staged := r8.e.cur != nil
	s.mu.Unlock()
	if staged {
		t.Fatal("kept: still staged after its upload and release; the scenario would not reach the kept point")
	}
	m.begin("kept", nil)
	must(t, s.Remove(ctx, "kept"))
	m.done()
	got := make([]byte, len(G)+1)
	n, err := r8.ReadAt(ctx, got, 0)
	if err != io.EOF || !bytes.Equal(got[:n], G) {
		t.Fatalf("read of an open, removed file: %s, %v; want %s, EOF", describe(got[:n]), err, describe(G))
	}
	must(t, r8.Release())

	// R: refused by the store for good, so set aside. Last, with nothing
	// else in flight, so the uploader's snapshot is one instant. A new
	// Store (whose store accepts it) may upload it, or find it set aside.
	f.mu.Lock()
	f.failKeys = map[string]error{"refused": backends.ErrPermission}
	f.mu.Unlock()
	h7, w7 := open("refused", true)
	write(w7, R)
	closeAs(h7, "refused", R)
	must(t, h7.Release())
	m.begin("refused", nil)
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := s.Drain(dctx, nil); !errors.Is(err, ErrUploadFailed) {
		t.Fatalf("drain with a refused file: %v, want ErrUploadFailed", err)
	}
	snapMu.Lock()
	defer snapMu.Unlock()
	return snaps
}

// handleWriter writes through the daemon (no passthrough).
type handleWriter struct{ h *Handle }

func (w handleWriter) WriteAt(p []byte, off int64) (int, error) {
	return w.h.WriteAt(context.Background(), p, off)
}

func describe(v []byte) string {
	if v == nil {
		return "absent"
	}
	return fmt.Sprintf("%d bytes %x", len(v), v[:min(4, len(v))])
}

func checkRecovery(t *testing.T, sn crashSnap) {
	t.Helper()
	b := nasAt(t, sn.store)
	// The snapshot's backend has another address: move its staging
	// sub-directory to the name the new backend looks for.
	subs, err := os.ReadDir(sn.staging)
	must(t, err)
	if len(subs) != 1 {
		t.Fatalf("snapshot staging holds %d entries, want 1", len(subs))
	}
	must(t, os.Rename(filepath.Join(sn.staging, subs[0].Name()), filepath.Join(sn.staging, stagingKey(b))))
	s := openStore(t, b, sn.staging, nil)
	ctx := context.Background()
	// The mount's view before any upload: what the Store shows, else the
	// backend.
	view := map[string][]byte{}
	for k := range sn.allowed {
		var data []byte
		if info, ok := s.Stat(k); ok {
			if info.Size > 0 || !info.ModTime.IsZero() {
				data = make([]byte, info.Size)
				h, err := s.Open(ctx, k, &info, OpenFlags{})
				must(t, err)
				n, err := h.ReadAt(ctx, data, 0)
				if err != nil && err != io.EOF {
					t.Fatal(err)
				}
				data = data[:n]
				must(t, h.Release())
			}
		} else if got, err := os.ReadFile(filepath.Join(sn.store, k)); err == nil {
			data = got
		}
		view[k] = data
	}
	if err := s.Drain(ctx, nil); err != nil {
		t.Fatalf("crash at %s: drain after restart: %v", sn.point, err)
	}
	for k, allowed := range sn.allowed {
		got, err := os.ReadFile(filepath.Join(sn.store, k))
		if err != nil {
			got = nil
		}
		ok := false
		var want []string
		for _, a := range allowed {
			want = append(want, describe(a))
			if bytes.Equal(a, got) && (a == nil) == (got == nil) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("crash at %s: %s in the store is %s, want one of %s", sn.point, k, describe(got), strings.Join(want, ", "))
		}
		if view[k] != nil && !bytes.Equal(view[k], got) {
			t.Errorf("crash at %s: %s read %s before the drain, the store has %s after", sn.point, k, describe(view[k]), describe(got))
		}
	}
	// Staged data is freed just after an upload is counted: poll.
	if err := testwait.Until(testwait.Guard, func() bool { blobs, recs := stagingFiles(t, s); return blobs == 0 && recs == 0 }); err != nil {
		blobs, recs := stagingFiles(t, s)
		t.Errorf("crash at %s: staging keeps %d blobs and %d records after the drain", sn.point, blobs, recs)
	}
	closeStore(t, s)
}

// TestCrashAtEveryTransition: a crash at each transition of a version, in
// a checkpoint-overwrite scenario, with and without passthrough, with
// uploads finishing at once or held until after the next step.
func TestCrashAtEveryTransition(t *testing.T) {
	points := []string{crashStaged, crashSealed, crashPreserveCopied, crashPreserved, crashCommitted,
		crashRecordRemoved, crashRekeyed, crashUnjournaled, crashCommitAwaited, crashSetAside, crashKept}
	seen := map[string]int{}
	for _, pt := range []bool{false, true} {
		for _, hold := range []bool{false, true} {
			for _, p := range points {
				t.Run(fmt.Sprintf("pt=%v/hold=%v/%s", pt, hold, p), func(t *testing.T) {
					snaps := crashScenario(t, pt, hold, p)
					seen[p] += len(snaps)
					for _, sn := range snaps {
						checkRecovery(t, sn)
					}
				})
			}
		}
	}
	var missing []string
	for _, p := range points {
		if seen[p] == 0 {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("crash points never reached by the scenario: %v", missing)
	}
}
