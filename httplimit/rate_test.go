package httplimit_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/doctest"
	"github.com/seed-a07d1050/portcullis/internal/testcert"
	"github.com/seed-a07d1050/portcullis/limit/limittest"
	"github.com/seed-a07d1050/portcullis/rate"
)

func TestRateConfigFieldsDocumentZero(t *testing.T) {
	doctest.ZeroValuesDocumented(t, "rateconfig.go", reflect.TypeFor[httplimit.RateConfig]())
}

func TestRateConfigErrors(t *testing.T) {
	ok := httplimit.RateConfig{Rate: rate.PerSecond(1)}
	for name, mod := range map[string]func(*httplimit.RateConfig){
		"no rate":     func(c *httplimit.RateConfig) { c.Rate = rate.Rate{} },
		"burst":       func(c *httplimit.RateConfig) { c.Burst = -1 },
		"delay":       func(c *httplimit.RateConfig) { c.Delay = -2 },
		"status":      func(c *httplimit.RateConfig) { c.Status = 200 },
		"headers":     func(c *httplimit.RateConfig) { c.Headers = 7 },
		"policy name": func(c *httplimit.RateConfig) { c.PolicyName = "é" },
		"override":    func(c *httplimit.RateConfig) { c.Overrides = map[string]rate.Limit{"x": {}} },
		"empty key":   func(c *httplimit.RateConfig) { c.Overrides = map[string]rate.Limit{"": {Rate: rate.PerSecond(1)}} },
	} {
		cfg := ok
		mod(&cfg)
		if l, err := httplimit.NewRate(cfg); err == nil {
			l.Close()
			t.Errorf("%s: NewRate succeeded", name)
		} else if !strings.HasPrefix(err.Error(), "httplimit: ") {
			t.Errorf("%s: error %q lacks the package prefix", name, err)
		}
	}
}

// newRate builds a RateLimiter on a fake clock, closed with the test.
func newRate(t *testing.T, cfg httplimit.RateConfig) (*httplimit.RateLimiter, *limittest.Clock) {
	t.Helper()
	clock := limittest.NewClock()
	cfg.Clock = clock
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	l, err := httplimit.NewRate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, clock
}

func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
}

func get(t *testing.T, c *http.Client, url string) *http.Response {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

// Over the rate, a client gets 429 with Retry-After and the RateLimit
// fields computed from its state; another client is unaffected.
func TestRateRefusesWithHeaders(t *testing.T) {
	l, clock := newRate(t, httplimit.RateConfig{Rate: rate.PerSecond(2), Burst: 3, Delay: rate.NoDelay})
	ts := startServer(t, l.Wrap(okHandler()))
	a, b := clientFrom(t, "127.0.0.21"), clientFrom(t, "127.0.0.22")
	for i := range 4 {
		if resp := get(t, a, ts.URL); resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") != "" {
			t.Fatalf("request %d: %s, RateLimit %q", i, resp.Status, resp.Header.Get("RateLimit"))
		}
	}
	clock.Advance(200 * time.Millisecond)
	resp := get(t, a, ts.URL)
	// State: 4 requests at 0 put the TAT 2 s ahead; 200 ms later it is
	// 1.8 s ahead and a fifth needs it at most 1.5 s ahead: retry in 300 ms.
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("fifth request: %s", resp.Status)
	}
	for field, want := range map[string]string{
		"Retry-After":      "1",
		"Ratelimit-Policy": `"default";q=4;w=2`,
		"Ratelimit":        `"default";r=0;t=1`,
	} {
		if got := resp.Header.Get(field); got != want {
			t.Errorf("%s: %q, want %q", field, got, want)
		}
	}
	if resp := get(t, b, ts.URL); resp.StatusCode != http.StatusOK {
		t.Fatalf("other client: %s", resp.Status)
	}
	clock.Advance(300 * time.Millisecond)
	if resp := get(t, a, ts.URL); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the retry time: %s", resp.Status)
	}
	if tot := l.Totals(); tot.Admitted != 6 || tot.Refused != 1 || tot.Keys != 2 {
		t.Fatalf("totals %+v", tot)
	}
}

