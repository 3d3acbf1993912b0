package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Metrics a workload is judged by.
const (
	MetricMBps  = "MB/s"    // decimal megabytes (1e6 bytes) per second
	MetricFiles = "files/s" // files (or directory entries) per second
)

// env is what one run of one workload sees.
type env struct {
	fs       FS
	m        *Manifest
	opt      *RunOptions
	prog     Progress
	run      int       // 0-based index of this run, varies shuffles and offsets
	deadline time.Time // zero: none
}

// expired says whether --duration has run out; workloads then stop early
// and report what they did.
func (e *env) expired() bool {
	return !e.deadline.IsZero() && time.Now().After(e.deadline)
}

// workload is one access pattern.
type workload struct {
	name   string
	desc   string
	op     string // what one latency sample is
	metric string // the figure it is judged by
	write  bool
	// threads is the number of goroutines the run will use.
	threads func(e *env) int
	// total is the progress total (bytes or items) of one run.
	total func(e *env) (n int64, bytes bool)
	run   func(ctx context.Context, e *env) (*sample, error)
}

// Workloads in the order they run.
func allWorkloads() []workload {
	return []workload{
		{
			name: "seq1", desc: "sequential 1 MiB reads of every shard, one thread", op: "1 MiB read", metric: MetricMBps,
			threads: func(*env) int { return 1 },
			total:   func(e *env) (int64, bool) { return sumSize(e.m.Shards), true },
			run:     func(ctx context.Context, e *env) (*sample, error) { return runSeq(ctx, e, 1) },
		},
		{
			name: "seqN", desc: "sequential 1 MiB reads of the shards, one thread per shard up to --threads", op: "1 MiB read", metric: MetricMBps,
			threads: func(e *env) int { return min(e.opt.Threads, len(e.m.Shards)) },
			total:   func(e *env) (int64, bool) { return sumSize(e.m.Shards), true },
			run: func(ctx context.Context, e *env) (*sample, error) {
				return runSeq(ctx, e, min(e.opt.Threads, len(e.m.Shards)))
			},
		},
		{
			name: "epoch", desc: "every small file once, whole-file reads in shuffled order, --threads readers", op: "file (open, read, close)", metric: MetricFiles,
			threads: func(e *env) int { return e.opt.Threads },
			total:   func(e *env) (int64, bool) { return sumSize(e.m.Small), true },
			run:     runEpoch,
		},
		{
			name: "random", desc: "random reads of 4 KiB..1 MiB (powers of two, 4 KiB aligned) in the shards, --threads readers", op: "pread", metric: MetricMBps,
			threads: func(e *env) int { return e.opt.Threads },
			total:   func(e *env) (int64, bool) { return int64(e.opt.RandomOps), false },
			run:     runRandom,
		},
		{
			name: "ckpt", desc: "sequential 1 MiB writes of one checkpoint file in --write-dir, then fsync and close", op: "1 MiB write", metric: MetricMBps, write: true,
			threads: func(*env) int { return 1 },
			total:   func(e *env) (int64, bool) { return e.ckptSize(), true },
			run:     runCkpt,
		},
		{
			name: "list", desc: "one listing of the metadata directory", op: "whole listing", metric: MetricFiles,
			threads: func(*env) int { return 1 },
			total:   func(e *env) (int64, bool) { return 0, false },
			run:     runList,
		},
		{
			name: "stat", desc: "stat of every entry of the metadata directory in shuffled order, --threads callers", op: "stat", metric: MetricFiles,
			threads: func(e *env) int { return e.opt.Threads },
			total:   func(e *env) (int64, bool) { return int64(e.m.MetaEntries), false },
			run:     runStat,
		},
	}
}

// WorkloadNames lists the workloads in the order they run.
func WorkloadNames() []string {
	var n []string
	for _, w := range allWorkloads() {
		n = append(n, w.name)
	}
	return n
}

