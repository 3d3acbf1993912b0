// Command cachebench measures mlfsd's read path against the OSS emulator
// (`mlfsd emulate oss --ttfb 20ms --conn-bandwidth 100MB/s`), each figure a
// ratio to a limit measured in the same run, reported per run and as the
// median of the runs:
//
//   - warm: sequential read of a large file through the mount (a second
//     mount on the same cache dir, so it also proves restart survival) ÷
//     reading the cache file directly;
//   - cold: sequential read of the same object through a mount with an empty
//     cache ÷ an ideal parallel ranged reader of the emulator without FUSE;
//   - small (--only small): an epoch over 2,000 files of 100 KiB in 20
//     directories, read whole in a shuffled order by 8 readers: cold with
//     directory prefetch and cold without (--no-prefetch-dirs), each
//     ÷ an ideal client issuing 64 whole-object GETs in flight without FUSE
//     (measured before and after the mounts, in the same run); then warm
//     (the same mount) ÷ the same epoch on local disk (5 of each,
//     alternating; the median of the pairs' ratios); and the store's
//     HEADs during the cold epoch and its requests during the warm ones,
//     which must be 0 and 0 (a mount reading its own data is authorized
//     by its own GETs: cache/authz.go);
//   - big4 (--only big4): 4 readers at once, each reading its own cold
//     object (--big4-size, 256 MiB) through one mount with an empty cache,
//     ÷ 4 ideal readers (--ideal-streams ranged GETs each, no FUSE) reading
//     the same 4 objects at once; aggregate MB/s, and the daemon's
//     CPU-seconds per GiB as for big;
//   - list (--only list): a cold `ls -l` and `ls -f` of one directory of
//     100,000 entries through a fresh mount, and the OSS backend listing it
//     page after page without FUSE (what the store alone costs) and in
//     ranges at once (backends/parlist, what an input mount does);
//   - start (--only start): the time from running `mlfsd mount` (with an
//     empty cache dir and --start-memory, 4 GiB) to the first byte read
//     through the new mount, and the mount's resident memory then (the
//     arena is backed as blocks are first used, not at start);
//   - scale (--only scale; never part of the default run): for each
//     --scale-n size (10k, 100k, 1M objects; 10M is the largest),
//     an emulator serving a synthetic namespace of that many objects
//     (`emulate oss --synthetic N --synthetic-fanout F`, nothing on disk)
//     and a fresh mount over it: the time to mount, to the first byte of
//     one file (its directory never listed), of `find -type f` over the
//     tree (entries/s), of reading a shuffled 1% of the files whole with
//     --scale-readers readers; the daemon's RSS mounted and idle, after
//     find, after the sample, and after drop_caches (the kernel forgets
//     every node); a table, DIR/scale.csv and a log-log DIR/scale.png
//     (--scale-out) on which a superlinear step bends away from the
//     dashed line proportional to N;
//   - readers (--only readers, not run by default): the programs users
//     run, `dd bs=1M`, `cat` (128 KiB reads) and a Python reader of 1 MiB
//     reads, each cold through its own fresh mount (empty cache, page
//     cache dropped) ÷ the ideal reader just before and after it; then a
//     cold small-file epoch read by Python with --readers threads ÷ the
//     ideal client (readers.go);
//   - the daemon's peak RSS (VmHWM) against --cache-memory + 256 MiB.
//
// The disk tier creates a file per small object. On ext4 without a journal
// (this development VM's root filesystem) every inode allocation scans
// the inodes deleted in the last 60 to 360 seconds (ext4's
// recently_deleted), by anyone on that filesystem: measured, creates then
// took 55-65% of the daemon's CPU in a cold small-file epoch. --cache-root
// puts the cache dirs on another filesystem (a journaled ext4, as on a
// real host, even a loop-mounted image), out of other processes' deletes.
//
// Usage (as root, FUSE needs it):
//
//	go build -o /tmp/mlfsd ./cmd/mlfsd
//	go run ./cache/cachebench --mlfsd /tmp/mlfsd --runs 3 [--only big|big4|small|list|start|scale|readers]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/parlist"
	"github.com/mlfsd/mlfsd/bench"
)

type config struct {
	mlfsd       string
	emulator    string
	work        string
	runs        int
	bigSize     int64
	big4Size    int64 // size of each of the 4 objects of big4
	smallFiles  int
	smallDirs   int
	smallSize   int64
	idealGETs   int
	listEntries int
	readers     int
	ttfb        string
	bandwidth   string
	cacheMemory string
	memBytes    int64  // cacheMemory in bytes
	startMemory string // the --cache-memory of the start part
	streams     int
	chunk       int64
	mountFlags  string
	only        string
	readAheadKB int
	pprofAddr   string // MLFSD_PPROF_ADDR of the mounts ("" = none)
	profileDir  string // CPU profiles of the daemon's timed phases go here
	profileSecs int
	// cacheRoot holds a fresh cache directory per cold mount: a directory
	// that just had thousands of files deleted makes the next epoch's
	// creates slow (ext4 inode allocation), which is the machine, not the
	// daemon. Removed when the run ends.
	cacheRoot string
	// cacheFS is where cacheRoot goes (--cache-root; default --work).
	cacheFS string
	// mountEnv is added to the mounts' environment (--mount-env).
	mountEnv string
	// scale configures the scale part (--only scale).
	scale scaleConfig
}

