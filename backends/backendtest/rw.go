package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// testEmptyRoot: a fresh root lists nothing, and every operation on a
// missing key reports ErrNotExist.
func testEmptyRoot(t *testing.T, s *suite) {
	b := s.open(t)
	if b.ID() == "" || b.ID() != b.ID() {
		t.Errorf("ID() = %q, want a stable non-empty name", b.ID())
	}
	for _, rec := range []bool{false, true} {
		page, err := b.List(t.Context(), backends.ListOptions{Recursive: rec})
		if err != nil {
			t.Fatalf("List of an empty root (recursive=%v): %v", rec, err)
		}
		if len(page.Objects)+len(page.Prefixes) != 0 || page.NextToken != "" {
			t.Errorf("List of an empty root (recursive=%v) = %+v, want an empty last page", rec, page)
		}
	}
	wantMissing(t, b, "missing")
	wantMissing(t, b, "missing/deeper")
	_, err := b.Read(t.Context(), "missing", backends.ReadOptions{Length: -1})
	wantErr(t, "Read of a missing key", err, backends.ErrNotExist)
	wantErr(t, "Delete of a missing key", b.Delete(t.Context(), "missing"), backends.ErrNotExist)
	wantErr(t, "Delete of a missing nested key", b.Delete(t.Context(), "missing/deeper"), backends.ErrNotExist)
}

// testWriteStatRead: what Commit reports is what Stat, List and Read see.
func testWriteStatRead(t *testing.T, s *suite) {
	b := s.open(t)
	data := []byte("hello, conformance suite\n")
	info := put(t, b, "dir/hello.txt", data)
	st := stat(t, b, "dir/hello.txt")
	if st.Key != "dir/hello.txt" || st.Size != int64(len(data)) || st.IsDir || st.Version != info.Version {
		t.Errorf("Stat = %+v, want key dir/hello.txt, size %d, a file, version %q from Commit", st, len(data), info.Version)
	}
	if st.ModTime.IsZero() {
		t.Errorf("Stat: zero ModTime")
	}
	wantContent(t, b, "dir/hello.txt", data)
	l := listAll(t, b, backends.ListOptions{Prefix: "dir/"})
	if len(l.files) != 1 || l.files[0].Key != "dir/hello.txt" || l.files[0].Size != int64(len(data)) || l.files[0].Version != info.Version {
		t.Errorf("List of dir/ = %+v, want the one file with Commit's size and version", l.files)
	}
	// An unknown size hint streams the same bytes.
	info2 := putHint(t, b, "nohint", data, -1)
	if info2.Size != int64(len(data)) {
		t.Errorf("write without a size hint: size %d", info2.Size)
	}
	wantContent(t, b, "nohint", data)
}

// testEmptyObject: a zero-byte object is a file, not a directory, and reads
// as nothing at any offset.
func testEmptyObject(t *testing.T, s *suite) {
	b := s.open(t)
	put(t, b, "empty", nil)
	put(t, b, "d/empty", []byte{})
	for _, k := range []string{"empty", "d/empty"} {
		st := stat(t, b, k)
		if st.Size != 0 || st.IsDir {
			t.Errorf("Stat(%q) = %+v, want a 0-byte file", k, st)
		}
		for _, ro := range []backends.ReadOptions{{Length: -1}, {Length: 10}, {Offset: 0, Length: 0}, {Offset: 5, Length: 1}} {
			got, err := readRange(t.Context(), b, k, ro)
			if err != nil || len(got) != 0 {
				t.Errorf("Read(%q, %+v) = %s, %v; want empty, nil", k, ro, short(got), err)
			}
		}
	}
	l := listAll(t, b, backends.ListOptions{Recursive: true})
	wantKeys(t, "recursive listing", l.fileKeys(), []string{"d/empty", "empty"})
	for _, f := range l.files {
		if f.Size != 0 {
			t.Errorf("listed size of %q = %d", f.Key, f.Size)
		}
	}
	l = listAll(t, b, backends.ListOptions{})
	wantKeys(t, "root files", l.fileKeys(), []string{"empty"})
	wantKeys(t, "root directories", l.dirs, []string{"d"})
}

