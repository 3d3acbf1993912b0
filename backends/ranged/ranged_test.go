package ranged

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

var (
	errFlaky     = errors.New("flaky")
	errTruncated = errors.New("truncated")
	errPastEnd   = errors.New("416")
	errPermanent = errors.New("permanent")
)

// fakeSource serves one object from memory, as a store answers a GET:
// Content-Range on ranged requests, 416 past the end, If-Match checked
// first. Its hooks cut bodies short or fail them.
type fakeSource struct {
	data    []byte
	version string
	// ignoreRange: answer every GET with the whole object.
	ignoreRange bool
	// cut, if set, gives for GET number n the number of bytes its body
	// delivers before failing with the returned error (nil: no failure).
	cut func(n int) (int, error)
	// changeAfter: after this many GETs the object has a new version.
	changeAfter int

	gets      []string // "pos-end@version" of each GET
	delivered bytes.Buffer
	finished  int
	finishErr error
}

func (f *fakeSource) Stat(ctx context.Context) (backends.ObjectInfo, error) {
	return backends.ObjectInfo{Size: int64(len(f.data)), Version: f.version}, nil
}

func (f *fakeSource) PastEnd(err error) bool { return errors.Is(err, errPastEnd) }

func (f *fakeSource) Open(ctx context.Context, pos, end int64, version string) (Response, error) {
	f.gets = append(f.gets, fmt.Sprintf("%d-%d@%s", pos, end, version))
	if f.changeAfter > 0 && len(f.gets) > f.changeAfter {
		f.version = "v2"
	}
	if version != "" && version != f.version {
		return Response{}, backends.ErrVersionMismatch // 412, as the backend maps it
	}
	size := int64(len(f.data))
	if f.ignoreRange {
		pos, end = 0, size
	}
	if end < 0 || end > size {
		end = size
	}
	if pos >= size && size > 0 {
		return Response{}, errPastEnd
	}
	var body io.Reader = bytes.NewReader(f.data[pos:end])
	if f.cut != nil {
		if k, err := f.cut(len(f.gets)); err != nil {
			body = &cutBody{data: f.data[pos:min(end, pos+int64(k))], err: err}
		}
	}
	cr := ""
	if !f.ignoreRange {
		cr = fmt.Sprintf("bytes %d-%d/%d", pos, end-1, size)
	}
	return Response{Body: io.NopCloser(body), Length: end - pos, ContentRange: cr, Version: f.version}, nil
}

func (f *fakeSource) Delivered(p []byte) { f.delivered.Write(p) }

func (f *fakeSource) Finish() error { f.finished++; return f.finishErr }

// cutBody delivers data, then fails with err, in the same Read as the
// last bytes, as a connection that breaks does.
type cutBody struct {
	data []byte
	err  error
}

func (c *cutBody) Read(p []byte) (int, error) {
	n := copy(p, c.data)
	c.data = c.data[n:]
	if len(c.data) == 0 {
		return n, c.err
	}
	return n, nil
}

func options() Options {
	return Options{Key: "k",
		Retry:     backends.RetryOptions{MaxAttempts: 5, BaseDelay: time.Microsecond, MaxDelay: time.Microsecond}.WithDefaults(),
		Transient: func(err error) bool { return errors.Is(err, errFlaky) || errors.Is(err, errTruncated) },
		Wrap:      func(op string, err error) error { return backends.Wrap(op, "k", nil, err) },
		Truncated: errTruncated}
}

