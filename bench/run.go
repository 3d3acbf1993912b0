package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Cache modes of a run: which page-cache state the read workloads see.
const (
	CacheCold = "cold" // page cache dropped before each run
	CacheWarm = "warm" // one untimed pass first, then the timed runs
	CacheBoth = "both" // cold run, then warm run, repeated
	CacheAsIs = "as-is"
	// CacheNA labels write workloads, which do not depend on it.
	CacheNA = "n/a"
)

// pageCacheUntouched is Report.PageCache when no run asked for a cold cache.
const pageCacheUntouched = "not dropped (no cold runs)"

// RunOptions configures Run.
type RunOptions struct {
	// Workloads to run, by name; empty means all (ckpt only with WriteDir).
	Workloads []string
	Threads   int           // readers of the parallel workloads
	Runs      int           // timed runs per workload and cache state; figures are medians
	Duration  time.Duration // caps each run of a workload; 0: none
	RandomOps int           // reads per run of the random workload
	WriteDir  string        // where ckpt writes (the inputs are read-only)
	CkptSize  int64         // bytes; 0: the dataset's shard size
	Cache     string        // CacheCold, CacheWarm, CacheBoth or CacheAsIs
	Seed      uint64        // of shuffles and random offsets; 0: the dataset's
	Target    string        // label of what is measured (e.g. "mlfsd", "local")
	Progress  Progress      // nil: none
	// DropCaches empties the page cache before cold runs; nil means
	// DropPageCache. Its error is reported, not fatal.
	DropCaches func() error
}