func main() {
	var c config
	var bigSize, big4Size, smallSize, chunk, scaleNs, scaleSize string
	sc := &c.scale
	flag.StringVar(&c.mlfsd, "mlfsd", "mlfsd", "the mlfsd binary to measure")
	flag.StringVar(&c.emulator, "emulator", "", "the mlfsd binary whose `emulate oss` serves the data (default: --mlfsd)")
	flag.StringVar(&c.work, "work", "/var/tmp/mlfsd-cachebench", "work directory (emulator data, cache dirs, mountpoints)")
	flag.IntVar(&c.runs, "runs", 3, "runs; figures are reported per run and as medians")
	flag.StringVar(&bigSize, "big-size", "1GiB", "size of the large object")
	flag.StringVar(&big4Size, "big4-size", "256MiB", "size of each of the 4 objects of big4")
	flag.IntVar(&c.smallFiles, "small-files", 2000, "number of small files")
	flag.IntVar(&c.smallDirs, "small-dirs", 20, "directories the small files are spread over")
	flag.IntVar(&c.idealGETs, "ideal-gets", 64, "parallel whole-object GETs of the small-file epoch's ideal client")
	flag.IntVar(&c.listEntries, "list-entries", 100000, "entries of the one directory the list workload lists")
	flag.StringVar(&smallSize, "small-size", "100KiB", "size of each small file")
	flag.IntVar(&c.readers, "readers", 8, "parallel readers of the small-file epochs")
	flag.StringVar(&c.ttfb, "ttfb", "20ms", "emulator time to first byte")
	flag.StringVar(&c.bandwidth, "conn-bandwidth", "100MB/s", "emulator bandwidth per connection")
	flag.StringVar(&c.cacheMemory, "cache-memory", "512MiB", "the daemon's --cache-memory")
	flag.StringVar(&c.startMemory, "start-memory", "4GiB", "the --cache-memory of the mount whose time to first byte the start part measures")
	flag.IntVar(&c.streams, "ideal-streams", 16, "parallel ranged GETs of the ideal reader (the daemon's per-file bound)")
	flag.StringVar(&chunk, "ideal-chunk", "8MiB", "range size of the ideal reader (the daemon's largest request)")
	flag.StringVar(&c.mountFlags, "mount-flags", "", "extra flags for `mlfsd mount` (space-separated)")
	flag.StringVar(&c.only, "only", "", "run only one part: big, big4, small, list, start, scale or readers (scale and readers run only when asked for)")
	flag.StringVar(&scaleNs, "scale-n", "10000,100000,1000000", "scale: the namespace sizes, in objects (10000000 is the issue's largest)")
	flag.Int64Var(&sc.fanOut, "scale-fanout", 1000, "scale: objects per directory (0: one flat directory)")
	flag.StringVar(&scaleSize, "scale-size", "4KiB", "scale: size of each object")
	flag.IntVar(&sc.readers, "scale-readers", 8, "scale: parallel readers of the 1% sample")
	flag.StringVar(&sc.out, "scale-out", "", "scale: directory of scale.csv and scale.png (default --work)")
	flag.StringVar(&c.mountEnv, "mount-env", "", "experiment: NAME=VALUE pairs (space-separated) added to the mounts' environment, e.g. GOGC=200")
	flag.StringVar(&c.cacheFS, "cache-root", "", "directory of the mounts' cache dirs (default: --work); see the note on ext4 without a journal")
	flag.StringVar(&c.pprofAddr, "pprof-addr", "", "serve net/http/pprof from each mount on this loopback address (MLFSD_PPROF_ADDR)")
	flag.StringVar(&c.profileDir, "profile-dir", "", "save a CPU profile of the daemon over each timed phase here (needs --pprof-addr)")
	flag.IntVar(&c.profileSecs, "profile-seconds", 4, "length of each --profile-dir profile (from the start of its phase)")
	flag.IntVar(&c.readAheadKB, "read-ahead-kb", 0, "experiment: set the mount's /sys/class/bdi/*/read_ahead_kb after mounting (0: leave the kernel's)")
	flag.Parse()
	var err error
	if c.scale.ns, err = parseScaleNs(scaleNs); err != nil {
		fatal(err)
	}
	if n, err := humanize.ParseBytes(scaleSize); err != nil {
		fatal(fmt.Errorf("--scale-size: %w", err))
	} else {
		c.scale.size = int64(n)
	}
	if c.scale.out == "" {
		c.scale.out = c.work
	}
	for _, p := range []struct {
		s string
		v *int64
	}{{bigSize, &c.bigSize}, {big4Size, &c.big4Size}, {smallSize, &c.smallSize}, {chunk, &c.chunk}} {
		n, err := humanize.ParseBytes(p.s)
		if err != nil {
			fatal(err)
		}
		*p.v = int64(n)
	}
	mem, err := humanize.ParseBytes(c.cacheMemory)
	if err != nil {
		fatal(fmt.Errorf("--cache-memory: %w", err))
	}
	c.memBytes = int64(mem)
	if c.profileDir != "" && c.pprofAddr == "" {
		fatal(errors.New("--profile-dir needs --pprof-addr"))
	}
	if err := run(c); err != nil {
		fatal(err)
	}
}

// wants reports whether the part runs (--only selects one; all by default
// but scale and readers, which run only when asked for: scale takes tens
// of minutes, readers minutes of fresh mounts).
func (c config) wants(part string) bool {
	if part == "scale" || part == "readers" {
		return c.only == part
	}
	return c.only == "" || c.only == part
}

// seeds reports whether the part's data is needed: the readers part reads
// big's object and small's files.
func (c config) seeds(part string) bool {
	return c.wants(part) || c.wants("readers") && (part == "big" || part == "small")
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "cachebench:", err)
	os.Exit(1)
}

// result is one run's figures.
type result struct {
	ColdMBs, IdealMBs, ColdRatio   float64
	ColdCPUPerGiB                  float64 // daemon CPU-seconds (user+system) per GiB of the cold read
	ColdMinorFaults                int64   // daemon minor page faults during the cold read
	ColdRandomReads, ColdBackendMB int64   // from the cold daemon's closing log: reads not seen as sequential, MB fetched
	WarmMBs, DirectMBs, WarmRatio  float64
	WarmGETs                       int64 // emulator GETs during the warm read: must be 0
	// start: seconds from running `mlfsd mount` (empty cache, --start-memory)
	// to the first byte read through it, and the mount's VmRSS then.
	StartSecs float64
	StartRSS  int64
	// big4: 4 cold objects read at once through one mount, aggregate MB/s,
	// against 4 ideal readers at once (the mean of before and after).
	Cold4MBs, Ideal4MBs, Cold4Ratio, Cold4CPUPerGiB float64
	// The small-file epoch: files/s of the ideal client (c.idealGETs
	// whole-object GETs in flight, no FUSE; the mean of one epoch before
	// and one after the mounts), of a cold mount with directory prefetch
	// and of one without, of local disk and of the warm mount.
	IdealFPS, ColdFPS, ColdNoPrefetchFPS, LocalFPS, WarmFPS float64
	ColdRatio3, ColdNoPrefetchRatio, WarmRatio3             float64
	ColdBackendFiles, ColdNoPrefetchBackendFiles            int64 // GETs the emulator served during each cold epoch
	// HEADs the emulator served during the cold epoch with prefetch (a
	// mount authorized by its own GETs sends none: cache/authz.go), and
	// GETs and HEADs during the 5 warm epochs (none once authorized).
	ColdHeads, WarmRequests int64
	// The list workload: seconds of a cold `ls -l` of one directory
	// through a fresh mount, of `ls -f` (names only) through another, and
	// of listing it with the OSS backend, page after page, without FUSE,
	// and in ranges at once (backends/parlist, as an input mount does).
	ListLSL, ListLSF, ListDirect, ListDirectParallel float64
	PeakRSS                                          int64
	// Readers: dd, cat and Python (--only readers).
	Readers *readersResult `json:",omitempty"`
}

