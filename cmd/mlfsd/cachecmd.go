package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/mlfsd/mlfsd/cache"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/api"
)

// cacheService is what `mlfsd cache` asks: the daemon through its API, or
// a node of this process over --cache-dir.
type cacheService interface {
	ClearCache(ctx context.Context, req node.ClearRequest) (node.ClearResult, error)
	Warm(ctx context.Context, req node.WarmRequest) (node.WarmStatus, error)
	WarmStatus(ctx context.Context, id string) (node.WarmStatus, error)
	CancelWarm(ctx context.Context, id string) (node.WarmStatus, error)
}

// localCache is a node of this process as a cacheService.
type localCache struct{ n *node.Node }

func (l localCache) ClearCache(ctx context.Context, req node.ClearRequest) (node.ClearResult, error) {
	return l.n.ClearCache(ctx, req)
}
func (l localCache) Warm(ctx context.Context, req node.WarmRequest) (node.WarmStatus, error) {
	return l.n.Warm(ctx, req)
}
func (l localCache) WarmStatus(_ context.Context, id string) (node.WarmStatus, error) {
	return l.n.WarmStatus(id)
}
func (l localCache) CancelWarm(_ context.Context, id string) (node.WarmStatus, error) {
	return l.n.CancelWarm(id)
}

// withCacheService runs f against the daemon at socket, or else a node of
// this process that holds --cache-dir (closed afterwards).
func withCacheService(ctx context.Context, a *app, cmd *cobra.Command, socket string, f func(cacheService) error) error {
	if socket != "" {
		return f(api.NewClient(socket))
	}
	if a.settings.Cache.Dir == "" {
		return errors.New("give --daemon SOCKET (a running daemon's cache) or --cache-dir DIR (a cache directory no process holds)")
	}
	log := a.log
	if f := cmd.Flag("log-level"); f == nil || !f.Changed {
		// A command's own node: its opening and closing of the cache
		// are not news to whoever ran the command; warnings are.
		var err error
		if log, err = newLogger(a.stderr, "warn", a.logFormat); err != nil {
			return err
		}
	}
	n, err := node.New(ctx, node.Options{Settings: a.settings, OpenCache: true, Log: log, Progress: a.stderr})
	if err != nil {
		return explainBusyCache(err)
	}
	err = f(localCache{n})
	return errors.Join(err, n.Close(context.Background()))
}

// explainBusyCache says what to do about a cache directory a daemon holds.
func explainBusyCache(err error) error {
	var busy *cache.DirBusyError
	if errors.As(err, &busy) && strings.HasSuffix(busy.Command, " daemon") {
		return fmt.Errorf("%w; ask it with --daemon SOCKET", err)
	}
	return err
}

func newCacheCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "cache",
		Short: "See and steer the node's read cache: du, clear, warm",
		Long: `See and steer the read cache: what it holds per dataset and mount (du), drop a
dataset's cached data (clear), or fetch a dataset before a job reads it (warm).

Each works against a running daemon (--daemon SOCKET) or, without one, on a
cache directory no process holds (--cache-dir DIR).`,
	}
	c.AddCommand(newCacheDuCmd(a), newCacheClearCmd(a), newCacheWarmCmd(a))
	return c
}

func newCacheDuCmd(a *app) *cobra.Command {
	var socket string
	var asJSON bool
	c := &cobra.Command{
		Use:   "du [--daemon SOCKET | --cache-dir DIR] [--json]",
		Short: "Show what the cache holds per dataset and mount: memory, disk and shared-tier bytes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var u node.CacheUsage
			if socket != "" {
				var err error
				if u, err = api.NewClient(socket).CacheUsage(cmd.Context()); err != nil {
					return err
				}
			} else {
				ds, err := cache.DiskUsage(a.settings.Cache.Dir)
				if err != nil {
					return explainBusyCache(err)
				}
				u = node.CacheUsage{Dir: a.settings.Cache.Dir, Datasets: ds, Mounts: []node.MountUsage{}}
			}
			return printCacheUsage(a.stdout, u, asJSON)
		},
	}
	c.Flags().StringVar(&socket, "daemon", "", "API socket of the mlfsd daemon whose cache to show (live: memory, mounts, shared tier, warm-ups)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	node.AddFlags(c.Flags(), &a.settings, node.GroupCache)
	return c
}

