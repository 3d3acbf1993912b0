package writeback

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/nas"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// newNAS opens a real NAS backend on a fresh directory.
func newNAS(t *testing.T) (backends.Backend, string) {
	t.Helper()
	dir := t.TempDir()
	u, err := backends.ParseURI("nas://" + dir + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := nas.New(context.Background(), u, nas.Options{}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, dir
}

// faulty decorates a Backend with fault injection. It embeds only the
// Backend interface, so the optional interfaces (Renamer, Copier,
// DirMaker) are hidden: the Store must do without them.
type faulty struct {
	backends.Backend

	mu          sync.Mutex
	failCommits int              // GUARDED_BY(mu): the next N commits fail (transient)
	failAll     error            // GUARDED_BY(mu): every Write fails with it
	failKeys    map[string]error // GUARDED_BY(mu): Writes of these keys fail so
	failAfter   int64            // GUARDED_BY(mu): >0: a write stream breaks after this many bytes, once
	gate        chan struct{}
	gateKeys    map[string]bool // GUARDED_BY(mu): keys the gate holds (nil: all)
	startGate   chan struct{}   // GUARDED_BY(mu): if set, Write blocks until it is closed
	deleteGate  chan struct{}   // GUARDED_BY(mu): if set, Delete blocks until it is closed
	deleting    chan string     // receives the key of each Delete held by deleteGate (if room)

	// lateCommits: a held Commit whose client gives up (context
	// cancelled) still lands once the gate opens, as a store finishes a
	// request its client disconnected from. GUARDED_BY(mu)
	lateCommits bool
	late        sync.WaitGroup // such commits still to land
	inCommit    chan string    // receives the key of each Commit begun (if room)

	started chan string // receives the key of each Write begun (if room)
	writes  atomic.Int32
	reads   atomic.Int32
	commits atomic.Int32
}

func newFaulty(b backends.Backend) *faulty {
	return &faulty{Backend: b, started: make(chan string, 1000), inCommit: make(chan string, 1000), deleting: make(chan string, 1000)}
}

func (f *faulty) Delete(ctx context.Context, key string) error {
	f.mu.Lock()
	gate := f.deleteGate
	f.mu.Unlock()
	if gate != nil {
		select {
		case f.deleting <- key:
		default:
		}
		<-gate
	}
	return f.Backend.Delete(ctx, key)
}

// hold makes every Commit (of keys, if given) block until release.
func (f *faulty) hold(keys ...string) {
	f.mu.Lock()
	f.gate = make(chan struct{})
	f.gateKeys = nil
	if len(keys) > 0 {
		f.gateKeys = map[string]bool{}
		for _, k := range keys {
			f.gateKeys[k] = true
		}
	}
	f.mu.Unlock()
}

func (f *faulty) release() {
	f.mu.Lock()
	if f.gate != nil {
		close(f.gate)
		f.gate = nil
	}
	f.mu.Unlock()
}

func (f *faulty) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	f.reads.Add(1)
	return f.Backend.Read(ctx, key, opt)
}

func (f *faulty) Write(ctx context.Context, key string, opt backends.WriteOptions) (backends.Writer, error) {
	f.writes.Add(1)
	select {
	case f.started <- key:
	default:
	}
	f.mu.Lock()
	err, start := f.failAll, f.startGate
	if kerr := f.failKeys[key]; kerr != nil {
		err = kerr
	}
	f.mu.Unlock()
	if start != nil {
		select {
		case <-start:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, backends.Wrap("write", key, err, nil)
	}
	w, err := f.Backend.Write(ctx, key, opt)
	if err != nil {
		return nil, err
	}
	return &faultyWriter{Writer: w, f: f, key: key}, nil
}

type faultyWriter struct {
	backends.Writer
	f   *faulty
	key string
	n   int64
	// sent: a late Commit is on its way; an Abort cannot undo it (the
	// store received the whole request).
	sent atomic.Bool
}

func (w *faultyWriter) Abort(ctx context.Context) error {
	if w.sent.Load() {
		return nil
	}
	return w.Writer.Abort(ctx)
}

func (w *faultyWriter) Write(p []byte) (int, error) {
	w.f.mu.Lock()
	after := w.f.failAfter
	if after > 0 && w.n+int64(len(p)) > after {
		w.f.failAfter = 0
		w.f.mu.Unlock()
		return 0, backends.Wrap("write", w.key, backends.ErrTransient, io.ErrUnexpectedEOF)
	}
	w.f.mu.Unlock()
	w.n += int64(len(p))
	return w.Writer.Write(p)
}

func (w *faultyWriter) Commit(ctx context.Context) (backends.ObjectInfo, error) {
	w.f.mu.Lock()
	gate := w.f.gate
	if w.f.gateKeys != nil && !w.f.gateKeys[w.key] {
		gate = nil
	}
	fail := w.f.failCommits > 0
	if fail {
		w.f.failCommits--
	}
	late := w.f.lateCommits
	w.f.mu.Unlock()
	select {
	case w.f.inCommit <- w.key:
	default:
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			if late {
				w.sent.Store(true)
				w.f.late.Add(1)
				go func() {
					defer w.f.late.Done()
					<-gate
					w.Writer.Commit(context.Background())
				}()
				return backends.ObjectInfo{}, ctx.Err()
			}
			w.Writer.Abort(context.Background())
			return backends.ObjectInfo{}, ctx.Err()
		}
	}
	if fail {
		w.Writer.Abort(ctx)
		return backends.ObjectInfo{}, backends.Wrap("commit", w.key, backends.ErrTransient, io.ErrUnexpectedEOF)
	}
	w.f.commits.Add(1)
	return w.Writer.Commit(ctx)
}

// renamer adds the backend's server-side rename (and mkdir) back.
type renamer struct {
	*faulty
}

func (r renamer) Rename(ctx context.Context, from, to string) error {
	return r.faulty.Backend.(backends.Renamer).Rename(ctx, from, to)
}

func (r renamer) MakeDir(ctx context.Context, key string) error {
	return r.faulty.Backend.(backends.DirMaker).MakeDir(ctx, key)
}

func openStore(t *testing.T, b backends.Backend, staging string, tweak func(*Options)) *Store {
	t.Helper()
	opt := Options{StagingDir: staging, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
		Registry: prometheus.NewRegistry(), Log: slog.Default()}
	if tweak != nil {
		tweak(&opt)
	}
	// An unlink or rename waits for a publish in flight (it cannot be
	// recalled): a Commit the test holds is then answered, as a store
	// would, after the test's own hook has seen the point.
	var f *faulty
	switch fb := b.(type) {
	case *faulty:
		f = fb
	case renamer:
		f = fb.faulty
	}
	if f != nil {
		hook := opt.crashHook
		opt.crashHook = func(p string) {
			if hook != nil {
				hook(p)
			}
			if p == crashCommitAwaited {
				f.release()
			}
		}
	}
	s, err := Open(context.Background(), b, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeStore(t, s) })
	return s
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// writeFile creates key with data through the Store, written in chunks,
// and closes it.
func writeFile(t *testing.T, s *Store, key string, data []byte) {
	t.Helper()
	ctx := context.Background()
	h, err := s.Open(ctx, key, nil, OpenFlags{Write: true, Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 128 << 10 {
		end := min(off+128<<10, len(data))
		if _, err := h.WriteAt(ctx, data[off:end], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
}

func drain(t *testing.T, s *Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.Drain(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// wantFile checks the backend directory holds exactly data at rel.
func wantFile(t *testing.T, dir, rel string, data []byte) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("%s: got %d bytes, want %d (content differs)", rel, len(got), len(data))
	}
}

func wantMissing(t *testing.T, dir, rel string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(dir, rel)); err == nil {
		t.Fatalf("%s exists in the backend, want it absent", rel)
	}
}

// stagingFiles counts the blobs and journal records left in staging.
func stagingFiles(t *testing.T, s *Store) (blobs, records int) {
	t.Helper()
	b, _ := os.ReadDir(s.blobDir)
	r, _ := os.ReadDir(s.jr.dir)
	return len(b), len(r)
}

// waitCommit waits until a Commit of key has begun.
func waitCommit(t *testing.T, f *faulty, key string) {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case k := <-f.inCommit:
			if k == key {
				return
			}
		case <-timeout:
			t.Fatalf("the upload of %q never reached its commit", key)
		}
	}
}

func waitStarted(t *testing.T, f *faulty, key string) {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case k := <-f.started:
			if k == key {
				return
			}
		case <-timeout:
			t.Fatalf("upload of %q never started", key)
		}
	}
}

