package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/bench"
)

// scaleConfig is the scale part's own configuration (--scale-*).
type scaleConfig struct {
	ns      []int64 // namespace sizes, in order
	fanOut  int64   // objects per directory (0: one flat directory)
	size    int64   // bytes per object
	readers int     // readers of the 1% sample
	out     string  // directory of scale.csv and scale.png
}

func parseScaleNs(s string) ([]int64, error) {
	var ns []int64
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(strings.ReplaceAll(f, "_", "")), 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--scale-n %q: want sizes like 10000,100000,1000000", s)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// scaleRow is the scale part's figures at one namespace size.
type scaleRow struct {
	N, Dirs int64
	// Seconds: `mlfsd mount` to mounted; the first byte of one file
	// read right after (its directory never listed); `find -type f` of
	// the whole tree; a shuffled 1% sample of the files read whole.
	MountSecs, FirstByteSecs, FindSecs, SampleSecs float64
	// RSS of the daemon: mounted and idle; right after find; after the
	// kernel forgot everything (drop_caches), with the seconds it took to
	// get within 10% of idle (or the wait's end); after the sample, whose
	// data the cache keeps (up to --cache-memory).
	IdleRSS, FindRSS, DropRSS, SampleRSS int64
	DropSecs                             float64
	// The daemon's live heap (after a collection): idle, after find, and
	// after drop_caches.
	IdleHeap, FindHeap, DropHeap int64
}

func (r scaleRow) findRate() float64   { return float64(r.N+r.Dirs) / r.FindSecs }
func (r scaleRow) sampleRate() float64 { return float64(sampleSize(r.N)) / r.SampleSecs }

// bytesPerEntry is the daemon's live heap per entry it knows after find
// (files and directories, every one listed), over the idle figure.
func (r scaleRow) bytesPerEntry() float64 {
	return float64(r.FindHeap-r.IdleHeap) / float64(r.N+r.Dirs)
}

func sampleSize(n int64) int64 { return max(1, n/100) }

// benchScale runs the scale part: for each size, an emulator serving a
// synthetic namespace of that many objects (nothing on disk), a fresh
// mount over it, and the figures of scaleRow. It prints a table and writes
// DIR/scale.csv and DIR/scale.png (log-log: a superlinear step shows).
func benchScale(c config, sc scaleConfig) error {
	ttfb, err := time.ParseDuration(c.ttfb)
	if err != nil {
		return fmt.Errorf("--ttfb: %w", err)
	}
	if c.pprofAddr == "" {
		// The daemons' live heap is read from their pprof endpoint.
		if c.pprofAddr, err = freeAddr(); err != nil {
			return err
		}
	}
	var rows []scaleRow
	for _, n := range sc.ns {
		fmt.Printf("scale: %d objects\n", n)
		row, err := scaleOne(c, sc, n)
		if err != nil {
			return fmt.Errorf("scale, %d objects: %w", n, err)
		}
		rows = append(rows, row)
	}
	fmt.Printf("\nscale over a synthetic namespace (%s objects, %d per directory; emulator ttfb %s, %s per connection; one run):\n",
		humanize.IBytes(uint64(sc.size)), sc.fanOut, c.ttfb, c.bandwidth)
	fmt.Printf("%10s %7s %10s %5s %8s %9s %10s %8s %8s %8s %8s %8s %6s %7s %8s\n", "entries", "mount s", "1st byte s", "/ttfb", "find s", "entries/s",
		"1% file/s", "idle RSS", "find RSS", "drop RSS", "/idle", "drop s", "B/ent", "heap", "1% RSS")
	for _, r := range rows {
		fmt.Printf("%10d %7.2f %10.3f %5.1f %8.2f %9.0f %10.0f %8s %8s %8s %8.2f %8.1f %6.0f %7s %8s\n", r.N+r.Dirs, r.MountSecs, r.FirstByteSecs,
			r.FirstByteSecs/ttfb.Seconds(), r.FindSecs, r.findRate(), r.sampleRate(), mib(r.IdleRSS), mib(r.FindRSS), mib(r.DropRSS),
			float64(r.DropRSS)/float64(r.IdleRSS), r.DropSecs, r.bytesPerEntry(), mib(r.FindHeap), mib(r.SampleRSS))
	}
	fmt.Println("B/ent: the daemon's live heap per entry after find, over idle; heap: its live heap then; 1% RSS includes the sample's data in the cache")
	fmt.Println("goals: first byte <= 3 x ttfb; find >= 20,000 entries/s (quiet machine); B/ent <= 200; drop RSS <= 1.1 x idle")
	if err := os.MkdirAll(sc.out, 0o755); err != nil {
		return err
	}
	csvPath, pngPath := filepath.Join(sc.out, "scale.csv"), filepath.Join(sc.out, "scale.png")
	if err := writeScaleCSV(csvPath, rows); err != nil {
		return err
	}
	if err := bench.PlotScale(pngPath, scaleSeries(rows)); err != nil {
		return err
	}
	fmt.Println("wrote", csvPath, "and", pngPath)
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.0fM", float64(b)/(1<<20)) }

func scaleOne(c config, sc scaleConfig, n int64) (scaleRow, error) {
	row := scaleRow{N: n}
	syn := ossemu.Synthetic{N: n, FanOut: sc.fanOut, Size: sc.size}
	if sc.fanOut > 0 {
		row.Dirs = (n + sc.fanOut - 1) / sc.fanOut
	}
	root := filepath.Join(c.work, "scale-emu")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return row, err
	}
	emu, err := startEmulator(c, root, "--synthetic", strconv.FormatInt(n, 10), "--synthetic-fanout", strconv.FormatInt(sc.fanOut, 10),
		"--synthetic-size", strconv.FormatInt(sc.size, 10))
	if err != nil {
		return row, err
	}
	defer emu.stop()
	cacheDir, err := os.MkdirTemp(c.cacheRoot, "scale-")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(cacheDir)
	mnt := filepath.Join(c.work, "mnt-scale")
	start := time.Now()
	m, err := startMount(c, emu, "oss://"+ossemu.SyntheticBucket+"/", cacheDir, mnt)
	if err != nil {
		return row, err
	}
	defer m.stop()
	row.MountSecs = time.Since(start).Seconds()
	row.IdleRSS = m.rss()
	if row.IdleHeap, err = liveHeap(c.pprofAddr); err != nil {
		return row, err
	}

	rng := rand.New(rand.NewPCG(uint64(n), 31))
	first := rng.Int64N(n)
	start = time.Now()
	f, err := os.Open(filepath.Join(mnt, ossemu.SyntheticKey(syn, first)))
	if err != nil {
		return row, fmt.Errorf("first byte: %w", err)
	}
	b := make([]byte, 1)
	_, err = io.ReadFull(f, b)
	row.FirstByteSecs = time.Since(start).Seconds()
	f.Close()
	want := make([]byte, 1)
	ossemu.SyntheticData(first, want, 0)
	if err != nil || b[0] != want[0] {
		return row, fmt.Errorf("first byte of object %d: %v, %v; want %v", first, b, err, want)
	}

	start = time.Now()
	found, err := countLines(exec.Command("find", mnt, "-type", "f"))
	row.FindSecs = time.Since(start).Seconds()
	if err != nil {
		return row, fmt.Errorf("find: %w", err)
	}
	if found != n {
		return row, fmt.Errorf("find listed %d files, want %d", found, n)
	}
	row.FindRSS = m.rss()
	if row.FindHeap, err = liveHeap(c.pprofAddr); err != nil {
		return row, err
	}

	// The kernel forgets every node (what memory pressure does to an
	// idle tree): the daemon drops their listings and gives the memory
	// back a second after the FORGETs. A minute at most.
	start = time.Now()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2\n"), 0); err != nil {
		return row, fmt.Errorf("drop_caches: %w", err)
	}
	for row.DropRSS = m.rss(); float64(row.DropRSS) > 1.1*float64(row.IdleRSS) && time.Since(start) < time.Minute; row.DropRSS = m.rss() {
		time.Sleep(200 * time.Millisecond)
	}
	row.DropSecs = time.Since(start).Seconds()
	if row.DropHeap, err = liveHeap(c.pprofAddr); err != nil {
		return row, err
	}

	sample := make(map[int64]bool, sampleSize(n))
	for int64(len(sample)) < sampleSize(n) {
		sample[rng.Int64N(n)] = true
	}
	start = time.Now()
	if err := readSample(mnt, syn, sample, sc.readers); err != nil {
		return row, err
	}
	row.SampleSecs = time.Since(start).Seconds()
	row.SampleRSS = m.rss()
	return row, nil
}

