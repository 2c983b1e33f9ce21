package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/livepage"
	"github.com/seed-a07d1050/portcullis/internal/redistest"
)

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
	if status, body, _ := get(t, d.client(ip), d.url("web", "/")); status != http.StatusTooManyRequests {
		t.Fatalf("a request over the limit: %d %s, want 429", status, body)
	}
	return release
}

// events opens the live page's event stream with the given header.
func events(t *testing.T, d *testDaemon, header http.Header) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, d.adminURL(livepage.EventsPath), nil)
	if err != nil {
		t.Fatal(err)
	}
	if header != nil {
		req.Header = header
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("event stream: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, bufio.NewReader(resp.Body)
}

// nextFrame reads the next frame of an event stream.
func nextFrame(t *testing.T, r *bufio.Reader) livepage.Frame {
	t.Helper()
	for range 100 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("event stream: %v", err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var f livepage.Frame
			if err := json.Unmarshal([]byte(data), &f); err != nil {
				t.Fatalf("event %q: %v", data, err)
			}
			return f
		}
	}
	t.Fatal("no event in 100 lines")
	return livepage.Frame{}
}

// listenersFrame reads frames until one lists the daemon's listeners: the
// first may have been sampled before they served (Start kicks a sample
// once they do).
func listenersFrame(t *testing.T, r *bufio.Reader) livepage.Frame {
	t.Helper()
	for range 3 {
		if f := nextFrame(t, r); len(f.Listeners) > 0 {
			return f
		}
	}
	t.Fatal("3 frames without a listener")
	return livepage.Frame{}
}

// row returns the row id of a frame.
func row(f livepage.Frame, id string) (livepage.Row, bool) {
	for _, l := range f.Listeners {
		if l.ID == id {
			return l.Row, true
		}
		for _, r := range l.Limits {
			if r.ID == id {
				return r, true
			}
		}
	}
	return livepage.Row{}, false
}

// liveGoroutines counts the goroutines running the live page's code.
func liveGoroutines() int {
	buf := make([]byte, 4<<20)
	n := runtime.Stack(buf, true)
	return strings.Count(string(buf[:n]), "internal/livepage.")
}

// The event stream shows a refusal within the next sample or two: the
// route's count, its key in use, the refusal in the history. Shutdown then
// ends the stream cleanly and leaves no goroutine of the page behind.
func TestLiveEventsShowARefusal(t *testing.T) {
	before := liveGoroutines()
	d := startDaemon(t, liveConfig)
	_, r := events(t, d, nil)
	one, ok := row(listenersFrame(t, r), liveRouteRow)
	if !ok || one.Refused != 0 || one.Limit != "1 per client_ip" {
		t.Fatalf("route row: %+v (found %v)", one, ok)
	}
	release := refuse(t, d, "127.0.0.2")
	var f livepage.Frame
	for i := 0; ; i++ {
		f = nextFrame(t, r)
		if one, _ := row(f, liveRouteRow); one.Refused == 1 && one.InUse == 1 {
			break
		}
		if i == 5 {
			t.Fatalf("5 frames after the refusal, none shows it: %+v", f)
		}
	}
	want := livepage.Key{Where: liveRouteRow, Key: "127.0.0.2", InUse: 1, Refused: 1}
	if !slices.Contains(f.Keys, want) {
		t.Errorf("busiest keys: %+v, want %+v among them", f.Keys, want)
	}
	var sum float64
	for _, v := range f.History.Requests {
		sum += v
	}
	if sum != 1 {
		t.Errorf("request refusals in the history: %v in all, want 1: %v", sum, f.History.Requests)
	}

	release()
	d.manualStop = true
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	go func() { _ = d.srv.Shutdown(ctx) }()
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Errorf("the event stream was cut at shutdown rather than ended: %v", err)
	}
	if !waitUntil(func() bool { return liveGoroutines() <= before }) {
		t.Errorf("%d goroutines of the live page left after shutdown, %d before", liveGoroutines(), before)
	}
}

// The page's first response is the whole page, rendered on the server.
func TestLivePageWithoutJavaScript(t *testing.T) {
	d := startDaemon(t, liveConfig)
	refuse(t, d, "127.0.0.2")
	d.waitFor("the refusal sampled", func() bool {
		_, body := adminGet(t, d, livepage.PagePath, "")
		return strings.Contains(body, `data-row="web/route/one"><td class="name">route one</td><td class="bound">1 per client_ip</td><td class="n in-use">1</td><td class="n waiting">0</td>`) &&
			strings.Contains(body, `<td class="n refused">1</td>`)
	})
	// Each route's path, as the daemon logged it at start.
	if _, body := adminGet(t, d, livepage.PagePath, ""); runtime.GOOS == "linux" && !strings.Contains(body, `<small class="path">route one: event_loops</small>`) {
		t.Errorf("the page does not say how route one is served:\n%s", body)
	}
	resp, body := adminGet(t, d, "/", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Refusals per second") {
		t.Errorf("GET / (redirected to the page): %d\n%s", resp.StatusCode, body)
	}
}

