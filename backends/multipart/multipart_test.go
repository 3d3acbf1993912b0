package multipart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// fakePart names an uploaded part, as an ETag would.
type fakePart struct {
	num  int
	size int64
}

// fakeStore is an in-memory store of one object, with hooks to fail,
// delay and observe its requests. It checks what the Writer promises its
// Store: parts numbered from 1, read afresh on each try, completed in
// order, the upload aborted once and never used after.
type fakeStore struct {
	t *testing.T

	// Hooks, set before the write starts. try counts from 1.
	failPut      func(try int) error
	failInitiate func(try int) error
	// beforePart runs before a part's body is read; partial: read only
	// part of the body, then fail with the hook's error.
	beforePart func(num, try int) (err error, partial bool)
	// complete may fail a try of Complete after (lost) or before its
	// effect.
	complete func(try int, c Completion) (lost bool, err error)
	// afterPart runs once a part is stored.
	afterPart func(num int)

	observed bytes.Buffer // Observe, when observing

	mu          sync.Mutex
	uploads     map[string]map[int][]byte // GUARDED_BY(mu)
	partTries   map[int]int               // GUARDED_BY(mu)
	completions []Completion              // GUARDED_BY(mu)
	aborted     []string                  // GUARDED_BY(mu)
	object      []byte                    // GUARDED_BY(mu): nil until stored
	puts        int                       // GUARDED_BY(mu)
	initiates   int                       // GUARDED_BY(mu)
	inFlight    int                       // GUARDED_BY(mu)
	maxInFlight int                       // GUARDED_BY(mu)
	doneBytes   int64                     // GUARDED_BY(mu): bytes of parts whose UploadPart returned
}

func newFake(t *testing.T) *fakeStore {
	return &fakeStore{t: t, uploads: map[string]map[int][]byte{}, partTries: map[int]int{}}
}

