// Package atomicfile replaces a file's content atomically: the data goes
// to a temporary file in the same directory, which is renamed over the
// target, so a reader sees the old content or the new, never a mix, and a
// failure leaves the old content and no temporary file.
//
// What survives a crash of the machine is the caller's choice, made at
// every call: NoSync (another process never sees a torn file, a power cut
// may), FileSync (the content is on disk before it is published; the
// rename itself may be lost) or Durable (the new content survives once
// Write returns).
package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Sync is what Write forces to disk.
type Sync int

const (
	// NoSync forces nothing: atomic against other processes only. For
	// files a crash may lose or that are rebuilt (reports, hints, the
	// files of a run directory in tmpfs).
	NoSync Sync = iota
	// FileSync fsyncs the temporary file before the rename: after a crash
	// the target is the old content or the complete new one, never an
	// empty or torn file, but may be the old one.
	FileSync
	// Durable fsyncs the file, renames, and fsyncs the directory: once
	// Write returns the new content survives a crash.
	Durable
)

// tmpSuffix ends every temporary name; with the leading dot, it is how
// TempTarget recognises a temporary file a crash left behind.
const tmpSuffix = ".tmp"

// Write replaces the content of path with data, with mode perm (exactly:
// the umask does not apply), forcing to disk what sync says.
func Write(path string, data []byte, perm fs.FileMode, sync Sync) error {
	return WriteFunc(path, perm, sync, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFunc is Write for content produced by write; an error from write
// leaves path as it was.
func WriteFunc(path string, perm fs.FileMode, sync Sync, write func(io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	// A unique name per call: two writers of one path never share a
	// temporary file, and a crash leaves one TempTarget recognises.
	f, err := os.CreateTemp(dir, "."+base+".*"+tmpSuffix)
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if err != nil && !renamed {
			f.Close() // fails harmlessly once closed below: the first error is the one to report
			os.Remove(f.Name())
		}
	}()
	if err := write(f); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if sync >= FileSync {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	renamed = true
	if sync >= Durable {
		// The new name is in place; an error syncing the directory says
		// only that a crash could still undo it.
		return SyncDir(dir)
	}
	return nil
}

// SyncDir fsyncs a directory, making the renames and removals in it
// survive a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// TempTarget reports whether name (a base name) is a temporary file of
// Write's, and the base name of the file it was to replace: directories
// that clean up after a crash remove such files.
func TempTarget(name string) (target string, ok bool) {
	if !strings.HasPrefix(name, ".") || !strings.HasSuffix(name, tmpSuffix) {
		return "", false
	}
	s := strings.TrimSuffix(name[1:], tmpSuffix)
	i := strings.LastIndexByte(s, '.')
	if i <= 0 || i == len(s)-1 || strings.Trim(s[i+1:], "0123456789") != "" {
		return "", false
	}
	return s[:i], true
}
