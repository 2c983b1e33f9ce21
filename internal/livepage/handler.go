package livepage

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The page's paths on the admin listener. The page refers to them, so a
// daemon serves [Page] at PagePath, [Events] at EventsPath, [Assets] under
// AssetsPath and its token form's POST at LoginPath.
const (
	PagePath   = "/live/"
	EventsPath = "/live/events"
	AssetsPath = "/live/assets/"
	LoginPath  = "/live/login"
)

// chartWidth and chartHeight are the chart's SVG coordinates, the newest
// sample on the right edge. The chart spans the history, at least
// minChartSpan samples: a daemon that started a minute ago fills it.
const (
	chartWidth   = 900
	chartHeight  = 160
	minChartSpan = 60
)

// writeTimeout bounds each write of the event stream, so that a client that
// stops reading does not hold its handler (and Server shutdown) for long.
const writeTimeout = 5 * time.Second

//go:embed assets
var assets embed.FS

var templates = template.Must(template.New("").Funcs(template.FuncMap{
	"points": ChartPoints,
	"clock":  func(t time.Time) string { return t.Format("15:04:05") },
	"rfc3339": func(t time.Time) string {
		return t.Format(time.RFC3339)
	},
	"rate":          formatRate,
	"httpListeners": httpListeners,
	"shown":         shownClasses,
	"shownClasses":  func() []string { return pageClasses },
}).ParseFS(assets, "assets/*.html"))

// Assets serves the page's embedded stylesheet and script, under
// [AssetsPath]. They hold no data, so a daemon may serve them without the
// admin token (the token form uses the stylesheet).
func Assets() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the directory is embedded above
	}
	return http.StripPrefix(AssetsPath, http.FileServerFS(sub))
}

// pageData is what page.html renders.
type pageData struct {
	Frame
	RefusedNow float64
	ChartMax   float64
	ChartSpan  int      // seconds
	XLabels    []string // under the chart, oldest first
}

// Page serves the live page, rendered on the server from the latest Frame
// of s, so that it is readable without JavaScript; its script then follows
// [Events].
func Page(s *Sampler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := s.sampled(r.Context())
		span := ChartSpan(len(f.History.Accept))
		d := pageData{
			Frame: f, RefusedNow: refusedNow(f.History), ChartMax: ChartMax(f.History),
			ChartSpan: span, XLabels: XLabels(span),
		}
		render(w, http.StatusOK, "page.html", d, log)
	})
}

// WriteLogin answers a browser that lacks the admin token with the form
// that asks for it, with status (401); failed says that a token was sent
// and was wrong.
func WriteLogin(w http.ResponseWriter, status int, failed bool, log *slog.Logger) {
	render(w, status, "login.html", struct{ Failed bool }{failed}, log)
}

// render executes the template name into a buffer first, so that a
// template error is a 500 rather than half a page.
func render(w http.ResponseWriter, status int, name string, data any, log *slog.Logger) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name, data); err != nil {
		log.Error("live page: render", "template", name, "error", err)
		http.Error(w, "live page: render failed", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self'")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// Events serves the event stream (text/event-stream): the latest Frame of s
// in JSON at once, then each new one as it is sampled, until the client
// goes or s is closed. A client that does not read a frame within five
// seconds is cut off.
func Events(s *Sampler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no") // for an nginx in front
		w.WriteHeader(http.StatusOK)
		// The server writes the end of the response after we return.
		defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
		for {
			_, frame, next := s.Latest()
			_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if err := writeEvent(w, frame); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			select {
			case <-next:
			case <-r.Context().Done():
				return
			case <-s.Done():
				return
			}
		}
	})
}

// writeEvent writes one event whose data is frame (JSON, a single line).
func writeEvent(w http.ResponseWriter, frame []byte) error {
	if _, err := w.Write([]byte("data: ")); err != nil {
		return err
	}
	if _, err := w.Write(frame); err != nil {
		return err
	}
	_, err := w.Write([]byte("\n\n"))
	return err
}

// refusedNow is the newest sample of both series together.
func refusedNow(h History) float64 {
	n := len(h.Accept)
	if n == 0 || len(h.Requests) != n {
		return 0
	}
	return round1(h.Accept[n-1] + h.Requests[n-1])
}

// chartSteps are the tops of the chart's scale, times a power of ten.
var chartSteps = []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10}

// The chart's geometry: ChartMax, ChartSpan, XLabels and ChartPoints draw
// the chart on a page's first load, and live.js computes the same for every
// later frame. They are exported for the browser module's tests
// (browser/livepage_test.go), which run live.js in Chromium and hold it to
// them; the daemon uses them only through [Page].

// ChartMax is the top of the chart's scale: the highest sample rounded up
// to one of chartSteps times a power of ten, and at least 1. live.js
// computes the same.
func ChartMax(h History) float64 {
	top := 1.0
	for _, s := range [][]float64{h.Accept, h.Requests} {
		for _, v := range s {
			top = max(top, v)
		}
	}
	p := math.Pow(10, math.Floor(math.Log10(top)))
	for _, m := range chartSteps {
		if top <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// ChartSpan is how many seconds the chart spans for n samples.
func ChartSpan(n int) int { return min(max(n, minChartSpan), HistoryLen) }

// XLabels are the labels under the chart: its span, two thirds and a third
// of it ago, and now. live.js computes the same.
func XLabels(span int) []string {
	ago := func(s int) string {
		if span < 180 {
			return "−" + strconv.Itoa(s) + " s"
		}
		return "−" + strconv.Itoa((s+30)/60) + " min"
	}
	return []string{ago(span), ago(span * 2 / 3), ago(span / 3), "now"}
}

// ChartPoints returns the SVG polyline points of vals on a scale of 0 to
// top over span seconds, the last value on the right edge. live.js
// computes the same.
func ChartPoints(vals []float64, top float64, span int) string {
	var b strings.Builder
	step := float64(chartWidth) / float64(max(span-1, 1))
	n := len(vals)
	for i, v := range vals {
		x := chartWidth - float64(n-1-i)*step
		y := chartHeight - math.Min(v/top, 1)*(chartHeight-4)
		b.WriteString(strconv.FormatFloat(x, 'f', 1, 64))
		b.WriteByte(',')
		b.WriteString(strconv.FormatFloat(y, 'f', 1, 64))
		b.WriteByte(' ')
	}
	return strings.TrimSpace(b.String())
}

// formatRate writes a rate per second as the page shows it: "0", "0.5",
// "12".
func formatRate(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// pageClasses are the status classes the requests table shows: 1xx, rare
// and never a sign of trouble, counts in the total only. live.js shows the
// same.
var pageClasses = []string{"2xx", "3xx", "4xx", "499", "5xx"}

// httpListeners returns the listeners that count requests.
func httpListeners(ls []Listener) []Listener {
	var out []Listener
	for _, l := range ls {
		if l.Requests != nil {
			out = append(out, l)
		}
	}
	return out
}

// shownClasses returns the counts of cs whose class the page shows, in the
// order of pageClasses.
func shownClasses(cs []Count) []Count {
	out := make([]Count, 0, len(pageClasses))
	for _, name := range pageClasses {
		c := Count{Name: name}
		for _, x := range cs {
			if x.Name == name {
				c = x
			}
		}
		out = append(out, c)
	}
	return out
}
