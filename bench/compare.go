package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// Comparison is several targets measured on the same dataset, side by side.
type Comparison struct {
	Reports []*Report // one per target, in order of first appearance
	Limit   string    // target the others are compared to; "" for none
	// ColdLimit, when set, is the limit of cold rows instead (an ideal
	// client reading the store without FUSE); Limit stays that of the rest.
	ColdLimit string
}

// cacheOrder sorts cache states in tables and plots.
func cacheOrder() []string { return []string{CacheCold, CacheWarm, CacheAsIs, CacheNA} }

// Compare merges reports by target (pooling the runs of reports of the same
// target and taking medians again) and checks they measured the same
// dataset. limit and coldLimit, when set, must be targets.
func Compare(reps []*Report, limit, coldLimit string) (*Comparison, error) {
	if len(reps) == 0 {
		return nil, fmt.Errorf("no reports")
	}
	c := &Comparison{Limit: limit, ColdLimit: coldLimit}
	byTarget := map[string]*Report{}
	for _, r := range reps {
		if r.Seed != reps[0].Seed || r.Dataset != reps[0].Dataset {
			return nil, fmt.Errorf("reports of %q and %q measured different datasets (seed %d %+v, seed %d %+v)",
				label(reps[0]), label(r), reps[0].Seed, reps[0].Dataset, r.Seed, r.Dataset)
		}
		t := label(r)
		m := byTarget[t]
		if m == nil {
			cp := *r
			cp.Target = t
			cp.Results = nil
			cp.Runs = 0
			cp.Notes = slices.Clone(r.Notes)
			m = &cp
			byTarget[t] = m
			c.Reports = append(c.Reports, m)
		} else if r.PageCache != pageCacheUntouched && !strings.Contains(m.PageCache, r.PageCache) {
			if m.PageCache == pageCacheUntouched {
				m.PageCache = r.PageCache
			} else {
				m.PageCache += "; " + r.PageCache
			}
		}
		for _, x := range r.Results {
			i := slices.IndexFunc(m.Results, func(y Result) bool { return y.Workload == x.Workload && y.Cache == x.Cache })
			if i < 0 {
				x.Runs = slices.Clone(x.Runs)
				m.Results = append(m.Results, x)
			} else {
				m.Results[i].Runs = append(m.Results[i].Runs, x.Runs...)
			}
		}
	}
	for _, m := range c.Reports {
		for i := range m.Results {
			m.Results[i].summarize()
			m.Runs = max(m.Runs, len(m.Results[i].Runs))
		}
		sortResults(m.Results)
	}
	if limit != "" && byTarget[limit] == nil {
		return nil, fmt.Errorf("--limit %q is not one of the targets %v", limit, c.targets())
	}
	if coldLimit != "" && byTarget[coldLimit] == nil {
		return nil, fmt.Errorf("--cold-limit %q is not one of the targets %v", coldLimit, c.targets())
	}
	return c, nil
}

func label(r *Report) string {
	if r.Target != "" {
		return r.Target
	}
	return r.Path
}

func (c *Comparison) targets() []string {
	var t []string
	for _, r := range c.Reports {
		t = append(t, r.Target)
	}
	return t
}

func sortResults(rs []Result) {
	wl := WorkloadNames()
	slices.SortStableFunc(rs, func(a, b Result) int {
		if d := slices.Index(wl, a.Workload) - slices.Index(wl, b.Workload); d != 0 {
			return d
		}
		return slices.Index(cacheOrder(), a.Cache) - slices.Index(cacheOrder(), b.Cache)
	})
}

// row is one (workload, cache) line of a comparison.
type row struct {
	workload, cache, metric, op string
	cells                       []*Result // per target; nil where not measured
}

func (c *Comparison) rows() []row {
	var all []Result
	for _, r := range c.Reports {
		for _, x := range r.Results {
			if !slices.ContainsFunc(all, func(y Result) bool { return y.Workload == x.Workload && y.Cache == x.Cache }) {
				all = append(all, x)
			}
		}
	}
	sortResults(all)
	var rows []row
	for _, x := range all {
		rw := row{workload: x.Workload, cache: x.Cache, metric: x.Metric, op: x.Op}
		for _, r := range c.Reports {
			i := slices.IndexFunc(r.Results, func(y Result) bool { return y.Workload == x.Workload && y.Cache == x.Cache })
			if i < 0 {
				rw.cells = append(rw.cells, nil)
			} else {
				rw.cells = append(rw.cells, &r.Results[i])
			}
		}
		rows = append(rows, rw)
	}
	return rows
}

// limitTarget is the target row rw is compared to ("" for none).
func (c *Comparison) limitTarget(rw row) string {
	if rw.cache == CacheCold && c.ColdLimit != "" {
		return c.ColdLimit
	}
	return c.Limit
}

// limitOf returns the limit target's result on the row, if any.
func (c *Comparison) limitOf(rw row) *Result {
	lt := c.limitTarget(rw)
	for i, r := range c.Reports {
		if lt != "" && r.Target == lt {
			return rw.cells[i]
		}
	}
	return nil
}

