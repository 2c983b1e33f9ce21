package livepage

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// waitLimit bounds every wait in these tests.
const waitLimit = 10 * time.Second

// keySource is a daemon with a client key that would break a page that
// did not escape it.
type keySource struct{ fakeSource }

func (k *keySource) LiveState(ctx context.Context) State {
	st := k.fakeSource.LiveState(ctx)
	l := &st.Listeners[0]
	l.Protocol, l.Addr, l.Limit, l.InUse, l.Waiting = "http", "127.0.0.1:8080", "16 connections per client", 5, 1
	l.Limits[0].Limit = "4 per client_ip, queue 4 for 2s"
	st.Keys = []Key{{Where: "web connections", Key: `<script>alert(1)</script>`, InUse: 3}}
	st.QUIC = []QUIC{{Listener: "quic", InProgress: 7, Threshold: 256, MaxInProgress: 16384, RetryOn: true}}
	st.Redis = &Redis{Addrs: []string{"10.0.0.1:6379"}, OnError: "open", Reachable: true, PingMillis: 0.4}
	l.Requests = &Requests{Total: 57, Classes: []Count{{Name: "1xx"}, {Name: "2xx", Count: 40}, {Name: "3xx", Count: 1},
		{Name: "4xx", Count: 12}, {Name: "499", Count: 3}, {Name: "5xx", Count: 1}}}
	st.Upstream = []UpstreamErrors{{ID: "web/slow/timeout", Listener: "web", Route: "slow", Kind: "timeout", Count: 9}}
	st.Shadow = []Shadow{{ID: "web/route/slow/shadow", Name: "route slow shadow_limit", Limit: "2 per client_ip", WouldRefuse: 6}}
	return st
}