// The fields follow the real state, with RateHeadersAlways on admitted
// responses too.
func TestRateHeadersFollowState(t *testing.T) {
	l, clock := newRate(t, httplimit.RateConfig{Rate: rate.PerMinute(6), Burst: 2, Delay: rate.NoDelay,
		Headers: httplimit.RateHeadersAlways, PolicyName: `per "min"`})
	ts := startServer(t, l.Wrap(okHandler()))
	c := clientFrom(t, "127.0.0.23")
	want := []string{`"per \"min\"";r=2;t=10`, `"per \"min\"";r=1;t=10`, `"per \"min\"";r=0;t=10`}
	for i, w := range want {
		resp := get(t, c, ts.URL)
		if got := resp.Header.Get("RateLimit"); resp.StatusCode != 200 || got != w {
			t.Fatalf("request %d: %s RateLimit %q, want %q", i, resp.Status, got, w)
		}
		if got := resp.Header.Get("RateLimit-Policy"); got != `"per \"min\"";q=3;w=30` {
			t.Fatalf("policy %q", got)
		}
	}
	clock.Advance(4 * time.Second)
	resp := get(t, c, ts.URL)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "6" || resp.Header.Get("RateLimit") != `"per \"min\"";r=0;t=6` {
		t.Fatalf("refusal %s %v", resp.Status, resp.Header)
	}
	clock.Advance(16 * time.Second) // 20 s in: the TAT is 10 s ahead; one more puts it 20 s ahead
	if got := get(t, c, ts.URL).Header.Get("RateLimit"); got != `"per \"min\"";r=1;t=10` {
		t.Fatalf("after 20s: %q", got)
	}
}

// A delayed request waits on its own goroutine; a client that leaves while
// delayed gives its place back, so the next request waits as if it had
// never come.
func TestRateDelayAndClientLeaves(t *testing.T) {
	l, clock := newRate(t, httplimit.RateConfig{Rate: rate.PerSecond(10), Burst: 5})
	var served sync.WaitGroup
	ts := startServer(t, l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		defer served.Done()
		_, _ = io.WriteString(w, "ok")
	})))
	c := clientFrom(t, "127.0.0.24")
	served.Add(1)
	get(t, c, ts.URL) // at once: TAT 100 ms ahead

	// The second waits 100 ms of the fake clock.
	served.Add(1)
	done := make(chan int, 1)
	go func() { done <- get(t, c, ts.URL).StatusCode }()
	waitFor(t, "the delayed request's timer", func() bool { return clock.Timers() >= 2 })
	select {
	case <-done:
		t.Fatal("the delayed request did not wait")
	case <-time.After(50 * time.Millisecond):
	}
	clock.Advance(100 * time.Millisecond)
	if st := <-done; st != 200 {
		t.Fatalf("delayed request %d", st)
	}

	// The third would wait 100 ms too; its client hangs up meanwhile.
	ctx, cancel := context.WithCancel(context.Background())
	leaver := clientFrom(t, "127.0.0.24")
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL, nil)
		if resp, err := leaver.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, "the leaver's timer", func() bool { return clock.Timers() >= 2 })
	cancel()
	waitFor(t, "the leaver's place given back", func() bool { return l.Totals().Cancelled == 1 })

	served.Add(1)
	go func() { done <- get(t, c, ts.URL).StatusCode }()
	waitFor(t, "the next request's timer", func() bool { return clock.Timers() >= 2 })
	clock.Advance(100 * time.Millisecond) // the leaver's place: 100 ms, not 200
	if st := <-done; st != 200 {
		t.Fatalf("next request %d", st)
	}
	served.Wait()
	if tot := l.Totals(); tot.Admitted != 1 || tot.Delayed != 3 || tot.Cancelled != 1 {
		t.Fatalf("totals %+v", tot)
	}
}

// Shadow mode lets everything through at once and reports what enforcing
// would have done.
func TestRateShadow(t *testing.T) {
	var mu sync.Mutex
	var reasons []error
	l, _ := newRate(t, httplimit.RateConfig{Rate: rate.PerSecond(1), Burst: 1, Shadow: true,
		OnReject: func(_ string, _ *http.Request, _ rate.Decision, err error) {
			mu.Lock()
			reasons = append(reasons, err)
			mu.Unlock()
		}})
	ts := startServer(t, l.Wrap(okHandler()))
	c := clientFrom(t, "127.0.0.25")
	for i := range 3 {
		if resp := get(t, c, ts.URL); resp.StatusCode != 200 {
			t.Fatalf("request %d: %s", i, resp.Status)
		}
	}
	if len(reasons) != 2 || !errors.Is(reasons[0], httplimit.ErrShadowDelayed) || !errors.Is(reasons[1], httplimit.ErrShadowRefused) {
		t.Fatalf("reasons %v", reasons)
	}
	if tot := l.Totals(); tot.Admitted != 1 || tot.ShadowDelayed != 1 || tot.ShadowRefused != 1 {
		t.Fatalf("totals %+v", tot)
	}
}

