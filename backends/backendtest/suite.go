// Package backendtest is the conformance suite every backends.Backend runs
// with a one-line test:
//
//	func TestConformance(t *testing.T) { backendtest.Run(t, newTestBackend) }
//
// It checks the semantics written in backends/backend.go, not just the
// absence of errors: ranged reads at the edges, empty objects, directory
// markers, listings with and without a delimiter paged over 10,000 keys, one
// name described without a listing (backends.LookupEntry),
// awkward key names, version tokens, atomic commit and abort, error
// sentinels, a streaming write of more than 64 MiB verified by checksum, and
// concurrent readers and writers. Optional interfaces (Renamer, Appender,
// DirMaker, Copier, Linker) are tested when the backend implements them;
// ExclusiveWriter's race test runs when Options.ExclusiveWriter asks for it.
//
// Every sub-test opens its own backend through newBackend, so each starts
// from an empty root and failures name the property that broke.
package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// Options tunes the suite for one backend. The zero value runs the full
// suite and tests whichever optional interfaces the backend implements.
type Options struct {
	// RequireRenamer, RequireAppender, RequireDirMaker, RequireCopier and
	// RequireLinker make the suite fail when the backend lacks that optional interface
	// (instead of skipping its sub-test), so a backend that promises one
	// cannot lose it silently.
	RequireRenamer  bool
	RequireAppender bool
	RequireDirMaker bool
	RequireCopier   bool
	RequireLinker   bool
	// ExclusiveWriter runs the race test of backends.ExclusiveWriter (8
	// callers on one key: exactly one wins) and fails if the backend does
	// not implement it. Off, that sub-test is skipped.
	ExclusiveWriter bool

	// ManyKeys is the number of keys the paging test creates (default 10,000).
	ManyKeys int
	// LargeSize is the size of the big streaming write (default 64 MiB plus
	// an odd tail, so no part or buffer boundary lines up with the end).
	LargeSize int64
	// Parallelism bounds concurrent calls while the suite creates many
	// objects (default 32).
	Parallelism int
}

const (
	defaultManyKeys    = 10_000
	defaultLargeSize   = 64<<20 + 12_345
	defaultParallelism = 32
)

// Run runs the conformance suite with default options. newBackend must
// return a fresh backend over an empty root that no other call shares; it
// may register its own clean-up (stopping an emulator, say) with t.Cleanup.
// The suite closes the backend at the end of each sub-test and checks that
// Close succeeds.
func Run(t *testing.T, newBackend func(t *testing.T) backends.Backend) {
	RunOptions(t, newBackend, Options{})
}

// RunOptions runs the conformance suite with opt.
func RunOptions(t *testing.T, newBackend func(t *testing.T) backends.Backend, opt Options) {
	if opt.ManyKeys <= 0 {
		opt.ManyKeys = defaultManyKeys
	}
	if opt.LargeSize <= 0 {
		opt.LargeSize = defaultLargeSize
	}
	if opt.Parallelism <= 0 {
		opt.Parallelism = defaultParallelism
	}
	s := &suite{opt: opt, newBackend: newBackend}
	tests := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		{"EmptyRoot", testEmptyRoot},
		{"WriteStatRead", testWriteStatRead},
		{"EmptyObject", testEmptyObject},
		{"RangedRead", testRangedRead},
		{"ReadIfVersion", testReadIfVersion},
		{"OverwriteChangesVersion", testOverwriteChangesVersion},
		{"WriteInvisibleUntilCommit", testWriteInvisibleUntilCommit},
		{"Abort", testAbort},
		{"Delete", testDelete},
		{"KeyNames", testKeyNames},
		{"Directories", testDirectories},
		{"ListDelimiter", testListDelimiter},
		{"ListPrefixPartial", testListPrefixPartial},
		{"ListSmallPages", testListSmallPages},
		{"ListManyKeys", testListManyKeys},
		{"ListStartAfter", testListStartAfter},
		{"LookupEntry", testLookupEntry},
		{"LargeStreamingWrite", testLargeStreamingWrite},
		{"ConcurrentReaders", testConcurrentReaders},
		{"ConcurrentWritersSameKey", testConcurrentWritersSameKey},
		{"ContextCanceled", testContextCanceled},
		{"DirMaker", testDirMaker},
		{"Renamer", testRenamer},
		{"Appender", testAppender},
		{"Copier", testCopier},
		{"Linker", testLinker},
		{"ExclusiveWriter", testExclusiveWriter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, s) })
	}
}

type suite struct {
	opt        Options
	newBackend func(t *testing.T) backends.Backend
}