func run(c config) error {
	emuRoot := filepath.Join(c.work, "emu")
	if err := seed(c, emuRoot); err != nil {
		return err
	}
	if err := os.MkdirAll(c.work, 0o755); err != nil {
		return err
	}
	var err error
	if c.cacheFS == "" {
		c.cacheFS = c.work
	}
	if err := os.MkdirAll(c.cacheFS, 0o755); err != nil {
		return err
	}
	if c.cacheRoot, err = os.MkdirTemp(c.cacheFS, "caches-"); err != nil {
		return err
	}
	defer os.RemoveAll(c.cacheRoot)
	if c.profileDir != "" {
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			return err
		}
	}
	// Before the emulator starts: it takes its key pair from the same
	// variables the clients (this process and the mounts) sign with.
	os.Setenv("OSS_ACCESS_KEY_ID", "cachebench")
	os.Setenv("OSS_ACCESS_KEY_SECRET", "cachebench")
	if c.wants("scale") {
		return benchScale(c, c.scale)
	}
	emu, err := startEmulator(c, emuRoot)
	if err != nil {
		return err
	}
	defer emu.stop()
	ctx := context.Background()
	u, _ := backends.ParseURI("oss://bench/big/")
	ideal, err := oss.New(ctx, u, oss.Options{Endpoint: emu.endpoint}, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer ideal.Close()
	rssBound := c.memBytes + 256<<20

	var results []result
	for r := range c.runs {
		var res result
		if c.wants("big") {
			if err := benchBig(ctx, c, emu, ideal, &res); err != nil {
				return err
			}
		}
		if c.wants("big4") {
			if err := benchBig4(ctx, c, emu, &res); err != nil {
				return err
			}
		}
		if c.wants("small") {
			if err := benchSmall(ctx, c, emu, emuRoot, r, &res); err != nil {
				return err
			}
		}
		if c.wants("list") {
			if err := benchList(ctx, c, emu, &res); err != nil {
				return err
			}
		}
		if c.wants("start") {
			if err := benchStart(c, emu, &res); err != nil {
				return err
			}
		}
		if c.wants("readers") {
			res.Readers = &readersResult{}
			err := benchReaders(ctx, c, emu, ideal, r, res.Readers)
			res.PeakRSS = max(res.PeakRSS, res.Readers.PeakRSS)
			if err != nil {
				return err
			}
		}
		b, _ := json.Marshal(res)
		fmt.Printf("run %d: %s\n", r+1, b)
		results = append(results, res)
	}
	report(c, results, rssBound)
	return nil
}

