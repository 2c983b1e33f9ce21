package browser_test

import (
	"bufio"
	"context"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seed-a07d1050/portcullis/browser/internal/browsertest"
)

var updateScreenshot = flag.Bool("update-screenshot", false,
	"write docs/images/live-page.png: the live page under `portcullis demo --attack`")

// screenshotPath is the live page's screenshot in the repository.
var screenshotPath = filepath.Join("..", "docs", "images", "live-page.png")

// demoLimit bounds the demo's run: its warm-up and two measured runs, then
// its table.
const demoLimit = time.Minute

// buildPortcullis builds the daemon of the checkout this module sits in
// (and replaces the root module with) into a temporary directory, from the
// checkout's root as a user builds it: built from this module, the daemon's
// dependencies would all need entries in this module's go.sum.
func buildPortcullis(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command, to build portcullis: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "portcullis")
	cmd := exec.Command(gobin, "build", "-o", bin, "./cmd/portcullis")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build portcullis: %v\n%s", err, out)
	}
	return bin
}

// startDemo runs `portcullis args...` and returns the admin address that
// its "Live page:" line names; the process is waited for, and killed if it
// outlives demoLimit, when the test ends.
func startDemo(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), demoLimit)
	cmd := exec.CommandContext(ctx, bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting portcullis demo: %v", err)
	}
	exited := make(chan error, 1)
	admin := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if rest, ok := strings.CutPrefix(line, "Live page: http://"); ok {
				addr, _, _ := strings.Cut(rest, "/")
				admin <- addr
			}
			if err != nil {
				break
			}
		}
		_, _ = io.Copy(io.Discard, r)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		defer cancel()
		if err := <-exited; err != nil {
			t.Errorf("portcullis demo: %v", err)
		}
	})
	select {
	case addr := <-admin:
		return addr
	case <-ctx.Done():
		t.Fatal("portcullis demo printed no live page address")
		return ""
	}
}

// The live page under `demo --attack`, in a real browser: the attacker's
// connections refused at accept show as a rate on the listener and a line
// on the chart, the attacker first among the busiest keys. With
// -update-screenshot, the page is saved as the documentation's
// screenshot.
func TestLivePageUnderDemoAttack(t *testing.T) {
	ctx := browsertest.New(t)
	admin := startDemo(t, buildPortcullis(t), "demo", "--attack", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--duration", "6s", "--warmup", "3s", "--attack-conns", "300", "--backend-conns", "64")

	web := chromedp.CSS(`tr[data-row="web"]`)
	err := chromedp.Do(ctx,
		chromedp.Navigate("http://"+admin+"/"),
		chromedp.WaitVisible(web),
		// The first run floods the bare backend; the second, through
		// Portcullis, is refused at accept.
		chromedp.WaitVisible(chromedp.CSS(`tr[data-row="web"] td.rate.hot`)),
	)
	if err != nil {
		t.Fatalf("the live page never showed the attack refused: %v", err)
	}
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
