package job

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/mlfsd/mlfsd/backends"
)

// CopyCode copies the object key of b (key != "": one file, written as
// dst/<basename>) or every object under b's root (key == "") into the
// directory dst, keeping permission bits where the store has them.
func CopyCode(ctx context.Context, b backends.Backend, key, dst string) error {
	if key != "" {
		info, err := b.Stat(ctx, key)
		if err != nil {
			return err
		}
		if info.IsDir {
			return fmt.Errorf("%s is a directory; end the code URI with '/'", key)
		}
		return copyObject(ctx, b, info, filepath.Join(dst, path.Base(key)))
	}
	opt := backends.ListOptions{Recursive: true}
	for {
		page, err := b.List(ctx, opt)
		if err != nil {
			return err
		}
		for _, info := range page.Objects {
			rel := strings.TrimSuffix(info.Key, "/")
			if rel == "" {
				continue
			}
			if !filepath.IsLocal(rel) {
				return fmt.Errorf("refusing key %q: it would land outside %s", info.Key, dst)
			}
			target := filepath.Join(dst, filepath.FromSlash(rel))
			if info.IsDir || strings.HasSuffix(info.Key, "/") {
				if err := os.MkdirAll(target, 0o755); err != nil {
					return err
				}
				continue
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := copyObject(ctx, b, info, target); err != nil {
				return err
			}
		}
		if page.NextToken == "" {
			return nil
		}
		opt.Token = page.NextToken
	}
}

func copyObject(ctx context.Context, b backends.Backend, info backends.ObjectInfo, target string) error {
	perm := fs.FileMode(info.Mode) & fs.ModePerm
	if perm == 0 {
		perm = 0o644
	}
	r, err := b.Read(ctx, info.Key, backends.ReadOptions{Length: -1, IfVersion: info.Version})
	if err != nil {
		return err
	}
	defer r.Close()
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != info.Size {
		err = fmt.Errorf("%s: copied %d bytes, want %d", info.Key, n, info.Size)
	}
	if err != nil {
		os.Remove(target)
		return fmt.Errorf("copy %s: %w", info.Key, err)
	}
	return os.Chmod(target, perm) // OpenFile's perm is masked by umask
}
