package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/bench"
)

// The readers part (--only readers): the programs users run, not our own Go
// reader, each cold through a fresh mount (empty cache, page cache
// dropped) against the ideal reader measured just before and just after it
// in the same run (issue #31 goal 4). A reader's figure includes starting
// its process (a few milliseconds against a read of --big-size).

// pyBigReader reads argv[1] in 1 MiB reads (unbuffered, readinto: no copy
// into a new bytes object per read), as a data loader's file reader does,
// and prints the seconds from its open to its end: the interpreter's start
// (0.1-0.3 s on a busy machine) is no part of the read.
const pyBigReader = `
import sys, time
buf = bytearray(1 << 20)
start = time.monotonic()
with open(sys.argv[1], "rb", buffering=0) as f:
    while f.readinto(buf):
        pass
print(time.monotonic() - start)
`

// pyEpochReader reads the files named on stdin, whole, with int(argv[1])
// threads (reads release the GIL), and prints the epoch's seconds: what a
// PyTorch DataLoader's workers do over a map-style dataset of files.
const pyEpochReader = `
import sys, time
from concurrent.futures import ThreadPoolExecutor
paths = sys.stdin.read().split("\n")
paths = [p for p in paths if p]
def read(p):
    with open(p, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass
start = time.monotonic()
with ThreadPoolExecutor(int(sys.argv[1])) as ex:
    for _ in ex.map(read, paths):
        pass
print(time.monotonic() - start)
`

// bigReaders are the readers of one large file the part measures, each a
// command line over the file's path.
var bigReaders = []struct {
	name string
	argv func(path string) []string
	// selfTimed: the reader prints its own seconds, from its open to its
	// end (an interpreter whose start is not negligible).
	selfTimed bool
}{
	{"dd bs=1M", func(p string) []string { return []string{"dd", "if=" + p, "of=/dev/null", "bs=1M", "status=none"} }, false},
	// cat reads in 128 KiB (coreutils' io_blksize) into a pipe-less
	// /dev/null: what `cat file > /dev/null` or `cat file | ...` costs.
	{"cat", func(p string) []string { return []string{"sh", "-c", `exec cat "$1" > /dev/null`, "cat", p} }, false},
	{"python 1MiB", func(p string) []string { return []string{"python3", "-c", pyBigReader, p} }, true},
}

// readersResult is one run of the readers part.
type readersResult struct {
	// MB/s of each big reader, of the ideal reader around it (the mean
	// of before and after) and their ratio, in bigReaders' order.
	MBs, IdealMBs, Ratio []float64
	// The cold small-file epoch read by a Python process with c.readers
	// threads, files/s, against the ideal client (c.idealGETs GETs in
	// flight) before and after it.
	EpochFPS, EpochIdealFPS, EpochRatio float64
	// PeakRSS is the largest VmHWM of the part's daemons.
	PeakRSS int64
}

// dropPageCache empties the page cache (and the dentry and inode caches),
// so nothing the last reader read is answered by the kernel.
func dropPageCache() error {
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}

// timed runs argv to its end and returns the seconds it took.
func timed(argv []string, stdin string) (float64, string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	secs := time.Since(start).Seconds()
	if err != nil {
		return 0, "", fmt.Errorf("%s: %v: %s", argv[0], err, stderr.String())
	}
	return secs, string(out), nil
}

// benchReaders measures every big reader on its own fresh mount, then the
// Python small-file epoch on another.
func benchReaders(ctx context.Context, c config, emu *emulator, ideal backends.Backend, r int, res *readersResult) error {
	for _, rd := range bigReaders {
		if _, err := exec.LookPath(rd.argv("x")[0]); err != nil {
			return fmt.Errorf("reader %q: %w", rd.name, err)
		}
	}
	idealOnce := func() (float64, error) {
		if err := dropPageCache(); err != nil {
			return 0, err
		}
		if err := bench.PrimeMemory(c.bigSize + c.memBytes); err != nil {
			return 0, err
		}
		return idealRead(ctx, c, ideal, "file.bin", c.bigSize)
	}
	res.MBs = make([]float64, len(bigReaders))
	res.IdealMBs = make([]float64, len(bigReaders))
	res.Ratio = make([]float64, len(bigReaders))
	// Each run starts with the next reader: on a shared machine the load
	// drifts during a run, and the last reader would always get its end.
	for k := range bigReaders {
		i := (k + r) % len(bigReaders)
		rd := bigReaders[i]
		cacheDir, err := os.MkdirTemp(c.cacheRoot, "readers-")
		if err != nil {
			return err
		}
		mnt := filepath.Join(c.work, "mnt-readers")
		m, err := startMount(c, emu, "oss://bench/big/", cacheDir, mnt)
		if err != nil {
			return err
		}
		before, err := idealOnce()
		if err == nil {
			err = dropPageCache()
		}
		if err == nil {
			err = bench.PrimeMemory(c.bigSize + c.memBytes)
		}
		var secs float64
		if err == nil {
			var out string
			secs, out, err = timed(rd.argv(filepath.Join(mnt, "file.bin")), "")
			if err == nil && rd.selfTimed {
				secs, err = strconv.ParseFloat(strings.TrimSpace(out), 64)
			}
		}
		var after float64
		if err == nil {
			after, err = idealOnce()
		}
		res.PeakRSS = max(res.PeakRSS, m.stop())
		os.RemoveAll(cacheDir)
		if err != nil {
			return fmt.Errorf("readers, %s: %w", rd.name, err)
		}
		mbs := float64(c.bigSize) / secs / 1e6
		id := (before + after) / 2
		res.MBs[i], res.IdealMBs[i], res.Ratio[i] = mbs, id, mbs/id
	}
	return readersEpoch(ctx, c, emu, r, res)
}