// seed writes the emulator's data for the parts that run, once each
// (reused while the sizes match).
func seed(c config, root string) error {
	r := rand.New(rand.NewPCG(1, 2))
	fill := func(path string, size int64) error {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		w := bufio.NewWriterSize(f, 1<<20)
		buf := make([]byte, 8)
		for n := int64(0); n < size; n += 8 {
			v := r.Uint64()
			for i := range buf {
				buf[i] = byte(v >> (8 * i))
			}
			w.Write(buf[:min(8, size-n)])
		}
		if err := w.Flush(); err != nil {
			return err
		}
		return f.Close()
	}
	parts := []struct {
		name  string
		stamp string
		write func() error
	}{
		{"big", fmt.Sprintf("%d", c.bigSize), func() error {
			return fill(filepath.Join(root, "bench", "big", "file.bin"), c.bigSize)
		}},
		{"big4", fmt.Sprintf("%d", c.big4Size), func() error {
			for i := range big4Objects {
				if err := fill(filepath.Join(root, "bench", "big4", fmt.Sprintf("file%d.bin", i)), c.big4Size); err != nil {
					return err
				}
			}
			return nil
		}},
		{"small", fmt.Sprintf("%d-%d-%d", c.smallFiles, c.smallDirs, c.smallSize), func() error {
			for i := range c.smallFiles {
				if err := fill(smallPath(c, root, i), c.smallSize); err != nil {
					return err
				}
			}
			return nil
		}},
		{"start", "1", func() error {
			return fill(filepath.Join(root, "bench", "start", "first.bin"), 4096)
		}},
		{"list", fmt.Sprintf("%d", c.listEntries), func() error {
			for i := range c.listEntries {
				if err := fill(listPath(root, i), int64(i%7)*100); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, p := range parts {
		if !c.seeds(p.name) {
			continue
		}
		stamp := filepath.Join(root, ".seeded-"+p.name+"-"+p.stamp)
		if _, err := os.Stat(stamp); err == nil {
			continue
		}
		os.RemoveAll(filepath.Join(root, "bench", p.name))
		fmt.Println("seeding", p.name, "in", root)
		if err := p.write(); err != nil {
			return err
		}
		if err := os.WriteFile(stamp, nil, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func smallPath(c config, root string, i int) string {
	return filepath.Join(root, "bench", "small", fmt.Sprintf("class%03d", i%c.smallDirs), fmt.Sprintf("img%05d.jpg", i))
}

func listPath(root string, i int) string {
	return filepath.Join(root, "bench", "list", fmt.Sprintf("entry%06d.txt", i))
}

type emulator struct {
	cmd      *exec.Cmd
	endpoint string
}

// startEmulator starts `emulate oss` over root, with extra flags.
func startEmulator(c config, root string, extra ...string) (*emulator, error) {
	bin := c.mlfsd
	if c.emulator != "" {
		bin = c.emulator
	}
	args := append([]string{"emulate", "oss", "--root", root, "--listen", "127.0.0.1:0", "--ttfb", c.ttfb, "--conn-bandwidth", c.bandwidth}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "MLFSD_PPROF_ADDR=") })
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(stderr)
	re := regexp.MustCompile(`endpoint=(\S+)`)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			go io.Copy(io.Discard, stderr)
			return &emulator{cmd: cmd, endpoint: m[1]}, nil
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	return nil, errors.New("the emulator did not start")
}

func (e *emulator) stop() {
	e.cmd.Process.Signal(syscall.SIGTERM)
	e.cmd.Wait()
}

// gets returns the emulator's GetObject count.
func (e *emulator) gets() int64 { return e.count("GetObject") }

// count returns one of the emulator's request counters ("GetObject",
// "HeadObject"), or -1 when it cannot be read.
func (e *emulator) count(name string) int64 {
	resp, err := http.Get(e.endpoint + "/_mlfsd/stats")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var st map[string]int64
	json.NewDecoder(resp.Body).Decode(&st)
	return st[name]
}

type mount struct {
	cmd    *exec.Cmd
	mnt    string
	stderr *strings.Builder
	done   chan error
}

func startMount(c config, emu *emulator, uri, cacheDir, mnt string) (*mount, error) {
	os.MkdirAll(mnt, 0o755)
	args := []string{"--cache-dir", cacheDir, "--cache-memory", c.cacheMemory, "--oss-endpoint", emu.endpoint}
	args = append(args, "mount", "--read-only")
	args = append(args, strings.Fields(c.mountFlags)...)
	args = append(args, uri, mnt)
	cmd := exec.Command(c.mlfsd, args...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "MLFSD_PPROF_ADDR=") })
	if c.pprofAddr != "" {
		cmd.Env = append(cmd.Env, "MLFSD_PPROF_ADDR="+c.pprofAddr)
	}
	cmd.Env = append(cmd.Env, strings.Fields(c.mountEnv)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	m := &mount{cmd: cmd, mnt: mnt, stderr: &stderr, done: make(chan error, 1)}
	go func() { m.done <- cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); !isMounted(mnt); {
		select {
		case err := <-m.done:
			return nil, fmt.Errorf("mlfsd mount exited: %v: %s", err, &stderr)
		default:
		}
		if time.Now().After(deadline) {
			m.stop()
			return nil, fmt.Errorf("%s not mounted after 30s: %s", mnt, &stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c.readAheadKB > 0 {
		var st syscall.Stat_t
		if err := syscall.Stat(mnt, &st); err != nil {
			m.stop()
			return nil, err
		}
		bdi := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", st.Dev>>8&0xfff, st.Dev&0xff|st.Dev>>12&0xfff00)
		if err := os.WriteFile(bdi, []byte(strconv.Itoa(c.readAheadKB)), 0o644); err != nil {
			m.stop()
			return nil, err
		}
	}
	return m, nil
}

func isMounted(mnt string) bool {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == mnt {
			return true
		}
	}
	return false
}

// peakRSS is the daemon's VmHWM so far, in bytes.
func (m *mount) peakRSS() int64 { return m.status("VmHWM:") }

// rss is the daemon's VmRSS now, in bytes.
func (m *mount) rss() int64 { return m.status("VmRSS:") }

// status is a size field of the daemon's /proc status, in bytes.
func (m *mount) status(field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, field) {
			f := strings.Fields(line)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return -1
}

// logField finds name=N in the daemon's log (the cache's closing line).
func logField(log, name string) int64 {
	m := regexp.MustCompile(`\b`+name+`=(\d+)`).FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		return -1
	}
	n, _ := strconv.ParseInt(m[len(m)-1][1], 10, 64)
	return n
}

// cpu is the daemon's CPU time so far (user + system, seconds) and its
// minor page faults, from /proc/PID/stat.
func (m *mount) cpu() (float64, int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	// Fields after the command name (which may hold spaces) in ")".
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	minflt, _ := strconv.ParseInt(f[7], 10, 64)
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return float64(utime+stime) / 100, minflt // USER_HZ is 100 on Linux
}

// profile starts a CPU profile of the daemon of --profile-seconds, if
// --profile-dir asks for them, and returns a function that waits for it,
// saves it as DIR/name-*.pprof, and saves a heap profile next to it. Call
// it as the timed phase starts.
func (m *mount) profile(c config, name string) func() {
	if c.profileDir == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", c.pprofAddr, c.profileSecs)
		resp, err := http.Get(url)
		if err != nil {
			fmt.Fprintln(os.Stderr, "cachebench: profile:", err)
			return
		}
		defer resp.Body.Close()
		f, err := os.CreateTemp(c.profileDir, name+"-*.pprof")
		if err != nil {
			fmt.Fprintln(os.Stderr, "cachebench: profile:", err)
			return
		}
		defer f.Close()
		io.Copy(f, resp.Body)
	}()
	return func() {
		<-done
		// And the heap as the phase left it (what holds memory besides
		// the block arena).
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/heap", c.pprofAddr))
		if err != nil {
			return
		}
		defer resp.Body.Close()
		if f, err := os.CreateTemp(c.profileDir, name+"-heap-*.pprof"); err == nil {
			io.Copy(f, resp.Body)
			f.Close()
		}
	}
}

// stop unmounts (SIGTERM) and returns the daemon's peak RSS.
func (m *mount) stop() int64 {
	rss := m.peakRSS()
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(60 * time.Second):
		m.cmd.Process.Kill()
		<-m.done
	}
	if isMounted(m.mnt) {
		syscall.Unmount(m.mnt, syscall.MNT_DETACH)
	}
	return rss
}

// readSeq reads path from start to end in 1 MiB reads and returns MB/s.
func readSeq(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	start := time.Now()
	var n int64
	for {
		m, err := f.Read(buf)
		n += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds() / 1e6, nil
}

// idealRead reads the object with c.streams parallel ranged GETs of
// c.chunk bytes, into memory, and returns MB/s.
func idealRead(ctx context.Context, c config, b backends.Backend, key string, size int64) (float64, error) {
	start := time.Now()
	offs := make(chan int64)
	errc := make(chan error, c.streams)
	var wg sync.WaitGroup
	for range c.streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			for off := range offs {
				r, err := b.Read(ctx, key, backends.ReadOptions{Offset: off, Length: min(c.chunk, size-off)})
				if err != nil {
					errc <- err
					continue
				}
				for {
					if _, err := io.ReadFull(r, buf); err != nil {
						break
					}
				}
				r.Close()
			}
		}()
	}
	for off := int64(0); off < size; off += c.chunk {
		offs <- off
	}
	close(offs)
	wg.Wait()
	select {
	case err := <-errc:
		return 0, err
	default:
	}
	return float64(size) / time.Since(start).Seconds() / 1e6, nil
}

// completeCacheFile waits until the cache dir holds a complete file of the
// given size (the daemon completes a file read to its end in the
// background) and returns its path.
func completeCacheFile(dir string, size int64, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		var found string
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !strings.Contains(d.Name(), ".") {
				if fi, err := d.Info(); err == nil && fi.Size() == size {
					found = p
				}
			}
			return nil
		})
		if found != "" {
			return found, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no complete cache file of %d bytes in %s after %s", size, dir, wait)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func benchBig(ctx context.Context, c config, emu *emulator, ideal backends.Backend, res *result) error {
	cacheDir, err := os.MkdirTemp(c.cacheRoot, "big-")
	if err != nil {
		return err
	}
	mnt := filepath.Join(c.work, "mnt-big")
	uri := "oss://bench/big/"

	// Cold: an empty cache, against the ideal reader measured just before
	// and just after (their mean), so a change in the machine's load during
	// the run weighs on both sides alike.
	m, err := startMount(c, emu, uri, cacheDir, mnt)
	if err != nil {
		return err
	}
	// Each timed phase starts with the memory it may use backed by the
	// host (see bench.PrimeMemory): the object's size for the mount's page
	// cache, plus the daemon's memory bound.
	primed := func(read func() (float64, error)) (float64, error) {
		if err := bench.PrimeMemory(c.bigSize + c.memBytes); err != nil {
			return 0, err
		}
		return read()
	}
	idealOnce := func() (float64, error) { return idealRead(ctx, c, ideal, "file.bin", c.bigSize) }
	before, err := primed(idealOnce)
	if err != nil {
		m.stop()
		return err
	}
	cpu0, flt0 := m.cpu()
	var profiled func()
	if res.ColdMBs, err = primed(func() (float64, error) {
		profiled = m.profile(c, "big-cold")
		return readSeq(filepath.Join(mnt, "file.bin"))
	}); err != nil {
		m.stop()
		return fmt.Errorf("cold read: %w", err)
	}
	cpu1, flt1 := m.cpu()
	profiled()
	res.ColdCPUPerGiB = (cpu1 - cpu0) / (float64(c.bigSize) / (1 << 30))
	res.ColdMinorFaults = flt1 - flt0
	after, err := primed(idealOnce)
	if err != nil {
		m.stop()
		return err
	}
	res.IdealMBs = (before + after) / 2
	res.ColdRatio = res.ColdMBs / res.IdealMBs
	cacheFile, err := completeCacheFile(cacheDir, c.bigSize, 5*time.Minute)
	res.PeakRSS = max(res.PeakRSS, m.stop())
	res.ColdRandomReads = logField(m.stderr.String(), "random_reads")
	res.ColdBackendMB = logField(m.stderr.String(), "backend_bytes") / 1e6
	if err != nil {
		return err
	}

	// Warm: a new daemon on the same cache dir (a restart).
	m, err = startMount(c, emu, uri, cacheDir, mnt)
	if err != nil {
		return err
	}
	gets := emu.gets()
	// Alternate mount and direct reads (both from the page cache, where
	// per-read overheads show most) and take the median of adjacent pairs:
	// memory bandwidth on a shared machine swings by several times.
	var warm, direct, ratios []float64
	for i := range 7 {
		pair := [2]float64{}
		for j, path := range []string{filepath.Join(mnt, "file.bin"), cacheFile} {
			if i%2 == 1 {
				j = 1 - j
				path = map[int]string{0: filepath.Join(mnt, "file.bin"), 1: cacheFile}[j]
			}
			v, err := readSeq(path)
			if err != nil {
				m.stop()
				return fmt.Errorf("warm read %s: %w", path, err)
			}
			pair[j] = v
		}
		warm, direct = append(warm, pair[0]), append(direct, pair[1])
		ratios = append(ratios, pair[0]/pair[1])
	}
	res.WarmGETs = emu.gets() - gets
	res.PeakRSS = max(res.PeakRSS, m.stop())
	res.WarmMBs, res.DirectMBs = median(warm), median(direct)
	res.WarmRatio = median(ratios)
	return nil
}

// big4Objects is how many objects big4 reads at once (issue #15 goal 1:
// "4 concurrent streams on 4 objects").
const big4Objects = 4

// benchBig4 reads big4Objects cold objects at once through one mount, one
// reader each, against as many ideal readers at once, measured just before
// and just after (their mean).
func benchBig4(ctx context.Context, c config, emu *emulator, res *result) error {
	cacheDir, err := os.MkdirTemp(c.cacheRoot, "big4-")
	if err != nil {
		return err
	}
	mnt := filepath.Join(c.work, "mnt-big4")
	u, _ := backends.ParseURI("oss://bench/big4/")
	ideal, err := oss.New(ctx, u, oss.Options{Endpoint: emu.endpoint}, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer ideal.Close()
	m, err := startMount(c, emu, "oss://bench/big4/", cacheDir, mnt)
	if err != nil {
		return err
	}
	total := big4Objects * c.big4Size
	// all runs read(i) for every object at once and returns the aggregate
	// MB/s, after priming the memory the phase may use (bench.PrimeMemory).
	all := func(read func(i int) error) (float64, error) {
		if err := bench.PrimeMemory(total + c.memBytes); err != nil {
			return 0, err
		}
		start := time.Now()
		errs := make([]error, big4Objects)
		var wg sync.WaitGroup
		for i := range big4Objects {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = read(i)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return 0, err
		}
		return float64(total) / time.Since(start).Seconds() / 1e6, nil
	}
	name := func(i int) string { return fmt.Sprintf("file%d.bin", i) }
	idealOnce := func() (float64, error) {
		return all(func(i int) error {
			_, err := idealRead(ctx, c, ideal, name(i), c.big4Size)
			return err
		})
	}
	before, err := idealOnce()
	if err != nil {
		m.stop()
		return err
	}
	cpu0, _ := m.cpu()
	res.Cold4MBs, err = all(func(i int) error {
		_, err := readSeq(filepath.Join(mnt, name(i)))
		return err
	})
	cpu1, _ := m.cpu()
	if err != nil {
		m.stop()
		return fmt.Errorf("cold read: %w", err)
	}
	after, err := idealOnce()
	res.PeakRSS = max(res.PeakRSS, m.stop())
	if err != nil {
		return err
	}
	res.Cold4CPUPerGiB = (cpu1 - cpu0) / (float64(total) / (1 << 30))
	res.Ideal4MBs = (before + after) / 2
	res.Cold4Ratio = res.Cold4MBs / res.Ideal4MBs
	return nil
}

// epoch reads files in the given order with c.readers parallel readers and
// returns the elapsed seconds.
func epoch(c config, files []string) (float64, error) {
	start := time.Now()
	next := make(chan string)
	errc := make(chan error, c.readers)
	var wg sync.WaitGroup
	for range c.readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			for p := range next {
				f, err := os.Open(p)
				if err != nil {
					errc <- err
					continue
				}
				for {
					if _, err := f.Read(buf); err != nil {
						break
					}
				}
				f.Close()
			}
		}()
	}
	for _, p := range files {
		next <- p
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errc:
		return 0, err
	default:
	}
	return time.Since(start).Seconds(), nil
}

