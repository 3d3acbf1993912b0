package writeback

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Options configures a Store. The zero value of every field but StagingDir
// selects a sensible default (see withDefaults).
type Options struct {
	// StagingDir holds staged data and the upload journal. One staging dir
	// may serve several backends: each gets its own sub-directory, named
	// after a hash of what names its data (not its endpoint; see
	// identity.go), so a restart finds its own journal.
	StagingDir string
	// Concurrency is the number of files uploaded at once (default 4).
	// Parallel parts within one large file are the backend's business.
	Concurrency int
	// StagingSync fsyncs a staged file's data and its journal record at
	// close, so closed files survive a machine crash (power loss), not only
	// a daemon crash.
	StagingSync bool
	// MinBackoff and MaxBackoff bound the delay between attempts of a
	// failing upload (defaults 200ms and 30s; the delay doubles each time).
	MinBackoff, MaxBackoff time.Duration
	// MaxAttempts is how many times a transiently failing upload is tried
	// before it is declared failed (default 10). Errors that cannot heal
	// (permission, invalid, unsupported) fail at once.
	MaxAttempts int
	// StreamThreshold, when positive, makes a file written sequentially
	// from empty start uploading once this many bytes are staged, before
	// close. Zero (the default) uploads only after close: on the benchmark
	// machine, streaming made close 2-3x slower by competing with the
	// writer for CPU and disk (see docs/PERFORMANCE.md).
	StreamThreshold int64
	// BandwidthLimit caps upload throughput in bytes per second across all
	// uploads (0 = unlimited).
	BandwidthLimit int64
	// Registry receives the Store's metrics (nil: not registered).
	Registry prometheus.Registerer
	// Log receives upload failures and recovery notes (nil: discarded).
	Log *slog.Logger

	// Handover, when set, takes over the files open for writing of the
	// Store that had this staging dir (see Store.Handover): their live
	// staging files are kept and become the files' current data.
	Handover *HandoverState

	// crashHook, set by tests, is called at each crash point (version.go).
	crashHook func(point string)
}

func (o Options) withDefaults() Options {
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 200 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 10
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports the first option that cannot work.
func (o Options) Validate() error {
	if o.StagingDir == "" {
		return fmt.Errorf("writeback: a staging directory is required (--staging-dir)")
	}
	if o.Concurrency < 0 {
		return fmt.Errorf("writeback: upload concurrency %d is negative", o.Concurrency)
	}
	if o.BandwidthLimit < 0 {
		return fmt.Errorf("writeback: bandwidth limit %d is negative", o.BandwidthLimit)
	}
	return nil
}
