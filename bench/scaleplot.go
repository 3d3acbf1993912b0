package bench

import (
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// ScaleSeries is one figure of a scale benchmark against the size of the
// namespace: Y[i] at N[i] entries. Series of one Tile share a chart.
type ScaleSeries struct {
	Tile, Name string
	N, Y       []float64
}

// PlotScale draws one log-log chart per tile of series into a PNG file,
// each with a dashed line proportional to N through the first point of
// its first series: a figure that grows linearly runs parallel to it, and
// a superlinear step shows as a bend away from it.
func PlotScale(path string, series []ScaleSeries) error {
	var tiles []string
	byTile := map[string][]ScaleSeries{}
	for _, s := range series {
		if len(s.N) != len(s.Y) {
			return fmt.Errorf("series %s: %d sizes and %d figures", s.Name, len(s.N), len(s.Y))
		}
		if _, ok := byTile[s.Tile]; !ok {
			tiles = append(tiles, s.Tile)
		}
		byTile[s.Tile] = append(byTile[s.Tile], s)
	}
	if len(tiles) == 0 {
		return fmt.Errorf("nothing to plot")
	}
	return drawTiles(path, tiles, 2, func(tile string, _ vg.Length) (*plot.Plot, error) {
		return scaleTile(tile, byTile[tile])
	})
}

func scaleTile(tile string, series []ScaleSeries) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = tile
	p.X.Label.Text = "entries (log scale)"
	p.Y.Label.Text = tile + " (log scale)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	xlo, xhi, ylo, yhi := math.Inf(1), 0.0, math.Inf(1), 0.0
	for i, s := range series {
		var pts plotter.XYs
		for j := range s.N {
			if s.N[j] > 0 && s.Y[j] > 0 { // a log scale shows no zero
				pts = append(pts, plotter.XY{X: s.N[j], Y: s.Y[j]})
				xlo, xhi = min(xlo, s.N[j]), max(xhi, s.N[j])
				ylo, yhi = min(ylo, s.Y[j]), max(yhi, s.Y[j])
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		l.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
		sc.Shape = plotutil.Shape(i)
		p.Add(l, sc)
		p.Legend.Add(s.Name, l, sc)
		if i == 0 {
			x0, y0 := pts[0].X, pts[0].Y
			lin := plotter.NewFunction(func(x float64) float64 { return y0 * x / x0 })
			lin.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
			lin.XMin, lin.XMax = x0, xhi
			p.Add(lin)
			p.Legend.Add("linear in entries", lin)
			yhi = max(yhi, y0*xhi/x0)
		}
	}
	if yhi == 0 {
		return nil, fmt.Errorf("%s: no figure above zero", tile)
	}
	p.X.Min, p.X.Max = xlo/2, xhi*2
	p.Y.Min, p.Y.Max = ylo/2, yhi*2
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}
