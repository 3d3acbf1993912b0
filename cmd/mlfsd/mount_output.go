package main

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/dustin/go-humanize"
	"github.com/spf13/pflag"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/all"
	mfs "github.com/mlfsd/mlfsd/fs"
	"github.com/mlfsd/mlfsd/writeback"
)

// outputConfig holds the write-back flags of output channels.
type outputConfig struct {
	stagingDir      string
	concurrency     int
	fsyncDurable    bool
	stagingSync     bool
	retries         int
	bwlimit         string
	streamThreshold string
	passthrough     bool
}

func addOutputFlags(fs *pflag.FlagSet, c *outputConfig) {
	fs.StringVar(&c.stagingDir, "staging-dir", "/var/lib/mlfsd/staging",
		"local directory where output files are staged and the upload journal is kept; restart on the same dir to finish uploads")
	fs.IntVar(&c.concurrency, "upload-concurrency", 4, "output files uploaded at once")
	fs.BoolVar(&c.fsyncDurable, "fsync-durable", true,
		"fsync on an output file returns only once the file is durable in the backend (false: once journaled locally)")
	fs.BoolVar(&c.stagingSync, "staging-fsync", false,
		"fsync staged data at close, so closed files also survive a machine crash before upload")
	fs.IntVar(&c.retries, "upload-retries", 10, "attempts of a failing upload before it is reported as failed")
	fs.StringVar(&c.bwlimit, "upload-bwlimit", "0", "cap on upload throughput per output channel, e.g. 100MiB (0 = none)")
	fs.StringVar(&c.streamThreshold, "upload-stream-threshold", "0",
		"a file written sequentially from empty starts uploading before close once this much is staged, e.g. 16MiB (0 = only after close)")
	fs.BoolVar(&c.passthrough, "output-passthrough", true,
		"let the kernel write output files' staging files directly (FUSE passthrough; needs root); false routes writes through mlfsd")
}

// options turns the flags into writeback.Options, naming any bad value.
func (c *outputConfig) options() (writeback.Options, error) {
	o := writeback.Options{
		StagingDir:  c.stagingDir,
		Concurrency: c.concurrency,
		StagingSync: c.stagingSync,
		MaxAttempts: c.retries,
	}
	if c.concurrency < 1 {
		return o, fmt.Errorf("--upload-concurrency %d: want at least 1", c.concurrency)
	}
	if c.retries < 1 {
		return o, fmt.Errorf("--upload-retries %d: want at least 1", c.retries)
	}
	bw, err := humanize.ParseBytes(c.bwlimit)
	if err != nil {
		return o, fmt.Errorf("--upload-bwlimit %q: want a size per second such as 100MiB: %v", c.bwlimit, err)
	}
	o.BandwidthLimit = int64(bw)
	st, err := humanize.ParseBytes(c.streamThreshold)
	if err != nil {
		return o, fmt.Errorf("--upload-stream-threshold %q: want a size such as 16MiB: %v", c.streamThreshold, err)
	}
	o.StreamThreshold = int64(st)
	return o, o.Validate()
}

// outputMount is a mounted output channel.
type outputMount interface {
	// Drain blocks until every byte written so far is durable in the backend.
	Drain(ctx context.Context) error
	// Unmount detaches the mount; call Drain first.
	Unmount() error
	// Wait blocks until the mount is detached (by Unmount or externally).
	Wait()
}

// mountOutput mounts the directory URI u read-write (write-back) at mountpoint.
func mountOutput(ctx context.Context, a *app, u backends.URI, mountpoint string) (outputMount, error) {
	if !u.IsDir() {
		return nil, fmt.Errorf("output channel %s must be a directory URI (end it with '/')", u)
	}
	opt, err := a.output.options()
	if err != nil {
		return nil, err
	}
	if err := mfs.CheckMountpoint(mountpoint); err != nil {
		return nil, err
	}
	if u.Scheme == backends.SchemeNAS {
		// An output directory need not exist yet (an OSS prefix never has
		// to); the NAS backend opens only existing roots.
		if err := os.MkdirAll(u.Path, 0o755); err != nil {
			return nil, fmt.Errorf("create output directory %s: %w", u.Path, err)
		}
	}
	b, _, err := all.Open(ctx, u, a.backends, a.log)
	if err != nil {
		return nil, err
	}
	opt.Log = a.log
	st, err := writeback.Open(ctx, b, opt)
	if err != nil {
		b.Close()
		return nil, err
	}
	srv, err := mfs.MountOutput(ctx, mountpoint, mfs.OutputOptions{Store: st, FsyncDurable: a.output.fsyncDurable, NoPassthrough: !a.output.passthrough, Log: a.log},
		mfs.MountOptions{FSName: u.String(), Log: a.log})
	if err != nil {
		st.Close()
		b.Close()
		return nil, err
	}
	m := &wbMount{a: a, name: u.String(), mnt: mountpoint, b: b, st: st, srv: srv, done: make(chan struct{})}
	go m.watch()
	return m, nil
}

// wbMount is a write-back output mount: the FUSE server, its Store and
// backend.
type wbMount struct {
	a    *app
	name string
	mnt  string
	b    backends.Backend
	st   *writeback.Store
	srv  *mfs.Server

	mu         sync.Mutex
	unmounting bool // GUARDED_BY(mu): Unmount was called (not an external umount)
	done       chan struct{}
}

// Drain waits until every closed file is durable, printing progress.
func (m *wbMount) Drain(ctx context.Context) error {
	return m.st.Drain(ctx, writeback.PrintProgress(m.a.stderr, m.name))
}

// Unmount detaches the FUSE mount and closes the Store; uploads still
// pending stay journaled in the staging dir for the next start.
func (m *wbMount) Unmount() error {
	m.mu.Lock()
	m.unmounting = true
	m.mu.Unlock()
	err := m.srv.Unmount()
	<-m.done
	return err
}

// watch waits for the mount to go away. If someone else unmounted it, it
// still drains first, so closed files are not left behind.
func (m *wbMount) watch() {
	m.srv.Wait()
	m.mu.Lock()
	external := !m.unmounting
	m.mu.Unlock()
	if external {
		m.a.log.Warn("output mount was unmounted externally; uploading what was closed", "mountpoint", m.mnt)
		if err := m.Drain(context.Background()); err != nil {
			m.a.log.Error("drain after external unmount", "mountpoint", m.mnt, "err", err)
		}
	}
	if n := m.st.Pending(); n > 0 {
		m.a.log.Warn("files closed after the drain stay journaled in the staging dir; they are uploaded at the next mount of this channel",
			"files", n, "staging_dir", m.st.StagingDir())
	}
	m.st.Close()
	m.b.Close()
	close(m.done)
}

// Wait blocks until the mount is detached and its Store closed.
func (m *wbMount) Wait() { <-m.done }