// liveHeap is the live heap of the daemon serving pprof at addr, after a
// collection (the heap profile's HeapAlloc, asked with gc=1).
func liveHeap(addr string) (int64, error) {
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return 0, fmt.Errorf("the daemon's heap: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("the daemon's heap profile at %s has no HeapAlloc", addr)
}

// freeAddr returns a loopback address with a free port.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// countLines runs cmd and counts the lines of its output.
func countLines(cmd *exec.Cmd) (int64, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	var n int64
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		n++
	}
	if err := cmd.Wait(); err != nil {
		return n, fmt.Errorf("%v: %s", err, &stderr)
	}
	return n, nil
}

// readSample reads the sample's files whole with readers readers, and
// checks every byte.
func readSample(mnt string, syn ossemu.Synthetic, sample map[int64]bool, readers int) error {
	todo := make(chan int64)
	errc := make(chan error, readers)
	var wg sync.WaitGroup
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := make([]byte, syn.Size)
			for i := range todo {
				got, err := os.ReadFile(filepath.Join(mnt, ossemu.SyntheticKey(syn, i)))
				ossemu.SyntheticData(i, want, 0)
				if err == nil && !bytes.Equal(got, want) {
					err = fmt.Errorf("object %d read wrong bytes", i)
				}
				if err != nil {
					errc <- err
					for range todo {
					}
					return
				}
			}
		}()
	}
	for i := range sample {
		todo <- i
	}
	close(todo)
	wg.Wait()
	select {
	case err := <-errc:
		return fmt.Errorf("1%% sample: %w", err)
	default:
		return nil
	}
}

