package cache

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// MiB is one mebibyte.
const MiB = 1 << 20

// Options configures a Cache. The zero value of a field selects its default
// (see DefaultOptions), except Dir: "" runs without a disk tier.
type Options struct {
	// Dir holds the disk tier. It survives restarts; "" disables the disk
	// tier (and with it passthrough).
	Dir string
	// MemoryBytes bounds the memory tier (block bytes held by ristretto).
	MemoryBytes int64
	// DiskBytes bounds the bytes the disk tier holds; 0 means no bound
	// other than FreeFloorBytes.
	DiskBytes int64
	// FreeFloorBytes is the free space the disk tier always leaves on the
	// filesystem holding Dir.
	FreeFloorBytes int64
	// BlockSize is the unit of caching, single-flight and presence.
	BlockSize int64
	// MinWindow and MaxWindow bound the readahead window of a sequential
	// stream: it starts at MinWindow and doubles on every sequential read,
	// except that a stream read from offset 0 takes MaxWindow at its
	// second read (a whole-file read; see handle.readahead).
	// MaxWindow is capped at a quarter of MemoryBytes (half the buffer that
	// holds fetched blocks until they are read).
	MinWindow, MaxWindow int64
	// MaxRequestBytes is the largest single ranged read sent to a backend.
	MaxRequestBytes int64
	// FileRequests bounds ranged reads in flight per open object, and
	// TotalRequests across the cache.
	FileRequests, TotalRequests int
	// SmallFileBytes: objects at most this large are fetched whole, in one
	// request, as soon as they are opened.
	SmallFileBytes int64
	// WarmAfter: once this many small objects of one directory were opened,
	// the directory's other small objects are fetched ahead of the reader
	// (an epoch over a dataset of small files). Negative disables warming.
	WarmAfter int
	// WarmRequests bounds the whole-object fetches warming runs at once.
	WarmRequests int
	// NoPassthrough disables FUSE passthrough of files complete on disk.
	NoPassthrough bool
	// Log receives eviction and error reports; nil discards them.
	Log *slog.Logger
	// Progress receives a line a second while New indexes the disk tier
	// an earlier run left (a stat per object: a cache of a million objects
	// takes seconds, more after a reboot), and a last line if it printed
	// any; nil: none.
	Progress io.Writer

	// writeQueueBytes overrides writeQueueBytes (tests).
	writeQueueBytes int64
	// bootID overrides the kernel's boot ID (tests simulate a reboot).
	bootID string
	// progressEvery overrides scanProgressEvery (tests).
	progressEvery time.Duration
	// indexCompactAfter overrides indexCompactAfter (tests).
	indexCompactAfter int
}

// DefaultOptions returns the defaults every zero field of Options takes.
func DefaultOptions() Options {
	return Options{
		MemoryBytes:     512 * MiB,
		FreeFloorBytes:  1 << 30,
		BlockSize:       1 * MiB,
		MinWindow:       1 * MiB,
		MaxWindow:       128 * MiB,
		MaxRequestBytes: 8 * MiB,
		FileRequests:    16,
		TotalRequests:   64,
		SmallFileBytes:  4 * MiB,
		WarmAfter:       4,
		WarmRequests:    64, // bounded by TotalRequests less what is kept for readers
	}
}

// withDefaults fills zero fields and validates the result.
func (o Options) withDefaults() (Options, error) {
	d := DefaultOptions()
	if o.MemoryBytes == 0 {
		o.MemoryBytes = d.MemoryBytes
	}
	if o.FreeFloorBytes == 0 {
		o.FreeFloorBytes = d.FreeFloorBytes
	}
	if o.BlockSize == 0 {
		o.BlockSize = d.BlockSize
	}
	if o.MinWindow == 0 {
		o.MinWindow = d.MinWindow
	}
	if o.MaxWindow == 0 {
		o.MaxWindow = d.MaxWindow
	}
	if o.MaxRequestBytes == 0 {
		o.MaxRequestBytes = d.MaxRequestBytes
	}
	if o.FileRequests == 0 {
		o.FileRequests = d.FileRequests
	}
	if o.TotalRequests == 0 {
		o.TotalRequests = d.TotalRequests
	}
	if o.SmallFileBytes == 0 {
		o.SmallFileBytes = d.SmallFileBytes
	}
	if o.WarmAfter == 0 {
		o.WarmAfter = d.WarmAfter
	}
	if o.WarmRequests == 0 {
		o.WarmRequests = d.WarmRequests
	}
	if o.writeQueueBytes == 0 {
		o.writeQueueBytes = writeQueueBytes
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.bootID == "" && o.Dir != "" {
		o.bootID = bootID()
	}
	return o, o.validate()
}

func (o Options) validate() error {
	var errs []error
	if o.MemoryBytes < 0 {
		errs = append(errs, fmt.Errorf("cache memory %d: must not be negative", o.MemoryBytes))
	}
	if o.DiskBytes < 0 {
		errs = append(errs, fmt.Errorf("cache disk bound %d: must not be negative", o.DiskBytes))
	}
	if o.FreeFloorBytes < 0 {
		errs = append(errs, fmt.Errorf("cache free-space floor %d: must not be negative", o.FreeFloorBytes))
	}
	if o.BlockSize < 4096 || o.BlockSize&(o.BlockSize-1) != 0 {
		errs = append(errs, fmt.Errorf("cache block size %d: must be a power of two of at least 4096", o.BlockSize))
	}
	if o.MinWindow < 0 || o.MaxWindow < o.MinWindow {
		errs = append(errs, fmt.Errorf("readahead window %d..%d: want 0 <= min <= max", o.MinWindow, o.MaxWindow))
	}
	if o.MaxRequestBytes < o.BlockSize {
		errs = append(errs, fmt.Errorf("largest request %d: must be at least the block size %d", o.MaxRequestBytes, o.BlockSize))
	}
	if o.WarmRequests < 1 {
		errs = append(errs, fmt.Errorf("warming requests %d: must be at least 1", o.WarmRequests))
	}
	if o.FileRequests < 1 || o.TotalRequests < 1 {
		errs = append(errs, fmt.Errorf("requests in flight %d per file, %d total: both must be at least 1", o.FileRequests, o.TotalRequests))
	}
	if o.SmallFileBytes < 0 {
		errs = append(errs, fmt.Errorf("small-file size %d: must not be negative", o.SmallFileBytes))
	}
	return errors.Join(errs...)
}
