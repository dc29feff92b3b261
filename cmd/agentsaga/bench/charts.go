package bench

import (
	"fmt"
	"image/color"
	"os"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// chartWidth and chartHeight size every chart written by this package: 600 x
// 375 points, which is 800 x 500 pixels at the PNG's 96 DPI.
const (
	chartWidth  vg.Length = 600
	chartHeight vg.Length = 375
)

// palette gives each contender its own color, in row order.
var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
}

func colorOf(i int) color.Color { return palette[i%len(palette)] }

// shortName cuts a contender's name to its head: what precedes " (" or ", ",
// e.g. "agentsaga (hook, ledger, fleet bucket)" becomes "agentsaga".
func shortName(name string) string {
	for _, sep := range []string{" (", ", "} {
		if i := strings.Index(name, sep); i > 0 {
			name = name[:i]
		}
	}
	return name
}

// StormChart writes to path a PNG of the storm scenario: per contender, the
// requests and the failed requests the downstream saw each second (solid
// and dashed lines in the contender's color), with the outage window
// cfg.OutageFrom..cfg.OutageTo shaded and bounded by two vertical lines.
func StormChart(path string, cfg StormConfig, rows []StormRow) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Downstream load during a %g s outage", (cfg.OutageTo - cfg.OutageFrom).Seconds())
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = "requests per second at the downstream"
	p.Legend.Top = true
	p.Add(plotter.NewGrid())

	maxY, maxX := 1.0, cfg.Duration.Seconds()
	for _, r := range rows {
		if n := float64(len(r.PerSecond)); n > maxX {
			maxX = n
		}
		for _, s := range r.PerSecond {
			if float64(s.Requests) > maxY {
				maxY = float64(s.Requests)
			}
		}
	}
	maxY *= 1.35 // headroom for the legend

	// The outage: a light band and its two edges.
	from, to := cfg.OutageFrom.Seconds(), cfg.OutageTo.Seconds()
	band, err := plotter.NewPolygon(plotter.XYs{{X: from, Y: 0}, {X: to, Y: 0}, {X: to, Y: maxY}, {X: from, Y: maxY}})
	if err != nil {
		return fmt.Errorf("bench: storm chart: %w", err)
	}
	band.Color = color.RGBA{R: 0xee, G: 0xee, B: 0xee, A: 0xff}
	band.LineStyle.Width = 0
	p.Add(band)
	for _, x := range []float64{from, to} {
		edge, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: maxY}})
		if err != nil {
			return fmt.Errorf("bench: storm chart: %w", err)
		}
		edge.Color = color.Gray{Y: 0x60}
		edge.Width = vg.Points(1)
		edge.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(edge)
	}
	p.Legend.Add(fmt.Sprintf("outage %g-%g s", from, to), band)

	for i, r := range rows {
		requests := make(plotter.XYs, len(r.PerSecond))
		failures := make(plotter.XYs, len(r.PerSecond))
		for s, sec := range r.PerSecond {
			requests[s] = plotter.XY{X: float64(s) + 0.5, Y: float64(sec.Requests)}
			failures[s] = plotter.XY{X: float64(s) + 0.5, Y: float64(sec.Failures)}
		}
		name := shortName(r.Contender)
		for _, series := range []struct {
			xys    plotter.XYs
			label  string
			dashes []vg.Length
		}{
			{requests, name + ": requests/s", nil},
			{failures, name + ": failed/s", []vg.Length{vg.Points(6), vg.Points(3)}},
		} {
			if len(series.xys) == 0 {
				continue
			}
			line, err := plotter.NewLine(series.xys)
			if err != nil {
				return fmt.Errorf("bench: storm chart: %w", err)
			}
			line.Color = colorOf(i)
			line.Width = vg.Points(1.5)
			line.Dashes = series.dashes
			p.Add(line)
			p.Legend.Add(series.label, line)
		}
	}
	p.X.Min, p.X.Max = 0, maxX
	p.Y.Min, p.Y.Max = 0, maxY
	var ticks []plot.Tick
	for x := 0.0; x <= maxX; x += 5 {
		label := ""
		if int(x)%10 == 0 {
			label = fmt.Sprintf("%g", x)
		}
		ticks = append(ticks, plot.Tick{Value: x, Label: label})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if err := savePNG(p, path); err != nil {
		return fmt.Errorf("bench: storm chart: %w", err)
	}
	return nil
}

// savePNG draws p on a chartWidth x chartHeight PNG with a small margin, so
// that the last tick label is not cut at the right edge, and writes it to
// path.
func savePNG(p *plot.Plot, path string) error {
	return writePNG(path, chartHeight, func(dc draw.Canvas) {
		p.Draw(draw.Crop(dc, vg.Points(4), -vg.Points(14), vg.Points(4), -vg.Points(6)))
	})
}