// Per-key overrides, and requests with an empty key go unlimited.
func TestRateOverridesAndEmptyKey(t *testing.T) {
	l, _ := newRate(t, httplimit.RateConfig{Rate: rate.PerSecond(1), Delay: rate.NoDelay,
		Key:       mustKey(httplimit.ByHeader("X-User")),
		Overrides: map[string]rate.Limit{"batch": {Rate: rate.PerSecond(1), Burst: 4, Delay: rate.NoDelay}}})
	ts := startServer(t, l.Wrap(okHandler()))
	c := clientFrom(t, "127.0.0.26")
	count := func(user string) int {
		ok := 0
		for range 10 {
			req, _ := http.NewRequest(http.MethodGet, ts.URL, nil)
			if user != "" {
				req.Header.Set("X-User", user)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == 200 {
				ok++
			}
		}
		return ok
	}
	if a, b, anon := count("alice"), count("batch"), count(""); a != 1 || b != 5 || anon != 10 {
		t.Fatalf("alice %d, batch %d, anonymous %d", a, b, anon)
	}
}

// Over HTTP/2 every stream is one request of the connection's client.
func TestRateOverHTTP2(t *testing.T) {
	l, _ := newRate(t, httplimit.RateConfig{Rate: rate.PerMinute(1), Burst: 2, Delay: rate.NoDelay})
	ts, conns := startTLSServer(t, l.Wrap(okHandler()))
	c := h2ClientFrom(t, ts, "127.0.0.27")
	var codes []int
	for range 5 {
		resp := get(t, c, ts.URL)
		if resp.ProtoMajor != 2 {
			t.Fatalf("protocol %s", resp.Proto)
		}
		codes = append(codes, resp.StatusCode)
	}
	if !reflect.DeepEqual(codes, []int{200, 200, 200, 429, 429}) || conns.Load() != 1 {
		t.Fatalf("codes %v over %d connections", codes, conns.Load())
	}
}

// Over HTTP/3 alike: the middleware is an http.Handler.
func TestRateOverHTTP3(t *testing.T) {
	l, _ := newRate(t, httplimit.RateConfig{Rate: rate.PerMinute(1), Burst: 1, Delay: rate.NoDelay})
	cert, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http3.Server{
		Handler:   l.Wrap(okHandler()),
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert.TLS}}),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(udp) }()
	defer func() {
		_ = srv.Close()
		<-served
	}()
	rt := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: cert.Pool, NextProtos: []string{http3.NextProtoH3}}, QUICConfig: &quic.Config{}}
	defer rt.Close()
	c := &http.Client{Transport: rt, Timeout: waitLimit}
	var codes []int
	for range 3 {
		resp := get(t, c, "https://"+udp.LocalAddr().String()+"/")
		if resp.ProtoMajor != 3 {
			t.Fatalf("protocol %s", resp.Proto)
		}
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After over HTTP/3")
		}
	}
	if !reflect.DeepEqual(codes, []int{200, 200, 429}) {
		t.Fatalf("codes %v", codes)
	}
}

// A custom Reject gets the decision with the key's state.
func TestRateCustomReject(t *testing.T) {
	l, _ := newRate(t, httplimit.RateConfig{Rate: rate.PerSecond(4), Status: 503,
		Reject: func(w http.ResponseWriter, _ *http.Request, key string, d rate.Decision, err error) {
			if !errors.Is(err, rate.ErrLimited) || d.RetryAfter != 250*time.Millisecond || key != "127.0.0.28" {
				w.WriteHeader(500)
				return
			}
			w.WriteHeader(418)
		}})
	ts := startServer(t, l.Wrap(okHandler()))
	c := clientFrom(t, "127.0.0.28")
	get(t, c, ts.URL)
	if resp := get(t, c, ts.URL); resp.StatusCode != 418 {
		t.Fatalf("custom refusal %s", resp.Status)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Over HTTP/2, a delayed request whose stream the client resets gives its
// place back, and the connection lives on.
func TestRateHTTP2StreamResetGivesPlaceBack(t *testing.T) {
	l, clock := newRate(t, httplimit.RateConfig{Rate: rate.PerSecond(10), Burst: 5})
	ts, conns := startTLSServer(t, l.Wrap(okHandler()))
	c := h2ClientFrom(t, ts, "127.0.0.29")
	get(t, c, ts.URL) // at once
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL, nil)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, "the delayed stream's timer", func() bool { return clock.Timers() >= 2 })
	cancel()
	<-done
	waitFor(t, "the reset stream's place given back", func() bool { return l.Totals().Cancelled == 1 })
	// The next request waits 100 ms, not 200: the reset one is gone.
	next := make(chan int, 1)
	go func() { next <- get(t, c, ts.URL).StatusCode }()
	waitFor(t, "the next request's timer", func() bool { return clock.Timers() >= 2 })
	clock.Advance(100 * time.Millisecond)
	if st := <-next; st != 200 || conns.Load() != 1 {
		t.Fatalf("next request %d over %d connections", st, conns.Load())
	}
}

