// Package browsertest starts a headless Chromium for tests, driven through
// chromedp: the live page's tests open it as an operator would.
//
// Without Chromium a test is skipped, except when the environment variable
// CI is set: CI installs Chromium (.ci/run), and a browser test skipped
// there would pass without having run.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Timeout bounds everything a test does in the browser.
const Timeout = time.Minute

// chromiumPath returns the Chromium to run: $CHROMIUM when set, else
// chromium (Debian's package) or chromium-browser in PATH.
func chromiumPath() (string, bool) {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p, true
	}
	for _, name := range []string{"chromium", "chromium-browser", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, true
		}
	}
	return "", false
}

// New starts a headless Chromium with a fresh profile and returns the
// context of a tab in it, which ends (the browser stopped) when the test
// ends or after Timeout. Without Chromium it skips t, or fails it when CI
// is set.
func New(t testing.TB) context.Context {
	t.Helper()
	path, ok := chromiumPath()
	if !ok {
		if os.Getenv("CI") != "" {
			t.Fatal("Chromium not found and CI is set: install it (apt-get install chromium) or set CHROMIUM")
		}
		t.Skip("Chromium not found (apt-get install chromium, or set CHROMIUM)")
	}
	profile := t.TempDir() // removed after the browser has stopped (cleanups run last first)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		// A container's /dev/shm is often 64 MiB, too small for Chromium.
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 1000),
	}
	ctx, cancelTimeout := context.WithTimeout(context.Background(), Timeout)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tab, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the browser process to exit
		cancelTimeout()
	})
	if err := chromedp.Do(tab); err != nil { // starts the browser
		t.Fatalf("starting Chromium %s: %v", path, err)
	}
	return tab
}
