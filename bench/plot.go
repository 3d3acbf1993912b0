package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/mlfsd/mlfsd/internal/atomicfile"
)

// Plot draws one bar chart per workload into a PNG file: the targets (one
// per report) along x, a bar per cache state, the workload's metric on y.
func Plot(path string, reps []*Report) (err error) {
	if len(reps) == 0 {
		return fmt.Errorf("nothing to plot")
	}
	var targets []string
	for _, r := range reps {
		targets = append(targets, label(r))
	}
	var workloads []string
	for _, w := range WorkloadNames() {
		for _, r := range reps {
			if slices.ContainsFunc(r.Results, func(x Result) bool { return x.Workload == w }) && !slices.Contains(workloads, w) {
				workloads = append(workloads, w)
			}
		}
	}
	if len(workloads) == 0 {
		return fmt.Errorf("the reports hold no results")
	}

	return drawTiles(path, workloads, len(targets), func(w string, tileWidth vg.Length) (*plot.Plot, error) {
		return workloadPlot(w, reps, targets, tileWidth)
	})
}

// PlotRatios draws one bar chart per workload into a PNG file: the targets
// along x, a bar per cache state, and on a linear y axis each figure's ratio
// to the limit of its row (ColdLimit for cold rows, Limit for the others),
// the ratios of the tables. A log axis shows ratios as differences of
// height that have nothing to do with the ratios, so the axis is linear,
// from 0 to ratioAxisMax at most; a bar above that is drawn to the top and
// labelled with its ratio and an arrow.
func (c *Comparison) PlotRatios(path string) error {
	if c.Limit == "" && c.ColdLimit == "" {
		return fmt.Errorf("a ratio plot needs a limit (--limit or --cold-limit)")
	}
	targets := c.targets()
	var workloads []string
	for _, rw := range c.rows() {
		if c.limitOf(rw) != nil && !slices.Contains(workloads, rw.workload) {
			workloads = append(workloads, rw.workload)
		}
	}
	if len(workloads) == 0 {
		return fmt.Errorf("no row has a figure of its limit")
	}
	return drawTiles(path, workloads, len(targets), func(w string, tileWidth vg.Length) (*plot.Plot, error) {
		p, _ := c.ratioPlot(w, tileWidth)
		return p, nil
	})
}

// ratioAxisMax caps the linear axis of ratio plots: the limits of the
// other rows (local disk on cold rows) are many times the store's, and
// would flatten every other bar.
const ratioAxisMax = 2.5

// ratioPlot is one workload's tile of PlotRatios, and the ratios it draws:
// one slice per cache state, one ratio per target (0: not measured).
func (c *Comparison) ratioPlot(w string, tileWidth vg.Length) (*plot.Plot, [][]float64) {
	p := plot.New()
	targets := c.targets()
	var rows []row
	for _, rw := range c.rows() {
		if rw.workload == w && c.limitOf(rw) != nil {
			rows = append(rows, rw)
		}
	}
	threads := 0
	for _, x := range rows[0].cells {
		if x != nil {
			threads = x.Threads
		}
	}
	p.Title.Text = fmt.Sprintf("%s (%d thread(s)): %s", w, threads, rows[0].metric)
	var limits []string
	for _, rw := range rows {
		limits = append(limits, rw.cache+" ÷ "+c.limitTarget(rw))
	}
	p.Y.Label.Text = "ratio (" + strings.Join(limits, ", ") + ")"
	barWidth := tileWidth * 0.7 / vg.Length((len(targets)+1)*len(rows))
	top := 0.0
	var ratios [][]float64
	for ri, rw := range rows {
		l := c.limitOf(rw).Value()
		b := &bars{width: barWidth, color: plotutil.Color(ri), vals: make([]float64, len(targets)), partial: make([]bool, len(targets)),
			format: func(v float64) string { return fmt.Sprintf("%.2f×", v) }}
		b.offset = barWidth * (vg.Length(ri) - vg.Length(len(rows)-1)/2)
		for ti, x := range rw.cells {
			if x != nil && l > 0 {
				b.vals[ti], b.partial[ti] = x.Value()/l, x.Partial
				top = max(top, b.vals[ti])
			}
		}
		p.Add(b)
		p.Legend.Add(rw.cache, b)
		ratios = append(ratios, b.vals)
	}
	one := plotter.NewFunction(func(float64) float64 { return 1 })
	one.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
	p.Add(one)
	p.Y.Min = 0
	p.Y.Max = min(max(top, 1)*1.15, ratioAxisMax)
	p.Legend.Top = true
	p.NominalX(targets...)
	p.X.Min, p.X.Max = -0.5, float64(len(targets))-0.5
	return p, ratios
}

// drawTiles lays out one plot per workload, two to a row, into a PNG.
func drawTiles(path string, workloads []string, ntargets int, tile func(w string, tileWidth vg.Length) (*plot.Plot, error)) (err error) {
	const cols = 2
	width := vg.Length(max(8.4, 2.2*float64(ntargets))) * vg.Inch
	rows := (len(workloads) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for i, w := range workloads {
		p, err := tile(w, width/cols)
		if err != nil {
			return err
		}
		grid[i/cols][i%cols] = p
	}
	for i := len(workloads); i < rows*cols; i++ {
		grid[i/cols][i%cols] = plot.New() // an empty tile
		grid[i/cols][i%cols].HideAxes()
	}

	height := vg.Length(rows) * 2.6 * vg.Inch
	img := vgimg.New(width, height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j := range grid[i] {
			grid[i][j].Draw(canvases[i][j])
		}
	}

	return atomicfile.WriteFunc(path, 0o644, atomicfile.NoSync, func(w io.Writer) error {
		_, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w)
		return err
	})
}

