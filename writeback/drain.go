package writeback

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// Progress describes a drain in progress.
type Progress struct {
	FilesDone, FilesTotal int64
	// BytesDone counts bytes sent to the backend since the drain began
	// (capped at BytesTotal: a retried upload sends bytes again), so it
	// moves during the upload of one large file.
	BytesDone, BytesTotal int64
	// Sent counts bytes handed to the backend during the drain (retries
	// included): unlike BytesDone it leaves out the part of a file that
	// was already sent when the drain began, so Rate is the rate of the
	// upload the drain waited for, not the size of what finished.
	Sent    int64
	Elapsed time.Duration
	// Failed counts files that could not be uploaded.
	Failed int
}

// Rate is the average upload rate of the drain so far, in bytes/s: the
// bytes sent during the drain over its elapsed time. (BytesDone over time
// would credit a file streamed to the backend before the drain, or one
// whose last part was in flight, as if the whole of it had gone up in the
// drain's window: a channel uploaded under a 40 MiB/s cap then showed
// hundreds of MiB/s.)
func (p Progress) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Sent) / p.Elapsed.Seconds()
}

// String renders a progress line: files, bytes, rate.
func (p Progress) String() string {
	s := fmt.Sprintf("%d/%d files, %s/%s, %s/s", p.FilesDone, p.FilesTotal,
		humanize.IBytes(uint64(p.BytesDone)), humanize.IBytes(uint64(p.BytesTotal)), humanize.IBytes(uint64(p.Rate())))
	if p.Failed > 0 {
		s += fmt.Sprintf(", %d failed", p.Failed)
	}
	return s
}

// Drain blocks until every closed file is durable in the backend, or has
// failed for good, or ctx ends. progress (if not nil) is called about once
// a second and once at the end. Files still open for writing are not
// waited for (their close has not returned). If some files failed, the
// error wraps ErrUploadFailed and names them; their data stays staged and
// journaled for the next start.
func (s *Store) Drain(ctx context.Context, progress func(Progress)) error {
	return s.drain(ctx, progress, time.Now)
}

// drain is Drain with the clock that times the progress reports and the
// rate injected (tests).
func (s *Store) drain(ctx context.Context, progress func(Progress), now func() time.Time) error {
	s.mu.Lock()
	base := s.done
	s.mu.Unlock()
	sentBase := s.sent.Load()
	// The window opens once the baselines are taken: bytes sent before
	// are not the drain's.
	start := now()
	snapshot := func() (Progress, []string, int, bool, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		busy := s.completing > 0
		closed := s.closed
		sent := s.sent.Load() - sentBase
		p := Progress{FilesDone: s.done.files - base.files, Sent: sent, Elapsed: now().Sub(start)}
		var failed []string
		var failedFiles, failedBytes int64 // failed, and counted as pending
		open := 0
		for _, e := range s.entries {
			if e.failed != nil {
				failed = append(failed, e.failed.Error())
				if e.pend != nil {
					failedFiles++
					failedBytes += e.pend.size
				}
			}
			if e.dirty && e.handles > 0 {
				open++
			}
		}
		failed = append(failed, s.aside...)
		p.Failed = len(failed)
		p.FilesTotal = p.FilesDone + s.pending.files - failedFiles
		p.BytesTotal = s.done.bytes - base.bytes + s.pending.bytes - failedBytes
		p.BytesDone = min(sent, p.BytesTotal)
		if p.FilesDone >= p.FilesTotal {
			p.BytesDone = p.BytesTotal
		}
		return p, failed, open, busy, closed
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastReport := start
	for {
		p, failed, open, busy, closed := snapshot()
		if closed && (p.FilesDone < p.FilesTotal || busy) {
			// Closed under the drain: handed over to another daemon
			// (Stop), which uploads the rest from the journal.
			return fmt.Errorf("drain stopped with %d file(s) pending: the staging dir was closed (handed over to a new daemon, which uploads them; drain again there)", p.FilesTotal-p.FilesDone)
		}
		if p.FilesDone >= p.FilesTotal && !busy {
			if progress != nil {
				progress(p)
			}
			if open > 0 {
				s.log.Warn("writeback: drained, but files are still open for writing; their data is uploaded when they are closed", "files", open)
			}
			if len(failed) > 0 {
				sort.Strings(failed)
				return fmt.Errorf("%w: %d file(s) are not in the backend (kept in staging): %s",
					ErrUploadFailed, len(failed), strings.Join(failed, "; "))
			}
			return nil
		}
		if t := start.Add(p.Elapsed); progress != nil && t.Sub(lastReport) >= time.Second {
			progress(p)
			lastReport = t
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain interrupted with %d file(s) pending (kept in staging): %w", p.FilesTotal-p.FilesDone, ctx.Err())
		case <-tick.C:
		}
	}
}

// PrintProgress returns a Drain progress callback that writes one line per
// report to w, prefixed with name. A drain with nothing to upload prints
// nothing.
func PrintProgress(w io.Writer, name string) func(Progress) {
	return func(p Progress) {
		if p.FilesTotal == 0 && p.Failed == 0 {
			return
		}
		fmt.Fprintf(w, "mlfsd: uploading %s: %s\n", name, p)
	}
}
