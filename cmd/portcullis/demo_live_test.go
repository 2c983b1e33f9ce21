package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seed-a07d1050/portcullis/internal/browsertest"
)

var updateScreenshot = flag.Bool("update-screenshot", false,
	"write docs/images/live-page.png: the live page under `portcullis demo --attack`")

// screenshotPath is the live page's screenshot in the repository.
var screenshotPath = filepath.Join("..", "..", "docs", "images", "live-page.png")

// The live page under `demo --attack`, in a real browser: the attacker's
// connections refused at accept show as a rate on the listener and a line
// on the chart, the attacker first among the busiest keys. With
// -update-screenshot, the page is saved as the documentation's
// screenshot.
func TestLivePageUnderDemoAttack(t *testing.T) {
	ctx := browsertest.New(t)
	var out bytes.Buffer
	srv, code := startRun(t, []string{"demo", "--attack", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--duration", "6s", "--warmup", "3s", "--attack-conns", "300", "--backend-conns", "64"}, &signals{}, &out)
	defer waitCode(t, code)

	web := chromedp.CSS(`tr[data-row="web"]`)
	err := chromedp.Do(ctx,
		chromedp.Navigate("http://"+srv.AdminAddr().String()+"/"),
		chromedp.WaitVisible(web),
		// The first run floods the bare backend; the second, through
		// Portcullis, is refused at accept.
		chromedp.WaitVisible(chromedp.CSS(`tr[data-row="web"] td.rate.hot`)),
	)
	if err != nil {
		t.Fatalf("the live page never showed the attack refused: %v", err)
	}
	since, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#updated"), "datetime"))
	if err != nil {
		t.Fatal(err)
	}
	// Five seconds of frames more (of the nine the run through Portcullis
	// lasts), so that the chart shows the attack for a while.
	waitFrames := `Date.parse(document.getElementById("updated").dateTime) - Date.parse("` + since.Value + `") >= 5000`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](waitFrames, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the page stopped following its event stream: %v", err)
	}
	key, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#keys tbody tr td.key")))
	if err != nil || key != "127.0.0.2" {
		t.Errorf("busiest key %q (%v), want the attacker 127.0.0.2", key, err)
	}
	refused, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`tr[data-row="web"] td.refused`)))
	if n, _ := strconv.Atoi(refused); err != nil || n == 0 {
		t.Errorf("connections refused on the page: %q (%v)", refused, err)
	}
	// The legitimate clients are still served: the requests panel counts
	// their 2xx.
	served, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#requests tr[data-row="web"] td.c2xx .count`)))
	if n, _ := strconv.Atoi(served); err != nil || n == 0 {
		t.Errorf("2xx on the page's requests panel: %q (%v), want some", served, err)
	}
	points, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#chart-accept"), "points"))
	if err != nil || points.Value == "" {
		t.Errorf("the chart has no line of refusals at accept (%v)", err)
	}
	if *updateScreenshot {
		saveScreenshot(t, ctx)
	}
}

// saveScreenshot writes the page, whole, to screenshotPath.
func saveScreenshot(t *testing.T, ctx context.Context) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(screenshotPath, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", screenshotPath, len(png))
}
