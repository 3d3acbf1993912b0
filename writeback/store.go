// Package writeback is the write path of mlfsd's output channels: staging
// files, a durable upload journal, a background upload queue with retries,
// and the drain that waits until every closed file is in the backend.
//
// A Store serves one backend. Files are staged under Options.StagingDir;
// each close (Handle.Flush) seals the staged bytes, records them in the
// journal and queues an upload; Handle.Sync can wait until the upload is
// durable. A Store reopened on the same staging dir after a crash uploads
// every sealed file again, so nothing whose close returned is lost, and
// only complete files are ever published (Backend.Write + Writer.Commit).
//
// The shape follows rclone's vfs/vfscache: per-file state persisted next to
// the data, and a queue that knows only how to upload an entry.
package writeback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/mlfsd/mlfsd/backends"
)

// Store stages, journals and uploads the files of one backend.
type Store struct {
	b       backends.Backend
	opt     Options
	log     *slog.Logger
	m       *metrics
	dir     string
	blobDir string
	jr      journal
	lock    *os.File // flock held while the Store is open
	limiter *rate.Limiter

	ctx    context.Context // cancelled by Close: stops uploads
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// nsMu serialises namespace changes (rename, remove) so that each sees
	// a quiet set of entries.
	nsMu sync.Mutex

	// sent counts bytes handed to backend writers (for progress rates;
	// retries count again).
	sent atomic.Int64

	mu      sync.Mutex
	cond    *sync.Cond        // broadcast on queue and upload state changes
	entries map[string]*entry // GUARDED_BY(mu); by key, removed entries are absent
	queue   []*entry          // GUARDED_BY(mu)
	closed  bool              // GUARDED_BY(mu)
	// stopping: handing over (Stop); uploaders take no new file.
	stopping bool     // GUARDED_BY(mu)
	aside    []string // GUARDED_BY(mu): files set aside by this run, for Drain
	// completing counts uploads whose end is being recorded (journal
	// record and staged data not yet released): Drain waits for them.
	completing int // GUARDED_BY(mu)
	// openWaiters counts Opens waiting for an unlink or rename of their
	// key (entry.removing). GUARDED_BY(mu)
	openWaiters int
	done        progressCounters // GUARDED_BY(mu): made durable since Open
	pending     progressCounters // GUARDED_BY(mu): sealed versions not yet durable
}

type progressCounters struct {
	files int64
	bytes int64
}

// ErrUploadFailed is returned by Drain (wrapped, naming the files) when
// some closed files could not be uploaded. Their data stays in staging and
// in the journal: the next Store on the same staging dir tries again.
var ErrUploadFailed = errors.New("upload failed")

// Open opens (creating it if needed) the staging area of b under
// opt.StagingDir, queues every upload a previous run left unfinished, and
// starts the uploaders. Close the Store when done; Drain first to wait for
// uploads.
func Open(ctx context.Context, b backends.Backend, opt Options) (*Store, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	opt = opt.withDefaults()
	dir := filepath.Join(opt.StagingDir, stagingKey(b))
	s := &Store{
		b: b, opt: opt, log: opt.Log.With("backend", b.ID()),
		dir: dir, blobDir: filepath.Join(dir, "blobs"), jr: journal{dir: filepath.Join(dir, "journal"), sync: opt.StagingSync},
		entries: map[string]*entry{},
	}
	s.cond = sync.NewCond(&s.mu)
	for _, d := range []string{s.blobDir, s.jr.dir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("staging dir %s: %w", opt.StagingDir, err)
		}
	}
	lock, err := s.lockStaging()
	if err != nil {
		return nil, err
	}
	s.lock = lock
	// Notes for whoever looks at the staging dir by hand, and for the
	// adoption of staged files by a later version keyed differently.
	identity := dataIdentity(b)
	_ = os.WriteFile(filepath.Join(dir, backendFile), []byte(b.ID()+"\n"), 0o600)
	_ = os.WriteFile(filepath.Join(dir, identityFile), []byte(identity+"\n"), 0o600)
	s.adoptLegacy(identity)

	m, err := newMetrics(opt.Registry, b.ID(), s.oldestPendingAge)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("writeback metrics: %w", err)
	}
	s.m = m
	if opt.BandwidthLimit > 0 {
		s.limiter = rate.NewLimiter(rate.Limit(opt.BandwidthLimit), int(min(opt.BandwidthLimit, 1<<20)))
	}
	if err := s.recover(); err != nil {
		lock.Close()
		return nil, err
	}
	left := s.leftUploads() // before this run starts any
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.abortLeftUploads(left)
	for range opt.Concurrency {
		s.wg.Add(1)
		go s.worker()
	}
	return s, nil
}