// printCacheUsage prints u as tables, or JSON.
func printCacheUsage(w io.Writer, u node.CacheUsage, asJSON bool) error {
	if asJSON {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(u)
	}
	b := func(n int64) string { return humanize.IBytes(uint64(n)) }
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DATASET\tOBJECTS\tCOMPLETE\tDISK\tMEMORY\tOPEN")
	var objs, disk, mem int64
	for _, d := range u.Datasets {
		name := d.Dataset
		if name == "" {
			name = "(unknown: cached before its dataset was recorded)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\n", name, d.Objects, d.Complete, b(d.DiskBytes), b(d.MemoryBytes), d.Open)
		objs, disk, mem = objs+d.Objects, disk+d.DiskBytes, mem+d.MemoryBytes
	}
	fmt.Fprintf(tw, "total\t%d\t\t%s\t%s\t\n", objs, b(disk), b(mem))
	if len(u.Mounts) > 0 {
		fmt.Fprintln(tw, "\nMOUNT\tDATASET\tSERVED\tFROM MEMORY\tFROM DISK")
		for _, m := range u.Mounts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Target, m.Dataset, b(m.ReadBytes), b(m.MemoryHitBytes), b(m.DiskHitBytes))
		}
	}
	if len(u.Shared) > 0 {
		fmt.Fprintln(tw, "\nSHARED TIER\tHOLDS (NODE'S COUNT)\tDATASET\tWRITTEN BY THIS NODE")
		for _, s := range u.Shared {
			holds := "-"
			if s.Bytes > 0 {
				holds = b(s.Bytes)
			}
			ds := make([]string, 0, len(s.WrittenBytes))
			for d := range s.WrittenBytes {
				ds = append(ds, d)
			}
			sort.Strings(ds)
			if len(ds) == 0 {
				fmt.Fprintf(tw, "%s\t%s\t-\t0 B\n", s.URI, holds)
			}
			for i, d := range ds {
				if i > 0 {
					holds = ""
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.URI, holds, d, b(s.WrittenBytes[d]))
			}
		}
	}
	if len(u.Warms) > 0 {
		fmt.Fprintln(tw, "\nWARM-UP\tURI\tSTATE\tFILES\tBYTES\tFETCHED\tERROR")
		for _, s := range u.Warms {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s/%s\t%s\t%s\n", s.ID, s.URI, s.State, s.FilesDone, s.Files, b(s.BytesDone), b(s.Bytes), b(s.BytesFetched), s.Error)
		}
	}
	return tw.Flush()
}