func (c *Comparison) valueCell(rw row, x *Result) string {
	if x == nil {
		return "—"
	}
	s := num(x.Value())
	if x.Partial {
		s += "*"
	}
	if n := len(x.Runs); n < c.maxRuns() {
		// Some rounds failed or were not run: say how many the median is of.
		s += fmt.Sprintf(" [%d run]", n)
	}
	if l := c.limitOf(rw); l != nil && l.Value() > 0 {
		s += fmt.Sprintf(" (%.2f×)", x.Value()/l.Value())
	}
	return s
}

func latCell(x *Result) string {
	if x == nil {
		return "—"
	}
	return lat(x.P50ms) + " / " + lat(x.P99ms)
}

// WriteTable prints the comparison for people.
func (c *Comparison) WriteTable(w io.Writer) error {
	c.writeHeader(w, "")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "WORKLOAD\tCACHE\tMETRIC\t%s\n", strings.Join(c.targets(), "\t"))
	for _, rw := range c.rows() {
		var cells []string
		for _, x := range rw.cells {
			cells = append(cells, c.valueCell(rw, x))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", rw.workload, rw.cache, rw.metric, strings.Join(cells, "\t"))
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "WORKLOAD\tCACHE\tp50 / p99 ms of\t%s\n", strings.Join(c.targets(), "\t"))
	for _, rw := range c.rows() {
		var cells []string
		for _, x := range rw.cells {
			cells = append(cells, latCell(x))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", rw.workload, rw.cache, rw.op, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

func (c *Comparison) writeHeader(w io.Writer, bullet string) {
	r0 := c.Reports[0]
	d := r0.Dataset
	fmt.Fprintf(w, "%sdataset %q (seed %d): %d shards x %d MiB, %d small files of ~%d KiB, %d metadata entries; %d threads; figures are medians of up to %d runs\n",
		bullet, d.Name, r0.Seed, d.Shards, d.ShardSize>>20, d.SmallFiles, d.SmallSize>>10, d.MetaEntries, r0.Threads, c.maxRuns())
	switch {
	case c.Limit != "" && c.ColdLimit != "":
		fmt.Fprintf(w, "%s(×) is the ratio to the limit measured in the same session: %q for cold rows, %q for the others\n", bullet, c.ColdLimit, c.Limit)
	case c.Limit != "":
		fmt.Fprintf(w, "%s(×) is the ratio to %q, the limit measured in the same session\n", bullet, c.Limit)
	case c.ColdLimit != "":
		fmt.Fprintf(w, "%s(×) is the ratio of cold rows to %q, the limit measured in the same session\n", bullet, c.ColdLimit)
	}
	for _, r := range c.Reports {
		fmt.Fprintf(w, "%s%s: %s; page cache %s\n", bullet, r.Target, r.Path, r.PageCache)
		for _, n := range r.Notes {
			fmt.Fprintf(w, "%s%s: %s\n", bullet, r.Target, n)
		}
	}
	if c.anyPartial() {
		fmt.Fprintf(w, "%s* some run stopped at --duration before the end of the workload\n", bullet)
	}
	if c.anyShort() {
		fmt.Fprintf(w, "%s[n run]: the figure is the median of only n runs (the others failed or did not run)\n", bullet)
	}
}

func (c *Comparison) maxRuns() int {
	n := 0
	for _, r := range c.Reports {
		n = max(n, r.Runs)
	}
	return n
}

func (c *Comparison) anyShort() bool {
	for _, r := range c.Reports {
		for _, x := range r.Results {
			if len(x.Runs) < c.maxRuns() {
				return true
			}
		}
	}
	return false
}

func (c *Comparison) anyPartial() bool {
	for _, r := range c.Reports {
		for _, x := range r.Results {
			if x.Partial {
				return true
			}
		}
	}
	return false
}

// WriteMarkdown prints the comparison as Markdown: a throughput table and a
// latency table, targets as columns.
func (c *Comparison) WriteMarkdown(w io.Writer) error {
	c.writeHeader(w, "- ")
	fmt.Fprintln(w)
	head := func(first string) {
		fmt.Fprintf(w, "| workload | cache | %s | %s |\n", first, strings.Join(c.targets(), " | "))
		fmt.Fprintf(w, "|---|---|---|%s\n", strings.Repeat("---:|", len(c.Reports)))
	}
	head("metric")
	for _, rw := range c.rows() {
		var cells []string
		for _, x := range rw.cells {
			cells = append(cells, c.valueCell(rw, x))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", rw.workload, rw.cache, rw.metric, strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
	head("latency p50 / p99 ms of")
	for _, rw := range c.rows() {
		var cells []string
		for _, x := range rw.cells {
			cells = append(cells, latCell(x))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", rw.workload, rw.cache, rw.op, strings.Join(cells, " | "))
	}
	return nil
}