// recover rebuilds pending entries from the journal and discards staged
// data no record names (files whose close never returned).
func (s *Store) recover() error {
	recs, bad, err := s.jr.load()
	if err != nil {
		return fmt.Errorf("staging dir %s: %w", s.dir, err)
	}
	for _, b := range bad {
		s.setAsideFile(b.name, b.err)
	}
	// The latest record per key wins.
	sort.Slice(recs, func(i, j int) bool { return recs[i].Seq > recs[j].Seq })
	keep := map[string]bool{}
	for _, r := range recs {
		if _, dup := s.entries[r.Key]; dup {
			s.log.Warn("writeback: dropping an older journal record for the same key", "key", r.Key, "record", r.ID)
			s.jr.remove(r.ID)
			continue
		}
		bl, err := s.openBlob(r.Blob)
		if err == nil && !s.liveBlob(r.Blob) {
			// A sealed blob never changes: any difference means it was lost
			// (machine crash without --staging-fsync) or written after its
			// close through a descriptor still open. Never publish it. (The
			// live file of a writer handed over may have changed since, written
			// in place: its upload checks that before publishing, see
			// checkUnchanged, and the writer's close seals it again.)
			if st, serr := bl.stat(); serr != nil {
				err = serr
			} else if st.size != r.Size {
				err = fmt.Errorf("staged data is %d bytes, the journal says %d (lost in a machine crash?)", st.size, r.Size)
			} else if r.CTime != 0 && st.ctime != r.CTime && !s.linkedAside(bl) {
				err = fmt.Errorf("staged data changed after its close (written through a descriptor still open)")
			}
			if err != nil {
				bl.f.Close()
			}
		}
		if err != nil {
			// Never retried, never blocking: moved out of the journal with
			// its data, reported by this run's Drain.
			s.setAside(r, fmt.Errorf("recover %q: %w", r.Key, err))
			continue
		}
		bl.sealed = true
		bl.refs = 2 // cur and pend
		mt := time.Unix(0, r.ModTime)
		e := s.newEntryLocked(r.ID, r.Key)
		e.cur, e.gen, e.mtime, e.inBackend = bl, 1, mt, true
		s.setPendLocked(e, &version{gen: 1, blob: bl, size: r.Size, ctime: r.CTime, seq: r.Seq, mtime: mt})
		e.lastSeal = blobStat{size: r.Size, ctime: r.CTime}
		s.entries[r.Key] = e
		keep[r.Blob] = true
		s.queue = append(s.queue, e)
		e.queued = true
	}
	if s.opt.Handover != nil {
		s.adoptLive(keep)
	}
	des, err := os.ReadDir(s.blobDir)
	if err != nil {
		return err
	}
	for _, de := range des {
		if !keep[de.Name()] {
			os.Remove(filepath.Join(s.blobDir, de.Name()))
		}
	}
	if n := len(s.queue); n > 0 {
		s.log.Info("writeback: resuming uploads left by a previous run", "files", n)
	}
	if des, _ := os.ReadDir(s.asideDir()); len(des) > 0 {
		s.log.Warn("writeback: files that could not be uploaded by an earlier run are kept for inspection", "dir", s.asideDir(), "entries", len(des))
	}
	return nil
}

