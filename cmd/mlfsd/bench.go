package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/all"
	"github.com/mlfsd/mlfsd/bench"
	"github.com/mlfsd/mlfsd/internal/atomicfile"
	"github.com/mlfsd/mlfsd/node"
)

func newBenchCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure training I/O throughput of a directory",
		Long: `Measure a mounted directory (mlfsd's, rclone's, s3fs's, a local disk) on the
access patterns of training. First generate a dataset with "bench prepare DIR",
make it visible at some path (mount it, upload it), then "bench run PATH".
Every byte read is verified; a run that reads wrong bytes fails.`,
	}
	c.AddCommand(newBenchPrepareCmd(a), newBenchRunCmd(a), newBenchReportCmd(a), newBenchPlotCmd(a))
	return c
}

// sizeValue is a byte-size flag: "1GiB", "100KiB", "512MB", "4096", parsed
// by the options table's one size parser.
type sizeValue struct{ v *int64 }

func (s sizeValue) String() string {
	if s.v == nil {
		return "0"
	}
	return node.FormatSize(*s.v)
}

func (s sizeValue) Set(v string) error {
	n, err := node.ParseSize(v)
	if err != nil {
		return fmt.Errorf("size %q: %v", v, err)
	}
	*s.v = n
	return nil
}

func (s sizeValue) Type() string { return "size" }

func sizeFlag(fs *pflag.FlagSet, v *int64, name, usage string) {
	fs.Var(sizeValue{v}, name, usage)
}

// showProgress draws progress bars on stderr when it is a terminal or when
// asked to.
func showProgress(w io.Writer, forced bool) bench.Progress {
	if !forced {
		f, ok := w.(*os.File)
		if !ok || !term.IsTerminal(int(f.Fd())) {
			return nil
		}
	}
	return &bench.BarProgress{W: w}
}

func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