// serve serves the page and the event stream of s on a loopback socket;
// active counts the event streams being served.
func serve(t *testing.T, s *Sampler) (url string, active *atomic.Int64) {
	t.Helper()
	active = new(atomic.Int64)
	mux := http.NewServeMux()
	mux.Handle("GET "+PagePath+"{$}", Page(s, slog.New(slog.DiscardHandler)))
	events := Events(s)
	mux.Handle("GET "+EventsPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		active.Add(1)
		defer active.Add(-1)
		events.ServeHTTP(w, r)
	}))
	mux.Handle("GET "+AssetsPath, Assets())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL, active
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// The first response is the whole page, numbers included, with what comes
// from clients escaped; the assets are embedded.
func TestPageIsRenderedOnTheServer(t *testing.T) {
	src := &keySource{}
	src.set(12, 34)
	s := NewSampler(src, time.Hour)
	defer s.Close()
	url, _ := serve(t, s)
	resp, body := get(t, url+PagePath)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s: %d %s", PagePath, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`<tr class="listener" data-row="web">`,
		`<td class="n refused">12</td>`,
		`data-row="web/route/slow"`,
		`<td class="n refused">34</td>`,
		`&lt;script&gt;alert(1)&lt;/script&gt;`,
		`reachable</span>, PING 0.4 ms`,
		`<td>quic</td><td class="n">7</td><td class="n">256</td><td class="n">16384</td><td>on</td>`,
		`/live/assets/live.js`,
		`<td class="n total">57</td><td class="n c2xx"><span class="count">40</span> <small>0/s</small></td>`,
		`<td class="n c499"><span class="count">3</span> <small>0/s</small></td><td class="n c5xx"><span class="count">1</span>`,
		`<tr data-row="web/slow/timeout"><td class="name">web / slow</td><td class="kind">timeout</td><td class="n per-sec">0</td><td class="n count">9</td></tr>`,
		`<tr data-row="web/route/slow/shadow"><td class="name">route slow shadow_limit</td><td class="bound">2 per client_ip</td><td class="n per-sec">0</td><td class="n count">6</td></tr>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "<script>alert") {
		t.Errorf("a client key reached the page unescaped")
	}
	for _, asset := range []string{"live.js", "live.css"} {
		if resp, body := get(t, url+AssetsPath+asset); resp.StatusCode != http.StatusOK || len(body) < 500 {
			t.Errorf("GET %s: %d, %d bytes", asset, resp.StatusCode, len(body))
		}
	}
}

// readEvent reads the next event of an event stream and decodes its
// frame.
func readEvent(t *testing.T, r *bufio.Reader) Frame {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("event stream: %v", err)
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var f Frame
		if err := json.Unmarshal([]byte(data), &f); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		return f
	}
}

func openEvents(t *testing.T, ctx context.Context, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+EventsPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("GET %s: %d %s", EventsPath, resp.StatusCode, ct)
	}
	return resp
}

// The event stream sends the latest frame at once, then each new one; it
// ends cleanly (the response complete, not cut) when the Sampler closes.
func TestEventsFollowTheSampler(t *testing.T) {
	src := &fakeSource{}
	s := NewSampler(src, 20*time.Millisecond)
	url, active := serve(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	resp := openEvents(t, ctx, url)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if f := readEvent(t, r); !f.Time.IsZero() && len(f.Listeners) != 1 {
		t.Fatalf("first event: %+v", f) // may be the empty frame before the first sample
	}
	src.set(0, 9)
	for i := 0; ; i++ {
		if f := readEvent(t, r); len(f.Listeners) == 1 && f.Listeners[0].Limits[0].Refused == 9 {
			break
		}
		if i == 100 {
			t.Fatal("no event showed the new count in 100 events")
		}
	}
	s.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Errorf("the stream did not end cleanly at Close: %v", err)
	}
	waitZero(t, active)
}

// A client that goes away ends its stream at once, without waiting for the
// next sample (an hour away here).
func TestEventsEndWhenTheClientGoes(t *testing.T) {
	s := NewSampler(&fakeSource{}, time.Hour)
	defer s.Close()
	url, active := serve(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	resp := openEvents(t, ctx, url)
	readEvent(t, bufio.NewReader(resp.Body))
	if n := active.Load(); n != 1 {
		t.Fatalf("%d streams served, want 1", n)
	}
	cancel()
	resp.Body.Close()
	waitZero(t, active)
}

func waitZero(t *testing.T, n *atomic.Int64) {
	t.Helper()
	if !waitfor.Until(waitLimit, func() bool { return n.Load() == 0 }) {
		t.Fatalf("%d event streams still served", n.Load())
	}
}

// The token form says when a token was wrong.
func TestWriteLogin(t *testing.T) {
	for _, failed := range []bool{false, true} {
		w := httptest.NewRecorder()
		WriteLogin(w, http.StatusUnauthorized, failed, slog.New(slog.DiscardHandler))
		body := w.Body.String()
		if w.Code != http.StatusUnauthorized || !strings.Contains(body, `name="token"`) || !strings.Contains(body, `action="/live/login"`) {
			t.Errorf("form (failed %v): %d\n%s", failed, w.Code, body)
		}
		if got := strings.Contains(body, "not the admin token"); got != failed {
			t.Errorf("form (failed %v) says the token was wrong: %v", failed, got)
		}
	}
}

// chartMax rounds up to a step of the scale times a power of ten; chartPoints puts
// the newest sample on the right edge and clamps to the scale.
func TestChart(t *testing.T) {
	for _, tc := range []struct {
		vals []float64
		want float64
	}{{nil, 1}, {[]float64{0.3}, 1}, {[]float64{1.6}, 2}, {[]float64{3.5}, 4}, {[]float64{7, 20}, 20}, {[]float64{2001}, 2500}, {[]float64{8001}, 10000}} {
		if got := ChartMax(History{Accept: tc.vals}); got != tc.want {
			t.Errorf("chartMax(%v) = %v, want %v", tc.vals, got, tc.want)
		}
	}
	// Three samples over a minute: 900/59 units apart.
	if got, want := ChartPoints([]float64{0, 5, 20}, 10, 61), "870.0,160.0 885.0,82.0 900.0,4.0"; got != want {
		t.Errorf("chartPoints = %q, want %q", got, want)
	}
	if got := ChartPoints(nil, 1, 60); got != "" {
		t.Errorf("chartPoints(nil) = %q", got)
	}
	for _, tc := range []struct {
		samples int
		want    []string
	}{
		{0, []string{"−60 s", "−40 s", "−20 s", "now"}},
		{150, []string{"−150 s", "−100 s", "−50 s", "now"}},
		{HistoryLen + 1, []string{"−15 min", "−10 min", "−5 min", "now"}},
	} {
		if got := XLabels(ChartSpan(tc.samples)); !slices.Equal(got, tc.want) {
			t.Errorf("labels for %d samples: %q, want %q", tc.samples, got, tc.want)
		}
	}
}