func workloadPlot(w string, reps []*Report, targets []string, tileWidth vg.Length) (*plot.Plot, error) {
	p := plot.New()
	var caches []string
	metric, threads := "", 0
	for _, c := range cacheOrder() {
		for _, r := range reps {
			for _, x := range r.Results {
				if x.Workload == w && x.Cache == c {
					if !slices.Contains(caches, c) {
						caches = append(caches, c)
					}
					metric, threads = x.Metric, x.Threads
				}
			}
		}
	}
	p.Title.Text = fmt.Sprintf("%s (%d thread(s))", w, threads)
	p.Y.Label.Text = metric + " (log scale)"
	// Bars of one target fill ~70% of its slot on the x axis.
	barWidth := tileWidth * 0.7 / vg.Length((len(targets)+1)*len(caches))
	lo, hi := math.Inf(1), 0.0
	for ci, c := range caches {
		b := &bars{width: barWidth, color: plotutil.Color(ci), vals: make([]float64, len(reps)), partial: make([]bool, len(reps))}
		b.offset = barWidth * (vg.Length(ci) - vg.Length(len(caches)-1)/2)
		for ti, r := range reps {
			i := slices.IndexFunc(r.Results, func(x Result) bool { return x.Workload == w && x.Cache == c })
			if i >= 0 {
				v := r.Results[i].Value()
				b.vals[ti], b.partial[ti] = v, r.Results[i].Partial
				if v > 0 {
					lo, hi = min(lo, v), max(hi, v)
				}
			}
		}
		p.Add(b)
		p.Legend.Add(c, b)
	}
	if hi == 0 {
		lo, hi = 1, 10
	}
	// Log scale: the figures of a comparison span orders of magnitude.
	p.Y.Scale = plot.LogScale{}
	p.Y.Min = math.Pow(10, math.Floor(math.Log10(lo)))
	p.Y.Max = math.Pow(10, math.Ceil(math.Log10(hi*3)))
	p.Y.Tick.Marker = rateTicks{}
	p.Legend.Top = true
	p.NominalX(targets...)
	p.X.Min, p.X.Max = -0.5, float64(len(targets))-0.5
	return p, nil
}

// bars is a bar chart on any y scale (gonum's BarChart starts bars at 0,
// which a log scale cannot show), each bar labelled with its value.
type bars struct {
	vals    []float64 // one per x position 0, 1, ...; 0 draws nothing
	partial []bool    // the run stopped at --duration: label gets a '*'
	// format labels a bar (default num); a bar above the axis is drawn to
	// its top and its label gets an arrow.
	format func(float64) string
	width  vg.Length
	offset vg.Length
	color  color.Color
}

// Plot implements plot.Plotter.
func (b *bars) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	label := plt.Y.Tick.Label
	label.Font.Size = vg.Points(7)
	label.XAlign, label.YAlign = draw.XCenter, draw.YBottom
	for i, v := range b.vals {
		if v <= 0 {
			continue
		}
		x := trX(float64(i)) + b.offset
		y0, y1 := trY(plt.Y.Min), trY(min(v, plt.Y.Max))
		pts := []vg.Point{{X: x - b.width/2, Y: y0}, {X: x - b.width/2, Y: y1}, {X: x + b.width/2, Y: y1}, {X: x + b.width/2, Y: y0}}
		c.FillPolygon(b.color, c.ClipPolygonY(pts))
		txt := num(v)
		if b.format != nil {
			txt = b.format(v)
		}
		if b.partial[i] {
			txt += "*"
		}
		if v > plt.Y.Max {
			txt += " ↑"
			y1 -= vg.Points(9)
		}
		c.FillText(label, vg.Point{X: x, Y: y1 + vg.Points(1)}, txt)
	}
}

// DataRange implements plot.DataRanger.
func (b *bars) DataRange() (xmin, xmax, ymin, ymax float64) {
	ymin, ymax = math.Inf(1), math.Inf(-1)
	for _, v := range b.vals {
		if v > 0 {
			ymin, ymax = min(ymin, v), max(ymax, v)
		}
	}
	if math.IsInf(ymin, 1) {
		ymin, ymax = 1, 10
	}
	return -0.5, float64(len(b.vals)) - 0.5, ymin, ymax
}

// Thumbnail implements plot.Thumbnailer (the legend's swatch).
func (b *bars) Thumbnail(c *draw.Canvas) {
	r := c.Rectangle
	c.FillPolygon(b.color, []vg.Point{r.Min, {X: r.Min.X, Y: r.Max.Y}, r.Max, {X: r.Max.X, Y: r.Min.Y}})
}

// rateTicks are gonum's log ticks labelled like the tables' figures.
type rateTicks struct{}

func (rateTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.LogTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = num(ts[i].Value)
		}
	}
	return ts
}