func newCacheClearCmd(a *app) *cobra.Command {
	var socket string
	var shared bool
	c := &cobra.Command{
		Use:   "clear [URI] [--shared] [--daemon SOCKET | --cache-dir DIR]",
		Short: "Drop a dataset's cached data (every dataset's without URI) from memory and disk",
		Long: `Drop from the cache's memory and disk the data of the datasets under URI
(oss://bucket/prefix/ also clears oss://bucket/prefix/train/; an endpoint left out
matches any), or of every dataset without URI.

It is safe while mounts are live: a file open now keeps reading right, and its
cached copy goes when its last reader closes it.

With --shared, URI's blocks are also deleted from the shared cache tier (the
cluster's: every node then reads them from the source again). URI is listed to
find them, with the credentials of this environment (or the daemon's), and the
tier is the one --shared-cache names (or the daemon's).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := node.ClearRequest{Shared: shared}
			if len(args) == 1 {
				req.URI = args[0]
			}
			if shared && socket != "" {
				opts, err := node.MountFlags(cmd.Flags())
				if err != nil {
					return err
				}
				req.Options, req.Credentials = opts, daemonCredentials()
			}
			return withCacheService(cmd.Context(), a, cmd, socket, func(s cacheService) error {
				res, err := s.ClearCache(cmd.Context(), req)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "cleared %d objects (%s on disk, %s in memory)", res.Objects,
					humanize.IBytes(uint64(res.DiskBytes)), humanize.IBytes(uint64(res.MemoryBytes)))
				if res.Deferred > 0 {
					fmt.Fprintf(a.stdout, "; %d open now go when their readers close them", res.Deferred)
				}
				if shared {
					fmt.Fprintf(a.stdout, "; %d blocks (%s) from the shared tier", res.Shared.Blocks, humanize.IBytes(uint64(res.Shared.Bytes)))
				}
				fmt.Fprintln(a.stdout)
				return nil
			})
		},
	}
	c.Flags().StringVar(&socket, "daemon", "", "API socket of the mlfsd daemon whose cache to clear")
	c.Flags().BoolVar(&shared, "shared", false, "also delete URI's blocks from the shared cache tier (every node's; needs URI)")
	node.AddFlags(c.Flags(), &a.settings, node.GroupCache, node.GroupOSS, node.GroupS3, node.GroupHDFS)
	return c
}

func newCacheWarmCmd(a *app) *cobra.Command {
	var socket, filesFrom, target string
	var parallel int
	var noWait bool
	c := &cobra.Command{
		Use:   "warm URI [--parallel N] [--files FILE] [--daemon SOCKET [--target MOUNTPOINT] | --cache-dir DIR]",
		Short: "Fetch a dataset (a prefix, or a file list) into the cache before a job reads it",
		Long: `Fetch everything under URI (or one object), or the keys FILE lists (one a line,
relative to URI), whole into the node's disk cache, and into the shared tier when
one is configured, so that a job's first epoch reads at the speed of the later ones.

It is resumable: an object already complete in the cache costs no request, so a
second run after an interruption fetches only what is missing.

With --daemon the daemon warms its cache (with the credentials of this
environment, or with those of the input mount --target names), and this command
follows its progress; --no-wait returns at once (mlfsd cache du shows progress).
Without a daemon it warms --cache-dir itself.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := node.WarmRequest{URI: args[0], Parallel: parallel, Target: target}
			if parallel < 1 {
				return fmt.Errorf("--parallel %d: give at least 1", parallel)
			}
			if filesFrom != "" {
				files, err := readFileList(filesFrom)
				if err != nil {
					return err
				}
				req.Files = files
			}
			if socket == "" && (target != "" || noWait) {
				return errors.New("--target and --no-wait ask a daemon: give --daemon SOCKET")
			}
			if socket != "" {
				// The daemon's node-wide settings are its own: only
				// mount-scope flags (an endpoint, a shared tier) travel.
				opts, err := node.MountFlags(cmd.Flags())
				if err != nil {
					return err
				}
				req.Options = opts
				if target == "" {
					req.Credentials = daemonCredentials()
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return withCacheService(ctx, a, cmd, socket, func(s cacheService) error {
				st, err := s.Warm(ctx, req)
				if err != nil {
					return err
				}
				if noWait {
					fmt.Fprintf(a.stdout, "warm-up %s of %s started\n", st.ID, st.URI)
					return nil
				}
				return followWarm(ctx, a, s, st)
			})
		},
	}
	c.Flags().StringVar(&socket, "daemon", "", "API socket of the mlfsd daemon whose cache to warm")
	c.Flags().IntVar(&parallel, "parallel", node.DefaultWarmParallel, "objects fetched at once")
	c.Flags().StringVar(&filesFrom, "files", "", "warm only the keys this file lists, one a line, relative to URI ('-': standard input)")
	c.Flags().StringVar(&target, "target", "", "with --daemon: warm through the input mount at this mountpoint (its credentials and shared tier)")
	c.Flags().BoolVar(&noWait, "no-wait", false, "with --daemon: start the warm-up and return")
	node.AddFlags(c.Flags(), &a.settings, node.GroupCache, node.GroupOSS, node.GroupS3, node.GroupHDFS)
	return c
}

// readFileList reads keys, one a line; blank lines and lines starting
// with '#' are skipped.
func readFileList(path string) ([]string, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("--files: %w", err)
		}
		defer f.Close()
		r = f
	}
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--files %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--files %s: lists no key", path)
	}
	return out, nil
}