// WorkloadHelp describes each workload, one per line.
func WorkloadHelp() string {
	var s string
	for _, w := range allWorkloads() {
		s += fmt.Sprintf("  %-7s %s\n", w.name, w.desc)
	}
	return s
}

func sumSize(fs []File) int64 {
	var n int64
	for _, f := range fs {
		n += f.Size
	}
	return n
}

func (e *env) ckptSize() int64 {
	if e.opt.CkptSize > 0 {
		return e.opt.CkptSize
	}
	return e.m.Profile.ShardSize
}

// readWhole reads f from start to end with reads of len(buf), verifying
// every byte against its content and the whole against the manifest's size
// and checksum. Latencies of reads go to lat when non-nil. partial reports a
// stop by --duration (the checksum is then not checked).
func readWhole(ctx context.Context, e *env, f File, buf []byte, v *Verifier, lat *[]time.Duration) (n int64, partial bool, err error) {
	in, err := e.fs.Open(ctx, f.Path)
	if err != nil {
		return 0, false, err
	}
	defer in.Close()
	c := f.Content()
	h := xxhash.New()
	for {
		if e.expired() {
			return n, true, nil
		}
		if err := ctx.Err(); err != nil {
			return n, false, err
		}
		t := time.Now()
		k, rerr := in.Read(buf)
		if lat != nil && k > 0 {
			*lat = append(*lat, time.Since(t))
		}
		if k > 0 {
			if n+int64(k) > f.Size {
				return n, false, fmt.Errorf("%s: longer than the %d bytes the manifest says", f.Path, f.Size)
			}
			if err := v.Check(f.Path, c, buf[:k], n); err != nil {
				return n, false, err
			}
			_, _ = h.Write(buf[:k])
			n += int64(k)
			e.prog.Add(int64(k))
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return n, false, fmt.Errorf("%s: read at offset %d: %w", f.Path, n, rerr)
		}
	}
	if n != f.Size {
		return n, false, fmt.Errorf("%s: read %d bytes, the manifest says %d", f.Path, n, f.Size)
	}
	if got := strconv.FormatUint(h.Sum64(), 16); got != f.XXH64 {
		return n, false, fmt.Errorf("%s: xxh64 %s, the manifest says %s", f.Path, got, f.XXH64)
	}
	return n, false, nil
}

// parallel runs body(worker, lat) on n goroutines, each with its own
// latency slice, and merges the latencies. The first error cancels ctx
// for the others and is returned.
func parallel(ctx context.Context, n int, body func(ctx context.Context, worker int, lat *[]time.Duration) error) ([]time.Duration, error) {
	var all latencies
	err := forEach(ctx, n, n, func(ctx context.Context, w int) error {
		var lat []time.Duration
		err := body(ctx, w, &lat)
		all.merge(lat)
		return err
	})
	return all.all, err
}

func runSeq(ctx context.Context, e *env, threads int) (*sample, error) {
	s := &sample{}
	var next, bytes, files, partial counter
	start := time.Now()
	lat, err := parallel(ctx, threads, func(ctx context.Context, _ int, lat *[]time.Duration) error {
		buf := make([]byte, 1<<20)
		var v Verifier
		for {
			i := next.next()
			if i >= len(e.m.Shards) || e.expired() || ctx.Err() != nil {
				return ctx.Err()
			}
			n, p, err := readWhole(ctx, e, e.m.Shards[i], buf, &v, lat)
			bytes.add(n)
			if err != nil {
				return err
			}
			if p {
				partial.add(1)
				return nil
			}
			files.add(1)
		}
	})
	s.elapsed = time.Since(start)
	s.bytes, s.files, s.lat = bytes.get(), files.get(), lat
	s.ops = int64(len(lat))
	s.partial = partial.get() > 0 || s.files < int64(len(e.m.Shards))
	return s, err
}

