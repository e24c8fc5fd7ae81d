package main

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCurveRoundTrip: a sweep's CSV read back draws the same chart, the
// chart is well-formed XML, and every series with points has a line and
// a legend entry; rows of a failed peer (no figures) draw nothing.
func TestCurveRoundTrip(t *testing.T) {
	for _, what := range []string{"latency", "idle", "replay", "fanout"} {
		t.Run(what, func(t *testing.T) {
			c := newCurve(what, 100, 5e9)
			cols := len(c.header) - 1 // the environment is appended by the sweep
			for i, n := range []string{"100", "1000", "10000"} {
				row := make([]string, cols)
				for j := range row {
					row[j] = "1" + strings.Repeat("0", i+j%3)
				}
				row[0] = n
				switch what {
				case "latency":
					row[1], row[2] = "tide", "pg"
				case "idle":
					row[1] = "tide"
				case "replay":
					row[1] = "tide"
				case "fanout":
					row[1], row[2] = "1", "tide"
				}
				c.rows = append(c.rows, row)
			}
			failed := make([]string, cols)
			failed[0], failed[len(failed)-1] = "10000", "failed: it broke"
			if what == "fanout" {
				failed[1], failed[2] = "1", "centrifugo"
			} else {
				failed[1] = "centrifugo"
			}
			c.rows = append(c.rows, failed)
			c.measured = "go1.x, 2 CPUs, now"
			for i := range c.rows {
				c.rows[i] = append(c.rows[i], c.measured)
			}
			base := filepath.Join(t.TempDir(), what)
			if err := c.write(base); err != nil {
				t.Fatal(err)
			}
			first, err := os.ReadFile(base + ".svg")
			if err != nil {
				t.Fatal(err)
			}
			back, err := readCurve(what, base+".csv")
			if err != nil {
				t.Fatal(err)
			}
			if err := back.writeSVG(base); err != nil {
				t.Fatal(err)
			}
			again, _ := os.ReadFile(base + ".svg")
			if string(first) != string(again) {
				t.Fatal("the chart drawn from the CSV differs from the sweep's")
			}
			wellFormed(t, first)
			drawn := 0
			for _, s := range c.series(c.specs) {
				if len(s.pts) > 0 {
					drawn++
					if !strings.Contains(string(first), ">"+s.name+"</text>") {
						t.Errorf("no legend entry for %q", s.name)
					}
				}
				for _, p := range s.pts {
					if p[1] <= 0 {
						t.Errorf("series %q has a point at y=%v", s.name, p[1])
					}
				}
			}
			if drawn == 0 || strings.Count(string(first), "<polyline") != drawn {
				t.Errorf("%d series with points, %d lines drawn", drawn, strings.Count(string(first), "<polyline"))
			}
		})
	}
}

func wellFormed(t *testing.T, svg []byte) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(string(svg)))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
}

// TestAxisTicks: ticks cover the data on linear and log axes and map into
// the axis' pixel range.
func TestAxisTicks(t *testing.T) {
	for _, tc := range []struct {
		vals []float64
		log  bool
	}{{[]float64{0.17, 4084}, true}, {[]float64{25.9, 899.6}, false}, {[]float64{0.014, 2.73}, true}, {[]float64{5, 5}, false}} {
		a := newAxis(tc.vals, tc.log, true, 100, 500)
		ticks := a.ticks()
		if len(ticks) < 2 {
			t.Fatalf("%v: ticks %v", tc.vals, ticks)
		}
		for _, v := range tc.vals {
			if v < ticks[0] || v > ticks[len(ticks)-1] {
				t.Errorf("%v (log %v): %v outside the ticks %v", tc.vals, tc.log, v, ticks)
			}
			if px := a.px(v); px < 100-1e-9 || px > 500+1e-9 {
				t.Errorf("%v: %v maps to %v, outside 100–500", tc.vals, v, px)
			}
		}
	}
}