// A reload that moves the admin listener ends the old listener's event
// streams (cleanly) and does not wait on them; the new listener serves the
// page.
func TestLiveEventsEndAtAdminMove(t *testing.T) {
	d := startDaemon(t, liveConfig)
	_, r := events(t, d, nil)
	nextFrame(t, r)
	next := strings.Replace(liveConfig, `admin: {listen: "127.0.0.1:0"}`, `admin: {listen: "127.0.0.2:0"}`, 1)
	next = strings.Replace(next, `listen: "127.0.0.1:0"`, `listen: "`+d.srv.Addr("web").String()+`"`, 1)
	if err := d.srv.Reload(parseConfig(t, next, d.backend.URL())); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Errorf("the old admin listener's stream was cut rather than ended: %v", err)
	}
	if !strings.HasPrefix(d.srv.AdminAddr().String(), "127.0.0.2:") {
		t.Fatalf("admin listener on %s after the reload", d.srv.AdminAddr())
	}
	_, r = events(t, d, nil)
	if f := listenersFrame(t, r); len(f.Listeners) != 1 {
		t.Errorf("the new admin listener's frame: %+v", f)
	}
}

// With a cluster, the page shows whether Redis answers a PING and, once
// requests have found it gone, the circuit breakers open.
func TestLivePageRedisHealth(t *testing.T) {
	redis := redistest.Start(t)
	d := startDaemon(t, `admin: {listen: "127.0.0.1:0"}
cluster:
  redis: {addrs: ["`+redis.Addr()+`"]}
  timeout: 2s
  on_error: closed
  local_connection_caps: true # connections are admitted with Redis down
  prefix: "test:`+t.Name()+`:"
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: one
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
`)
	_, r := events(t, d, nil)
	if f := listenersFrame(t, r); f.Redis == nil || !f.Redis.Reachable || f.Redis.OpenBreakers != 0 ||
		!slices.Equal(f.Redis.Addrs, []string{redis.Addr()}) || f.Redis.OnError != "closed" {
		t.Fatalf("Redis up: %+v", f.Redis)
	}
	redis.Stop()
	c := d.client("127.0.0.2")
	for i := 0; ; i++ {
		// Each request fails in Redis and is refused (on_error: closed);
		// five in a row open the breaker (redisstore's default).
		for range 5 {
			if status, _, _ := get(t, c, d.url("web", "/")); status == http.StatusOK {
				t.Fatal("a request was served with Redis down and on_error: closed")
			}
		}
		f := nextFrame(t, r)
		if f.Redis != nil && !f.Redis.Reachable && f.Redis.Error != "" && f.Redis.OpenBreakers == 1 && !f.Redis.OutageSince.IsZero() {
			break
		}
		if i == 5 {
			t.Fatalf("5 frames with Redis down, none shows it: %+v", f.Redis)
		}
	}
}

// An http3 listener shows its QUIC admission, and its clients' connections
// like a TCP listener's.
func TestLivePageQUIC(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: tls
    protocol: https
    listen: "127.0.0.1:0"
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
    routes:
      - upstreams: ["{{backend}}"]
  - name: quic
    protocol: http3
    listen: "127.0.0.1:0"
    max_conns_per_client: 1
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
    routes_from: tls
`)
	c, _ := h3Client(t, "127.0.0.2", pool)
	if status, _, _ := get(t, c, "https://"+d.srv.Addr("quic").String()+"/"); status != http.StatusOK {
		t.Fatalf("HTTP/3 request: %d", status)
	}
	_, r := events(t, d, nil)
	for i := 0; ; i++ {
		f := listenersFrame(t, r)
		quic, _ := row(f, "quic")
		want := livepage.Key{Where: "quic connections", Key: "127.0.0.2", InUse: 1}
		if len(f.QUIC) == 1 && quic.InUse == 1 && slices.Contains(f.Keys, want) {
			q := f.QUIC[0]
			if q.Listener != "quic" || q.Threshold <= 0 || q.MaxInProgress <= q.Threshold || q.InProgress != 0 {
				t.Errorf("QUIC admission: %+v", q)
			}
			if quic.Limit != "1 connection per client, routes of tls" {
				t.Errorf("the http3 listener's bound: %q", quic.Limit)
			}
			break
		}
		if i == 5 {
			t.Fatalf("5 frames without the QUIC connection: %+v", f)
		}
	}
}
