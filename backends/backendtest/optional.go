package backendtest

import (
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// testDirMaker: MakeDir creates a directory and its parents (an empty one
// included: the "directory marker" case), is idempotent, refuses to turn a
// file into a directory, and an empty directory deletes with or without a
// trailing '/'.
func testDirMaker(t *testing.T, s *suite) {
	b := s.open(t)
	dm := requireOptional[backends.DirMaker](t, b, s.opt.RequireDirMaker, "DirMaker")
	ctx := t.Context()
	if err := dm.MakeDir(ctx, "m/n/o"); err != nil {
		t.Fatalf("MakeDir(m/n/o): %v", err)
	}
	for _, k := range []string{"m", "m/n", "m/n/o", "m/n/o/"} {
		st, err := b.Stat(ctx, k)
		if err != nil || !st.IsDir {
			t.Errorf("Stat(%q) after MakeDir = %+v, %v; want a directory", k, st, err)
		}
	}
	if err := dm.MakeDir(ctx, "m/n/o"); err != nil {
		t.Errorf("MakeDir of an existing directory: %v", err)
	}
	if err := dm.MakeDir(ctx, "m/p/"); err != nil {
		t.Errorf("MakeDir with a trailing '/': %v", err)
	}
	l := listAll(t, b, backends.ListOptions{})
	wantKeys(t, "root directories", l.dirs, []string{"m"})
	wantKeys(t, "root files", l.fileKeys(), nil)
	l = listAll(t, b, backends.ListOptions{Prefix: "m/n/"})
	wantKeys(t, "directories in m/n/ (an empty directory)", l.dirs, []string{"m/n/o"})
	l = listAll(t, b, backends.ListOptions{Prefix: "m/"})
	wantKeys(t, "directories in m/", l.dirs, []string{"m/n", "m/p"})
	l = listAll(t, b, backends.ListOptions{Recursive: true})
	wantKeys(t, "recursive files", l.fileKeys(), nil)
	wantRecursiveDirs(t, "recursive listing", l, "m", "m/n", "m/n/o", "m/p")

	// A file inside a made directory lists beside the empty sub-directory.
	put(t, b, "m/n/f", []byte("f"))
	l = listAll(t, b, backends.ListOptions{Prefix: "m/n/"})
	wantKeys(t, "files in m/n/", l.fileKeys(), []string{"m/n/f"})
	wantKeys(t, "directories in m/n/", l.dirs, []string{"m/n/o"})

	err := dm.MakeDir(ctx, "m/n/f")
	if err == nil {
		t.Errorf("MakeDir over an existing file succeeded")
	}
	if st := stat(t, b, "m/n/f"); st.IsDir {
		t.Errorf("MakeDir turned file m/n/f into a directory")
	}
	wantContent(t, b, "m/n/f", []byte("f"))

	wantErr(t, "Delete of a non-empty made directory", b.Delete(ctx, "m/n"), backends.ErrNotEmpty)
	for _, k := range []string{"m/n/o/", "m/p", "m/n/f", "m/n", "m/"} {
		if err := b.Delete(ctx, k); err != nil {
			t.Fatalf("Delete(%q): %v", k, err)
		}
		wantMissing(t, b, k)
	}
	wantErr(t, "Delete of a deleted directory", b.Delete(ctx, "m"), backends.ErrNotExist)
	l = listAll(t, b, backends.ListOptions{Recursive: true})
	if len(l.files)+len(l.dirs) != 0 {
		t.Errorf("after deleting everything: files %q dirs %q", l.fileKeys(), l.dirs)
	}
}

// testRenamer: a file moves with its content and replaces a file at the
// destination; a directory moves with everything under it; a missing
// source reports ErrNotExist; an existing directory is never replaced.
func testRenamer(t *testing.T, s *suite) {
	b := s.open(t)
	rn := requireOptional[backends.Renamer](t, b, s.opt.RequireRenamer, "Renamer")
	ctx := t.Context()
	put(t, b, "src", []byte("moving"))
	put(t, b, "dst/keep", []byte("keep"))
	if err := rn.Rename(ctx, "src", "dst/moved"); err != nil {
		t.Fatalf("Rename(src, dst/moved): %v", err)
	}
	wantMissing(t, b, "src")
	wantContent(t, b, "dst/moved", []byte("moving"))

	put(t, b, "other", []byte("replacement"))
	if err := rn.Rename(ctx, "other", "dst/moved"); err != nil {
		t.Fatalf("Rename over an existing file: %v", err)
	}
	wantMissing(t, b, "other")
	wantContent(t, b, "dst/moved", []byte("replacement"))
	if st := stat(t, b, "dst/moved"); st.Size != int64(len("replacement")) {
		t.Errorf("size after Rename over a file: %d", st.Size)
	}

	put(t, b, "tree/a", []byte("a"))
	put(t, b, "tree/sub/b", []byte("b"))
	if err := rn.Rename(ctx, "tree", "moved tree"); err != nil {
		t.Fatalf("Rename of a directory: %v", err)
	}
	wantMissing(t, b, "tree")
	wantMissing(t, b, "tree/a")
	wantContent(t, b, "moved tree/a", []byte("a"))
	wantContent(t, b, "moved tree/sub/b", []byte("b"))
	l := listAll(t, b, backends.ListOptions{Recursive: true})
	wantKeys(t, "recursive listing after Rename", l.fileKeys(), []string{"dst/keep", "dst/moved", "moved tree/a", "moved tree/sub/b"})

	err := rn.Rename(ctx, "nothing", "dst/nothing")
	wantErr(t, "Rename of a missing key", err, backends.ErrNotExist)
	wantMissing(t, b, "dst/nothing")

	if err := rn.Rename(ctx, "dst/keep", "moved tree"); err == nil {
		t.Errorf("Rename of a file onto an existing directory succeeded")
	}
	wantContent(t, b, "dst/keep", []byte("keep"))
	wantContent(t, b, "moved tree/a", []byte("a"))
}

// testAppender: appended bytes follow the old ones after Commit, the
// version changes, and appending to a missing key reports ErrNotExist.
func testAppender(t *testing.T, s *suite) {
	b := s.open(t)
	ap := requireOptional[backends.Appender](t, b, s.opt.RequireAppender, "Appender")
	ctx := t.Context()
	v0 := put(t, b, "log", []byte("abc")).Version
	want := []byte("abc")
	prev := v0
	for i, more := range []string{"def", "", "ghijkl"} {
		w, err := ap.Append(ctx, "log")
		if err != nil {
			t.Fatalf("Append #%d: %v", i, err)
		}
		if _, err := w.Write([]byte(more)); err != nil {
			t.Fatalf("Append #%d: Write: %v", i, err)
		}
		info, err := w.Commit(ctx)
		if err != nil {
			t.Fatalf("Append #%d: Commit: %v", i, err)
		}
		want = append(want, more...)
		if info.Key != "log" || info.Size != int64(len(want)) {
			t.Errorf("Append #%d: Commit = %+v, want key log size %d", i, info, len(want))
		}
		if more != "" && info.Version == prev {
			t.Errorf("Append #%d: version %q unchanged", i, info.Version)
		}
		prev = info.Version
		wantContent(t, b, "log", want)
		if st := stat(t, b, "log"); st.Size != int64(len(want)) || st.Version != info.Version {
			t.Errorf("Append #%d: Stat = %+v, want size %d version %q", i, st, len(want), info.Version)
		}
	}
	_, err := b.Read(ctx, "log", backends.ReadOptions{Length: -1, IfVersion: v0})
	wantErr(t, "Read at the version before Append", err, backends.ErrVersionMismatch)

	w, err := ap.Append(ctx, "no-such-log")
	if err == nil {
		_, _ = w.Write([]byte("x"))
		_, err = w.Commit(ctx)
	}
	wantErr(t, "Append to a missing key", err, backends.ErrNotExist)
	wantMissing(t, b, "no-such-log")
}

// testCopier: a copy has the source's content under its own key, leaves
// the source alone, and a missing source reports ErrNotExist.
func testCopier(t *testing.T, s *suite) {
	b := s.open(t)
	cp := requireOptional[backends.Copier](t, b, s.opt.RequireCopier, "Copier")
	ctx := t.Context()
	data := make([]byte, 100_000)
	fillPattern(9, 0, data)
	put(t, b, "orig", data)
	info, err := cp.Copy(ctx, "orig", "copies/one")
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	checkCommitInfo(t, "copies/one", info, int64(len(data)))
	wantContent(t, b, "copies/one", data)
	wantContent(t, b, "orig", data)
	if st := stat(t, b, "copies/one"); st.Version != info.Version {
		t.Errorf("Stat version %q, Copy reported %q", st.Version, info.Version)
	}
	put(t, b, "small", []byte("small"))
	if _, err := cp.Copy(ctx, "small", "copies/one"); err != nil {
		t.Fatalf("Copy over an existing object: %v", err)
	}
	wantContent(t, b, "copies/one", []byte("small"))
	_, err = cp.Copy(ctx, "missing", "copies/two")
	wantErr(t, "Copy of a missing key", err, backends.ErrNotExist)
	wantMissing(t, b, "copies/two")
	l := listAll(t, b, backends.ListOptions{Recursive: true})
	wantKeys(t, "recursive listing after Copy", l.fileKeys(), []string{"copies/one", "orig", "small"})
}
