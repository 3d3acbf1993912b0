package bench

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlotScale: the scale chart is a PNG with one tile per figure, and a
// series that cannot be drawn is refused.
func TestPlotScale(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scale.png")
	n := []float64{1e4, 1e5, 1e6}
	err := PlotScale(path, []ScaleSeries{
		{Tile: "seconds", Name: "find", N: n, Y: []float64{0.5, 5, 80}},
		{Tile: "seconds", Name: "first byte", N: n, Y: []float64{0.05, 0.05, 0.06}},
		{Tile: "RSS (MiB)", Name: "after find", N: n, Y: []float64{40, 60, 260}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 150 {
		t.Fatalf("a %dx%d image", b.Dx(), b.Dy())
	}
	if err := PlotScale(path, []ScaleSeries{{Tile: "x", Name: "y", N: n, Y: []float64{1}}}); err == nil || !strings.Contains(err.Error(), "3 sizes and 1 figures") {
		t.Fatalf("mismatched series: %v", err)
	}
}
