// Package fstest holds POSIX checks that any mlfsd mount can be run through:
// a table of func(t, mnt, src) that compare a mount with its source directory.
package fstest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
)

// Check is one POSIX property of a mount at mnt whose source tree is the
// plain directory src.
type Check func(t *testing.T, mnt, src string)

// ReadOnlyChecks are the properties every read-only input mount must have.
// Each needs at least one regular file and one sub-directory in src.
var ReadOnlyChecks = map[string]Check{
	"TreeMatchesSource":  TreeMatchesSource,
	"StatMatchesSource":  statMatchesSource,
	"ReaddirIsSorted":    readdirNames,
	"WriteOpenEROFS":     writeOpenEROFS,
	"CreateEROFS":        createEROFS,
	"MkdirEROFS":         mkdirEROFS,
	"UnlinkEROFS":        unlinkEROFS,
	"RmdirEROFS":         rmdirEROFS,
	"RenameEROFS":        renameEROFS,
	"SymlinkEROFS":       symlinkEROFS,
	"ChmodEROFS":         chmodEROFS,
	"TruncateEROFS":      truncateEROFS,
	"MissingIsENOENT":    missingIsENOENT,
	"MissingTwiceENOENT": missingTwice,
	"ReadPastEOF":        readPastEOF,
	"ConcurrentReaders":  concurrentReaders,
}

// RunReadOnly runs every ReadOnlyCheck as a sub-test.
func RunReadOnly(t *testing.T, mnt, src string) {
	names := make([]string, 0, len(ReadOnlyChecks))
	for n := range ReadOnlyChecks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Run(n, func(t *testing.T) { ReadOnlyChecks[n](t, mnt, src) })
	}
}

// Tree maps each relative path under root to a digest: "d" for directories,
// the SHA-256 of the content for files.
func Tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			out[rel] = "d"
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		out[rel] = string(h.Sum(nil))
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
}

// TreeMatchesSource checks the mount holds exactly the source's names and
// bytes.
func TreeMatchesSource(t *testing.T, mnt, src string) {
	want, got := Tree(t, src), Tree(t, mnt)
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("missing in mount: %s", k)
		case g != v:
			t.Errorf("content differs: %s", k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("extra in mount: %s", k)
		}
	}
}

// firstOf returns the first regular file and the first directory in src,
// as paths relative to it.
func firstOf(t *testing.T, src string) (file, dir string) {
	t.Helper()
	filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == src {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() && dir == "" {
			dir = rel
		}
		if d.Type().IsRegular() && file == "" {
			file = rel
		}
		if file != "" && dir != "" {
			return filepath.SkipAll
		}
		return nil
	})
	if file == "" || dir == "" {
		t.Fatalf("source %s needs a file and a sub-directory", src)
	}
	return file, dir
}

func statMatchesSource(t *testing.T, mnt, src string) {
	file, dir := firstOf(t, src)
	for _, rel := range []string{file, dir} {
		s, err := os.Stat(filepath.Join(src, rel))
		if err != nil {
			t.Fatal(err)
		}
		m, err := os.Stat(filepath.Join(mnt, rel))
		if err != nil {
			t.Fatalf("stat %s in mount: %v", rel, err)
		}
		if s.IsDir() != m.IsDir() {
			t.Errorf("%s: IsDir %v in source, %v in mount", rel, s.IsDir(), m.IsDir())
		}
		if !s.IsDir() && s.Size() != m.Size() {
			t.Errorf("%s: size %d in source, %d in mount", rel, s.Size(), m.Size())
		}
		if !s.IsDir() && !s.ModTime().Equal(m.ModTime()) && s.ModTime().Unix() != m.ModTime().Unix() {
			t.Errorf("%s: mtime %v in source, %v in mount", rel, s.ModTime(), m.ModTime())
		}
		// A store that keeps modes (NAS) shows them as they are; others
		// show no write bits.
		if m.Mode().Perm() != s.Mode().Perm() && m.Mode().Perm()&0o222 != 0 {
			t.Errorf("%s: read-only mount shows write bits %v (source %v)", rel, m.Mode(), s.Mode())
		}
	}
}

func readdirNames(t *testing.T, mnt, src string) {
	_, dir := firstOf(t, src)
	for _, rel := range []string{".", dir} {
		want, err := os.ReadDir(filepath.Join(src, rel))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadDir(filepath.Join(mnt, rel))
		if err != nil {
			t.Fatalf("readdir %s in mount: %v", rel, err)
		}
		if len(got) != len(want) {
			t.Fatalf("readdir %s: %d entries in mount, %d in source", rel, len(got), len(want))
		}
		for i := range want {
			if got[i].Name() != want[i].Name() || got[i].IsDir() != want[i].IsDir() {
				t.Errorf("readdir %s[%d]: %s (dir %v) in mount, %s (dir %v) in source", rel, i,
					got[i].Name(), got[i].IsDir(), want[i].Name(), want[i].IsDir())
			}
		}
	}
}