func writeScaleCSV(path string, rows []scaleRow) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"objects", "entries", "mount_s", "first_byte_s", "find_s", "find_entries_per_s", "sample_files", "sample_s", "sample_files_per_s",
		"idle_rss", "find_rss", "drop_rss", "drop_s", "sample_rss", "idle_heap", "find_heap", "drop_heap", "heap_bytes_per_entry"})
	for _, r := range rows {
		w.Write([]string{strconv.FormatInt(r.N, 10), strconv.FormatInt(r.N+r.Dirs, 10), ff(r.MountSecs), ff(r.FirstByteSecs), ff(r.FindSecs),
			ff(r.findRate()), strconv.FormatInt(sampleSize(r.N), 10), ff(r.SampleSecs), ff(r.sampleRate()), strconv.FormatInt(r.IdleRSS, 10),
			strconv.FormatInt(r.FindRSS, 10), strconv.FormatInt(r.DropRSS, 10), ff(r.DropSecs), strconv.FormatInt(r.SampleRSS, 10),
			strconv.FormatInt(r.IdleHeap, 10), strconv.FormatInt(r.FindHeap, 10), strconv.FormatInt(r.DropHeap, 10), ff(r.bytesPerEntry())})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func ff(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }

func scaleSeries(rows []scaleRow) []bench.ScaleSeries {
	col := func(tile, name string, f func(scaleRow) float64) bench.ScaleSeries {
		s := bench.ScaleSeries{Tile: tile, Name: name}
		for _, r := range rows {
			s.N = append(s.N, float64(r.N+r.Dirs))
			s.Y = append(s.Y, f(r))
		}
		return s
	}
	mb := func(v int64) float64 { return float64(v) / (1 << 20) }
	return []bench.ScaleSeries{
		col("seconds", "find", func(r scaleRow) float64 { return r.FindSecs }),
		col("seconds", "1% sample", func(r scaleRow) float64 { return r.SampleSecs }),
		col("seconds", "mount", func(r scaleRow) float64 { return r.MountSecs }),
		col("seconds", "first byte", func(r scaleRow) float64 { return r.FirstByteSecs }),
		col("daemon memory, MiB", "RSS after find", func(r scaleRow) float64 { return mb(r.FindRSS) }),
		col("daemon memory, MiB", "live heap after find", func(r scaleRow) float64 { return mb(r.FindHeap) }),
		col("daemon memory, MiB", "RSS idle (mounted)", func(r scaleRow) float64 { return mb(r.IdleRSS) }),
		col("daemon memory, MiB", "RSS after drop_caches", func(r scaleRow) float64 { return mb(r.DropRSS) }),
	}
}