// open returns a fresh backend for one sub-test and closes it at its end.
func (s *suite) open(t *testing.T) backends.Backend {
	t.Helper()
	b := s.newBackend(t)
	if b == nil {
		t.Fatal("newBackend returned a nil backend")
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// put writes data under key in one streaming write and checks what Commit
// reports.
func put(t *testing.T, b backends.Backend, key string, data []byte) backends.ObjectInfo {
	t.Helper()
	return putHint(t, b, key, data, int64(len(data)))
}

func putHint(t *testing.T, b backends.Backend, key string, data []byte, hint int64) backends.ObjectInfo {
	t.Helper()
	info, err := tryPut(t.Context(), b, key, data, hint)
	if err != nil {
		t.Fatalf("write %q: %v", key, err)
	}
	checkCommitInfo(t, key, info, int64(len(data)))
	return info
}

// tryPut is put without testing.T, for use from worker goroutines.
func tryPut(ctx context.Context, b backends.Backend, key string, data []byte, hint int64) (backends.ObjectInfo, error) {
	w, err := b.Write(ctx, key, backends.WriteOptions{SizeHint: hint})
	if err != nil {
		return backends.ObjectInfo{}, fmt.Errorf("Write: %w", err)
	}
	if n, err := w.Write(data); err != nil || n != len(data) {
		_ = w.Abort(ctx)
		return backends.ObjectInfo{}, fmt.Errorf("Writer.Write = %d, %v; want %d, nil", n, err, len(data))
	}
	info, err := w.Commit(ctx)
	if err != nil {
		return info, fmt.Errorf("Commit: %w", err)
	}
	return info, nil
}

func checkCommitInfo(t *testing.T, key string, info backends.ObjectInfo, size int64) {
	t.Helper()
	if info.Key != key {
		t.Errorf("Commit of %q: info.Key = %q", key, info.Key)
	}
	if info.Size != size {
		t.Errorf("Commit of %q: info.Size = %d, want %d", key, info.Size, size)
	}
	if info.Version == "" {
		t.Errorf("Commit of %q: empty Version", key)
	}
	if info.IsDir {
		t.Errorf("Commit of %q: IsDir set", key)
	}
}

// get reads the whole object.
func get(t *testing.T, b backends.Backend, key string) []byte {
	t.Helper()
	data, err := readRange(t.Context(), b, key, backends.ReadOptions{Length: -1})
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	return data
}

func readRange(ctx context.Context, b backends.Backend, key string, opt backends.ReadOptions) ([]byte, error) {
	r, err := b.Read(ctx, key, opt)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(r)
	if cerr := r.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close reader: %w", cerr)
	}
	return data, err
}

func wantContent(t *testing.T, b backends.Backend, key string, want []byte) {
	t.Helper()
	if got := get(t, b, key); !bytes.Equal(got, want) {
		t.Errorf("content of %q = %s, want %s", key, short(got), short(want))
	}
}

// wantErr fails unless err wraps want.
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want an error wrapping %q", what, want)
	} else if !errors.Is(err, want) {
		t.Errorf("%s: error %q does not wrap %q", what, err, want)
	}
}

// wantErrOneOf fails unless err wraps one of want (for the few places where
// the contract leaves the choice to the store).
func wantErrOneOf(t *testing.T, what string, err error, want ...error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want an error wrapping one of %q", what, want)
		return
	}
	for _, w := range want {
		if errors.Is(err, w) {
			return
		}
	}
	t.Errorf("%s: error %q wraps none of %q", what, err, want)
}

func wantMissing(t *testing.T, b backends.Backend, key string) {
	t.Helper()
	_, err := b.Stat(t.Context(), key)
	wantErr(t, fmt.Sprintf("Stat(%q)", key), err, backends.ErrNotExist)
}

func stat(t *testing.T, b backends.Backend, key string) backends.ObjectInfo {
	t.Helper()
	info, err := b.Stat(t.Context(), key)
	if err != nil {
		t.Fatalf("Stat(%q): %v", key, err)
	}
	return info
}

// short renders data for an error message without flooding the log.
func short(data []byte) string {
	if len(data) <= 64 {
		return fmt.Sprintf("%q", data)
	}
	return fmt.Sprintf("%q... (%d bytes)", data[:64], len(data))
}

// requireOptional returns b as T, or ends the sub-test: a failure when opt
// requires T, a skip naming the interface otherwise.
func requireOptional[T any](t *testing.T, b backends.Backend, required bool, name string) T {
	t.Helper()
	v, ok := b.(T)
	if !ok {
		if required {
			t.Fatalf("backend %T does not implement backends.%s, which the test requires", b, name)
		}
		t.Skipf("backend %T does not implement backends.%s", b, name)
	}
	return v
}
