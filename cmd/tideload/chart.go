package main

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// A hand-written SVG line chart (no dependencies): axes with ticks, linear
// or logarithmic, one polyline with markers per series, and a legend.

type series struct {
	name  string
	color string
	dash  bool
	pts   [][2]float64 // x, y
}

type chart struct {
	title          string
	subtitle       []string // lines under the title
	xLabel, yLabel string
	logX, logY     bool
	series         []series
}

const (
	chartW, chartH               = 760, 440
	padL, padR, padT, padB       = 78, 24, 68, 118
	plotW, plotH                 = chartW - padL - padR, chartH - padT - padB
	legendRowH, legendCols       = 17, 2
	markerR                      = 3.2
	fontFamily                   = "DejaVu Sans, Helvetica, Arial, sans-serif"
	gridColor, axisColor, txtCol = "#e4e4e4", "#444444", "#222222"
)

// axis maps data values to pixels.
type axis struct {
	log      bool
	lo, hi   float64 // data range (log10 of it for a log axis)
	from, to float64 // pixels
}

func newAxis(vals []float64, log, zero bool, from, to float64) axis {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if log && v <= 0 {
			continue
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	a := axis{log: log, from: from, to: to}
	if log {
		a.lo, a.hi = math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if a.hi == a.lo {
			a.hi++
		}
		return a
	}
	if zero {
		lo = math.Min(lo, 0)
	}
	step := niceStep((hi - lo) / 5)
	a.lo, a.hi = math.Floor(lo/step)*step, math.Ceil(hi/step)*step
	if a.hi == a.lo {
		a.hi = a.lo + step
	}
	return a
}

func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func (a axis) px(v float64) float64 {
	if a.log {
		v = math.Log10(v)
	}
	return a.from + (v-a.lo)/(a.hi-a.lo)*(a.to-a.from)
}

// ticks returns the tick values: 1-2-5 per decade on a log axis, about six
// round steps on a linear one.
func (a axis) ticks() []float64 {
	var out []float64
	if a.log {
		mults := []float64{1, 2, 5}
		if a.hi-a.lo > 4 {
			mults = []float64{1}
		}
		for e := a.lo; e <= a.hi; e++ {
			for _, m := range mults {
				v := m * math.Pow(10, e)
				if math.Log10(v) <= a.hi+1e-9 {
					out = append(out, v)
				}
			}
		}
		return out
	}
	step := niceStep((a.hi - a.lo) / 5)
	for v := a.lo; v <= a.hi+step/1e6; v += step {
		out = append(out, v)
	}
	return out
}

func tickLabel(v float64) string {
	switch {
	case v >= 1e6 && math.Mod(v, 1e6) == 0:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3 && math.Mod(v, 1e3) == 0:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	case v >= 1:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func chartSVG(c chart) string {
	var xs, ys []float64
	for _, s := range c.series {
		for _, p := range s.pts {
			xs, ys = append(xs, p[0]), append(ys, p[1])
		}
	}
	ax := newAxis(xs, c.logX, false, padL, padL+plotW)
	ay := newAxis(ys, c.logY, true, padT+plotH, padT)
	var b strings.Builder
	esc := html.EscapeString
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="12">`+"\n", chartW, chartH, chartW, chartH, fontFamily)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold" fill="%s">%s</text>`+"\n", padL, txtCol, esc(c.title))
	for i, line := range c.subtitle {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" fill="#555555">%s</text>`+"\n", padL, 38+13*i, esc(line))
	}
	// grid and ticks
	for _, t := range ax.ticks() {
		x := ax.px(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x, padT, x, padT+plotH, gridColor)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="%s">%s</text>`+"\n", x, padT+plotH+16, txtCol, tickLabel(t))
	}
	for _, t := range ay.ticks() {
		y := ay.px(t)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, y, padL+plotW, y, gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n", padL-6, y+4, txtCol, tickLabel(t))
	}
	// axes
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", padL, padT+plotH, padL+plotW, padT+plotH, axisColor)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", padL, padT, padL, padT+plotH, axisColor)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="%s">%s</text>`+"\n", padL+plotW/2, padT+plotH+34, txtCol, esc(c.xLabel))
	fmt.Fprintf(&b, `<text transform="translate(18 %d) rotate(-90)" text-anchor="middle" fill="%s">%s</text>`+"\n", padT+plotH/2, txtCol, esc(c.yLabel))
	// series
	n := 0
	for _, s := range c.series {
		if len(s.pts) == 0 {
			continue
		}
		dash := ""
		if s.dash {
			dash = ` stroke-dasharray="6 4"`
		}
		var pts []string
		for _, p := range s.pts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", ax.px(p[0]), ay.px(p[1])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", s.color, dash, strings.Join(pts, " "))
		for _, p := range s.pts {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"><title>%s: %s, %s</title></circle>`+"\n",
				ax.px(p[0]), ay.px(p[1]), markerR, s.color, esc(s.name), tickLabel(p[0]), strconv.FormatFloat(p[1], 'g', 4, 64))
		}
		// legend entry
		col, row := n%legendCols, n/legendCols
		lx := float64(padL + col*plotW/legendCols)
		ly := float64(padT + plotH + 54 + row*legendRowH)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", lx, ly-4, lx+26, ly-4, s.color, dash)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", lx+32, ly, txtCol, esc(s.name))
		n++
	}
	b.WriteString("</svg>\n")
	return b.String()
}
