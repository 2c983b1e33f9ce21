package livepage

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seed-a07d1050/portcullis/internal/browsertest"
)

// live.js draws the chart as handler.go does on the first load: the same
// scale, span, labels and points, for the same samples, in a real browser.
func TestScriptChartMatchesTheServer(t *testing.T) {
	ctx := browsertest.New(t)
	s := NewSampler(&fakeSource{}, time.Hour)
	defer s.Close()
	url, _ := serve(t, s)
	if err := chromedp.Do(ctx, chromedp.Navigate(url+PagePath), chromedp.WaitVisible(chromedp.CSS("#chart"))); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 3, 59, 60, 61, 150, 179, 180, 181, 600, HistoryLen} {
		vals := make([]float64, n)
		scale := []float64{0.5, 3, 70, 2100, 99999}[n%5]
		for i := range vals {
			vals[i] = round1(rng.Float64() * scale)
		}
		js, err := json.Marshal(vals)
		if err != nil {
			t.Fatal(err)
		}
		top := chartMax(History{Accept: vals})
		if got, err := chromedp.Run(ctx, chromedp.Evaluate[float64](fmt.Sprintf("chartMax([%s])", js))); err != nil || got != top {
			t.Errorf("%d samples: chartMax %v in the browser, %v on the server (%v)", n, got, top, err)
		}
		span := chartSpan(n)
		if got, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("chartSpan(%d)", n))); err != nil || got != span {
			t.Errorf("%d samples: span %v in the browser, %v on the server (%v)", n, got, span, err)
		}
		if got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](fmt.Sprintf("xLabels(%d)", span))); err != nil || !slices.Equal(got, xLabels(span)) {
			t.Errorf("span %d: labels %q in the browser, %q on the server (%v)", span, got, xLabels(span), err)
		}
		want := chartPoints(vals, top, span)
		if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf("points(%s, %v, %d)", js, top, span))); err != nil || got != want {
			t.Errorf("%d samples: points differ (%v)\nbrowser: %.200s\nserver:  %.200s", n, err, got, want)
		}
	}
}

// live.js draws the tables and the Redis line as page.html renders them:
// the same rows, classes and texts, for the same frame.
func TestScriptTablesMatchTheServer(t *testing.T) {
	ctx := browsertest.New(t)
	src := &keySource{}
	src.set(12, 34)
	s := NewSampler(src, time.Hour) // one frame, drawn by both
	defer s.Close()
	url, _ := serve(t, s)
	if err := chromedp.Do(ctx, chromedp.Navigate(url+PagePath)); err != nil {
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
	rendered, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`fetch("`+PagePath+`").then((r) => r.text()).then((html) => (`+describe+`)(new DOMParser().parseFromString(html, "text/html")))`,
		chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(drawn, rendered) || len(drawn) != 10 {
		t.Errorf("the script draws the page otherwise than the server renders it:\nscript: %q\nserver: %q", drawn, rendered)
	}
}
