package daemon_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seed-a07d1050/portcullis/internal/browsertest"
)

// shownWithin is how soon after a refusal the live page must show it: the
// next sample (a second at most) and its event.
const shownWithin = 2 * time.Second

// liveCell selects a cell (class) of a row of the live page's tables.
func liveCell(rowID, class string) chromedp.CSS {
	return chromedp.CSS(`tr[data-row="` + rowID + `"] td.` + class)
}

// waitText waits, within limit, until the element sel has the text want.
func waitText(ctx context.Context, sel chromedp.CSS, want string, limit time.Duration) error {
	js := `(() => { const e = document.querySelector(` + "`" + string(sel) + "`" + `); return e !== null && e.textContent === "` + want + `"; })()`
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(limit)))
	return err
}

// In a real browser, the live page follows its event stream: a client
// refused with 429 shows on the page, without a reload, within 2 s.
func TestLivePageInABrowser(t *testing.T) {
	ctx := browsertest.New(t)
	d := startDaemon(t, liveConfig)
	refused := liveCell(liveRouteRow, "refused")
	err := chromedp.Do(ctx,
		chromedp.Navigate(d.adminURL("/")),
		chromedp.WaitVisible(refused),
	)
	if err != nil {
		t.Fatalf("opening the live page: %v", err)
	}
	if before, err := chromedp.Run(ctx, chromedp.Text(refused)); err != nil || before != "0" {
		t.Fatalf("refused before any refusal: %q (%v)", before, err)
	}
	if err := waitText(ctx, chromedp.CSS("#link"), "live", browsertest.Timeout/2); err != nil {
		t.Fatalf("the page never followed its event stream: %v", err)
	}

	refuse(t, d, "127.0.0.2")
	refusedAt := time.Now()
	if err := waitText(ctx, refused, "1", shownWithin); err != nil {
		t.Fatalf("the page did not show the refusal within %v: %v", shownWithin, err)
	}
	t.Logf("the page showed the refusal %v after the 429", time.Since(refusedAt).Round(time.Millisecond))
	if key, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#keys tbody tr td.key"))); err != nil || key != "127.0.0.2" {
		t.Errorf("busiest key on the page: %q (%v), want 127.0.0.2", key, err)
	}
}

// With admin.token_file, the browser gets the token form, and the token
// typed into it opens the live page.
func TestLivePageTokenFormInABrowser(t *testing.T) {
	ctx := browsertest.New(t)
	tokenFile := filepath.Join(t.TempDir(), "admin.token")
	writeToken(t, tokenFile, adminToken)
	d := startDaemon(t, strings.Replace(liveConfig, `admin: {listen: "127.0.0.1:0"}`,
		`admin: {listen: "127.0.0.1:0", token_file: "`+tokenFile+`"}`, 1))
	d.manualStop = true
	token := chromedp.CSS("#token")
	err := chromedp.Do(ctx,
		chromedp.Navigate(d.adminURL("/")),
		chromedp.WaitVisible(token),
		chromedp.SendKeys(token, adminTokenLater),
		chromedp.Submit(token),
		chromedp.WaitVisible(chromedp.CSS("#login-failed")),
		chromedp.SendKeys(token, adminToken),
		chromedp.Submit(token),
		chromedp.WaitVisible(liveCell(liveRouteRow, "refused")),
	)
	if err != nil {
		t.Fatalf("logging in to the live page: %v", err)
	}
	if err := waitText(ctx, chromedp.CSS("#link"), "live", browsertest.Timeout/2); err != nil {
		t.Fatalf("the page never followed its event stream (the cookie not sent with it?): %v", err)
	}
}

// In a real browser, the health panels show what the daemon counted: the
// listener's requests by status class, the upstream error, the dry-run
// rate's refusal, the requests a rate is delaying as waiting, and the 499s
// of the clients that left while delayed.
func TestLivePageHealthInABrowser(t *testing.T) {
	ctx := browsertest.New(t)
	d := startDaemon(t, liveHealthConfig)
	err := chromedp.Do(ctx,
		chromedp.Navigate(d.adminURL("/")),
		chromedp.WaitVisible(chromedp.CSS(`#requests tr[data-row="web"]`)),
	)
	if err != nil {
		t.Fatalf("opening the live page: %v", err)
	}
	if err := waitText(ctx, chromedp.CSS("#link"), "live", browsertest.Timeout/2); err != nil {
		t.Fatalf("the page never followed its event stream: %v", err)
	}
	leave := healthTraffic(t, d)
	expect := func(when string, want map[string]string) {
		t.Helper()
		for sel, text := range want {
			if err := waitText(ctx, chromedp.CSS(sel), text, shownWithin); err != nil {
				got, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
				t.Errorf("%s: %s shows %q, want %q (%v)", when, sel, got, text, err)
			}
		}
	}
	requests := `#requests tr[data-row="web"] `
	expect("with two requests delayed", map[string]string{
		requests + "td.total":                                      "6",
		requests + "td.c2xx .count":                                "4",
		requests + "td.c3xx .count":                                "0",
		requests + "td.c4xx .count":                                "1",
		requests + "td.c499 .count":                                "0",
		requests + "td.c5xx .count":                                "1",
		`#upstream tr[data-row="` + liveDownErrors + `"] td.kind`:  "refused",
		`#upstream tr[data-row="` + liveDownErrors + `"] td.count`: "1",
		`#shadow tr[data-row="` + liveShadowRate + `"] td.count`:   "1",
		`#listeners ` + string(liveCell(liveSlowRate, "waiting")):  "2",
		`#listeners ` + string(liveCell(liveRouteRow, "refused")):  "1",
	})
	leave()
	expect("after the delayed clients left", map[string]string{
		requests + "td.total":                                     "8",
		requests + "td.c499 .count":                               "2",
		`#listeners ` + string(liveCell(liveSlowRate, "waiting")): "0",
	})
}