// readersEpoch is the cold small-file epoch read by Python, through a
// fresh mount listed first (untimed, as a loader lists its dataset).
func readersEpoch(ctx context.Context, c config, emu *emulator, r int, res *readersResult) error {
	rel := make([]string, c.smallFiles)
	for i := range rel {
		rel[i] = strings.TrimPrefix(smallPath(c, "", i), "bench/small/")
	}
	rnd := rand.New(rand.NewPCG(2, uint64(r)))
	rnd.Shuffle(len(rel), func(i, j int) { rel[i], rel[j] = rel[j], rel[i] })
	u, _ := backends.ParseURI("oss://bench/small/")
	ideal, err := oss.New(ctx, u, oss.Options{Endpoint: emu.endpoint}, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer ideal.Close()
	before, err := idealEpoch(ctx, c, ideal, rel)
	if err != nil {
		return fmt.Errorf("ideal epoch: %w", err)
	}
	cacheDir, err := os.MkdirTemp(c.cacheRoot, "readers-small-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cacheDir)
	mnt := filepath.Join(c.work, "mnt-readers-small")
	m, err := startMount(c, emu, "oss://bench/small/", cacheDir, mnt)
	if err != nil {
		return err
	}
	err = listSmall(c, mnt)
	var secs float64
	if err == nil {
		var paths strings.Builder
		for _, p := range rel {
			paths.WriteString(filepath.Join(mnt, p) + "\n")
		}
		var out string
		if _, out, err = timed([]string{"python3", "-c", pyEpochReader, strconv.Itoa(c.readers)}, paths.String()); err == nil {
			secs, err = strconv.ParseFloat(strings.TrimSpace(out), 64)
		}
	}
	res.PeakRSS = max(res.PeakRSS, m.stop())
	if err != nil {
		return fmt.Errorf("readers, python epoch: %w", err)
	}
	after, err := idealEpoch(ctx, c, ideal, rel)
	if err != nil {
		return fmt.Errorf("ideal epoch: %w", err)
	}
	res.EpochFPS = float64(c.smallFiles) / secs
	res.EpochIdealFPS = (before + after) / 2
	res.EpochRatio = res.EpochFPS / res.EpochIdealFPS
	return nil
}

// reportReaders prints the readers part's medians and each run's ratios.
func reportReaders(c config, rs []readersResult) {
	col := func(f func(readersResult) float64) float64 {
		var v []float64
		for _, r := range rs {
			v = append(v, f(r))
		}
		return median(v)
	}
	fmt.Printf("readers, cold %s, single stream, a fresh mount each (goal >= 0.85 of the ideal %d x %s ranged GETs):\n",
		humanize.IBytes(uint64(c.bigSize)), c.streams, humanize.IBytes(uint64(c.chunk)))
	for i, rd := range bigReaders {
		fmt.Printf("  %-12s %4.0f MB/s / ideal %4.0f MB/s = %.2f (per run:", rd.name,
			col(func(r readersResult) float64 { return r.MBs[i] }), col(func(r readersResult) float64 { return r.IdealMBs[i] }),
			col(func(r readersResult) float64 { return r.Ratio[i] }))
		for _, r := range rs {
			fmt.Printf(" %.2f", r.Ratio[i])
		}
		fmt.Println(")")
	}
	fmt.Printf("  cold epoch of %d small files, python with %d threads: %.0f files/s / ideal (%d GETs in flight) %.0f = %.2f (goal >= 0.8; per run:",
		c.smallFiles, c.readers, col(func(r readersResult) float64 { return r.EpochFPS }), c.idealGETs,
		col(func(r readersResult) float64 { return r.EpochIdealFPS }), col(func(r readersResult) float64 { return r.EpochRatio }))
	for _, r := range rs {
		fmt.Printf(" %.2f", r.EpochRatio)
	}
	fmt.Println(")")
}
