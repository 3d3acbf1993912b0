package job

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/mlfsd/mlfsd/internal/atomicfile"
)

// created records what a run created on the local disk, so a failed start
// removes exactly that and nothing the caller had before.
type created struct {
	dirs  []string // in creation order
	files []string
}

// mkdir creates dir and any missing parents, recording each one it created.
func (c *created) mkdir(dir string) error {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s exists and is not a directory", d)
			}
			break
		}
		if errors.Is(err, syscall.ENOTCONN) {
			return staleMount(d)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		c.dirs = append(c.dirs, missing[i])
	}
	return nil
}

// writeFile writes data to path atomically (temp file and rename),
// recording path when it did not exist before.
func (c *created) writeFile(path string, data []byte, perm fs.FileMode) error {
	_, statErr := os.Lstat(path)
	if err := atomicfile.Write(path, data, perm, atomicfile.NoSync); err != nil {
		return err
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		c.files = append(c.files, path)
	}
	return nil
}

// undo removes what was created, newest first. Directories are removed only
// when empty (os.Remove), so nothing the caller put there, and nothing under
// a mount that failed to detach, is ever deleted; keep lists trees that may
// be removed whole (the usercode directory, when created by this run).
func (c *created) undo(keep map[string]bool) error {
	var errs []error
	for i := len(c.files) - 1; i >= 0; i-- {
		if err := os.Remove(c.files[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	for i := len(c.dirs) - 1; i >= 0; i-- {
		d := c.dirs[i]
		var err error
		if keep[d] {
			err = os.RemoveAll(d)
		} else {
			err = os.Remove(d)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkEmptyDir makes sure a mountpoint hides nothing: mounting over files
// would make them invisible to the job and look like data loss.
func checkEmptyDir(dir string) error {
	f, err := os.Open(dir)
	if errors.Is(err, syscall.ENOTCONN) {
		// Its attributes may be cached, so only opening it shows the
		// daemon is gone.
		return staleMount(dir)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return fmt.Errorf("mountpoint %s is not empty", dir)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("mountpoint %s: %w", dir, err)
	}
	return nil
}

// staleMount is the error for a directory whose FUSE daemon died.
func staleMount(dir string) error {
	return fmt.Errorf("%s is a stale FUSE mount (its daemon died); run `umount -l %s` first", dir, dir)
}