// testRangedRead: every edge of a ranged read.
func testRangedRead(t *testing.T, s *suite) {
	b := s.open(t)
	const size = 1000
	data := make([]byte, size)
	fillPattern(1, 0, data)
	put(t, b, "obj", data)
	cases := []struct {
		off, n    int64
		from, end int64 // expected slice of data
	}{
		{0, -1, 0, size},
		{0, size, 0, size},
		{0, size + 1, 0, size},
		{0, 1, 0, 1},
		{0, 0, 0, 0},
		{1, 10, 1, 11},
		{size / 2, -1, size / 2, size},
		{size - 1, 1, size - 1, size},
		{size - 1, 10, size - 1, size}, // short read at the end
		{size - 1, -1, size - 1, size},
		{size, 1, size, size}, // at the end: empty
		{size, -1, size, size},
		{size + 100, 10, size, size}, // past the end: empty, no error
		{1 << 40, -1, size, size},
	}
	for _, c := range cases {
		got, err := readRange(t.Context(), b, "obj", backends.ReadOptions{Offset: c.off, Length: c.n})
		if err != nil {
			t.Errorf("Read(offset=%d length=%d): %v", c.off, c.n, err)
			continue
		}
		if !bytes.Equal(got, data[c.from:c.end]) {
			t.Errorf("Read(offset=%d length=%d) = %s, want bytes [%d,%d)", c.off, c.n, short(got), c.from, c.end)
		}
	}
	// A reader closed before the end releases cleanly.
	r, err := b.Read(t.Context(), "obj", backends.ReadOptions{Length: -1})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if _, err := r.Read(buf); err != nil {
		t.Errorf("first Read: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close of a half-read reader: %v", err)
	}
}

// testReadIfVersion: a read pinned to a version fails with
// ErrVersionMismatch once the object changed, and succeeds at the current one.
func testReadIfVersion(t *testing.T, s *suite) {
	b := s.open(t)
	v1 := put(t, b, "k", []byte("first")).Version
	got, err := readRange(t.Context(), b, "k", backends.ReadOptions{Length: -1, IfVersion: v1})
	if err != nil || string(got) != "first" {
		t.Fatalf("Read at the current version = %s, %v", short(got), err)
	}
	v2 := put(t, b, "k", []byte("second")).Version
	if v2 == v1 {
		t.Fatalf("overwrite kept version %q", v1)
	}
	_, err = b.Read(t.Context(), "k", backends.ReadOptions{Length: -1, IfVersion: v1})
	wantErr(t, "Read at a stale version", err, backends.ErrVersionMismatch)
	_, err = b.Read(t.Context(), "k", backends.ReadOptions{Offset: 2, Length: 1, IfVersion: v1})
	wantErr(t, "ranged Read at a stale version", err, backends.ErrVersionMismatch)
	got, err = readRange(t.Context(), b, "k", backends.ReadOptions{Offset: 1, Length: 3, IfVersion: v2})
	if err != nil || string(got) != "eco" {
		t.Errorf("ranged Read at the new version = %s, %v; want \"eco\"", short(got), err)
	}
	if st := stat(t, b, "k"); st.Version != v2 {
		t.Errorf("Stat version %q, want %q from the last Commit", st.Version, v2)
	}
}

// testOverwriteChangesVersion: replacing content, even with the same size
// straight away, yields a new version token.
func testOverwriteChangesVersion(t *testing.T, s *suite) {
	b := s.open(t)
	seen := map[string]int{}
	for i := range 5 {
		data := []byte(fmt.Sprintf("content-%d", i)) // same size every time
		info := put(t, b, "same-size", data)
		if j, dup := seen[info.Version]; dup {
			t.Errorf("write #%d got version %q again (first seen at write #%d)", i, info.Version, j)
		} else {
			seen[info.Version] = i
		}
		if st := stat(t, b, "same-size"); st.Version != info.Version {
			t.Errorf("write #%d: Stat version %q, Commit said %q", i, st.Version, info.Version)
		}
		wantContent(t, b, "same-size", data)
	}
}

