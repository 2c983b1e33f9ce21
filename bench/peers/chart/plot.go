package main

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// proxyColors keeps each proxy's colour the same in both panels.
var proxyColors = map[string]color.Color{
	"portcullis":         color.RGBA{R: 0x1f, G: 0x6f, B: 0xb4, A: 0xff},
	"portcullis-fast":    color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
	"portcullis-lean":    color.RGBA{R: 0x08, G: 0x30, B: 0x9c, A: 0xff},
	"portcullis-nethttp": color.RGBA{R: 0x9a, G: 0x6f, B: 0xc4, A: 0xff},
	"portcullis-log":     color.RGBA{R: 0x4f, G: 0x9f, B: 0xc8, A: 0xff},
	"portcullis-rst":     color.RGBA{R: 0x7f, G: 0xb0, B: 0xe0, A: 0xff},
	"portcullis-syn":     color.RGBA{R: 0x0b, G: 0x3a, B: 0x66, A: 0xff},
	"nginx":              color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"haproxy":            color.RGBA{R: 0xd6, G: 0x5f, B: 0x0e, A: 0xff},
	floor:                color.Gray{Y: 0x99},
	floorAdmit:           color.Gray{Y: 0xbb},
	floorEpollAdmit:      color.Gray{Y: 0x66},
}

const barWidth = 18 // points, at most

// panelDataWidth is about how wide, in points, the data area of one panel
// is: a third of the 20-inch canvas, less the pads and the Y axis.
const panelDataWidth = 380

// barWidthFor returns the width of one bar in a panel of groups groups of
// n bars each: barWidth, or narrower when a group's bars would not fit in
// its share of the panel and would run into the next group's.
func barWidthFor(groups, n int) vg.Length {
	return vg.Points(min(barWidth, 0.8*panelDataWidth/float64(groups*n)))
}

// panel is one bar chart: groups along x, one bar per proxy in each group.
type panel struct {
	title, yLabel string
	groups        []string
	value         func(proxy string, group int) Num
	// refLine, when positive, draws a dashed horizontal line at that value.
	refLine  float64
	refLabel string
}

func writeChart(path string, s Summary) error {
	panels := []panel{goodputPanel(s), p99Panel(s), cpuPanel(s)}
	row := make([]*plot.Plot, len(panels))
	for i, pn := range panels {
		p, err := pn.plot(s.Proxies)
		if err != nil {
			return fmt.Errorf("%s: %w", pn.title, err)
		}
		row[i] = p
	}
	img := vgimg.New(20*vg.Inch, 5.5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Inch / 2, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8,
		PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, dc)
	for i, p := range row {
		p.Draw(canvases[0][i])
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(out); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

func goodputPanel(s Summary) panel {
	return panel{
		title:    "Legitimate goodput (successes/s) vs no-attack",
		yLabel:   "ratio (throughput: vs direct to backend)",
		groups:   []string{"throughput", "slowloris 3000", "slow-requests 3000"},
		refLine:  minGoodputRatio,
		refLabel: "target 0.99",
		value: func(proxy string, g int) Num {
			if g == 0 {
				t, _ := findThroughput(s, proxy)
				return t.VsDirect
			}
			r, _ := findProtection(s, proxy, attackScenarios[g-1])
			return r.GoodputRatio
		},
	}
}

func p99Panel(s Summary) panel {
	return panel{
		title:  "Legitimate p99 latency",
		yLabel: "ms",
		groups: []string{"throughput", "no attack (fresh conns)", "slowloris 3000", "slow-requests 3000"},
		value: func(proxy string, g int) Num {
			switch g {
			case 0:
				t, _ := findThroughput(s, proxy)
				return t.P99MS
			case 1:
				r, _ := findProtection(s, proxy, scSlowloris)
				return r.BaseP99MS
			}
			r, _ := findProtection(s, proxy, attackScenarios[g-2])
			return r.P99MS
		},
	}
}

// cpuPanel shows what each proxy spends per request under the throughput
// scenario, the figure issue 19 is about.
func cpuPanel(s Summary) panel {
	return panel{
		title:  "Proxy CPU per 1000 keep-alive requests",
		yLabel: "ms of CPU (throughput scenario)",
		groups: []string{"throughput"},
		value: func(proxy string, _ int) Num {
			t, _ := findThroughput(s, proxy)
			return t.CPUPer1kMS
		},
	}
}

func (pn panel) plot(proxies []string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.title
	p.Y.Label.Text = pn.yLabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	n := len(proxies)
	w := barWidthFor(len(pn.groups), n)
	top := pn.refLine
	for i, proxy := range proxies {
		vals := make(plotter.Values, len(pn.groups))
		for g := range pn.groups {
			if v := pn.value(proxy, g); v.Known() {
				vals[g] = float64(v)
				top = max(top, vals[g])
			}
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		bars.Color = proxyColors[proxy]
		bars.LineStyle.Width = 0
		bars.Offset = w * vg.Length(float64(i)-float64(n-1)/2)
		p.Add(bars)
		p.Legend.Add(proxy, bars)
	}
	if pn.refLine > 0 {
		if err := pn.addRefLine(p); err != nil {
			return nil, err
		}
	}
	// Headroom above the tallest bar keeps the legend off the bars.
	p.Y.Max = 1.3 * top
	p.NominalX(pn.groups...)
	p.Add(plotter.NewGrid())
	return p, nil
}

func (pn panel) addRefLine(p *plot.Plot) error {
	line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: pn.refLine}, {X: float64(len(pn.groups)) - 0.5, Y: pn.refLine}})
	if err != nil {
		return err
	}
	line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	line.Color = color.Gray{Y: 0x40}
	p.Add(line)
	p.Legend.Add(pn.refLabel, line)
	return nil
}