// idealEpoch reads every key whole with c.idealGETs GETs in flight, the
// way a data loader without FUSE would, and returns files/s.
func idealEpoch(ctx context.Context, c config, b backends.Backend, keys []string) (float64, error) {
	start := time.Now()
	next := make(chan string)
	errc := make(chan error, c.idealGETs)
	var wg sync.WaitGroup
	for range c.idealGETs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			for k := range next {
				r, err := b.Read(ctx, k, backends.ReadOptions{Length: -1})
				if err != nil {
					errc <- err
					continue
				}
				for {
					if _, err := r.Read(buf); err != nil {
						break
					}
				}
				r.Close()
			}
		}()
	}
	for _, k := range keys {
		next <- k
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errc:
		return 0, err
	default:
	}
	return float64(len(keys)) / time.Since(start).Seconds(), nil
}

// benchSmall measures the small-file epoch: the ideal client, a cold mount
// with directory prefetch and one without (in alternating order from run
// to run), local disk, and the warm mount, all over the same shuffled
// order of the same files.
func benchSmall(ctx context.Context, c config, emu *emulator, emuRoot string, r int, res *result) error {
	rel := make([]string, c.smallFiles)
	for i := range rel {
		rel[i] = strings.TrimPrefix(smallPath(c, "", i), "bench/small/")
	}
	rnd := rand.New(rand.NewPCG(1, uint64(r)))
	rnd.Shuffle(len(rel), func(i, j int) { rel[i], rel[j] = rel[j], rel[i] })
	under := func(root string) []string {
		out := make([]string, len(rel))
		for i, p := range rel {
			out[i] = filepath.Join(root, p)
		}
		return out
	}
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
	fps := func(secs float64) float64 { return float64(c.smallFiles) / secs }
	var coldHeads int64 // of the last cold epoch
	// cold mounts a fresh cache, lists the dataset as a loader does
	// (untimed), then times one epoch; it returns the mount, still up.
	cold := func(extra string) (*mount, float64, int64, error) {
		cacheDir, err := os.MkdirTemp(c.cacheRoot, "small-")
		if err != nil {
			return nil, 0, 0, err
		}
		mnt := filepath.Join(c.work, "mnt-small")
		cc := c
		cc.mountFlags = strings.TrimSpace(c.mountFlags + " " + extra)
		m, err := startMount(cc, emu, "oss://bench/small/", cacheDir, mnt)
		if err != nil {
			return nil, 0, 0, err
		}
		err = listSmall(c, mnt)
		var secs float64
		gets, heads := emu.gets(), emu.count("HeadObject")
		if err == nil {
			profiled := m.profile(c, "small-cold"+strings.ReplaceAll(extra, "--", "-"))
			secs, err = epoch(c, under(mnt))
			profiled()
		}
		gets, coldHeads = emu.gets()-gets, emu.count("HeadObject")-heads
		if err != nil {
			res.PeakRSS = max(res.PeakRSS, m.stop())
			return nil, 0, 0, err
		}
		return m, secs, gets, nil
	}
	var warmMount *mount
	runOn := func() error {
		m, secs, gets, err := cold("")
		if err != nil {
			return fmt.Errorf("cold epoch, directory prefetch on: %w", err)
		}
		warmMount = m
		res.ColdFPS, res.ColdBackendFiles, res.ColdHeads = fps(secs), gets, coldHeads
		requests := func() int64 { return emu.gets() + emu.count("HeadObject") }
		before := requests()
		// The local-disk limit reads the emulator's own files, in the
		// order of the warm epoch. A warm epoch lasts a fraction of a
		// second, so local and warm epochs alternate 5 times and the
		// figures are the medians (the ratio that of adjacent pairs): on
		// a shared machine one pair swings by several times.
		profiled := m.profile(c, "small-warm")
		var locals, warms, ratios []float64
		for range 5 {
			local, err := epoch(c, under(filepath.Join(emuRoot, "bench", "small")))
			if err != nil {
				return fmt.Errorf("local epoch: %w", err)
			}
			warm, err := epoch(c, under(m.mnt))
			if err != nil {
				return fmt.Errorf("warm epoch: %w", err)
			}
			locals, warms = append(locals, fps(local)), append(warms, fps(warm))
			ratios = append(ratios, local/warm)
		}
		profiled()
		res.WarmRequests = requests() - before
		res.LocalFPS, res.WarmFPS, res.WarmRatio3 = median(locals), median(warms), median(ratios)
		res.PeakRSS = max(res.PeakRSS, m.stop())
		warmMount = nil
		return nil
	}
	runOff := func() error {
		m, secs, gets, err := cold("--no-prefetch-dirs")
		if err != nil {
			return fmt.Errorf("cold epoch, directory prefetch off: %w", err)
		}
		res.PeakRSS = max(res.PeakRSS, m.stop())
		res.ColdNoPrefetchFPS, res.ColdNoPrefetchBackendFiles = fps(secs), gets
		return nil
	}
	order := []func() error{runOn, runOff}
	if r%2 == 1 {
		order = []func() error{runOff, runOn}
	}
	for _, f := range order {
		if err := f(); err != nil {
			if warmMount != nil {
				warmMount.stop()
			}
			return err
		}
	}
	after, err := idealEpoch(ctx, c, ideal, rel)
	if err != nil {
		return fmt.Errorf("ideal epoch: %w", err)
	}
	res.IdealFPS = (before + after) / 2
	res.ColdRatio3 = res.ColdFPS / res.IdealFPS
	res.ColdNoPrefetchRatio = res.ColdNoPrefetchFPS / res.IdealFPS
	return nil
}