func (o *RunOptions) validate() error {
	if o.Threads < 1 {
		return fmt.Errorf("threads %d: want at least 1", o.Threads)
	}
	if o.Runs < 1 {
		return fmt.Errorf("runs %d: want at least 1", o.Runs)
	}
	if o.RandomOps < 1 {
		return fmt.Errorf("random ops %d: want at least 1", o.RandomOps)
	}
	if o.Duration < 0 || o.CkptSize < 0 {
		return errors.New("duration and checkpoint size must not be negative")
	}
	switch o.Cache {
	case CacheCold, CacheWarm, CacheBoth, CacheAsIs:
	default:
		return fmt.Errorf("cache %q: want %s, %s, %s or %s", o.Cache, CacheCold, CacheWarm, CacheBoth, CacheAsIs)
	}
	if o.WriteDir != "" {
		fi, err := os.Stat(o.WriteDir)
		if err != nil {
			return fmt.Errorf("write dir: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("write dir %s is not a directory", o.WriteDir)
		}
	}
	return nil
}

// selectWorkloads resolves names (case-insensitive) in run order.
func (o *RunOptions) selectWorkloads() ([]workload, []string, error) {
	all := allWorkloads()
	var notes []string
	if len(o.Workloads) == 0 {
		var sel []workload
		for _, w := range all {
			if w.write && o.WriteDir == "" {
				notes = append(notes, fmt.Sprintf("%s skipped: no --write-dir given", w.name))
				continue
			}
			sel = append(sel, w)
		}
		return sel, notes, nil
	}
	want := map[string]bool{}
	for _, n := range o.Workloads {
		n = strings.TrimSpace(n)
		found := false
		for _, w := range all {
			if strings.EqualFold(w.name, n) {
				want[w.name], found = true, true
				if w.write && o.WriteDir == "" {
					return nil, nil, fmt.Errorf("workload %s writes: give --write-dir", w.name)
				}
			}
		}
		if !found {
			return nil, nil, fmt.Errorf("unknown workload %q: want some of %s", n, strings.Join(WorkloadNames(), ","))
		}
	}
	var sel []workload
	for _, w := range all {
		if want[w.name] {
			sel = append(sel, w)
		}
	}
	return sel, notes, nil
}

// DropPageCache writes back dirty pages and drops the kernel's page, dentry
// and inode caches (root only). A FUSE daemon's own cache is not affected:
// to measure a daemon cold, start it afresh.
func DropPageCache() error {
	unix.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}

// ConfirmDropPageCache refuses a cache state that drops the page cache
// (cold, both) unless the user confirmed it: dropping it empties the
// cached files of every process on the host, not only the dataset's, and
// on a shared host slows everyone else's jobs down.
func ConfirmDropPageCache(cache string, confirmed bool) error {
	if confirmed || (cache != CacheCold && cache != CacheBoth) {
		return nil
	}
	return fmt.Errorf("--cache %s drops the page cache of the whole host before each cold run (every process's cached files, not only this dataset's; other jobs on a shared host slow down): "+
		"add --drop-page-cache to confirm, or measure with --cache warm or --cache as-is", cache)
}

// Run measures the dataset (prepared by Prepare) that fsys shows and
// returns the report. A read of wrong bytes fails the run with a
// *MismatchError.
func Run(ctx context.Context, fsys FS, opt RunOptions) (*Report, error) {
	if err := opt.validate(); err != nil {
		return nil, err
	}
	sel, notes, err := opt.selectWorkloads()
	if err != nil {
		return nil, err
	}
	m, err := LoadManifestFS(ctx, fsys)
	if err != nil {
		return nil, err
	}
	if opt.Seed == 0 {
		opt.Seed = m.Seed
	}
	drop := opt.DropCaches
	if drop == nil {
		drop = DropPageCache
	}
	host, _ := os.Hostname()
	rep := &Report{
		Format: ReportFormat, Target: opt.Target, Path: fsys.String(), Started: time.Now().UTC(), Host: host,
		CPUs: runtime.NumCPU(), Dataset: m.Profile, Seed: m.Seed, Threads: opt.Threads, Runs: opt.Runs,
		Cache: opt.Cache, Duration: opt.Duration.String(), Notes: notes,
	}
	prog := progressOrNone(opt.Progress)
	var dropErr error
	dropped := false
	coldPrep := func() {
		if err := drop(); err != nil {
			dropErr = err
		} else {
			dropped = true
		}
	}
	for _, w := range sel {
		res := map[string]*Result{}
		order := []string{}
		// one runs w once as run r of cache state cache. pattern picks the
		// shuffle and random offsets: a warm run repeats the pattern that
		// warmed the cache.
		one := func(cache string, r, pattern int, timed bool) error {
			e := &env{fs: fsys, m: m, opt: &opt, prog: prog, run: pattern}
			if opt.Duration > 0 {
				e.deadline = time.Now().Add(opt.Duration)
			}
			total, bytes := w.total(e)
			desc := fmt.Sprintf("%s %s %d/%d", w.name, cache, r+1, opt.Runs)
			if !timed {
				desc = fmt.Sprintf("%s warm-up", w.name)
			}
			prog.Begin(desc, total, bytes)
			s, err := w.run(ctx, e)
			prog.End()
			if err != nil {
				return fmt.Errorf("%s (%s run %d): %w", w.name, cache, r+1, err)
			}
			if !timed {
				return nil
			}
			rr := res[cache]
			if rr == nil {
				rr = &Result{Workload: w.name, Cache: cache, Threads: w.threads(e), Op: w.op, Metric: w.metric}
				res[cache] = rr
				order = append(order, cache)
			}
			rr.Runs = append(rr.Runs, s.toSample())
			return nil
		}
		var err error
		switch {
		case w.write:
			for r := 0; r < opt.Runs && err == nil; r++ {
				err = one(CacheNA, r, r, true)
			}
		case opt.Cache == CacheCold:
			for r := 0; r < opt.Runs && err == nil; r++ {
				coldPrep()
				err = one(CacheCold, r, r, true)
			}
		case opt.Cache == CacheWarm:
			err = one(CacheWarm, 0, 0, false)
			for r := 0; r < opt.Runs && err == nil; r++ {
				err = one(CacheWarm, r, 0, true)
			}
		case opt.Cache == CacheBoth:
			for r := 0; r < opt.Runs && err == nil; r++ {
				coldPrep()
				if err = one(CacheCold, r, r, true); err == nil {
					err = one(CacheWarm, r, r, true)
				}
			}
		default:
			for r := 0; r < opt.Runs && err == nil; r++ {
				err = one(CacheAsIs, r, r, true)
			}
		}
		if err != nil {
			return nil, err
		}
		for _, c := range order {
			res[c].summarize()
			rep.Results = append(rep.Results, *res[c])
		}
	}
	switch {
	case dropErr != nil:
		rep.PageCache = fmt.Sprintf("NOT dropped (%v): cold figures may include page-cache hits", dropErr)
	case dropped:
		rep.PageCache = "dropped before each cold run (sync; echo 3 > /proc/sys/vm/drop_caches)"
	default:
		rep.PageCache = pageCacheUntouched
	}
	return rep, nil
}