// OnAdmit is told of each request let through, with its writer and its
// decision: at once, delayed (with the delay it waited), or over the rate
// in shadow mode; a refused request is not admitted.
func TestRateOnAdmit(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  httplimit.RateConfig
		want []rate.Verdict // of the requests sent one after the other; Refused: not admitted
	}{
		// The second comes well within the second the first took: it waits
		// for the rest of it.
		{"delayed", httplimit.RateConfig{Rate: rate.PerSecond(1), Burst: 1}, []rate.Verdict{rate.Admitted, rate.Delayed}},
		{"refused", httplimit.RateConfig{Rate: rate.PerMinute(1), Burst: 0, Delay: rate.NoDelay}, []rate.Verdict{rate.Admitted, rate.Refused}},
		{"shadow", httplimit.RateConfig{Rate: rate.PerMinute(1), Burst: 0, Delay: rate.NoDelay, Shadow: true}, []rate.Verdict{rate.Admitted, rate.ShadowRefused, rate.ShadowRefused}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []rate.Verdict
			var delays []time.Duration
			cfg := tt.cfg
			cfg.Logger = quietLogger()
			cfg.OnAdmit = func(w http.ResponseWriter, r *http.Request, key string, d rate.Decision) {
				if w == nil || r == nil || key != "127.0.0.23" {
					t.Errorf("OnAdmit(%v, %v, %q)", w, r, key)
				}
				mu.Lock()
				got, delays = append(got, d.Verdict), append(delays, d.Delay)
				mu.Unlock()
			}
			l, err := httplimit.NewRate(cfg) // the real clock: a delayed request waits
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			ts := startServer(t, l.Wrap(okHandler()))
			c := clientFrom(t, "127.0.0.23")
			for range tt.want {
				get(t, c, ts.URL)
			}
			mu.Lock()
			defer mu.Unlock()
			var want []rate.Verdict
			for _, v := range tt.want {
				if v != rate.Refused {
					want = append(want, v)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("OnAdmit saw %v, want %v", got, want)
			}
			for i, v := range got {
				if (v == rate.Delayed) != (delays[i] > 0) {
					t.Errorf("verdict %v with delay %v", v, delays[i])
				}
			}
		})
	}
}

// TryAdmit admits quietly what may proceed at once; a request it leaves
// goes through the handler, which refuses it and counts that once. A
// RateLimiter that sends its fields with every answer takes nothing
// quietly, and one whose Key gives "" applies to nothing.
func TestRateTryAdmit(t *testing.T) {
	l, _ := newRate(t, httplimit.RateConfig{Rate: rate.PerSecond(1)})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:5000"
	if key, ok := l.Admits(r); !ok || key != "192.0.2.1" || l.Totals().Admitted != 0 {
		t.Fatalf("Admits before the first request: key %q, %v, totals %+v", key, ok, l.Totals())
	}
	if key, ok := l.TryAdmit(r); !ok || key != "192.0.2.1" {
		t.Fatalf("first request: key %q, admitted %v", key, ok)
	}
	if _, ok := l.Admits(r); ok {
		t.Fatal("Admits says yes to a second request within the second")
	}
	if _, ok := l.TryAdmit(r); ok {
		t.Fatal("second request within the second admitted quietly")
	}
	if tot := l.Totals(); tot.Admitted != 1 || tot.Refused != 0 {
		t.Fatalf("after one quiet admission and one quiet refusal: %+v", tot)
	}
	w := httptest.NewRecorder()
	l.Wrap(okHandler()).ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("the handler answered %d to the request left to it, want 429", w.Code)
	}
	if tot := l.Totals(); tot.Admitted != 1 || tot.Refused != 1 {
		t.Fatalf("after the handler: %+v, want one admission and one refusal", tot)
	}

	always, _ := newRate(t, httplimit.RateConfig{Rate: rate.PerSecond(100), Headers: httplimit.RateHeadersAlways})
	if _, ok := always.TryAdmit(r); ok || always.Totals().Admitted != 0 {
		t.Error("a RateLimiter sending its fields with every answer admitted quietly")
	}
	none, _ := newRate(t, httplimit.RateConfig{Rate: rate.PerSecond(1), Key: func(*http.Request) string { return "" }})
	for range 3 {
		if key, ok := none.TryAdmit(r); !ok || key != "" {
			t.Fatalf("a request the rate does not apply to: key %q, admitted %v", key, ok)
		}
	}
}