func runEpoch(ctx context.Context, e *env) (*sample, error) {
	order := rand.New(rand.NewPCG(e.opt.Seed, uint64(e.run))).Perm(len(e.m.Small))
	var maxSize int64
	for _, f := range e.m.Small {
		maxSize = max(maxSize, f.Size)
	}
	var next, bytes, files counter
	start := time.Now()
	lat, err := parallel(ctx, e.opt.Threads, func(ctx context.Context, _ int, lat *[]time.Duration) error {
		// One read asks for more than the file holds, as Python's
		// f.read() does, and the next sees EOF.
		buf := make([]byte, maxSize+1)
		var v Verifier
		for {
			i := next.next()
			if i >= len(order) || e.expired() || ctx.Err() != nil {
				return ctx.Err()
			}
			t := time.Now()
			n, partial, err := readWhole(ctx, e, e.m.Small[order[i]], buf, &v, nil)
			bytes.add(n)
			if err != nil || partial {
				return err
			}
			*lat = append(*lat, time.Since(t))
			files.add(1)
		}
	})
	s := &sample{elapsed: time.Since(start), bytes: bytes.get(), files: files.get(), lat: lat}
	s.ops = s.files
	s.partial = s.files < int64(len(order))
	return s, err
}

// The random workload reads 4 KiB << k bytes, k uniform in [0, randomSizes):
// 4 KiB..1 MiB.
const randomSizes = 9

func runRandom(ctx context.Context, e *env) (*sample, error) {
	threads := e.opt.Threads
	var bytes counter
	start := time.Now()
	lat, err := parallel(ctx, threads, func(ctx context.Context, w int, lat *[]time.Duration) error {
		ops := e.opt.RandomOps / threads
		if w < e.opt.RandomOps%threads {
			ops++
		}
		rng := rand.New(rand.NewPCG(e.opt.Seed^0x72616e646f6d, uint64(e.run)<<16|uint64(w)))
		files := make([]Handle, len(e.m.Shards))
		defer func() {
			for _, f := range files {
				if f != nil {
					f.Close()
				}
			}
		}()
		buf := make([]byte, 1<<20)
		var v Verifier
		for range ops {
			if e.expired() || ctx.Err() != nil {
				return ctx.Err()
			}
			i := rng.IntN(len(e.m.Shards))
			f := e.m.Shards[i]
			n := min(int64(4<<10)<<rng.IntN(randomSizes), f.Size)
			off := rng.Int64N((f.Size-n)/4096+1) * 4096
			if files[i] == nil {
				fh, err := e.fs.Open(ctx, f.Path)
				if err != nil {
					return err
				}
				files[i] = fh
			}
			t := time.Now()
			k, err := files[i].ReadAt(buf[:n], off)
			*lat = append(*lat, time.Since(t))
			if err != nil && !(errors.Is(err, io.EOF) && int64(k) == n) {
				return fmt.Errorf("%s: read of %d bytes at offset %d: %w", f.Path, n, off, err)
			}
			if err := v.Check(f.Path, f.Content(), buf[:k], off); err != nil {
				return err
			}
			bytes.add(int64(k))
			e.prog.Add(1)
		}
		return nil
	})
	s := &sample{elapsed: time.Since(start), bytes: bytes.get(), lat: lat, ops: int64(len(lat))}
	s.partial = s.ops < int64(e.opt.RandomOps)
	return s, err
}

