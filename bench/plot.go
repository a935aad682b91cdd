package main

import (
	"fmt"
	"math"
	"strings"
)

// plotSVG draws a curve's series against x: each repetition a dot, the
// medians joined by a line; x on a log scale with logX, y from 0.
func plotSVG(pl curvePlot, pts []curvePoint) string {
	const w, h, left, right, top, bottom = 640.0, 400.0, 80.0, 170.0, 40.0, 56.0
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd"}
	xs, at := byX(pts)
	fx := func(x float64) float64 { return x }
	if pl.logX {
		fx = math.Log10
	}
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	for _, x := range xs {
		xmin, xmax = min(xmin, fx(x)), max(xmax, fx(x))
		for _, s := range pl.series {
			for _, v := range valuesOf(at[x], s.value) {
				ymax = max(ymax, v)
			}
		}
	}
	if len(xs) == 0 || ymax == 0 {
		xmin, xmax, ymax = 0, 1, 1
	}
	if xmax == xmin {
		xmin, xmax = xmin-1, xmax+1
	}
	pad := (xmax - xmin) * 0.05
	xmin, xmax = xmin-pad, xmax+pad
	ystep := niceStep(ymax / 5)
	ymax = math.Ceil(ymax*1.05/ystep) * ystep
	px := func(x float64) float64 { return left + (fx(x)-xmin)/(xmax-xmin)*(w-left-right) }
	py := func(y float64) float64 { return h - bottom - y/ymax*(h-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="22" font-size="15" text-anchor="middle">%s</text>`+"\n", (left+w-right)/2, esc(pl.title))
	// Axes and grid.
	for y := 0.0; y <= ymax+ystep/2; y += ystep {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, py(y), w-right, py(y))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, py(y)+4, fmtNum(y))
	}
	for _, x := range xs {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", px(x), top, px(x), h-bottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(x), h-bottom+16, fmtNum(x))
	}
	fmt.Fprintf(&b, `<polyline points="%.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="none" stroke="black"/>`+"\n", left, top, left, h-bottom, w-right, h-bottom)
	scale := ""
	if pl.logX {
		scale = " (log scale)"
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n", (left+w-right)/2, h-12, esc(pl.xLabel+scale))
	fmt.Fprintf(&b, `<text transform="translate(18,%.0f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (top+h-bottom)/2, esc(pl.yLabel))
	// The series.
	for i, s := range pl.series {
		col := colors[i%len(colors)]
		var line []string
		for _, x := range xs {
			vs := valuesOf(at[x], s.value)
			for _, v := range vs {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s" fill-opacity="0.5"/>`+"\n", px(x), py(v), col)
			}
			if len(vs) > 0 {
				line = append(line, fmt.Sprintf("%.1f,%.1f", px(x), py(median(vs))))
			}
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(line, " "), col)
		ly := top + 10 + float64(i)*20
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-width="2"/>`+"\n", w-right+12, ly, w-right+32, ly, col)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s</text>`+"\n", w-right+38, ly+4, esc(s.label))
	}
	b.WriteString("</svg>\n")
	return b.String()
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

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