func newBenchPrepareCmd(a *app) *cobra.Command {
	var (
		profile  string
		seed     uint64
		p        bench.Profile
		progress bool
		reuse    bool
	)
	c := &cobra.Command{
		Use:   "prepare DIR",
		Short: "Generate a benchmark dataset (deterministic from --seed) into a missing or empty DIR",
		Long: `Generate a benchmark dataset into DIR: large shards (shards/), many small files
(small/), a wide directory of empty entries (meta/) and manifest.json with sizes
and xxh64 checksums. The same profile and seed always give the same bytes.
Profiles: test (tiny, for tests), medium (a comparison that runs in minutes),
large (4 x 1 GiB shards, 10,000 x ~100 KiB files, 100,000 entries; the default).
The size flags override the profile's values.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			base, err := bench.LookupProfile(profile)
			if err != nil {
				return err
			}
			f := cmd.Flags()
			if f.Changed("shards") {
				base.Shards = p.Shards
			}
			if f.Changed("shard-size") {
				base.ShardSize = p.ShardSize
			}
			if f.Changed("small-files") {
				base.SmallFiles = p.SmallFiles
			}
			if f.Changed("small-size") {
				base.SmallSize = p.SmallSize
			}
			if f.Changed("small-per-dir") {
				base.SmallPerDir = p.SmallPerDir
			}
			if f.Changed("meta-entries") {
				base.MetaEntries = p.MetaEntries
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			m, err := bench.Prepare(ctx, args[0], bench.PrepareOptions{
				Profile: base, Seed: seed, Progress: showProgress(a.stderr, progress), Reuse: reuse,
			})
			if err != nil {
				return fmt.Errorf("bench prepare: %w", err)
			}
			fmt.Fprintf(a.stdout, "prepared %s: %d shards x %s, %d small files (%s), %d metadata entries, seed %d\n",
				args[0], len(m.Shards), humanize.IBytes(uint64(m.Profile.ShardSize)), len(m.Small),
				humanize.IBytes(uint64(m.TotalBytes()-int64(len(m.Shards))*m.Profile.ShardSize)), m.MetaEntries, m.Seed)
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&profile, "profile", "large", "dataset size: "+strings.Join(bench.ProfileNames(), ", "))
	fl.Uint64Var(&seed, "seed", 1, "seed of all content")
	fl.IntVar(&p.Shards, "shards", 0, "number of large shards (overrides the profile)")
	sizeFlag(fl, &p.ShardSize, "shard-size", "size of each shard (overrides the profile)")
	fl.IntVar(&p.SmallFiles, "small-files", 0, "number of small files (overrides the profile)")
	sizeFlag(fl, &p.SmallSize, "small-size", "mean small file size; each is 75%..125% of it (overrides the profile)")
	fl.IntVar(&p.SmallPerDir, "small-per-dir", 0, "small files per subdirectory (overrides the profile)")
	fl.IntVar(&p.MetaEntries, "meta-entries", 0, "entries of the metadata directory (overrides the profile)")
	fl.BoolVar(&progress, "progress", false, "show progress even when stderr is not a terminal")
	fl.BoolVar(&reuse, "reuse", false, "succeed without writing when DIR already holds this dataset (same sizes and seed)")
	return c
}

func newBenchRunCmd(a *app) *cobra.Command {
	var (
		opt           bench.RunOptions
		workloads     string
		asJSON        bool
		out, plot     string
		progress      bool
		dropPageCache bool
	)
	c := &cobra.Command{
		Use:   "run PATH|URI",
		Short: "Run the training workloads on a prepared dataset at PATH and print the figures",
		Long: `Run the training workloads on the dataset at PATH (where "bench prepare" output
is mounted) and print, per workload and cache state, MB/s, files/s, ops/s and
p50/p99 latency.

Given a directory URI (oss://bucket/prefix/, hdfs://..., nas:///dir/) instead of
a path, the read workloads read the store directly, without FUSE, as an ideal
client would (the first MiB in one request, so a small file takes one; then
16 ranged reads of 2 MiB in flight ahead of a sequential reader): the limit a
cold read through a mount is held to. The backend flags (--oss-endpoint...)
apply.

Figures are medians of --runs runs. Every byte read is checked; wrong bytes
fail the run (exit status 1) naming the file and offset.

Cache states (--cache): cold drops the kernel page cache before each run (root
only; if not permitted the output says so). That is the whole host's page
cache, every process's, so cold and both (the default) run only with
--drop-page-cache, the confirmation that no one else's jobs share the host.
Warm times runs after one untimed pass, both alternates a cold and a warm run; a warm run repeats the shuffle and
offsets of the pass that warmed it. A FUSE daemon's own cache is not
dropped: to measure one cold, remount it.

Workloads:
` + bench.WorkloadHelp(),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if workloads != "" {
				opt.Workloads = strings.Split(workloads, ",")
			}
			opt.Progress = showProgress(a.stderr, progress)
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			fsys, closeFS, err := a.benchFS(ctx, args[0])
			if err != nil {
				return fmt.Errorf("bench run: %w", err)
			}
			defer closeFS()
			if err := bench.ConfirmDropPageCache(opt.Cache, dropPageCache); err != nil {
				return fmt.Errorf("bench run: %w", err)
			}
			rep, err := bench.Run(ctx, fsys, opt)
			if err != nil {
				return fmt.Errorf("bench run: %w", err)
			}
			if out != "" {
				if err := atomicfile.WriteFunc(out, 0o644, atomicfile.NoSync, rep.WriteJSON); err != nil {
					return fmt.Errorf("bench run: writing --out: %w", err)
				}
			}
			if plot != "" {
				if err := bench.Plot(plot, []*bench.Report{rep}); err != nil {
					return fmt.Errorf("bench run: --plot: %w", err)
				}
			}
			if asJSON {
				return rep.WriteJSON(a.stdout)
			}
			return rep.WriteTable(a.stdout)
		},
	}
	fl := c.Flags()
	node.AddFlags(fl, &a.settings, node.GroupOSS, node.GroupS3, node.GroupHDFS)
	fl.StringVar(&workloads, "workloads", "", "comma-separated workloads to run (default: all; ckpt only with --write-dir): "+strings.Join(bench.WorkloadNames(), ","))
	fl.IntVar(&opt.Threads, "threads", 8, "readers of the parallel workloads (seqN, epoch, random, stat)")
	fl.IntVar(&opt.Runs, "runs", 3, "timed runs per workload and cache state; figures are their medians")
	fl.DurationVar(&opt.Duration, "duration", 0, "stop each run of a workload after this long (0: read everything)")
	fl.IntVar(&opt.RandomOps, "random-ops", 2000, "reads per run of the random workload")
	fl.StringVar(&opt.WriteDir, "write-dir", "", "directory the ckpt workload writes to (and removes its file from)")
	sizeFlag(fl, &opt.CkptSize, "ckpt-size", "size of the checkpoint file (default: the dataset's shard size)")
	fl.StringVar(&opt.Cache, "cache", bench.CacheBoth, "page-cache state of the read workloads: cold, warm, both or as-is (cold and both need --drop-page-cache)")
	fl.BoolVar(&dropPageCache, "drop-page-cache", false, "confirm that --cache cold or both may drop the page cache of the whole host (every process's, not only the dataset's) before each cold run")
	fl.Uint64Var(&opt.Seed, "seed", 0, "seed of shuffles and random offsets (default: the dataset's)")
	fl.StringVar(&opt.Target, "target", "", "label of what is measured, e.g. mlfsd, rclone, local (shown in reports and plots)")
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON instead of a table")
	fl.StringVar(&out, "out", "", "also write the JSON report to this file")
	fl.StringVar(&plot, "plot", "", "draw the results into this PNG file")
	fl.BoolVar(&progress, "progress", false, "show progress even when stderr is not a terminal")
	return c
}

func newBenchReportCmd(a *app) *cobra.Command {
	var (
		limit, coldLimit, plot string
		markdown               bool
	)
	c := &cobra.Command{
		Use:   "report REPORT.json...",
		Short: "Compare JSON reports of bench run side by side (table, plot)",
		Long: `Read reports written by "bench run --out" or "--json" and print one table with
the targets side by side. Reports with the same target are merged (their runs
pooled, figures re-taken as medians). With --limit, each figure is also shown
as a ratio to that target's (the limit measured in the same session).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var reps []*bench.Report
			for _, p := range args {
				r, err := bench.ReadReport(p)
				if err != nil {
					return fmt.Errorf("bench report: %w", err)
				}
				reps = append(reps, r)
			}
			cmp, err := bench.Compare(reps, limit, coldLimit)
			if err != nil {
				return fmt.Errorf("bench report: %w", err)
			}
			if plot != "" {
				// With a limit, the plot shows the tables' ratios, on a
				// linear axis; without, the figures themselves.
				draw := func() error { return bench.Plot(plot, cmp.Reports) }
				if limit != "" || coldLimit != "" {
					draw = func() error { return cmp.PlotRatios(plot) }
				}
				if err := draw(); err != nil {
					return fmt.Errorf("bench report: --plot: %w", err)
				}
			}
			if markdown {
				return cmp.WriteMarkdown(a.stdout)
			}
			return cmp.WriteTable(a.stdout)
		},
	}
	fl := c.Flags()
	fl.StringVar(&limit, "limit", "", "target whose figures are the limit (ratios are shown against it)")
	fl.StringVar(&coldLimit, "cold-limit", "", "target that is the limit of cold rows instead, e.g. a direct reader of the store (bench run URI)")
	fl.StringVar(&plot, "plot", "", "draw the targets side by side into this PNG file (with a limit: the ratios, on a linear axis)")
	fl.BoolVar(&markdown, "markdown", false, "print Markdown tables (for docs/PERFORMANCE.md)")
	return c
}

