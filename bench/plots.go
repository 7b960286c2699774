package main

import (
	"context"
	"flag"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

var plotDir = flag.String("plots", "docs/bench", "where the PNG plots go (the report links them relative to -o's directory)")

// samples are the start-up distributions the sections measured, by name,
// for the cold-start plot; scaleSamples the create times of the scale
// section in order.
var (
	samples      = map[string][]float64{}
	scaleSamples []float64
)

// plotsSection renders the plots from what the sections measured and
// embeds them.
func plotsSection(ctx context.Context, rep *strings.Builder) {
	if err := os.MkdirAll(*plotDir, 0o755); err != nil {
		fmt.Fprintf(rep, "## Plots\n\nnot rendered: %v\n\n", err)
		return
	}
	rel := func(p string) string {
		r, err := filepath.Rel(filepath.Dir(*out), p)
		if err != nil {
			return p
		}
		return filepath.ToSlash(r)
	}
	rep.WriteString("## Plots\n\n")
	if len(samples) > 0 {
		p := filepath.Join(*plotDir, "cold-start.png")
		if err := plotCDF(p, samples); err != nil {
			fmt.Fprintf(rep, "cold-start plot not rendered: %v\n\n", err)
		} else {
			fmt.Fprintf(rep, "Start-up distributions (cumulative: the share of starts done by a given time; log scale):\n\n![start-up distributions](%s)\n\n", rel(p))
		}
	}
	if len(scaleSamples) > 0 {
		p := filepath.Join(*plotDir, "scale.png")
		if err := plotScale(p, scaleSamples); err != nil {
			fmt.Fprintf(rep, "scale plot not rendered: %v\n\n", err)
		} else {
			fmt.Fprintf(rep, "Create time against sandboxes alive:\n\n![create time against sandboxes alive](%s)\n\n", rel(p))
		}
	}
}

// plotCDF draws the empirical distribution of each series (ms, log x).
func plotCDF(path string, series map[string][]float64) error {
	p := plot.New()
	p.Title.Text = "Start-up time, this run"
	p.X.Label.Text = "ms (log scale)"
	p.Y.Label.Text = "share of starts done"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(10)
	names := make([]string, 0, len(series))
	for n := range series {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		v := append([]float64(nil), series[n]...)
		sort.Float64s(v)
		pts := make(plotter.XYs, 0, 2*len(v))
		for j, x := range v {
			// A step: the share reaches (j+1)/n at x, from j/n.
			pts = append(pts, plotter.XY{X: max(x, 0.01), Y: float64(j) / float64(len(v))}, plotter.XY{X: max(x, 0.01), Y: float64(j+1) / float64(len(v))})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (n=%d)", n, len(v)), l)
	}
	p.Add(plotter.NewGrid())
	return p.Save(8*vg.Inch, 4.5*vg.Inch, path)
}

// plotScale draws each Create's time against the sandboxes alive before it.
func plotScale(path string, ms []float64) error {
	p := plot.New()
	p.Title.Text = "Create time against sandboxes alive, this run"
	p.X.Label.Text = "sandboxes alive"
	p.Y.Label.Text = "Create, ms"
	pts := make(plotter.XYs, len(ms))
	for i, v := range ms {
		pts[i] = plotter.XY{X: float64(i), Y: v}
	}
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	sc.GlyphStyle.Radius = vg.Points(1.5)
	sc.GlyphStyle.Color = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	p.Add(sc, plotter.NewGrid())
	return p.Save(8*vg.Inch, 4.5*vg.Inch, path)
}
