package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sync/errgroup"

	"github.com/mlfsd/mlfsd/internal/atomicfile"
)

// PrepareOptions configures Prepare.
type PrepareOptions struct {
	Profile  Profile
	Seed     uint64
	Progress Progress // nil: none
	// Workers writing files in parallel; 0 means GOMAXPROCS.
	Workers int
	// Reuse accepts a dir that already holds this very dataset (same
	// profile and seed, per its manifest) and returns its manifest.
	Reuse bool
}

// Prepare generates the dataset into dir, which must be missing or empty,
// and returns its manifest. The same profile and seed always produce the
// same bytes and the same manifest. On failure dir is left as it was found
// (missing or empty).
func Prepare(ctx context.Context, dir string, opt PrepareOptions) (m *Manifest, err error) {
	m, err = Plan(opt.Profile, opt.Seed)
	if err != nil {
		return nil, err
	}
	if opt.Reuse {
		if old, err := LoadManifest(dir); err == nil && old.Seed == opt.Seed && old.Profile == opt.Profile {
			return old, nil
		}
	}
	created, err := ensureEmptyDir(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			cleanup(dir, created)
		}
	}()
	prog := progressOrNone(opt.Progress)
	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}

	prog.Begin("prepare: data files", m.TotalBytes(), true)
	files := make([]*File, 0, len(m.Shards)+len(m.Small))
	for i := range m.Shards {
		files = append(files, &m.Shards[i])
	}
	for i := range m.Small {
		files = append(files, &m.Small[i])
	}
	if err := forEach(ctx, workers, len(files), func(ctx context.Context, i int) error {
		return writeDataFile(ctx, dir, files[i], prog)
	}); err != nil {
		prog.End()
		return nil, err
	}
	prog.End()

	prog.Begin("prepare: metadata entries", int64(m.MetaEntries), false)
	md := filepath.Join(dir, m.MetaDir)
	if err := os.Mkdir(md, 0o755); err != nil {
		prog.End()
		return nil, err
	}
	if err := forEach(ctx, workers, m.MetaEntries, func(_ context.Context, i int) error {
		if err := os.WriteFile(filepath.Join(md, MetaName(i)), nil, 0o644); err != nil {
			return err
		}
		prog.Add(1)
		return nil
	}); err != nil {
		prog.End()
		return nil, err
	}
	prog.End()

	// The manifest goes last and atomically: its presence means complete.
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(filepath.Join(dir, ManifestName), append(b, '\n'), 0o644, atomicfile.NoSync); err != nil {
		return nil, err
	}
	return m, nil
}

// ensureEmptyDir creates dir if missing and refuses a non-empty one; created
// says whether it made dir.
func ensureEmptyDir(dir string) (created bool, err error) {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return false, err
		}
		return true, nil
	case err != nil:
		return false, err
	case len(ents) > 0:
		return false, fmt.Errorf("%s is not empty: prepare writes a new dataset into a missing or empty directory", dir)
	}
	return false, nil
}

// cleanup undoes a failed Prepare: dir goes back to missing or empty.
func cleanup(dir string, created bool) {
	if created {
		_ = os.RemoveAll(dir)
		return
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

func writeDataFile(ctx context.Context, root string, f *File, prog Progress) (err error) {
	p := filepath.Join(root, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	c := f.Content()
	h := xxhash.New()
	buf := make([]byte, min(f.Size, 1<<20))
	for off := int64(0); off < f.Size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := buf[:min(int64(len(buf)), f.Size-off)]
		c.Fill(b, off)
		_, _ = h.Write(b)
		if _, err := out.Write(b); err != nil {
			return err
		}
		off += int64(len(b))
		prog.Add(int64(len(b)))
	}
	f.XXH64 = strconv.FormatUint(h.Sum64(), 16)
	return nil
}

// forEach runs fn(i) for i in [0, n) on up to workers goroutines; the first
// error cancels the rest and is returned.
func forEach(ctx context.Context, workers, n int, fn func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	var next atomic.Int64
	for range min(workers, n) {
		g.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return nil
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				if err := fn(ctx, i); err != nil {
					return err
				}
			}
		})
	}
	return g.Wait()
}
