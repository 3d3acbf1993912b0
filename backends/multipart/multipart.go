// Package multipart is the streaming writer of the object-store backends
// (oss, s3): it buffers small objects for one PUT and sends large ones as a
// multipart upload whose parts go up in parallel, with bounded memory,
// while the caller keeps writing. The two stores' SDKs differ only in how
// each request is made and how its errors read, so each backend gives that
// as a Store (one try of each request) and keeps its own error mapping and
// retry policy; the loop around them lives here once.
package multipart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"

	"github.com/mlfsd/mlfsd/backends"
)

// Store is one object's multipart upload as a store's SDK makes it. Each
// method is one try: the Writer retries it through Options.Retry, which
// decides what is worth another try, so a method must be safe to call
// again after a failure. P is what the store needs to name an uploaded
// part when completing (an ETag and a part number, a CRC, ...).
type Store[P any] interface {
	// Put stores data as the whole object in one request (objects up to
	// the multipart threshold). data must not be kept after it returns.
	Put(ctx context.Context, data []byte) (backends.ObjectInfo, error)
	// Initiate starts a multipart upload and returns its ID.
	Initiate(ctx context.Context) (uploadID string, err error)
	// UploadPart uploads part num (from 1) of n bytes read from body.
	// It is called from several goroutines at once.
	UploadPart(ctx context.Context, uploadID string, num int, body io.ReadSeeker, n int64) (P, error)
	// Complete publishes the upload from parts, in part-number order.
	Complete(ctx context.Context, uploadID string, parts []P, c Completion) (backends.ObjectInfo, error)
	// Abort discards the upload, retries included; an upload already gone
	// is not an error. The Writer calls it once, after a failure or on
	// Writer.Abort, once no part is in flight.
	Abort(ctx context.Context, uploadID string) error
}

// Observer is implemented by Stores that want to see every byte written
// through Write and ReadFrom, in order (the oss store hashes them into the
// object's CRC64 to check against the store's). Optional, discovered by
// type assertion.
type Observer interface {
	Observe(p []byte)
}

// Completion is what Complete is told besides the parts.
type Completion struct {
	// Size is the object's size.
	Size int64
	// Observed: every byte of the object went through Observer.Observe.
	// False when WriteReaderAt (or a server-side copy) made the parts
	// without our reading them.
	Observed bool
	// Retry: this is not the first try, and an earlier one may have
	// completed the upload and lost its response; the store then says
	// "no such upload", and Complete may check whether the object is ours.
	Retry bool
}

// Options shape one write.
type Options struct {
	// Key is the object's key, for errors.
	Key string
	// PartSize is the size of the first parts.
	PartSize int64
	// MaxPartSize and MaxParts are the store's limits: with no size hint,
	// the part size doubles every 1000 parts (up to MaxPartSize) to stay
	// within MaxParts.
	MaxPartSize int64
	MaxParts    int
	// Threshold: writes larger than this use a multipart upload.
	Threshold int64
	// Concurrency is the number of parts uploaded in parallel; the Writer
	// holds at most Concurrency+1 parts in memory.
	Concurrency int
	// ReaderAtConcurrency is the number of parts of a WriteReaderAt in
	// flight. Each reads its bytes from the source itself, so they cost no
	// memory of ours and may be many more than Concurrency: a store takes
	// parts faster side by side than one connection carries them. 0 (or
	// less than Concurrency) means Concurrency.
	ReaderAtConcurrency int
	// OnUpload, if set, is told the upload ID once a multipart upload
	// starts (backends.WriteOptions.OnUpload).
	OnUpload func(uploadID string)
	// Retry runs one try until it succeeds or the store's retry policy
	// gives up, returning the last error.
	Retry func(ctx context.Context, try func() error) error
	// Wrap maps a store error to a backends error for op ("write") on Key:
	// each store has its own.
	Wrap func(op string, err error) error
}