// Close stops the uploaders (aborting uploads in flight) and releases the
// staging dir. Pending uploads stay journaled for the next Open; call
// Drain first to finish them.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.cond.Broadcast()
	streams := []*streamer{}
	for _, e := range s.entries {
		if e.stream != nil {
			streams = append(streams, e.stream)
		}
	}
	s.mu.Unlock()
	s.cancel()
	for _, st := range streams {
		st.wait()
	}
	s.wg.Wait()
	s.mu.Lock()
	for _, e := range s.entries {
		if e.cur != nil {
			e.cur.f.Close()
		}
		if e.pend != nil && e.pend.blob != e.cur {
			e.pend.blob.f.Close()
		}
	}
	s.mu.Unlock()
	// Leave no empty staging area behind (one per channel URI ever mounted).
	if empty(s.blobDir) && empty(s.jr.dir) && !exists(s.asideDir()) && (empty(s.uploadsDir()) || !exists(s.uploadsDir())) {
		os.RemoveAll(s.dir)
	}
	return s.lock.Close()
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func empty(dir string) bool {
	des, err := os.ReadDir(dir)
	return err == nil && len(des) == 0
}

// Backend returns the backend the Store uploads to.
func (s *Store) Backend() backends.Backend { return s.b }

// Stat reports what the Store knows of key: the staged size and time of a
// file being written or uploaded, or what the backend holds after the
// Store's last upload or rename of it. ok is false when the Store has
// never seen key (ask the backend).
func (s *Store) Stat(key string) (info backends.ObjectInfo, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[key]
	if e == nil {
		return backends.ObjectInfo{}, false
	}
	return s.statLocked(e), true
}

func (s *Store) statLocked(e *entry) backends.ObjectInfo {
	info := e.base
	info.Key = e.key
	info.IsDir = false
	if e.cur != nil {
		s.refreshLocked(e)
		info.Size = e.cur.size
		info.ModTime = e.mtime
	}
	return info
}

// Children lists the files the Store knows directly under directory dir
// ("" is the root) and the names of sub-directories implied by deeper
// keys. The output tree merges them with the backend's listing.
func (s *Store) Children(dir string) (files []backends.ObjectInfo, dirs []string) {
	prefix := dir
	if prefix != "" {
		prefix += "/"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for k, e := range s.entries {
		if len(k) <= len(prefix) || k[:len(prefix)] != prefix {
			continue
		}
		rest := k[len(prefix):]
		if i := indexByte(rest, '/'); i >= 0 {
			if d := rest[:i]; !seen[d] {
				seen[d] = true
				dirs = append(dirs, d)
			}
			continue
		}
		if e.cur == nil && e.pend == nil && !e.inBackend {
			continue
		}
		files = append(files, s.statLocked(e))
	}
	return files, dirs
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// StagingDir returns the staging directory (where free space matters).
func (s *Store) StagingDir() string { return s.opt.StagingDir }

// Pending returns how many closed files are not yet durable in the backend.
func (s *Store) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.pending.files)
}

// wakeOnDone wakes the Store's waiters when ctx ends, so that a wait on
// s.cond sees ctx.Err(); the returned func stops it.
func (s *Store) wakeOnDone(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
}

// WaitUnstaged blocks until the Store holds no staged data of key: its
// last closed version is durable in the backend and no descriptor is open
// on it (the staged copy is freed at the last release, which the kernel
// sends after close(2) returns). A later open of key then reads the
// backend. It returns the upload's error if key cannot be uploaded, and
// fails when ctx ends or the Store closes. Tests use it to reach the state
// of a file written long ago, without waiting on a clock.
func (s *Store) WaitUnstaged(ctx context.Context, key string) error {
	defer s.wakeOnDone(ctx)()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		e := s.entries[key]
		switch {
		case e == nil || (e.cur == nil && e.pend == nil && e.handles == 0):
			return nil
		case e.failed != nil:
			return e.failed
		case ctx.Err() != nil:
			return ctx.Err()
		case s.closed:
			return backends.Wrap("wait", key, backends.ErrTransient, context.Canceled)
		}
		s.cond.Wait()
	}
}
