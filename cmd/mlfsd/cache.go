package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"

	"github.com/dustin/go-humanize"
	"github.com/spf13/pflag"

	"github.com/mlfsd/mlfsd/cache"
	mfs "github.com/mlfsd/mlfsd/fs"
)

// cacheConfig holds the read-path cache flags, and the one Cache every input
// mount of this process shares (one disk tier per directory and process).
type cacheConfig struct {
	dir           string
	memory        byteSize
	disk          byteSize
	freeFloor     byteSize
	maxWindow     byteSize
	requests      int
	noPassthrough bool
	noWarm        bool

	mu     sync.Mutex
	shared *cache.Cache // GUARDED_BY(mu)
	users  int          // GUARDED_BY(mu): mounts using shared
}

func defaultCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "mlfsd")
	}
	return filepath.Join(os.TempDir(), "mlfsd-cache")
}

func addCacheFlags(fs *pflag.FlagSet, c *cacheConfig) {
	d := cache.DefaultOptions()
	c.memory, c.freeFloor, c.maxWindow = byteSize(d.MemoryBytes), byteSize(2<<30), byteSize(d.MaxWindow)
	fs.StringVar(&c.dir, "cache-dir", defaultCacheDir(),
		`disk cache of input data; it survives restarts ("" keeps no disk cache)`)
	fs.Var(&c.memory, "cache-memory", "memory cache size (e.g. 512MiB, 4GiB); the daemon stays within this plus 256MiB")
	fs.Var(&c.disk, "cache-disk", "most bytes the disk cache holds (0: bounded only by --cache-free-floor)")
	fs.Var(&c.freeFloor, "cache-free-floor", "free space the disk cache always leaves on its filesystem")
	fs.Var(&c.maxWindow, "prefetch-window", "largest readahead window of a sequential reader (at most a quarter of --cache-memory)")
	fs.IntVar(&c.requests, "prefetch-requests", d.TotalRequests, "most ranged reads in flight to backends, over all files")
	fs.BoolVar(&c.noWarm, "no-prefetch-dirs", false,
		"do not fetch a directory's other small files ahead once several of them were opened")
	fs.BoolVar(&c.noPassthrough, "no-passthrough", false,
		"serve cached files through the daemon instead of FUSE passthrough")
}

// newSource returns the Source input mounts read through, and a function
// that releases it once every mount using it is gone.
func (a *app) newSource(ctx context.Context) (mfs.Source, func() error, error) {
	c := &a.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shared == nil {
		opt := cache.Options{
			Dir:            c.dir,
			MemoryBytes:    int64(c.memory),
			DiskBytes:      int64(c.disk),
			FreeFloorBytes: int64(c.freeFloor),
			MaxWindow:      int64(c.maxWindow),
			TotalRequests:  c.requests,
			NoPassthrough:  c.noPassthrough,
			Log:            a.log,
		}
		if c.noWarm {
			opt.WarmAfter = -1
		}
		if opt.MemoryBytes <= 0 {
			return nil, nil, fmt.Errorf("--cache-memory %s: must be more than 0", &c.memory)
		}
		if opt.MaxWindow < cache.DefaultOptions().MinWindow {
			return nil, nil, fmt.Errorf("--prefetch-window %s: must be at least 1MiB", &c.maxWindow)
		}
		if opt.FreeFloorBytes == 0 {
			opt.FreeFloorBytes = 1 // 0 would mean "default"; the user asked for none
		}
		sc, err := cache.New(opt)
		if errors.Is(err, cache.ErrDirBusy) {
			// Another daemon owns that disk cache: serve from memory
			// rather than refuse to mount.
			a.log.Warn("disk cache in use by another process; running without one (give --cache-dir)", "dir", c.dir)
			opt.Dir = ""
			sc, err = cache.New(opt)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read cache: %w", err)
		}
		if os.Getenv("GOMEMLIMIT") == "" {
			// Blocks the memory tier dropped are garbage until the next GC;
			// a soft limit keeps the heap near --cache-memory instead of
			// twice it.
			debug.SetMemoryLimit(int64(c.memory) + 160<<20)
		}
		c.shared = sc
	}
	c.users++
	sc := c.shared
	var once sync.Once
	release := func() error {
		var err error
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.users--
			if c.users == 0 {
				err = c.shared.Close()
				c.shared = nil
			}
		})
		return err
	}
	return sc, release, nil
}

// byteSize is a flag value in bytes that accepts units: 512MiB, 4GiB, 1G, 0.
type byteSize int64

func (b *byteSize) String() string { return humanize.IBytes(uint64(*b)) }

func (b *byteSize) Set(s string) error {
	v, err := humanize.ParseBytes(s)
	if err != nil {
		return fmt.Errorf("%q is not a size (want e.g. 512MiB, 4GiB)", s)
	}
	if v > math.MaxInt64 {
		return fmt.Errorf("%q is too large", s)
	}
	*b = byteSize(v)
	return nil
}

func (b *byteSize) Type() string { return "size" }