// PartSizeFor returns the part size for an object of sizeHint bytes (or
// unknown, <= 0): partSize, raised so that the object fits in 90% of
// maxParts parts (slack for a hint that is low), and capped at maxPartSize.
func PartSizeFor(partSize, sizeHint, maxPartSize int64, maxParts int) int64 {
	if sizeHint > 0 {
		room := int64(maxParts) * 9 / 10
		partSize = max(partSize, (sizeHint+room-1)/room)
		partSize = min(partSize, maxPartSize)
	}
	return partSize
}

// Writer is a write in progress; it implements backends.Writer,
// backends.ReaderAtWriter and io.ReaderFrom. Its methods are called by
// one goroutine; part uploads run in background goroutines that only
// touch the fields under mu.
type Writer[P any] struct {
	st       Store[P]
	obs      Observer // st's, or nil
	opt      Options
	ctx      context.Context // lives until Commit or Abort; cancels part uploads
	cancel   context.CancelFunc
	partSize int64

	buf  []byte
	size int64

	uploadID string // the multipart upload, once started
	nextPart int
	sem      chan struct{}
	wg       sync.WaitGroup

	// whole: WriteReaderAt gave the whole content; nothing more is written.
	whole bool
	// unobserved: some bytes did not go through obs (WriteReaderAt).
	unobserved bool

	mu      sync.Mutex
	parts   []numbered[P] // GUARDED_BY(mu)
	partErr error         // GUARDED_BY(mu): the first part failure

	done      bool
	committed *backends.ObjectInfo
}

type numbered[P any] struct {
	num  int
	part P
}

// New starts a write of opt.Key to st. ctx bounds the part uploads until
// Commit or Abort.
func New[P any](ctx context.Context, st Store[P], opt Options) *Writer[P] {
	wctx, cancel := context.WithCancel(ctx)
	obs, _ := st.(Observer)
	return &Writer[P]{st: st, obs: obs, opt: opt, ctx: wctx, cancel: cancel, partSize: opt.PartSize,
		sem: make(chan struct{}, opt.Concurrency)}
}

func (w *Writer[P]) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.partErr
}

func (w *Writer[P]) invalid(op, why string) error {
	return backends.Wrap(op, w.opt.Key, backends.ErrInvalid, errors.New(why))
}

// usable says whether more data may be written.
func (w *Writer[P]) usable() error {
	if w.done {
		return w.invalid("write", "write after commit or abort")
	}
	if w.whole {
		return w.invalid("write", "write after WriteReaderAt")
	}
	return w.failed()
}

func (w *Writer[P]) observe(p []byte) {
	if w.obs != nil {
		w.obs.Observe(p)
	}
}

