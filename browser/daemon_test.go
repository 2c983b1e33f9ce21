package browser_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seed-a07d1050/portcullis/browser/internal/browsertest"
	"github.com/seed-a07d1050/portcullis/internal/admin"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// waitLimit bounds every wait outside the browser in these tests.
const waitLimit = 10 * time.Second

// shownWithin is how soon after a refusal the live page must show it: the
// next sample (a second at most) and its event.
const shownWithin = 2 * time.Second

// liveConfig is a daemon whose route "one" lets each client run one
// request at a time and refuses the next with 429.
const liveConfig = `admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: one
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
`

// liveRouteRow is the live page's row of the route "one" of liveConfig.
const liveRouteRow = "web/route/one"

// liveHealthConfig is a daemon with a route for each part of the live
// page's health panels: "slow" delays all but the first request of a
// client by a minute, "shadow" has a dry-run rate that would refuse the
// second request, "down" has an upstream that refuses connections, and
// "one" (the rest) lets each client run one request at a time.
const liveHealthConfig = `admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: slow
        path_prefix: /slow
        upstreams: ["{{backend}}"]
        rate: {rate: 1r/m, burst: 5}
      - name: shadow
        path_prefix: /shadow
        upstreams: ["{{backend}}"]
        rate: {rate: 1r/m, nodelay: true, dry_run: true}
      - name: down
        path_prefix: /down
        upstreams: ["http://127.0.0.1:1"]
      - name: one
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
`

// The rows and lines of liveHealthConfig's panels.
const (
	liveSlowRate   = "web/route/slow/rate"
	liveShadowRate = "web/route/shadow/rate"
	liveDownErrors = "web/down/refused"
)

// The admin tokens of the token form's test: the one in the file, and one
// that is not.
const (
	adminToken      = "0123456789abcdef0123456789abcdef"
	adminTokenLater = "fedcba9876543210fedcba9876543210"
)

// testDaemon is a Portcullis daemon started in this process, with the clients
// the test made.
type testDaemon struct {
	t       *testing.T
	srv     *daemon.Server
	mu      sync.Mutex
	clients []*http.Client
	// manualStop is set by a test that stops the admin listener's use
	// (the token form's): the final check then reads the snapshot in
	// process.
	manualStop bool
}