func (f *fakeStore) Put(ctx context.Context, data []byte) (backends.ObjectInfo, error) {
	f.mu.Lock()
	f.puts++
	try := f.puts
	f.mu.Unlock()
	if f.failPut != nil {
		if err := f.failPut(try); err != nil {
			return backends.ObjectInfo{}, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.object = bytes.Clone(data)
	if f.object == nil {
		f.object = []byte{}
	}
	return backends.ObjectInfo{Key: "k", Size: int64(len(data)), Version: "put"}, nil
}

func (f *fakeStore) Initiate(ctx context.Context) (string, error) {
	f.mu.Lock()
	f.initiates++
	try := f.initiates
	f.mu.Unlock()
	if f.failInitiate != nil {
		if err := f.failInitiate(try); err != nil {
			return "", err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	id := "up" + strconv.Itoa(try)
	f.uploads[id] = map[int][]byte{}
	return id, nil
}

func (f *fakeStore) UploadPart(ctx context.Context, uploadID string, num int, body io.ReadSeeker, n int64) (fakePart, error) {
	f.mu.Lock()
	f.partTries[num]++
	try := f.partTries[num]
	_, ok := f.uploads[uploadID]
	f.inFlight++
	f.maxInFlight = max(f.maxInFlight, f.inFlight)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()
	if !ok {
		f.t.Errorf("part %d uploaded to %q, which is not open", num, uploadID)
		return fakePart{}, errors.New("no such upload")
	}
	if num < 1 {
		f.t.Errorf("part number %d", num)
	}
	if f.beforePart != nil {
		if err, partial := f.beforePart(num, try); err != nil {
			if partial {
				// Consume some of the body: the next try must get it
				// afresh, from its start.
				io.CopyN(io.Discard, body, n/2)
			}
			return fakePart{}, err
		}
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return fakePart{}, err
	}
	if int64(len(data)) != n {
		f.t.Errorf("part %d: body of %d bytes, announced %d", num, len(data), n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.uploads[uploadID][num] = data
	f.doneBytes += n
	if f.afterPart != nil {
		f.afterPart(num)
	}
	return fakePart{num: num, size: n}, nil
}

func (f *fakeStore) Complete(ctx context.Context, uploadID string, parts []fakePart, c Completion) (backends.ObjectInfo, error) {
	f.mu.Lock()
	f.completions = append(f.completions, c)
	try := len(f.completions)
	f.mu.Unlock()
	var lost bool
	var hookErr error
	if f.complete != nil {
		if lost, hookErr = f.complete(try, c); hookErr != nil && !lost {
			return backends.ObjectInfo{}, hookErr
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	up, ok := f.uploads[uploadID]
	if !ok {
		if c.Retry && f.object != nil {
			// What a store does after a lost answer: it finds the
			// object is its own.
			return backends.ObjectInfo{Key: "k", Size: c.Size, Version: "checked"}, nil
		}
		return backends.ObjectInfo{}, errors.New("no such upload")
	}
	obj := []byte{}
	for i, p := range parts {
		if p.num != i+1 {
			f.t.Errorf("Complete: part %d at position %d", p.num, i)
		}
		obj = append(obj, up[p.num]...)
	}
	if len(parts) != len(up) {
		f.t.Errorf("Complete with %d parts, %d uploaded", len(parts), len(up))
	}
	if int64(len(obj)) != c.Size {
		f.t.Errorf("Complete: %d bytes, told %d", len(obj), c.Size)
	}
	delete(f.uploads, uploadID)
	f.object = obj
	if lost {
		return backends.ObjectInfo{}, hookErr
	}
	return backends.ObjectInfo{Key: "k", Size: c.Size, Version: "mp"}, nil
}

func (f *fakeStore) Abort(ctx context.Context, uploadID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.aborted = append(f.aborted, uploadID)
	delete(f.uploads, uploadID)
	return nil
}

// observingStore also implements Observer.
type observingStore struct{ *fakeStore }

func (o observingStore) Observe(p []byte) { o.observed.Write(p) }

// errFlaky is transient: the test's retry policy tries again.
var errFlaky = errors.New("flaky")

// retryFlaky retries errFlaky, quickly, up to 5 tries.
func retryFlaky(ctx context.Context, try func() error) error {
	o := backends.RetryOptions{MaxAttempts: 5, BaseDelay: time.Microsecond, MaxDelay: time.Microsecond}.WithDefaults()
	return backends.Retry(ctx, o, func(err error) bool { return errors.Is(err, errFlaky) }, nil, try)
}

func testOptions(part int64) Options {
	return Options{Key: "k", PartSize: part, MaxPartSize: 1 << 30, MaxParts: 10000, Threshold: part, Concurrency: 3,
		Retry: retryFlaky, Wrap: func(op string, err error) error { return backends.Wrap(op, "k", nil, err) }}
}

func patterned(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// how a test feeds the Writer.
var feeds = map[string]func(w *Writer[fakePart], data []byte) error{
	"Write": func(w *Writer[fakePart], data []byte) error {
		for i, off := 1, 0; off < len(data); i++ {
			n := min(len(data)-off, (i*7919)%5003+1)
			if k, err := w.Write(data[off : off+n]); err != nil || k != n {
				return fmt.Errorf("Write = %d: %w", k, err)
			}
			off += n
		}
		return nil
	},
	"ReadFrom": func(w *Writer[fakePart], data []byte) error {
		n, err := w.ReadFrom(io.MultiReader(bytes.NewReader(data[:len(data)/3]), bytes.NewReader(data[len(data)/3:])))
		if err == nil && n != int64(len(data)) {
			err = fmt.Errorf("ReadFrom took %d of %d bytes", n, len(data))
		}
		return err
	},
	"WriteReaderAt": func(w *Writer[fakePart], data []byte) error {
		return w.WriteReaderAt(bytes.NewReader(data), int64(len(data)))
	},
}

// TestRoundTrip: every size, through every way in, is stored byte for
// byte: up to the threshold with one Put, past it in parts of PartSize
// (the last shorter) completed in part-number order even when they finish
// out of order; every byte written through Write or ReadFrom is observed,
// and Complete is told whether it was.
func TestRoundTrip(t *testing.T) {
	const part = 1000
	for name, feed := range feeds {
		for _, size := range []int{0, 1, part - 1, part, part + 1, 3 * part, 10*part + 17} {
			t.Run(fmt.Sprintf("%s/%d", name, size), func(t *testing.T) {
				f := newFake(t)
				if size > 2*part {
					// Part 1 finishes after part 2: the order of
					// completion is not the order of the object.
					two := make(chan struct{})
					f.beforePart = func(num, try int) (error, bool) {
						if num == 1 {
							<-two
						}
						return nil, false
					}
					f.afterPart = func(num int) {
						if num == 2 {
							close(two)
						}
					}
				}
				data := patterned(size, uint64(size))
				w := New(t.Context(), Store[fakePart](observingStore{f}), testOptions(part))
				if err := feed(w, data); err != nil {
					t.Fatal(err)
				}
				info, err := w.Commit(t.Context())
				if err != nil || info.Size != int64(size) {
					t.Fatalf("Commit = %+v, %v", info, err)
				}
				if !bytes.Equal(f.object, data) {
					t.Fatalf("stored %d bytes that differ from the %d written", len(f.object), size)
				}
				multi := size > part
				if got := f.initiates > 0; got != multi {
					t.Fatalf("multipart upload started: %v, want %v", got, multi)
				}
				if multi {
					if len(f.completions) != 1 || f.completions[0].Observed != (name != "WriteReaderAt") || f.completions[0].Retry {
						t.Fatalf("Complete told %+v", f.completions)
					}
				}
				if name != "WriteReaderAt" || !multi {
					if !bytes.Equal(f.observed.Bytes(), data) {
						t.Fatalf("observed %d bytes that differ from the %d written", f.observed.Len(), size)
					}
				}
				if len(f.aborted) != 0 {
					t.Fatalf("a committed write aborted %v", f.aborted)
				}
				if again, err := w.Commit(t.Context()); err != nil || again != info {
					t.Fatalf("second Commit = %+v, %v", again, err)
				}
				if _, err := w.Write([]byte("x")); !errors.Is(err, backends.ErrInvalid) {
					t.Fatalf("Write after Commit = %v, want ErrInvalid", err)
				}
			})
		}
	}
}

// TestRetry: a transient failure of any request is retried; a part is
// read again from its start on each try (here after a try that read half
// of it); a Complete whose answer was lost is retried and told so.
func TestRetry(t *testing.T) {
	const part = 1000
	for name, feed := range feeds {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.failInitiate = func(try int) error {
				if try == 1 {
					return errFlaky
				}
				return nil
			}
			f.beforePart = func(num, try int) (error, bool) {
				if try < 3 {
					return errFlaky, try == 1
				}
				return nil, false
			}
			f.complete = func(try int, c Completion) (bool, error) {
				if try == 1 {
					return true, errFlaky // completed, answer lost
				}
				return false, nil
			}
			data := patterned(7*part+3, 7)
			w := New(t.Context(), Store[fakePart](f), testOptions(part))
			if err := feed(w, data); err != nil {
				t.Fatal(err)
			}
			info, err := w.Commit(t.Context())
			if err != nil || info.Size != int64(len(data)) {
				t.Fatalf("Commit = %+v, %v", info, err)
			}
			if !bytes.Equal(f.object, data) {
				t.Fatal("stored object differs")
			}
			if len(f.completions) != 2 || f.completions[0].Retry || !f.completions[1].Retry {
				t.Fatalf("Complete told %+v, want a first try and a retry", f.completions)
			}
			for num, tries := range f.partTries {
				if tries != 3 {
					t.Fatalf("part %d tried %d times, want 3", num, tries)
				}
			}
		})
	}
	t.Run("Put", func(t *testing.T) {
		f := newFake(t)
		f.failPut = func(try int) error {
			if try == 1 {
				return errFlaky
			}
			return nil
		}
		w := New(t.Context(), Store[fakePart](f), testOptions(part))
		if _, err := w.Write([]byte("small")); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Commit(t.Context()); err != nil || string(f.object) != "small" || f.puts != 2 {
			t.Fatalf("Commit = %v; stored %q after %d PUTs", err, f.object, f.puts)
		}
	})
}

// TestAbortOnError: a part that fails for good fails the write with the
// store's error, mapped by Wrap; the upload is aborted once, after which
// the Writer refuses more. Abort of a started write aborts its upload;
// Abort of a small or a committed one touches nothing.
func TestAbortOnError(t *testing.T) {
	const part = 1000
	boom := errors.New("boom")
	// Part 3 fails while data is still coming; part 21, the last, is
	// sent by Commit.
	for _, bad := range []int{3, 21} {
		for name, feed := range feeds {
			t.Run(fmt.Sprintf("%s/part%d", name, bad), func(t *testing.T) {
				f := newFake(t)
				f.beforePart = func(num, try int) (error, bool) {
					if num == bad {
						return boom, false
					}
					return nil, false
				}
				var onUpload []string
				opt := testOptions(part)
				opt.OnUpload = func(id string) { onUpload = append(onUpload, id) }
				w := New(t.Context(), Store[fakePart](f), opt)
				var oe *backends.OpError
				if err := feed(w, patterned(20*part+1, 3)); err != nil {
					// The failure reached the writer while it was taking
					// data: as boom, or as the cancellation boom caused
					// (it stops the other parts early).
					if !errors.As(err, &oe) || !errors.Is(err, boom) && !errors.Is(err, context.Canceled) {
						t.Fatalf("write with a failing part = %v, want boom, wrapped", err)
					}
					w.Abort(t.Context())
				} else if _, err := w.Commit(t.Context()); !errors.Is(err, boom) || !errors.As(err, &oe) {
					t.Fatalf("Commit with a failing part = %v, want boom, wrapped", err)
				}
				if f.object != nil {
					t.Fatal("a failed write stored an object")
				}
				if len(onUpload) != 1 || len(f.aborted) != 1 || f.aborted[0] != onUpload[0] {
					t.Fatalf("upload %v aborted %v, want once", onUpload, f.aborted)
				}
				if f.partTries[bad] != 1 {
					t.Fatalf("a permanent failure was tried %d times", f.partTries[bad])
				}
				if _, err := w.Commit(t.Context()); !errors.Is(err, backends.ErrInvalid) {
					t.Fatalf("Commit after a failure = %v, want ErrInvalid", err)
				}
				if err := w.Abort(t.Context()); err != nil || len(f.aborted) != 1 {
					t.Fatalf("second Abort = %v; aborted %v", err, f.aborted)
				}
			})
		}
	}
	t.Run("Abort", func(t *testing.T) {
		f := newFake(t)
		w := New(t.Context(), Store[fakePart](f), testOptions(part))
		if _, err := w.Write(patterned(5*part, 1)); err != nil {
			t.Fatal(err)
		}
		if err := w.Abort(t.Context()); err != nil || len(f.aborted) != 1 || len(f.uploads) != 0 {
			t.Fatalf("Abort = %v; aborted %v, open %v", err, f.aborted, f.uploads)
		}
		if _, err := w.Write([]byte("x")); !errors.Is(err, backends.ErrInvalid) {
			t.Fatalf("Write after Abort = %v, want ErrInvalid", err)
		}
		small := New(t.Context(), Store[fakePart](f), testOptions(part))
		small.Write([]byte("x"))
		if err := small.Abort(t.Context()); err != nil || len(f.aborted) != 1 || f.puts != 0 {
			t.Fatalf("Abort of a small write = %v; aborted %v, %d PUTs", err, f.aborted, f.puts)
		}
		done := New(t.Context(), Store[fakePart](f), testOptions(part))
		done.Write(patterned(3*part, 2))
		if _, err := done.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := done.Abort(t.Context()); err != nil || len(f.aborted) != 1 {
			t.Fatalf("Abort after Commit = %v; aborted %v", err, f.aborted)
		}
	})
}

// boundedReader checks, at every read, that the bytes the Writer took but
// the store has not yet acknowledged fit in Concurrency+1 parts.
type boundedReader struct {
	t     *testing.T
	f     *fakeStore
	data  []byte
	read  int64
	limit int64
}

func (r *boundedReader) Read(p []byte) (int, error) {
	r.f.mu.Lock()
	held := r.read - r.f.doneBytes
	r.f.mu.Unlock()
	if held > r.limit {
		r.t.Errorf("the writer holds %d bytes not yet uploaded, more than %d", held, r.limit)
	}
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.data[:min(len(p), 333)])
	r.data = r.data[n:]
	r.read += int64(n)
	return n, nil
}

// TestBoundedMemory: parts go up Concurrency at a time (the first
// Concurrency wait for each other, so the parallelism is reached), never
// more, and the Writer reads no further ahead than Concurrency+1 parts
// while they are in flight.
func TestBoundedMemory(t *testing.T) {
	const part = 1000
	opt := testOptions(part)
	f := newFake(t)
	var started atomic.Int32
	all := make(chan struct{})
	f.beforePart = func(num, try int) (error, bool) {
		if num <= opt.Concurrency {
			if started.Add(1) == int32(opt.Concurrency) {
				close(all)
			}
			<-all
		}
		return nil, false
	}
	data := patterned(15*part, 9)
	w := New(t.Context(), Store[fakePart](f), opt)
	r := &boundedReader{t: t, f: f, data: data, limit: int64(opt.Concurrency+1) * part}
	if n, err := w.ReadFrom(r); err != nil || n != int64(len(data)) {
		t.Fatalf("ReadFrom = %d, %v", n, err)
	}
	if _, err := w.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.object, data) {
		t.Fatal("stored object differs")
	}
	if f.maxInFlight != opt.Concurrency {
		t.Fatalf("at most %d parts in flight, want %d", f.maxInFlight, opt.Concurrency)
	}
}

// TestReaderAtConcurrency: the parts of a WriteReaderAt go up
// ReaderAtConcurrency at a time (the first ones wait for each other, so
// that parallelism is reached), never more, while a streaming write of the
// same Options keeps to Concurrency.
func TestReaderAtConcurrency(t *testing.T) {
	const part = 1000
	opt := testOptions(part)
	opt.ReaderAtConcurrency = 8
	f := newFake(t)
	var started atomic.Int32
	all := make(chan struct{})
	f.beforePart = func(num, try int) (error, bool) {
		if num <= opt.ReaderAtConcurrency {
			if started.Add(1) == int32(opt.ReaderAtConcurrency) {
				close(all)
			}
			select { // bounded: with fewer in flight, fail below, not hang
			case <-all:
			case <-time.After(5 * time.Second):
			}
		}
		return nil, false
	}
	data := patterned(20*part, 10)
	w := New(t.Context(), Store[fakePart](f), opt)
	if err := w.WriteReaderAt(bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.object, data) {
		t.Fatal("stored object differs")
	}
	if f.maxInFlight != opt.ReaderAtConcurrency {
		t.Fatalf("at most %d parts in flight, want %d", f.maxInFlight, opt.ReaderAtConcurrency)
	}

	f2 := newFake(t)
	w2 := New(t.Context(), Store[fakePart](f2), opt)
	if n, err := w2.ReadFrom(bytes.NewReader(data)); err != nil || n != int64(len(data)) {
		t.Fatalf("ReadFrom = %d, %v", n, err)
	}
	if _, err := w2.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if f2.maxInFlight > opt.Concurrency {
		t.Fatalf("a streaming write had %d parts in flight, more than Concurrency %d", f2.maxInFlight, opt.Concurrency)
	}
}

// TestPartSize: a size hint raises the part size to fit the store's part
// limit; without one, the part size doubles every 1000 parts, up to
// MaxPartSize.
func TestPartSize(t *testing.T) {
	if got := PartSizeFor(8<<20, -1, 5<<30, 10000); got != 8<<20 {
		t.Fatalf("no hint: %d", got)
	}
	if got := PartSizeFor(8<<20, 1<<40, 5<<30, 10000); got*9000 < 1<<40 || got > 5<<30 {
		t.Fatalf("1 TiB hint: part size %d", got)
	}
	if got := PartSizeFor(8<<20, 1<<50, 5<<30, 10000); got != 5<<30 {
		t.Fatalf("huge hint: part size %d, want the cap", got)
	}
	f := newFake(t)
	opt := testOptions(1)
	opt.Threshold, opt.MaxPartSize = 0, 4
	data := patterned(5000, 4)
	w := New(t.Context(), Store[fakePart](f), opt)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.object, data) {
		t.Fatal("stored object differs")
	}
	// 1000 parts of 1, 1000 of 2, then parts of 4.
	if n := len(f.partTries); n != 2000+(5000-3000+3)/4 {
		t.Fatalf("%d parts", n)
	}
}