func newBenchPlotCmd(a *app) *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "plot -o OUT.png REPORT.json...",
		Short: "Draw JSON reports of bench run side by side into a PNG",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("bench plot: give the PNG to write with -o")
			}
			var reps []*bench.Report
			for _, p := range args {
				r, err := bench.ReadReport(p)
				if err != nil {
					return fmt.Errorf("bench plot: %w", err)
				}
				reps = append(reps, r)
			}
			cmp, err := bench.Compare(reps, "", "")
			if err != nil {
				return fmt.Errorf("bench plot: %w", err)
			}
			if err := bench.Plot(out, cmp.Reports); err != nil {
				return fmt.Errorf("bench plot: %w", err)
			}
			fmt.Fprintf(a.stdout, "wrote %s\n", out)
			return nil
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "PNG file to write")
	return c
}

// benchFS returns what bench run reads: a directory, or a backend when arg
// is a URI; release closes it.
func (a *app) benchFS(ctx context.Context, arg string) (fsys bench.FS, release func(), err error) {
	if !strings.Contains(arg, "://") {
		fi, err := os.Stat(arg)
		if err != nil {
			return nil, nil, err
		}
		if !fi.IsDir() {
			return nil, nil, fmt.Errorf("%s is not a directory", arg)
		}
		return bench.DirFS(arg), func() {}, nil
	}
	u, err := backends.ParseURI(arg)
	if err != nil {
		return nil, nil, err
	}
	b, key, err := all.Open(ctx, u, a.settings.Backend, a.log)
	if err != nil {
		return nil, nil, err
	}
	if key != "" {
		b.Close()
		return nil, nil, fmt.Errorf("%s names one object: give the dataset's directory URI, ending in /", arg)
	}
	return &bench.BackendFS{B: b, Name: u.String()}, func() { b.Close() }, nil
}