// startBackend serves "/" (200, "ok PATH") and "/stream" (a first part,
// flushed, then nothing until the client goes) on a loopback socket.
func startBackend(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first part\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "ok %s\n", r.URL.Path)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// startDaemon starts a backend and a daemon from text ({{backend}}
// replaced by the backend's URL), and checks after the test that the
// daemon holds nothing (no connection, permit or waiter).
func startDaemon(t *testing.T, text string) *testDaemon {
	t.Helper()
	text = strings.ReplaceAll(text, "{{backend}}", startBackend(t))
	cfg, err := config.Parse("test.yaml", []byte(text))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	srv, err := daemon.Start(cfg, daemon.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	d := &testDaemon{t: t, srv: srv}
	t.Cleanup(func() {
		if !t.Failed() {
			d.checkIdle()
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return d
}

func (d *testDaemon) url(listener, path string) string {
	return "http://" + d.srv.Addr(listener).String() + path
}

func (d *testDaemon) adminURL(path string) string {
	return "http://" + d.srv.AdminAddr().String() + path
}

// client returns an HTTP client whose connections come from source address
// ip (127.0.0.X).
func (d *testDaemon) client(ip string) *http.Client {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: waitLimit}
	c := &http.Client{Timeout: 2 * waitLimit, Transport: &http.Transport{DialContext: dialer.DialContext, DisableCompression: true}}
	d.mu.Lock()
	d.clients = append(d.clients, c)
	d.mu.Unlock()
	return c
}

// snapshot reads /debug/limits.
func (d *testDaemon) snapshot() admin.Snapshot {
	d.t.Helper()
	resp, err := http.Get(d.adminURL("/debug/limits"))
	if err != nil {
		d.t.Fatalf("debug/limits: %v", err)
	}
	defer resp.Body.Close()
	var s admin.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		d.t.Fatalf("debug/limits: %v", err)
	}
	return s
}

// checkIdle fails the test unless the daemon comes to hold no connection,
// permit or waiter within waitLimit, its clients' idle connections closed.
func (d *testDaemon) checkIdle() {
	d.t.Helper()
	read := d.snapshot
	if d.manualStop {
		read = d.srv.Snapshot
	}
	var last admin.Snapshot
	idle := func() bool {
		d.mu.Lock()
		for _, c := range d.clients {
			c.CloseIdleConnections()
		}
		d.mu.Unlock()
		last = read()
		return last.InUse() == 0
	}
	if !waitUntil(idle) {
		b, _ := json.MarshalIndent(last, "", "  ")
		d.t.Errorf("daemon not idle after the test:\n%s", b)
	}
}

// waitUntil polls cond until it holds or waitLimit passes.
func waitUntil(cond func() bool) bool {
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// get sends GET url with c and returns the status and body.
func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// holdPermit makes a request from ip that holds the route's permit until
// the returned function is called: the backend's /stream answers a first
// part, then waits for the client to go.
func holdPermit(t *testing.T, d *testDaemon, ip string) (release func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url("web", "/stream"), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := d.client(ip).Do(req)
	if err != nil {
		t.Fatalf("holding request: %v", err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatalf("holding request: %v", err)
	}
	return func() {
		cancel()
		resp.Body.Close()
	}
}

// refuse holds the route's permit from ip and sends a second request from
// ip, which must get 429. The permit is held until release is called, or
// the test ends.
func refuse(t *testing.T, d *testDaemon, ip string) (release func()) {
	t.Helper()
	release = holdPermit(t, d, ip)
	t.Cleanup(release)
	if status, body := get(t, d.client(ip), d.url("web", "/")); status != http.StatusTooManyRequests {
		t.Fatalf("a request over the limit: %d %s, want 429", status, body)
	}
	return release
}

// healthTraffic drives liveHealthConfig's daemon: four 2xx (one per
// route but down, and a second shadow one the dry-run rate would have
// refused), a 429 (with a request holding route one's permit), a 502 from
// the dead upstream, and two requests that the slow route's rate is
// delaying. Calling the function it returns makes the two delayed
// requests' clients leave (they end as 499) and waits until they have.
func healthTraffic(t *testing.T, d *testDaemon) (leave func()) {
	t.Helper()
	c := d.client("127.0.0.3")
	for _, p := range []string{"/slow/a", "/shadow/a", "/shadow/b", "/"} {
		if st, body := get(t, c, d.url("web", p)); st != http.StatusOK {
			t.Fatalf("GET %s: %d %s, want 200", p, st, body)
		}
	}
	refuse(t, d, "127.0.0.2")
	if st, _ := get(t, c, d.url("web", "/down")); st != http.StatusBadGateway {
		t.Fatalf("dead upstream: %d, want 502", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	for i := range 2 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url("web", fmt.Sprintf("/slow/%d", i)), nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			resp, err := c.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				err = fmt.Errorf("a delayed request answered %d before its client left", resp.StatusCode)
			}
			done <- err
		}()
	}
	var once bool
	leave = func() {
		if once {
			return
		}
		once = true
		cancel()
		for range 2 {
			if err := <-done; err != nil && !strings.Contains(err.Error(), "context canceled") {
				t.Errorf("delayed request: %v", err)
			}
		}
	}
	t.Cleanup(leave)
	delaying := `portcullis_rate_delaying{limit="rate",listener="web",route="slow"} 2`
	if !waitUntil(func() bool {
		_, m := get(t, http.DefaultClient, d.adminURL("/metrics"))
		return strings.Contains(m, delaying)
	}) {
		t.Fatal("timed out waiting for two requests delayed by the slow route's rate")
	}
	return leave
}

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
	// With a trailing newline, as `openssl rand -hex 32 > file` writes it.
	if err := os.WriteFile(tokenFile, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
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
