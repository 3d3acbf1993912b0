package bench

import (
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Progress is told how long phases are and how far they got. Add is called
// from many goroutines.
type Progress interface {
	// Begin starts a phase of total units (bytes when bytes is set, else
	// items; total 0 when unknown).
	Begin(desc string, total int64, bytes bool)
	Add(n int64)
	End()
}

// noProgress discards progress.
type noProgress struct{}

func (noProgress) Begin(string, int64, bool) {}
func (noProgress) Add(int64)                 {}
func (noProgress) End()                      {}

func progressOrNone(p Progress) Progress {
	if p == nil {
		return noProgress{}
	}
	return p
}

// BarProgress draws a progress bar per phase on w (a terminal: stderr).
type BarProgress struct {
	W   io.Writer
	bar *progressbar.ProgressBar
}

// Begin implements Progress.
func (b *BarProgress) Begin(desc string, total int64, bytes bool) {
	if total <= 0 {
		total = -1 // a spinner
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(b.W),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionFullWidth(),
	}
	if bytes {
		opts = append(opts, progressbar.OptionShowBytes(true), progressbar.OptionUseIECUnits(true))
	} else {
		opts = append(opts, progressbar.OptionShowCount(), progressbar.OptionShowIts())
	}
	b.bar = progressbar.NewOptions64(total, opts...)
}

// Add implements Progress.
func (b *BarProgress) Add(n int64) {
	if b.bar != nil {
		_ = b.bar.Add64(n)
	}
}

// End implements Progress.
func (b *BarProgress) End() {
	if b.bar != nil {
		_ = b.bar.Finish()
		_ = b.bar.Clear()
		b.bar = nil
	}
}
