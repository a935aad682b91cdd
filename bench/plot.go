package main

import (
	"fmt"
	"image/color"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// seriesColors are the plots' series, in order.
var seriesColors = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff},
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, color.RGBA{0x94, 0x67, 0xbd, 0xff},
}

// plotPNG draws a curve's series against x into path (a PNG): each
// repetition a dot, the medians joined by a line; x on a log scale with
// logX, ticked at the measured points, y from 0.
func plotPNG(pl curvePlot, pts []curvePoint, path string) error {
	p := plot.New()
	p.Title.Text = pl.title
	p.X.Label.Text, p.Y.Label.Text = pl.xLabel, pl.yLabel
	xs, _ := byX(pts)
	var ticks plot.ConstantTicks
	for _, x := range xs {
		ticks = append(ticks, plot.Tick{Value: x, Label: fmtNum(x)})
	}
	p.X.Tick.Marker = ticks
	if pl.logX {
		p.X.Scale = plot.LogScale{}
		p.X.Label.Text += " (log scale)"
	}
	p.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		var ts []plot.Tick
		step := niceStep((hi - lo) / 5)
		for y := math.Ceil(lo/step) * step; y <= hi+step/1e6; y += step {
			ts = append(ts, plot.Tick{Value: y, Label: fmtNum(y)})
		}
		return ts
	})
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	ymax := 0.0
	for i, d := range seriesData(pl, pts) {
		col := seriesColors[i%len(seriesColors)]
		if len(d.dots) == 0 {
			continue
		}
		for _, xy := range d.dots {
			ymax = max(ymax, xy.Y)
		}
		sc, err := plotter.NewScatter(d.dots)
		if err != nil {
			return err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(2.5), Shape: draw.RingGlyph{}}
		ln, err := plotter.NewLine(d.medians)
		if err != nil {
			return err
		}
		ln.LineStyle.Color, ln.LineStyle.Width = col, vg.Points(1.5)
		p.Add(sc, ln)
		p.Legend.Add(d.label, ln)
	}
	// y from 0, with room above the highest dot for the legend.
	p.Y.Min, p.Y.Max = 0, max(ymax*1.25, 1)
	if len(xs) > 0 {
		lo, hi := xs[0], xs[len(xs)-1]
		if pl.logX {
			p.X.Min, p.X.Max = lo/1.4, hi*1.4
		} else {
			pad := max((hi-lo)*0.05, math.Abs(hi)*0.05, 0.5)
			p.X.Min, p.X.Max = lo-pad, hi+pad
		}
	}
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

// plotSoak draws a soak's series against time into path (a PNG): the
// samples joined, the warm-up shaded out by leaving it grey, and the line
// fitted after it.
func plotSoak(r soakResult, f soakFit, path string) error {
	p := plot.New()
	verdict := map[bool]string{true: "flat", false: "not flat"}[f.Flat]
	if f.Sum {
		verdict = "the state store's and the rest"
	}
	if f.Bounded {
		verdict = map[bool]string{true: "under its bound", false: "over its bound"}[f.Flat]
	}
	p.Title.Text = f.Label + ": " + verdict
	p.X.Label.Text, p.Y.Label.Text = "minutes", strings.TrimSpace(f.Label+" ("+strings.TrimSpace(f.Unit)+")")
	if f.Unit == "" {
		p.Y.Label.Text = f.Label
	}
	p.Add(plotter.NewGrid())
	var warm, measured plotter.XYs
	ymax := 0.0
	for _, s := range r.Samples {
		v, ok := s.Values[f.Series]
		if !ok {
			continue
		}
		ymax = max(ymax, v)
		xy := plotter.XY{X: s.At / 60, Y: v}
		if s.At < r.Warmup {
			warm = append(warm, xy)
		} else {
			measured = append(measured, xy)
		}
	}
	if len(warm) > 0 && len(measured) > 0 {
		warm = append(warm, measured[0])
	}
	for i, pts := range []plotter.XYs{warm, measured} {
		if len(pts) < 2 {
			continue
		}
		ln, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		ln.LineStyle.Width = vg.Points(1)
		ln.LineStyle.Color = seriesColors[0]
		if i == 0 {
			ln.LineStyle.Color = color.Gray{Y: 0xa0}
			p.Legend.Add("warm-up", ln)
		} else {
			p.Legend.Add("samples", ln)
		}
		p.Add(ln)
	}
	if f.Bounded && f.Bound > 0 {
		t0, t1 := r.Samples[0].At/60, r.Samples[len(r.Samples)-1].At/60
		b, err := plotter.NewLine(plotter.XYs{{X: t0, Y: f.Bound}, {X: t1, Y: f.Bound}})
		if err != nil {
			return err
		}
		b.LineStyle.Color, b.LineStyle.Width = seriesColors[2], vg.Points(1.5)
		p.Add(b)
		p.Legend.Add(fmt.Sprintf("bound: %.3g%s", f.Bound, f.Unit), b)
		ymax = max(ymax, f.Bound)
	}
	if f.N >= soakMinSamples {
		t0, t1 := measured[0].X*60, measured[len(measured)-1].X*60
		fit, err := plotter.NewLine(plotter.XYs{{X: t0 / 60, Y: f.Intercept + f.Slope*t0}, {X: t1 / 60, Y: f.Intercept + f.Slope*t1}})
		if err != nil {
			return err
		}
		fit.LineStyle.Color, fit.LineStyle.Width = seriesColors[1], vg.Points(2)
		fit.LineStyle.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		p.Add(fit)
		p.Legend.Add(fmt.Sprintf("fit: %+.3g%s per hour", f.Slope*3600, f.Unit), fit)
	}
	p.Legend.Top, p.Legend.Left = false, true
	p.Y.Min, p.Y.Max = 0, max(ymax*1.15, 1)
	return p.Save(7*vg.Inch, 3.5*vg.Inch, path)
}

// plotted is a series as drawn: a dot a repetition, a line through the
// medians.
type plotted struct {
	label         string
	dots, medians plotter.XYs
}

func seriesData(pl curvePlot, pts []curvePoint) []plotted {
	xs, at := byX(pts)
	var out []plotted
	for _, s := range pl.series {
		d := plotted{label: s.label}
		for _, x := range xs {
			vs := valuesOf(at[x], s.value)
			for _, v := range vs {
				d.dots = append(d.dots, plotter.XY{X: x, Y: v})
			}
			if len(vs) > 0 {
				d.medians = append(d.medians, plotter.XY{X: x, Y: median(vs)})
			}
		}
		out = append(out, d)
	}
	return out
}

// niceStep rounds a step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}