// Write implements io.Writer.
func (w *Writer[P]) Write(p []byte) (int, error) {
	if err := w.usable(); err != nil {
		return 0, err
	}
	w.observe(p)
	w.size += int64(len(p))
	if w.buf == nil {
		w.buf = w.newPart()
	}
	w.buf = append(w.buf, p...)
	if err := w.sendParts(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ReadFrom implements io.ReaderFrom: it reads straight into part buffers,
// sparing a copy of every byte through the caller's buffer.
func (w *Writer[P]) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		if err := w.usable(); err != nil {
			return total, err
		}
		if w.buf == nil {
			w.buf = w.newPart()
		}
		if len(w.buf) == cap(w.buf) {
			// Only before a multipart upload starts, when the threshold
			// is above the part size.
			w.buf = slices.Grow(w.buf, int(w.partSize))
		}
		n, err := r.Read(w.buf[len(w.buf):cap(w.buf)])
		if n > 0 {
			w.observe(w.buf[len(w.buf) : len(w.buf)+n])
			w.size += int64(n)
			w.buf = w.buf[:len(w.buf)+n]
			total += int64(n)
			if serr := w.sendParts(); serr != nil {
				return total, serr
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// sendParts starts the multipart upload once the buffer passes the
// threshold, and then sends every whole part the buffer holds.
func (w *Writer[P]) sendParts() error {
	if w.uploadID == "" && int64(len(w.buf)) > w.opt.Threshold {
		if err := w.initiate(); err != nil {
			return err
		}
	}
	if w.uploadID == "" {
		return nil
	}
	for int64(len(w.buf)) >= w.partSize {
		part := w.buf[:w.partSize:w.partSize]
		w.buf = append(w.newPart(), w.buf[w.partSize:]...)
		if err := w.dispatch(part); err != nil {
			return err
		}
	}
	return nil
}

// newPart returns an empty buffer with room for a whole part, so that
// filling it never reallocates: growing it by append from empty copied
// each part about twice more (1.5 CPU-seconds per 2 GiB uploaded to oss).
// Part buffers are not reused: the HTTP transport may still hold a part's
// body after its request returns.
func (w *Writer[P]) newPart() []byte { return make([]byte, 0, w.partSize) }

func (w *Writer[P]) initiate() error {
	var id string
	err := w.opt.Retry(w.ctx, func() error {
		var err error
		id, err = w.st.Initiate(w.ctx)
		return err
	})
	if err != nil {
		return w.opt.Wrap("write", err)
	}
	w.uploadID = id
	if w.opt.OnUpload != nil {
		w.opt.OnUpload(id)
	}
	return nil
}

// dispatch uploads one part from memory in the background.
func (w *Writer[P]) dispatch(data []byte) error {
	return w.dispatchPart(int64(len(data)), func() io.ReadSeeker { return bytes.NewReader(data) })
}

// dispatchPart uploads the next part, n bytes that body returns (afresh
// for each try; seekable, as SDKs sign and checksum it), in the
// background, waiting for a free slot: the slots bound the parts in
// memory.
func (w *Writer[P]) dispatchPart(n int64, body func() io.ReadSeeker) error {
	select {
	case w.sem <- struct{}{}:
	case <-w.ctx.Done():
		return backends.Wrap("write", w.opt.Key, nil, w.ctx.Err())
	}
	w.nextPart++
	num := w.nextPart
	if num%1000 == 0 && w.partSize < w.opt.MaxPartSize {
		w.partSize = min(w.partSize*2, w.opt.MaxPartSize) // unknown size: grow to fit MaxParts
	}
	w.wg.Add(1)
	go func() {
		defer func() { <-w.sem; w.wg.Done() }()
		var part P
		err := w.opt.Retry(w.ctx, func() error {
			var err error
			part, err = w.st.UploadPart(w.ctx, w.uploadID, num, body(), n)
			return err
		})
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			if w.partErr == nil {
				w.partErr = w.opt.Wrap("write", fmt.Errorf("part %d: %w", num, err))
				w.cancel() // stop the other parts early
			}
			return
		}
		w.parts = append(w.parts, numbered[P]{num, part})
	}()
	return nil
}

// WriteReaderAt implements backends.ReaderAtWriter. Up to the multipart
// threshold it reads r like ReadFrom; past it every part is read from r by
// its own upload, ReaderAtConcurrency at a time, with no copy through our
// memory.
func (w *Writer[P]) WriteReaderAt(r io.ReaderAt, size int64) error {
	if err := w.usable(); err != nil {
		return err
	}
	if w.size != 0 || w.buf != nil {
		return w.invalid("write", "WriteReaderAt after Write")
	}
	if size <= w.opt.Threshold {
		n, err := w.ReadFrom(io.NewSectionReader(r, 0, size))
		if err == nil && n != size {
			err = backends.Wrap("write", w.opt.Key, backends.ErrInvalid, fmt.Errorf("source gave %d of %d bytes", n, size))
		}
		w.whole = true
		return err
	}
	if c := w.opt.ReaderAtConcurrency; c > cap(w.sem) {
		w.sem = make(chan struct{}, c) // no part is in flight yet
	}
	if err := w.initiate(); err != nil {
		return err
	}
	w.whole, w.unobserved = true, true
	w.size = size
	for off := int64(0); off < size; {
		n, at := min(w.partSize, size-off), off
		if err := w.dispatchPart(n, func() io.ReadSeeker { return io.NewSectionReader(r, at, n) }); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// Start starts the multipart upload now, for parts the store makes itself
// (a server-side copy), and returns its ID and the part size to use.
// CommitParts then completes it; Abort discards it.
func (w *Writer[P]) Start() (uploadID string, partSize int64, err error) {
	if err := w.usable(); err != nil {
		return "", 0, err
	}
	if err := w.initiate(); err != nil {
		return "", 0, err
	}
	w.whole, w.unobserved = true, true
	return w.uploadID, w.partSize, nil
}

// CommitParts completes the upload begun by Start from parts (numbered
// from 1, in order) that make size bytes, as Commit does.
func (w *Writer[P]) CommitParts(ctx context.Context, parts []P, size int64) (backends.ObjectInfo, error) {
	w.mu.Lock()
	w.parts = w.parts[:0]
	for i, p := range parts {
		w.parts = append(w.parts, numbered[P]{i + 1, p})
	}
	w.mu.Unlock()
	w.nextPart = len(parts)
	w.size = size
	return w.Commit(ctx)
}

// Commit implements backends.Writer. On failure the upload is aborted.
func (w *Writer[P]) Commit(ctx context.Context) (backends.ObjectInfo, error) {
	if w.committed != nil {
		return *w.committed, nil
	}
	if w.done {
		return backends.ObjectInfo{}, w.invalid("commit", "write was aborted")
	}
	var info backends.ObjectInfo
	var err error
	if w.uploadID == "" {
		info, err = w.put(ctx)
	} else {
		info, err = w.complete(ctx)
	}
	if err != nil {
		_ = w.Abort(context.WithoutCancel(ctx))
		return backends.ObjectInfo{}, err
	}
	w.done = true
	w.committed = &info
	w.cancel()
	w.buf = nil
	return info, nil
}

func (w *Writer[P]) put(ctx context.Context) (backends.ObjectInfo, error) {
	var info backends.ObjectInfo
	err := w.opt.Retry(ctx, func() error {
		var err error
		info, err = w.st.Put(ctx, w.buf)
		return err
	})
	if err != nil {
		return backends.ObjectInfo{}, w.opt.Wrap("write", err)
	}
	return info, nil
}

func (w *Writer[P]) complete(ctx context.Context) (backends.ObjectInfo, error) {
	if len(w.buf) > 0 || w.nextPart == 0 {
		last := w.buf
		w.buf = nil
		if err := w.dispatch(last); err != nil {
			return backends.ObjectInfo{}, err
		}
	}
	w.wg.Wait()
	if err := w.failed(); err != nil {
		return backends.ObjectInfo{}, err
	}
	w.mu.Lock()
	done := slices.Clone(w.parts)
	w.mu.Unlock()
	sort.Slice(done, func(i, j int) bool { return done[i].num < done[j].num })
	parts := make([]P, len(done))
	for i, d := range done {
		parts[i] = d.part
	}
	c := Completion{Size: w.size, Observed: !w.unobserved}
	var info backends.ObjectInfo
	err := w.opt.Retry(ctx, func() error {
		var err error
		info, err = w.st.Complete(ctx, w.uploadID, parts, c)
		c.Retry = true
		return err
	})
	if err != nil {
		return backends.ObjectInfo{}, w.opt.Wrap("write", err)
	}
	w.uploadID = "" // completed: nothing to abort
	return info, nil
}

// Abort implements backends.Writer: it stops the part uploads and
// discards the multipart upload, if one was started.
func (w *Writer[P]) Abort(ctx context.Context) error {
	if w.done {
		return nil
	}
	w.done = true
	w.cancel()
	w.wg.Wait()
	w.buf = nil
	if w.uploadID == "" {
		return nil
	}
	id := w.uploadID
	w.uploadID = ""
	return w.st.Abort(ctx, id)
}
