package browser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seed-a07d1050/portcullis/browser/internal/browsertest"
	"github.com/seed-a07d1050/portcullis/internal/livepage"
)

// pageSource is a daemon of one listener with one limit, a client key that
// would break a page that did not escape it, and a row in every panel of
// the page, so that the script has everything to draw.
type pageSource struct {
	mu       sync.Mutex
	conns    uint64 // refused at accept
	requests uint64 // refused by the limit
}

func (p *pageSource) set(conns, requests uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns, p.requests = conns, requests
}

func (p *pageSource) LiveState(context.Context) livepage.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := livepage.State{Time: time.Now(), Listeners: []livepage.Listener{{
		Row:    livepage.Row{ID: "web", Name: "web", Refused: p.conns},
		Limits: []livepage.Row{{ID: "web/route/slow", Name: "route slow", Refused: p.requests}},
	}}}
	l := &st.Listeners[0]
	l.Protocol, l.Addr, l.Limit, l.InUse, l.Waiting = "http", "127.0.0.1:8080", "16 connections per client", 5, 1
	l.Limits[0].Limit = "4 per client_ip, queue 4 for 2s"
	l.Warnings = []string{"admin: exposed"}
	l.Paths = []string{"route slow: full_server (an https upstream, https://10.0.0.1)", "route fast: event_loops"}
	st.Keys = []livepage.Key{{Where: "web connections", Key: `<script>alert(1)</script>`, InUse: 3}}
	st.QUIC = []livepage.QUIC{{Listener: "quic", InProgress: 7, Threshold: 256, MaxInProgress: 16384, RetryOn: true}}
	st.Redis = &livepage.Redis{Addrs: []string{"10.0.0.1:6379"}, OnError: "open", Reachable: true, PingMillis: 0.4}
	l.Requests = &livepage.Requests{Total: 57, Classes: []livepage.Count{{Name: "1xx"}, {Name: "2xx", Count: 40}, {Name: "3xx", Count: 1},
		{Name: "4xx", Count: 12}, {Name: "499", Count: 3}, {Name: "5xx", Count: 1}}}
	st.Upstream = []livepage.UpstreamErrors{{ID: "web/slow/timeout", Listener: "web", Route: "slow", Kind: "timeout", Count: 9}}
	st.Shadow = []livepage.Shadow{{ID: "web/route/slow/shadow", Name: "route slow shadow_limit", Limit: "2 per client_ip", WouldRefuse: 6}}
	return st
}

// servePage serves the page, its event stream and its assets for s on a
// loopback socket and returns the server's URL.
func servePage(t *testing.T, s *livepage.Sampler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET "+livepage.PagePath+"{$}", livepage.Page(s, slog.New(slog.DiscardHandler)))
	mux.Handle("GET "+livepage.EventsPath, livepage.Events(s))
	mux.Handle("GET "+livepage.AssetsPath, livepage.Assets())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// live.js draws the chart as handler.go does on the first load: the same
// scale, span, labels and points, for the same samples, in a real browser.
func TestScriptChartMatchesTheServer(t *testing.T) {
	ctx := browsertest.New(t)
	s := livepage.NewSampler(&pageSource{}, time.Hour)
	defer s.Close()
	url := servePage(t, s)
	if err := chromedp.Do(ctx, chromedp.Navigate(url+livepage.PagePath), chromedp.WaitVisible(chromedp.CSS("#chart"))); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 3, 59, 60, 61, 150, 179, 180, 181, 600, livepage.HistoryLen} {
		vals := make([]float64, n)
		scale := []float64{0.5, 3, 70, 2100, 99999}[n%5]
		for i := range vals {
			vals[i] = math.Round(rng.Float64()*scale*10) / 10 // as the Sampler rounds its rates
		}
		js, err := json.Marshal(vals)
		if err != nil {
			t.Fatal(err)
		}
		top := livepage.ChartMax(livepage.History{Accept: vals})
		if got, err := chromedp.Run(ctx, chromedp.Evaluate[float64](fmt.Sprintf("chartMax([%s])", js))); err != nil || got != top {
			t.Errorf("%d samples: chartMax %v in the browser, %v on the server (%v)", n, got, top, err)
		}
		span := livepage.ChartSpan(n)
		if got, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("chartSpan(%d)", n))); err != nil || got != span {
			t.Errorf("%d samples: span %v in the browser, %v on the server (%v)", n, got, span, err)
		}
		if got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](fmt.Sprintf("xLabels(%d)", span))); err != nil || !slices.Equal(got, livepage.XLabels(span)) {
			t.Errorf("span %d: labels %q in the browser, %q on the server (%v)", span, got, livepage.XLabels(span), err)
		}
		want := livepage.ChartPoints(vals, top, span)
		if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf("points(%s, %v, %d)", js, top, span))); err != nil || got != want {
			t.Errorf("%d samples: points differ (%v)\nbrowser: %.200s\nserver:  %.200s", n, err, got, want)
		}
	}
}

// live.js draws the tables and the Redis line as page.html renders them:
// the same rows, classes and texts, for the same frame.
func TestScriptTablesMatchTheServer(t *testing.T) {
	ctx := browsertest.New(t)
	src := &pageSource{}
	src.set(12, 34)
	s := livepage.NewSampler(src, time.Hour) // one frame, drawn by both
	defer s.Close()
	url := servePage(t, s)
	if err := chromedp.Do(ctx, chromedp.Navigate(url+livepage.PagePath)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.body.dataset.drawn !== undefined`, chromedp.WithPollingTimeout(browsertest.Timeout/2))); err != nil {
		t.Fatalf("the script drew no frame: %v", err)
	}
	// Each row of a part of the page as its class, data-row and the
	// classes and texts of its cells, white space collapsed.
	const describe = `(root) => ["#requests tbody", "#upstream tbody", "#shadow tbody", "#listeners tbody", "#keys tbody", "#quic tbody", "#redis", "#refused-now", "#chart-max", "#xaxis"].map((sel) => {
		const e = root.querySelector(sel);
		const rows = e.tagName === "TBODY" ? [...e.rows] : [e];
		return sel + ": " + rows.map((r) => [r.className, r.dataset ? r.dataset.row : "",
			...[...(r.cells || [])].map((c) => c.className + "=" + c.textContent.replace(/\s+/g, " ").trim()),
			r.cells ? "" : r.textContent.replace(/\s+/g, " ").trim()].join("|")).join(" / ");
	})`
	drawn, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(`+describe+`)(document)`))
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`fetch("`+livepage.PagePath+`").then((r) => r.text()).then((html) => (`+describe+`)(new DOMParser().parseFromString(html, "text/html")))`,
		chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(drawn, rendered) || len(drawn) != 10 {
		t.Errorf("the script draws the page otherwise than the server renders it:\nscript: %q\nserver: %q", drawn, rendered)
	}
}