// saveTiledPNG draws plots one under the other, each chartWidth x
// chartHeight, on one PNG, and writes it to path.
func saveTiledPNG(plots []*plot.Plot, path string) error {
	return writePNG(path, vg.Length(max(len(plots), 1))*chartHeight, func(dc draw.Canvas) {
		tiles := draw.Tiles{Rows: max(len(plots), 1), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(4),
			PadRight: vg.Points(14), PadY: vg.Points(12)}
		for i, p := range plots {
			p.Draw(tiles.At(dc, 0, i))
		}
	})
}

// writePNG writes to path a chartWidth x height PNG on which draw drew,
// over a white background (under the margins too).
func writePNG(path string, height vg.Length, drawOn func(draw.Canvas)) error {
	img := vgimg.New(chartWidth, height)
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	drawOn(dc)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// addTarget adds to p a dashed black line through xys, a bound the
// chart's figures are held to, with label in the legend.
func addTarget(p *plot.Plot, xys plotter.XYs, label string) error {
	line, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	line.Color = color.Black
	line.Width = vg.Points(1.5)
	line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	p.Add(line)
	p.Legend.Add(label, line)
	return nil
}

// addSeries adds to p a line through xys in the i-th contender's color,
// width wide, and a dot of radius at its last point; the caller may
// restyle either (a step, a cross).
func addSeries(p *plot.Plot, xys plotter.XYs, i int, width, radius vg.Length) (*plotter.Line, *plotter.Scatter, error) {
	line, err := plotter.NewLine(xys)
	if err != nil {
		return nil, nil, err
	}
	line.Color = colorOf(i)
	line.Width = width
	p.Add(line)
	end, err := plotter.NewScatter(xys[len(xys)-1:])
	if err != nil {
		return nil, nil, err
	}
	end.Color = colorOf(i)
	end.Radius = radius
	end.Shape = draw.CircleGlyph{}
	p.Add(end)
	return line, end, nil
}

// addBars adds to p a bar chart of values, width wide, in the i-th
// contender's color: one such chart per contender gives each its color.
func addBars(p *plot.Plot, values plotter.Values, width vg.Length, i int) error {
	bars, err := plotter.NewBarChart(values, width)
	if err != nil {
		return err
	}
	bars.Color = colorOf(i)
	bars.LineStyle.Width = 0
	p.Add(bars)
	return nil
}

// distinct is each key of rows once, in the order of their first row.
func distinct[R any, K comparable](rows []R, key func(R) K) []K {
	keys := []K{}
	for _, r := range rows {
		if k := key(r); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// AmplificationChart writes to path a PNG bar chart of each contender's
// amplification (requests at the downstream per logical call) with a plain
// Y axis, and, when rows[0].Target is positive, the bound agentsaga
// promises as a dashed horizontal line.
func AmplificationChart(path string, rows []Row) error {
	p := plot.New()
	p.Title.Text = "Amplification during a 100% outage"
	p.Y.Label.Text = "requests per logical call"
	p.Add(plotter.NewGrid())

	values := make(plotter.Values, len(rows))
	names := make([]string, len(rows))
	maxY := 1.0
	for i, r := range rows {
		values[i] = r.Amplification
		// The figure goes under the name, clear of the bars and the target line.
		names[i] = fmt.Sprintf("%s\n%.2f", shortName(r.Contender), r.Amplification)
		if r.Amplification > maxY {
			maxY = r.Amplification
		}
	}
	if len(rows) > 0 && rows[0].Target > maxY {
		maxY = rows[0].Target
	}
	// The target first, so the bars are drawn over it.
	if len(rows) > 0 && rows[0].Target > 0 {
		if err := addTarget(p, plotter.XYs{{X: -0.5, Y: rows[0].Target}, {X: float64(len(rows)) - 0.5, Y: rows[0].Target}},
			fmt.Sprintf("%s target <= %.2f", shortName(rows[0].Contender), rows[0].Target)); err != nil {
			return fmt.Errorf("bench: amplification chart: %w", err)
		}
		p.Legend.Top = true
	}
	width := chartWidth * 0.6 / vg.Length(max(len(rows), 1))
	for i := range rows {
		// One bar chart per contender, so each gets its own color.
		one := make(plotter.Values, len(rows))
		one[i] = values[i]
		if err := addBars(p, one, width, i); err != nil {
			return fmt.Errorf("bench: amplification chart: %w", err)
		}
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(rows))-0.5
	p.Y.Min, p.Y.Max = 0, maxY*1.15

	if err := savePNG(p, path); err != nil {
		return fmt.Errorf("bench: amplification chart: %w", err)
	}
	return nil
}