// warmPoll is how often a followed warm-up's progress is asked for.
const warmPoll = 250 * time.Millisecond

// followWarm shows a warm-up's progress until it ends (a bar on a
// terminal, a line every few seconds otherwise); interrupted, it cancels
// the warm-up, which a second run resumes.
func followWarm(ctx context.Context, a *app, s cacheService, st node.WarmStatus) error {
	p := newWarmProgress(a.stderr, st)
	interrupted := false
	for !st.Ended() {
		t := time.NewTimer(warmPoll)
		select {
		case <-ctx.Done():
			if !interrupted {
				interrupted = true
				// Cancelled, then followed until it stopped (it may
				// have ended on its own meanwhile).
				if _, err := s.CancelWarm(context.Background(), st.ID); err != nil {
					t.Stop()
					p.finish(st)
					return err
				}
			}
			<-t.C
		case <-t.C:
		}
		var err error
		if st, err = s.WarmStatus(context.Background(), st.ID); err != nil {
			p.finish(st)
			return err
		}
		p.update(st)
	}
	p.finish(st)
	if st.State == node.WarmCancelled {
		return fmt.Errorf("interrupted: %d of %d files warmed; run it again to fetch the rest", st.FilesDone, st.Files)
	}
	fmt.Fprintf(a.stdout, "warmed %s: %d files, %s (%d cached already; %s fetched)\n", st.URI, st.FilesDone,
		humanize.IBytes(uint64(st.BytesDone)), st.FilesCached, humanize.IBytes(uint64(st.BytesFetched)))
	if st.State != node.WarmDone {
		return fmt.Errorf("warm-up %s: %d files failed, the first: %s", st.State, st.FilesFailed, st.Error)
	}
	return nil
}

// warmProgress shows a warm-up's progress: a bar with a rate on a
// terminal, plain lines otherwise.
type warmProgress struct {
	w         io.Writer
	tty       bool
	bar       *progressbar.ProgressBar
	start     time.Time
	lastPrint time.Time
}

// warmLineEvery is how often progress lines go to a stderr that is not a
// terminal.
const warmLineEvery = 5 * time.Second

func newWarmProgress(w io.Writer, st node.WarmStatus) *warmProgress {
	f, ok := w.(*os.File)
	p := &warmProgress{w: w, tty: ok && term.IsTerminal(int(f.Fd())), start: time.Now()}
	p.lastPrint = p.start
	p.update(st)
	return p
}

func (p *warmProgress) update(st node.WarmStatus) {
	if st.State == node.WarmListing {
		return
	}
	if p.tty {
		if p.bar == nil {
			p.bar = progressbar.NewOptions64(st.Bytes,
				progressbar.OptionSetWriter(p.w),
				progressbar.OptionSetDescription("warming "+st.URI),
				progressbar.OptionShowBytes(true), progressbar.OptionUseIECUnits(true),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionShowElapsedTimeOnFinish(),
				progressbar.OptionFullWidth())
		}
		p.bar.Set64(st.BytesDone)
		return
	}
	if time.Since(p.lastPrint) >= warmLineEvery {
		p.lastPrint = time.Now()
		p.line(st)
	}
}

func (p *warmProgress) line(st node.WarmStatus) {
	rate := float64(st.BytesFetched) / max(time.Since(p.start).Seconds(), 1e-3)
	fmt.Fprintf(p.w, "mlfsd: warming %s: %d/%d files, %s/%s, %s/s fetched\n", st.URI, st.FilesDone, st.Files,
		humanize.IBytes(uint64(st.BytesDone)), humanize.IBytes(uint64(st.Bytes)), humanize.IBytes(uint64(rate)))
}

func (p *warmProgress) finish(st node.WarmStatus) {
	if p.bar != nil {
		p.bar.Set64(st.BytesDone)
		p.bar.Finish()
		fmt.Fprintln(p.w)
		return
	}
	if !p.tty {
		p.line(st)
	}
}