// wantErrno fails unless err carries errno.
func wantErrno(t *testing.T, what string, err error, errno syscall.Errno) {
	t.Helper()
	if !errors.Is(err, errno) {
		t.Errorf("%s: got %v, want %v", what, err, errno)
	}
}

func writeOpenEROFS(t *testing.T, mnt, src string) {
	file, _ := firstOf(t, src)
	_, err := os.OpenFile(filepath.Join(mnt, file), os.O_WRONLY, 0)
	wantErrno(t, "open O_WRONLY", err, syscall.EROFS)
	_, err = os.OpenFile(filepath.Join(mnt, file), os.O_RDWR, 0)
	wantErrno(t, "open O_RDWR", err, syscall.EROFS)
}

func createEROFS(t *testing.T, mnt, src string) {
	_, err := os.Create(filepath.Join(mnt, "new-file"))
	wantErrno(t, "create", err, syscall.EROFS)
}

func mkdirEROFS(t *testing.T, mnt, src string) {
	wantErrno(t, "mkdir", os.Mkdir(filepath.Join(mnt, "new-dir"), 0o755), syscall.EROFS)
}

func unlinkEROFS(t *testing.T, mnt, src string) {
	file, _ := firstOf(t, src)
	wantErrno(t, "unlink", syscall.Unlink(filepath.Join(mnt, file)), syscall.EROFS)
	if _, err := os.Stat(filepath.Join(mnt, file)); err != nil {
		t.Errorf("file gone after refused unlink: %v", err)
	}
}

func rmdirEROFS(t *testing.T, mnt, src string) {
	_, dir := firstOf(t, src)
	wantErrno(t, "rmdir", syscall.Rmdir(filepath.Join(mnt, dir)), syscall.EROFS)
}

func renameEROFS(t *testing.T, mnt, src string) {
	file, _ := firstOf(t, src)
	wantErrno(t, "rename", os.Rename(filepath.Join(mnt, file), filepath.Join(mnt, "renamed")), syscall.EROFS)
}

func symlinkEROFS(t *testing.T, mnt, src string) {
	wantErrno(t, "symlink", os.Symlink("target", filepath.Join(mnt, "link")), syscall.EROFS)
}

func chmodEROFS(t *testing.T, mnt, src string) {
	file, _ := firstOf(t, src)
	wantErrno(t, "chmod", os.Chmod(filepath.Join(mnt, file), 0o777), syscall.EROFS)
}

func truncateEROFS(t *testing.T, mnt, src string) {
	file, _ := firstOf(t, src)
	wantErrno(t, "truncate", os.Truncate(filepath.Join(mnt, file), 0), syscall.EROFS)
}

func missingIsENOENT(t *testing.T, mnt, src string) {
	_, err := os.Stat(filepath.Join(mnt, "no-such-file"))
	wantErrno(t, "stat missing", err, syscall.ENOENT)
	_, err = os.Open(filepath.Join(mnt, "no-such-dir", "x"))
	wantErrno(t, "open missing/x", err, syscall.ENOENT)
}

// missingTwice exercises the negative-lookup cache: the second miss must
// still be ENOENT, not some stale positive entry.
func missingTwice(t *testing.T, mnt, src string) {
	for i := 0; i < 2; i++ {
		_, err := os.Lstat(filepath.Join(mnt, "absent-twice"))
		wantErrno(t, "lstat", err, syscall.ENOENT)
	}
}

func readPastEOF(t *testing.T, mnt, src string) {
	file, _ := firstOf(t, src)
	st, err := os.Stat(filepath.Join(src, file))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(mnt, file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 16)
	n, err := f.ReadAt(buf, st.Size()+100)
	if n != 0 || err != io.EOF {
		t.Errorf("ReadAt past EOF = %d, %v; want 0, EOF", n, err)
	}
}

func concurrentReaders(t *testing.T, mnt, src string) {
	file, _ := firstOf(t, src)
	want, err := os.ReadFile(filepath.Join(src, file))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			got, err := os.ReadFile(filepath.Join(mnt, file))
			if err == nil && !bytes.Equal(got, want) {
				err = errors.New("content differs")
			}
			errs <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Errorf("reader: %v", err)
		}
	}
}