// benchList times a cold listing of one directory of c.listEntries
// entries: `ls -l` (names and attributes) and `ls -f` (names only, no
// sorting), each through a fresh mount, and the OSS backend listing it page
// by page without FUSE (what the store costs), then in ranges at once.
func benchList(ctx context.Context, c config, emu *emulator, res *result) error {
	u, _ := backends.ParseURI("oss://bench/list/")
	b, err := oss.New(ctx, u, oss.Options{Endpoint: emu.endpoint}, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer b.Close()
	start := time.Now()
	n := 0
	opt := backends.ListOptions{}
	for {
		page, err := b.List(ctx, opt)
		if err != nil {
			return fmt.Errorf("direct listing: %w", err)
		}
		n += len(page.Objects) + len(page.Prefixes)
		if page.NextToken == "" {
			break
		}
		opt.Token = page.NextToken
	}
	res.ListDirect = time.Since(start).Seconds()
	if n != c.listEntries {
		return fmt.Errorf("direct listing: %d entries, want %d", n, c.listEntries)
	}
	start = time.Now()
	page, err := parlist.List(ctx, b, backends.ListOptions{}, parlist.Options{})
	if err != nil {
		return fmt.Errorf("parallel listing: %w", err)
	}
	res.ListDirectParallel = time.Since(start).Seconds()
	if n := len(page.Objects) + len(page.Prefixes); n != c.listEntries {
		return fmt.Errorf("parallel listing: %d entries, want %d", n, c.listEntries)
	}
	for _, ls := range []struct {
		flag string
		secs *float64
		want int
	}{{"-l", &res.ListLSL, c.listEntries + 1}, {"-f", &res.ListLSF, c.listEntries + 2}} {
		cacheDir := filepath.Join(c.work, "cache-list")
		mnt := filepath.Join(c.work, "mnt-list")
		os.RemoveAll(cacheDir)
		m, err := startMount(c, emu, "oss://bench/list/", cacheDir, mnt)
		if err != nil {
			return err
		}
		start := time.Now()
		out, err := exec.Command("ls", ls.flag, mnt).Output()
		*ls.secs = time.Since(start).Seconds()
		res.PeakRSS = max(res.PeakRSS, m.stop())
		if err != nil {
			return fmt.Errorf("ls %s %s: %w", ls.flag, mnt, err)
		}
		// ls -l adds a "total" line; ls -f lists . and .. where the
		// filesystem returns them (FUSE mounts of go-fuse do not).
		if got := strings.Count(string(out), "\n"); got != ls.want && !(ls.flag == "-f" && got == c.listEntries) {
			return fmt.Errorf("ls %s %s: %d lines, want %d", ls.flag, mnt, got, ls.want)
		}
	}
	return nil
}

// benchStart runs `mlfsd mount` with an empty cache dir and --start-memory
// and reads a file's first byte through the mount as soon as it answers:
// the wait a job (or a pod) has before its first read.
func benchStart(c config, emu *emulator, res *result) error {
	mnt := filepath.Join(c.work, "mnt-start")
	cacheDir, err := os.MkdirTemp(c.cacheRoot, "start-")
	if err != nil {
		return err
	}
	os.MkdirAll(mnt, 0o755)
	args := []string{"--cache-dir", cacheDir, "--cache-memory", c.startMemory, "--oss-endpoint", emu.endpoint,
		"mount", "--read-only", "oss://bench/start/", mnt}
	cmd := exec.Command(c.mlfsd, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	m := &mount{cmd: cmd, mnt: mnt, stderr: &stderr, done: make(chan error, 1)}
	go func() { m.done <- cmd.Wait() }()
	defer m.stop()
	file := filepath.Join(mnt, "first.bin")
	b := make([]byte, 1)
	// Until the mount answers, the path is the empty directory under it.
	for {
		if f, err := os.Open(file); err == nil {
			n, err := f.Read(b)
			f.Close()
			if n == 1 {
				break
			}
			if err != nil {
				return fmt.Errorf("first read of %s: %w", file, err)
			}
		}
		select {
		case err := <-m.done:
			return fmt.Errorf("mlfsd mount exited: %v: %s", err, &stderr)
		default:
		}
		if time.Since(start) > 5*time.Minute {
			return fmt.Errorf("%s answered no read within 5 minutes: %s", mnt, &stderr)
		}
		time.Sleep(time.Millisecond)
	}
	res.StartSecs = time.Since(start).Seconds()
	res.StartRSS = m.rss()
	res.PeakRSS = max(res.PeakRSS, m.peakRSS())
	return nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func report(c config, rs []result, rssBound int64) {
	col := func(f func(result) float64) float64 {
		var v []float64
		for _, r := range rs {
			v = append(v, f(r))
		}
		return median(v)
	}
	var peak int64
	var warmGETs int64
	for _, r := range rs {
		peak = max(peak, r.PeakRSS)
		warmGETs += r.WarmGETs
	}
	fmt.Printf("\nmedians of %d runs (emulator: ttfb %s, %s per connection; --cache-memory %s)\n", len(rs), c.ttfb, c.bandwidth, c.cacheMemory)
	if c.wants("big") {
		fmt.Printf("warm sequential %s: mount %.0f MB/s / cache file %.0f MB/s = %.2f (emulator GETs during warm reads: %d)\n",
			humanize.IBytes(uint64(c.bigSize)), col(func(r result) float64 { return r.WarmMBs }), col(func(r result) float64 { return r.DirectMBs }),
			col(func(r result) float64 { return r.WarmRatio }), warmGETs)
		fmt.Printf("cold sequential %s: mount %.0f MB/s / ideal %d x %s ranged GETs %.0f MB/s = %.2f\n",
			humanize.IBytes(uint64(c.bigSize)), col(func(r result) float64 { return r.ColdMBs }), c.streams, humanize.IBytes(uint64(c.chunk)),
			col(func(r result) float64 { return r.IdealMBs }), col(func(r result) float64 { return r.ColdRatio }))
		fmt.Printf("cold read, daemon: %.2f CPU-seconds per GiB, %.0f minor page faults, %.0f random reads, %.0f MB fetched\n",
			col(func(r result) float64 { return r.ColdCPUPerGiB }), col(func(r result) float64 { return float64(r.ColdMinorFaults) }),
			col(func(r result) float64 { return float64(r.ColdRandomReads) }), col(func(r result) float64 { return float64(r.ColdBackendMB) }))
	}
	if c.wants("big4") {
		fmt.Printf("cold, %d objects of %s at once, one reader each: mount %.0f MB/s / %d ideal readers (%d x %s ranged GETs each) %.0f MB/s = %.2f (goal >= 0.85); daemon %.2f CPU-seconds per GiB\n",
			big4Objects, humanize.IBytes(uint64(c.big4Size)), col(func(r result) float64 { return r.Cold4MBs }), big4Objects, c.streams, humanize.IBytes(uint64(c.chunk)),
			col(func(r result) float64 { return r.Ideal4MBs }), col(func(r result) float64 { return r.Cold4Ratio }), col(func(r result) float64 { return r.Cold4CPUPerGiB }))
	}
	if c.wants("small") {
		fmt.Printf("epoch of %d x %s files in %d dirs, %d readers, shuffled, files/s:\n", c.smallFiles, humanize.IBytes(uint64(c.smallSize)), c.smallDirs, c.readers)
		fmt.Printf("  ideal client (%d whole-object GETs in flight, no FUSE) %.0f\n", c.idealGETs, col(func(r result) float64 { return r.IdealFPS }))
		fmt.Printf("  cold, directory prefetch on  %.0f = %.2f of ideal (goal >= 0.7; %.0f GETs, %.0f HEADs: want 0)\n", col(func(r result) float64 { return r.ColdFPS }),
			col(func(r result) float64 { return r.ColdRatio3 }), col(func(r result) float64 { return float64(r.ColdBackendFiles) }),
			col(func(r result) float64 { return float64(r.ColdHeads) }))
		fmt.Printf("  cold, directory prefetch off %.0f = %.2f of ideal (%.0f GETs)\n", col(func(r result) float64 { return r.ColdNoPrefetchFPS }),
			col(func(r result) float64 { return r.ColdNoPrefetchRatio }), col(func(r result) float64 { return float64(r.ColdNoPrefetchBackendFiles) }))
		fmt.Printf("  on / off per run:")
		for _, r := range rs {
			fmt.Printf(" %.2f", r.ColdFPS/r.ColdNoPrefetchFPS)
		}
		fmt.Printf("\n  warm %.0f / local disk %.0f = %.2f (goal >= 0.5; %.0f store requests in 5 warm epochs: want 0)\n", col(func(r result) float64 { return r.WarmFPS }),
			col(func(r result) float64 { return r.LocalFPS }), col(func(r result) float64 { return r.WarmRatio3 }),
			col(func(r result) float64 { return float64(r.WarmRequests) }))
	}
	if c.wants("list") {
		fmt.Printf("cold listing of one directory of %d entries, seconds: ls -l %.2f (goal < 3), ls -f %.2f, OSS backend alone (no FUSE) %.2f page after page, %.2f in ranges at once\n",
			c.listEntries, col(func(r result) float64 { return r.ListLSL }), col(func(r result) float64 { return r.ListLSF }),
			col(func(r result) float64 { return r.ListDirect }), col(func(r result) float64 { return r.ListDirectParallel }))
		fmt.Printf("  ls -f throughput / the parallel direct lister's = %.2f (goal >= 0.8); ls -l time / ls -f time = %.2f (goal <= 1.2)\n",
			col(func(r result) float64 { return r.ListDirectParallel / r.ListLSF }), col(func(r result) float64 { return r.ListLSL / r.ListLSF }))
	}
	if c.wants("start") {
		fmt.Printf("start, --cache-memory %s, empty cache: `mlfsd mount` to the first byte read through it %.2f s (goal < 1 quiet, < 3 busy); the mount's RSS then %s\n",
			c.startMemory, col(func(r result) float64 { return r.StartSecs }), humanize.IBytes(uint64(col(func(r result) float64 { return float64(r.StartRSS) }))))
	}
	if c.wants("readers") {
		var rr []readersResult
		for _, r := range rs {
			rr = append(rr, *r.Readers)
		}
		reportReaders(c, rr)
	}
	fmt.Printf("daemon peak RSS %s; bound --cache-memory + 256MiB = %s: %s\n", humanize.IBytes(uint64(peak)), humanize.IBytes(uint64(rssBound)),
		map[bool]string{true: "within", false: "EXCEEDED"}[peak < rssBound])
}

// listSmall lists the small part's files through mnt (untimed: an epoch is
// timed on a listed tree) and checks that all of them are there.
func listSmall(c config, mnt string) error {
	n := 0
	err := filepath.WalkDir(mnt, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err == nil && n != c.smallFiles {
		err = fmt.Errorf("listed %d files through the mount, want %d", n, c.smallFiles)
	}
	return err
}
