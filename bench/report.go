package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"
)

// ReportFormat names the JSON report's format version.
const ReportFormat = "mlfsd-bench-report/1"

// Report is the result of one `mlfsd bench run`.
type Report struct {
	Format    string    `json:"format"`
	Target    string    `json:"target"` // label of what was measured
	Path      string    `json:"path"`
	Started   time.Time `json:"started"`
	Host      string    `json:"host"`
	CPUs      int       `json:"cpus"`
	Dataset   Profile   `json:"dataset"`
	Seed      uint64    `json:"seed"`
	Threads   int       `json:"threads"`
	Runs      int       `json:"runs"`
	Cache     string    `json:"cache"`      // mode asked for
	PageCache string    `json:"page_cache"` // what was done to the page cache
	Duration  string    `json:"duration"`   // cap per run, "0s": none
	Notes     []string  `json:"notes,omitempty"`
	Results   []Result  `json:"results"`
}

// Result is one workload in one cache state: medians over its runs.
type Result struct {
	Workload    string   `json:"workload"`
	Cache       string   `json:"cache"`
	Threads     int      `json:"threads"`
	Op          string   `json:"op"`     // what one latency sample is
	Metric      string   `json:"metric"` // the figure it is judged by
	MBps        float64  `json:"mb_per_s"`
	FilesPerSec float64  `json:"files_per_s"`
	OpsPerSec   float64  `json:"ops_per_s"`
	P50ms       float64  `json:"p50_ms"`
	P99ms       float64  `json:"p99_ms"`
	Partial     bool     `json:"partial,omitempty"` // some run stopped at --duration
	Runs        []Sample `json:"runs"`
}

// Sample is one timed run.
type Sample struct {
	Seconds     float64            `json:"seconds"`
	Bytes       int64              `json:"bytes"`
	Files       int64              `json:"files"`
	Ops         int64              `json:"ops"`
	MBps        float64            `json:"mb_per_s"`
	FilesPerSec float64            `json:"files_per_s"`
	OpsPerSec   float64            `json:"ops_per_s"`
	P50ms       float64            `json:"p50_ms"`
	P99ms       float64            `json:"p99_ms"`
	Partial     bool               `json:"partial,omitempty"`
	Extra       map[string]float64 `json:"extra,omitempty"`
}

func (s *sample) toSample() Sample {
	sec := s.elapsed.Seconds()
	if sec <= 0 {
		sec = 1e-9
	}
	return Sample{
		Seconds: sec, Bytes: s.bytes, Files: s.files, Ops: s.ops,
		MBps: float64(s.bytes) / 1e6 / sec, FilesPerSec: float64(s.files) / sec, OpsPerSec: float64(s.ops) / sec,
		P50ms: ms(percentile(s.lat, 0.50)), P99ms: ms(percentile(s.lat, 0.99)),
		Partial: s.partial, Extra: s.extra,
	}
}

// summarize sets the figures of r to the medians of its runs.
func (r *Result) summarize() {
	pick := func(f func(Sample) float64) float64 {
		v := make([]float64, len(r.Runs))
		for i, s := range r.Runs {
			v[i] = f(s)
		}
		return median(v)
	}
	r.MBps = pick(func(s Sample) float64 { return s.MBps })
	r.FilesPerSec = pick(func(s Sample) float64 { return s.FilesPerSec })
	r.OpsPerSec = pick(func(s Sample) float64 { return s.OpsPerSec })
	r.P50ms = pick(func(s Sample) float64 { return s.P50ms })
	r.P99ms = pick(func(s Sample) float64 { return s.P99ms })
	r.Partial = false
	for _, s := range r.Runs {
		r.Partial = r.Partial || s.Partial
	}
}

// Value is the figure the result is judged by (its Metric).
func (r *Result) Value() float64 {
	if r.Metric == MetricFiles {
		return r.FilesPerSec
	}
	return r.MBps
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadReport reads a JSON report written by WriteJSON.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Format != ReportFormat {
		return nil, fmt.Errorf("%s: format %q, want %q (a report of `mlfsd bench run --json`)", path, r.Format, ReportFormat)
	}
	return &r, nil
}

// WriteTable prints the report for people.
func (r *Report) WriteTable(w io.Writer) error {
	target := ""
	if r.Target != "" {
		target = fmt.Sprintf(" [%s]", r.Target)
	}
	fmt.Fprintf(w, "mlfsd bench: %s%s: dataset %q (seed %d), %d threads, median of %d run(s)\n",
		r.Path, target, r.Dataset.Name, r.Seed, r.Threads, r.Runs)
	fmt.Fprintf(w, "page cache: %s\n", r.PageCache)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tCACHE\tTHREADS\tMB/s\tfiles/s\tops/s\tp50 ms\tp99 ms\tLATENCY OF")
	for _, x := range r.Results {
		op := x.Op
		if x.Partial {
			op += " (stopped at --duration)"
		}
		if v, ok := medianExtra(x.Runs, "fsync_ms"); ok {
			op += fmt.Sprintf("; fsync %.1f ms", v)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", x.Workload, x.Cache, x.Threads,
			num(x.MBps), num(x.FilesPerSec), num(x.OpsPerSec), lat(x.P50ms), lat(x.P99ms), op)
	}
	return tw.Flush()
}

func medianExtra(runs []Sample, key string) (float64, bool) {
	var v []float64
	for _, s := range runs {
		if x, ok := s.Extra[key]; ok {
			v = append(v, x)
		}
	}
	return median(v), len(v) > 0
}

// num formats a rate with about three significant digits.
func num(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e5:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func lat(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}