func data(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// TestResume: bodies cut short or failed mid-way are resumed from the
// offset reached, pinned to the first response's version, and the bytes
// delivered are exactly the range asked for, seen by the Checker, which
// ends the read.
func TestResume(t *testing.T) {
	obj := data(100_000)
	for _, ro := range []backends.ReadOptions{{Offset: 0, Length: -1}, {Offset: 777, Length: 50_000}, {Offset: 99_000, Length: 5000}} {
		f := &fakeSource{data: obj, version: "v1", cut: func(n int) (int, error) {
			if n <= 3 {
				return 100 * n, errFlaky // the first bodies fail mid-way
			}
			if n == 4 {
				return 10, io.EOF // and one ends early
			}
			return 0, nil
		}}
		r, err := Read(t.Context(), f, options(), ro)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		end := int64(len(obj))
		if ro.Length > 0 {
			end = min(end, ro.Offset+ro.Length)
		}
		if err != nil || !bytes.Equal(got, obj[ro.Offset:end]) {
			t.Fatalf("%+v: read %d bytes, %v; want %d bytes", ro, len(got), err, end-ro.Offset)
		}
		if !bytes.Equal(f.delivered.Bytes(), got) || f.finished == 0 {
			t.Fatalf("%+v: Checker saw %d bytes, finished %d times", ro, f.delivered.Len(), f.finished)
		}
		for i, g := range f.gets[1:] {
			if !bytes.HasSuffix([]byte(g), []byte("@v1")) {
				t.Fatalf("%+v: GET %d is not pinned to the first version: %v", ro, i+2, f.gets)
			}
		}
		if len(f.gets) < 4 {
			t.Fatalf("%+v: %d GETs, want resumes: %v", ro, len(f.gets), f.gets)
		}
	}
}

// TestReadErrors: what must fail fails, as the error it is.
func TestReadErrors(t *testing.T) {
	obj := data(10_000)
	read := func(f *fakeSource, ro backends.ReadOptions) ([]byte, error) {
		r, err := Read(t.Context(), f, options(), ro)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		return io.ReadAll(r)
	}
	whole := backends.ReadOptions{Length: -1}

	// A new version appears while resuming: never mix versions.
	f := &fakeSource{data: obj, version: "v1", changeAfter: 1, cut: func(n int) (int, error) { return 100, errFlaky }}
	if got, err := read(f, whole); !errors.Is(err, backends.ErrVersionMismatch) {
		t.Fatalf("a changed object read as %d bytes, %v", len(got), err)
	}
	// The store ignores the range: its bytes are not ours.
	f = &fakeSource{data: obj, version: "v1", ignoreRange: true}
	if _, err := read(f, backends.ReadOptions{Offset: 10, Length: 10}); !errors.Is(err, backends.ErrInvalid) {
		t.Fatalf("a range answered from 0 = %v, want ErrInvalid", err)
	}
	// A permanent failure mid-body is not resumed past.
	f = &fakeSource{data: obj, version: "v1", cut: func(n int) (int, error) { return 100, errPermanent }}
	r, err := Read(t.Context(), f, options(), whole)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1000)
	if n, err := r.Read(buf); n != 100 || !errors.Is(err, errPermanent) || len(f.gets) != 1 {
		t.Fatalf("Read = %d, %v after %d GETs; want 100 bytes and the permanent error, once", n, err, len(f.gets))
	}
	// Transient failures that outlast the retries reach the caller.
	f = &fakeSource{data: obj, version: "v1", cut: func(n int) (int, error) { return 0, errFlaky }}
	if _, err := read(f, whole); !errors.Is(err, errFlaky) {
		t.Fatalf("endless flaky bodies = %v, want the error", err)
	}
	// A range at or past the end is empty; so is a zero-length read,
	// which asks Stat and checks the version.
	f = &fakeSource{data: obj, version: "v1"}
	if got, err := read(f, backends.ReadOptions{Offset: 10_000, Length: -1}); err != nil || len(got) != 0 {
		t.Fatalf("read past the end = %d bytes, %v", len(got), err)
	}
	if got, err := read(f, backends.ReadOptions{Offset: 5, Length: 0}); err != nil || len(got) != 0 {
		t.Fatalf("zero-length read = %d bytes, %v", len(got), err)
	}
	if _, err := read(f, backends.ReadOptions{Length: 0, IfVersion: "v0"}); !errors.Is(err, backends.ErrVersionMismatch) {
		t.Fatalf("zero-length read of another version = %v", err)
	}
	if _, err := read(f, backends.ReadOptions{Offset: -1, Length: 1}); !errors.Is(err, backends.ErrInvalid) {
		t.Fatalf("negative offset = %v", err)
	}
	// The Checker's verdict replaces EOF.
	bad := errors.New("crc")
	f = &fakeSource{data: obj, version: "v1", finishErr: bad}
	if _, err := read(f, whole); !errors.Is(err, bad) {
		t.Fatalf("a read the Checker refuses = %v", err)
	}
}