func runCkpt(ctx context.Context, e *env) (s *sample, err error) {
	size := e.ckptSize()
	name := fmt.Sprintf("mlfsd-bench-ckpt-%d-%d.bin", os.Getpid(), e.run)
	p := filepath.Join(e.opt.WriteDir, name)
	c := Content{Seed: mix(e.opt.Seed ^ 0x636b7074 + uint64(e.run))}
	buf := make([]byte, 1<<20)
	var lat []time.Duration

	start := time.Now()
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() {
		if out != nil {
			out.Close()
		}
		if rerr := os.Remove(p); rerr != nil && err == nil {
			err = fmt.Errorf("removing checkpoint %s: %w", p, rerr)
		}
	}()
	var n int64
	for n < size {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b := buf[:min(int64(len(buf)), size-n)]
		c.Fill(b, n)
		t := time.Now()
		if _, err := out.Write(b); err != nil {
			return nil, fmt.Errorf("%s: write at offset %d: %w", p, n, err)
		}
		lat = append(lat, time.Since(t))
		n += int64(len(b))
		e.prog.Add(int64(len(b)))
	}
	t := time.Now()
	if err := out.Sync(); err != nil {
		return nil, fmt.Errorf("%s: fsync: %w", p, err)
	}
	fsync := time.Since(t)
	t = time.Now()
	err = out.Close()
	out = nil
	if err != nil {
		return nil, fmt.Errorf("%s: close: %w", p, err)
	}
	closed := time.Since(t)
	s = &sample{elapsed: time.Since(start), bytes: n, files: 1, lat: lat, ops: int64(len(lat)),
		extra: map[string]float64{"fsync_ms": ms(fsync), "close_ms": ms(closed)}}

	// Read it back (untimed): what was written must be what is there.
	f := File{Path: p, Size: size, Seed: c.Seed}
	in, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	var v Verifier
	var off int64
	for {
		k, rerr := in.Read(buf)
		if k > 0 {
			if err := v.Check(f.Path, c, buf[:k], off); err != nil {
				return nil, fmt.Errorf("checkpoint read back: %w", err)
			}
			off += int64(k)
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return nil, fmt.Errorf("checkpoint read back: %s: %w", p, rerr)
		}
	}
	if off != size {
		return nil, fmt.Errorf("checkpoint read back: %s: %d bytes, wrote %d", p, off, size)
	}
	return s, nil
}

func runList(ctx context.Context, e *env) (*sample, error) {
	start := time.Now()
	names, err := e.fs.ReadDirNames(ctx, e.m.MetaDir)
	if err != nil {
		return nil, fmt.Errorf("%s: listing: %w", e.m.MetaDir, err)
	}
	el := time.Since(start)
	e.prog.Add(int64(len(names)))
	// Every entry once, nothing else.
	slices.Sort(names)
	if len(names) != e.m.MetaEntries {
		return nil, fmt.Errorf("%s: listing has %d entries, the manifest says %d", e.m.MetaDir, len(names), e.m.MetaEntries)
	}
	for i, n := range names {
		if n != MetaName(i) {
			return nil, fmt.Errorf("%s: listing has %q where %q belongs", e.m.MetaDir, n, MetaName(i))
		}
	}
	return &sample{elapsed: el, files: int64(len(names)), ops: 1, lat: []time.Duration{el}}, ctx.Err()
}

func runStat(ctx context.Context, e *env) (*sample, error) {
	order := rand.New(rand.NewPCG(e.opt.Seed^0x73746174, uint64(e.run))).Perm(e.m.MetaEntries)
	var next, files counter
	start := time.Now()
	lat, err := parallel(ctx, e.opt.Threads, func(ctx context.Context, _ int, lat *[]time.Duration) error {
		for {
			i := next.next()
			if i >= len(order) || e.expired() || ctx.Err() != nil {
				return ctx.Err()
			}
			rel := e.m.MetaDir + "/" + MetaName(order[i])
			t := time.Now()
			fi, err := e.fs.Stat(ctx, rel)
			*lat = append(*lat, time.Since(t))
			if err != nil {
				return err
			}
			if !fi.Regular || fi.Size != 0 {
				return fmt.Errorf("%s: size %d (regular file: %v), want an empty regular file", rel, fi.Size, fi.Regular)
			}
			files.add(1)
			e.prog.Add(1)
		}
	})
	s := &sample{elapsed: time.Since(start), files: files.get(), lat: lat, ops: int64(len(lat))}
	s.partial = s.files < int64(len(order))
	return s, err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