// waitStreaming waits until key's stream has sent bytes (so it is open and
// a close adopts it).
func waitStreaming(t *testing.T, s *Store, h *Handle) {
	t.Helper()
	testwait.Eventually(t, func() bool { return s.streamedBytes(h.e) > 0 }, "the stream to send bytes")
}

// streamedBytes is how much of e the stream has sent so far.
func (s *Store) streamedBytes(e *entry) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.stream == nil {
		return 0
	}
	return e.stream.sentBytes
}

// writeAt writes p at off through h, failing the test if the write fails
// or is short.
func writeAt(t testing.TB, ctx context.Context, h *Handle, p []byte, off int64) {
	t.Helper()
	if n, err := h.WriteAt(ctx, p, off); err != nil || n != len(p) {
		t.Fatalf("write %s at %d: %d of %d bytes, %v", h.Key(), off, n, len(p), err)
	}
}

// flush flushes h (close(2) of a descriptor), failing the test on an error.
func flush(t testing.TB, ctx context.Context, h *Handle) {
	t.Helper()
	if err := h.Flush(ctx); err != nil {
		t.Fatalf("flush %s: %v", h.Key(), err)
	}
}

// release releases h (the last close), failing the test on an error.
func release(t testing.TB, h *Handle) {
	t.Helper()
	if err := h.Release(); err != nil {
		t.Fatalf("release %s: %v", h.Key(), err)
	}
}

// closeStore closes s, failing the test on an error.
func closeStore(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("close store: %v", err)
	}
}