// testWriteInvisibleUntilCommit: neither a new key nor the new content of
// an old key shows before Commit, and no temporary name ever shows.
func testWriteInvisibleUntilCommit(t *testing.T, s *suite) {
	b := s.open(t)
	ctx := t.Context()
	put(t, b, "old", []byte("old content"))

	wNew, err := b.Write(ctx, "dir/new", backends.WriteOptions{SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	wOld, err := b.Write(ctx, "old", backends.WriteOptions{SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []backends.Writer{wNew, wOld} {
		if _, err := w.Write([]byte("new content, not yet committed")); err != nil {
			t.Fatal(err)
		}
	}
	wantMissing(t, b, "dir/new")
	_, err = b.Read(ctx, "dir/new", backends.ReadOptions{Length: -1})
	wantErr(t, "Read before Commit", err, backends.ErrNotExist)
	wantContent(t, b, "old", []byte("old content"))
	l := listAll(t, b, backends.ListOptions{Recursive: true})
	wantKeys(t, "recursive listing before Commit", l.fileKeys(), []string{"old"})
	l = listAll(t, b, backends.ListOptions{Prefix: "dir/"})
	wantKeys(t, "listing of dir/ before Commit", l.fileKeys(), nil)

	for _, w := range []backends.Writer{wNew, wOld} {
		if _, err := w.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wantContent(t, b, "dir/new", []byte("new content, not yet committed"))
	wantContent(t, b, "old", []byte("new content, not yet committed"))
	l = listAll(t, b, backends.ListOptions{Recursive: true})
	wantKeys(t, "recursive listing after Commit", l.fileKeys(), []string{"dir/new", "old"})

	// Writing after Commit is refused; Abort after Commit is a no-op.
	if _, err := wNew.Write([]byte("late")); err == nil {
		t.Errorf("Write after Commit succeeded")
	}
	if err := wNew.Abort(ctx); err != nil {
		t.Errorf("Abort after Commit: %v", err)
	}
	wantContent(t, b, "dir/new", []byte("new content, not yet committed"))
}

// testAbort: an aborted write leaves no object, no temporary file, and the
// previous content of an overwritten key intact.
func testAbort(t *testing.T, s *suite) {
	b := s.open(t)
	ctx := t.Context()
	put(t, b, "keep", []byte("kept"))
	for _, key := range []string{"fresh", "deep/er/fresh", "keep"} {
		w, err := b.Write(ctx, key, backends.WriteOptions{SizeHint: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		chunk := make([]byte, 64<<10)
		fillPattern(2, 0, chunk)
		for range 4 {
			if _, err := w.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Abort(ctx); err != nil {
			t.Fatalf("Abort of %q: %v", key, err)
		}
		// Commit after Abort must not publish anything.
		if _, err := w.Commit(ctx); err == nil {
			t.Errorf("Commit after Abort of %q succeeded", key)
		}
	}
	wantMissing(t, b, "fresh")
	wantMissing(t, b, "deep/er/fresh")
	wantContent(t, b, "keep", []byte("kept"))
	l := listAll(t, b, backends.ListOptions{Recursive: true})
	wantKeys(t, "recursive listing after Abort", l.fileKeys(), []string{"keep"})
	l = listAll(t, b, backends.ListOptions{})
	wantKeys(t, "root listing after Abort", l.fileKeys(), []string{"keep"})
	if len(l.dirs) != 0 {
		t.Errorf("directories %q left behind by an aborted write", l.dirs)
	}
}

// testDelete: a deleted object is gone from Stat, Read and List; deleting
// it again, or a key below a missing directory, reports ErrNotExist.
func testDelete(t *testing.T, s *suite) {
	b := s.open(t)
	ctx := t.Context()
	put(t, b, "a", []byte("a"))
	put(t, b, "d/b", []byte("b"))
	put(t, b, "d/c", []byte("c"))
	for _, k := range []string{"a", "d/b"} {
		if err := b.Delete(ctx, k); err != nil {
			t.Fatalf("Delete(%q): %v", k, err)
		}
		wantMissing(t, b, k)
		_, err := b.Read(ctx, k, backends.ReadOptions{Length: -1})
		wantErr(t, fmt.Sprintf("Read(%q) after Delete", k), err, backends.ErrNotExist)
		wantErr(t, fmt.Sprintf("second Delete(%q)", k), b.Delete(ctx, k), backends.ErrNotExist)
	}
	l := listAll(t, b, backends.ListOptions{Recursive: true})
	wantKeys(t, "recursive listing after Delete", l.fileKeys(), []string{"d/c"})
	wantContent(t, b, "d/c", []byte("c"))
	wantErr(t, "Delete below a missing directory", b.Delete(ctx, "nodir/x"), backends.ErrNotExist)
}

// testKeyNames: keys with characters that URL, shell and path code get
// wrong round-trip exactly, through Stat, Read, List and Delete.
func testKeyNames(t *testing.T, s *suite) {
	b := s.open(t)
	ctx := t.Context()
	keys := []string{
		"with space",
		"two  spaces and trailing space ",
		"100%",
		"%41 is not A",
		"percent%2Fslash",
		"percent%20space",
		"a+b",
		"plus+dir/c+d",
		"hash#tag",
		"what?",
		"q?x=1&y=2",
		"semi;colon,comma@at=eq~tilde'quote!bang",
		"ünïcödé",
		"日本語/ファイル.txt",
		"emoji-🎉",
		"dir with space/file %20+#?.bin",
		"ß/straße",
	}
	for _, k := range keys {
		info := put(t, b, k, []byte(k))
		if info.Key != k {
			t.Errorf("Commit of %q reported key %q", k, info.Key)
		}
	}
	for _, k := range keys {
		if st := stat(t, b, k); st.Key != k || st.Size != int64(len(k)) {
			t.Errorf("Stat(%q) = key %q size %d", k, st.Key, st.Size)
		}
		wantContent(t, b, k, []byte(k))
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	l := listAll(t, b, backends.ListOptions{Recursive: true})
	wantKeys(t, "recursive listing", l.fileKeys(), sorted)
	l = listAll(t, b, backends.ListOptions{Recursive: true, MaxKeys: 3})
	wantKeys(t, "recursive listing in pages of 3", l.fileKeys(), sorted)
	l = listAll(t, b, backends.ListOptions{})
	wantKeys(t, "root directories", l.dirs, []string{"dir with space", "plus+dir", "ß", "日本語"})
	l = listAll(t, b, backends.ListOptions{Prefix: "dir with space/"})
	wantKeys(t, "listing of \"dir with space/\"", l.fileKeys(), []string{"dir with space/file %20+#?.bin"})
	l = listAll(t, b, backends.ListOptions{Prefix: "q?"})
	wantKeys(t, "listing with prefix \"q?\"", l.fileKeys(), []string{"q?x=1&y=2"})
	l = listAll(t, b, backends.ListOptions{Prefix: "%"})
	wantKeys(t, "listing with prefix \"%\"", l.fileKeys(), []string{"%41 is not A"})
	for _, k := range keys {
		if err := b.Delete(ctx, k); err != nil {
			t.Errorf("Delete(%q): %v", k, err)
		}
		wantMissing(t, b, k)
	}
	l = listAll(t, b, backends.ListOptions{Recursive: true})
	wantKeys(t, "recursive listing after deleting every key", l.fileKeys(), nil)
}

// testDirectories: a directory implied by the keys below it is IsDir for
// Stat (with or without a trailing '/', key reported without one), cannot
// be read as a file or deleted while not empty, and goes once emptied.
func testDirectories(t *testing.T, s *suite) {
	b := s.open(t)
	ctx := t.Context()
	put(t, b, "d/a/f1", []byte("1"))
	put(t, b, "d/b", []byte("2"))
	for _, k := range []string{"d", "d/", "d/a", "d/a/"} {
		st, err := b.Stat(ctx, k)
		if err != nil {
			t.Errorf("Stat(%q) of a directory: %v", k, err)
			continue
		}
		want := k[:len(k)-boolInt(k[len(k)-1] == '/')]
		if !st.IsDir || st.Key != want {
			t.Errorf("Stat(%q) = %+v, want IsDir with key %q", k, st, want)
		}
	}
	_, err := b.Read(ctx, "d", backends.ReadOptions{Length: -1})
	wantErrOneOf(t, "Read of a directory", err, backends.ErrIsDir, backends.ErrNotExist)
	for _, k := range []string{"d", "d/", "d/a", "d/a/"} {
		wantErr(t, fmt.Sprintf("Delete(%q) of a non-empty directory", k), b.Delete(ctx, k), backends.ErrNotEmpty)
	}
	wantContent(t, b, "d/a/f1", []byte("1"))
	l := listAll(t, b, backends.ListOptions{Prefix: "d/"})
	wantKeys(t, "files in d/", l.fileKeys(), []string{"d/b"})
	wantKeys(t, "directories in d/", l.dirs, []string{"d/a"})

	// Empty the tree bottom-up. A store whose directories exist only
	// through their contents may report the emptied directory missing.
	for _, k := range []string{"d/a/f1", "d/b"} {
		if err := b.Delete(ctx, k); err != nil {
			t.Fatalf("Delete(%q): %v", k, err)
		}
	}
	for _, k := range []string{"d/a/", "d"} {
		if err := b.Delete(ctx, k); err != nil && !errors.Is(err, backends.ErrNotExist) {
			t.Errorf("Delete(%q) of an empty directory: %v", k, err)
		}
		wantMissing(t, b, k)
	}
	l = listAll(t, b, backends.ListOptions{Recursive: true})
	if len(l.files)+len(l.dirs) != 0 {
		t.Errorf("after deleting everything: files %q dirs %q", l.fileKeys(), l.dirs)
	}
}

// testContextCanceled: a cancelled context stops every call, and a write
// committed under one publishes nothing.
func testContextCanceled(t *testing.T, s *suite) {
	b := s.open(t)
	put(t, b, "k", []byte("data"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := b.Stat(ctx, "k")
	wantErr(t, "Stat with a cancelled context", err, context.Canceled)
	_, err = b.List(ctx, backends.ListOptions{})
	wantErr(t, "List with a cancelled context", err, context.Canceled)
	_, err = b.Read(ctx, "k", backends.ReadOptions{Length: -1})
	wantErr(t, "Read with a cancelled context", err, context.Canceled)
	if w, err := b.Write(t.Context(), "new", backends.WriteOptions{SizeHint: -1}); err != nil {
		t.Errorf("Write: %v", err)
	} else {
		if _, err := w.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		_, err := w.Commit(ctx)
		wantErr(t, "Commit with a cancelled context", err, context.Canceled)
		_ = w.Abort(t.Context())
		wantMissing(t, b, "new")
	}
	wantErr(t, "Delete with a cancelled context", b.Delete(ctx, "k"), context.Canceled)
	wantContent(t, b, "k", []byte("data"))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
