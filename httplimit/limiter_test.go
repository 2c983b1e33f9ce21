package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/limit/limittest"
)

// TestLimitExactPerKey sends more concurrent requests than the limit from
// several client addresses at once: each address gets exactly its permits
// (3, or 5 by override), the rest get 429, and no address affects another.
func TestLimitExactPerKey(t *testing.T) {
	const permits, perClient = 3, 8
	overrides := map[string]int{"127.0.0.5": 5}
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: permits, Overrides: overrides}})
	g := newGate()
	ts := startServer(t, l.Wrap(g))

	clients := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}
	want := map[string]int{"127.0.0.2": 3, "127.0.0.3": 3, "127.0.0.4": 3, "127.0.0.5": 5}
	var mu sync.Mutex
	refused := map[string]int{}
	var wg sync.WaitGroup
	for _, ip := range clients {
		c := clientFrom(t, ip)
		for i := range perClient {
			wg.Go(func() {
				code, err := getStatus(t.Context(), c, fmt.Sprintf("%s/?id=%s-%d", ts.URL, ip, i))
				if err != nil {
					t.Errorf("%s: %v", ip, err)
					return
				}
				if code == http.StatusTooManyRequests {
					mu.Lock()
					refused[ip]++
					mu.Unlock()
				} else if code != http.StatusOK {
					t.Errorf("%s: status %d", ip, code)
				}
			})
		}
	}
	// Every admitted request blocks in the gate; every other one is refused.
	admitted := map[string]int{}
	for range 3 + 3 + 3 + 5 {
		id := g.next(t)
		admitted[id[:strings.IndexByte(id, '-')]]++
	}
	waitFor(t, "every other request to be refused", func() bool {
		return l.Totals().Refused == uint64(len(clients)*perClient-14)
	})
	for _, ip := range clients {
		if got := admitted[ip]; got != want[ip] {
			t.Errorf("%s: %d admitted, want %d", ip, got, want[ip])
		}
	}
	if tot := l.Totals(); tot.InUse != 14 || tot.Keys != 4 {
		t.Errorf("totals while held: %+v, want 14 in use over 4 keys", tot)
	}
	close(g.release)
	wg.Wait()
	for _, ip := range clients {
		if got := refused[ip]; got != perClient-want[ip] {
			t.Errorf("%s: %d refused, want %d", ip, got, perClient-want[ip])
		}
	}
	expectIdle(t, l)
	if overrides["127.0.0.5"] != 5 || len(overrides) != 1 {
		t.Errorf("caller's Overrides changed: %v", overrides)
	}
}

// TestConcurrencyNeverExceeded hammers the server from three addresses
// and checks, inside the handler, that no key ever runs more than its
// permits at once.
func TestConcurrencyNeverExceeded(t *testing.T) {
	const permits, workers, rounds = 2, 6, 15
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: permits, QueueSize: workers}})
	var mu sync.Mutex
	inFlight, peak := map[string]int{}, map[string]int{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip := r.RemoteAddr[:strings.LastIndexByte(r.RemoteAddr, ':')]
		mu.Lock()
		inFlight[ip]++
		peak[ip] = max(peak[ip], inFlight[ip])
		mu.Unlock()
		time.Sleep(100 * time.Microsecond)
		mu.Lock()
		inFlight[ip]--
		mu.Unlock()
	})
	ts := startServer(t, l.Wrap(h))
	var wg sync.WaitGroup
	var ok atomic.Int64
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		c := clientFrom(t, ip)
		for range workers {
			wg.Go(func() {
				for range rounds {
					code, err := getStatus(t.Context(), c, ts.URL)
					if err != nil || code != http.StatusOK {
						t.Errorf("%s: %d %v", ip, code, err)
						return
					}
					ok.Add(1)
				}
			})
		}
	}
	wg.Wait()
	for ip, p := range peak {
		if p > permits {
			t.Errorf("%s: %d exchanges at once, limit %d", ip, p, permits)
		}
	}
	if ok.Load() != 3*workers*rounds {
		t.Errorf("%d requests served, want %d (all wait in the queue)", ok.Load(), 3*workers*rounds)
	}
	expectIdle(t, l)
}

// holdOne starts a request that enters g and stays there.
func holdOne(t *testing.T, c *http.Client, url string, g *gate) <-chan int {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		code, _ := getStatus(t.Context(), c, url)
		done <- code
	}()
	g.next(t)
	return done
}

func TestQueueFIFO(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1, QueueSize: 3}})
	g := newGate()
	ts := startServer(t, l.Wrap(g))
	c := clientFrom(t, "127.0.0.2")
	first := holdOne(t, c, ts.URL+"/?id=a", g)
	var codes []<-chan int
	for i, id := range []string{"b", "c", "d"} {
		done := make(chan int, 1)
		go func() {
			code, _ := getStatus(t.Context(), c, ts.URL+"/?id="+id)
			done <- code
		}()
		codes = append(codes, done)
		waitFor(t, id+" to wait", func() bool { return l.Totals().Waiting == i+1 })
	}
	var order []string
	for range 3 {
		g.release <- struct{}{}
		order = append(order, g.next(t))
	}
	g.release <- struct{}{}
	if got := strings.Join(order, ""); got != "bcd" {
		t.Errorf("admitted in order %q, want bcd", got)
	}
	for _, done := range append(codes, first) {
		if code := <-done; code != http.StatusOK {
			t.Errorf("status %d, want 200", code)
		}
	}
	expectIdle(t, l)
}

func TestQueueTimeoutAndFull(t *testing.T) {
	clock := limittest.NewClock()
	var mu sync.Mutex
	var events []string
	l := newLimiter(t, httplimit.Config{
		Policy: httplimit.Policy{
			Permits:      1,
			QueueSize:    1,
			QueueTimeout: 2 * time.Second,
			ReclaimAfter: -1,
		},
		RetryAfter: 1500 * time.Millisecond, Clock: clock,
		Observer: limit.ObserverFunc[string](func(e limit.Event[string]) {
			mu.Lock()
			events = append(events, fmt.Sprintf("%s %s %v", e.Kind, e.Key, e.Wait))
			mu.Unlock()
		}),
	})
	g := newGate()
	ts := startServer(t, l.Wrap(g))
	c := clientFrom(t, "127.0.0.2")
	held := holdOne(t, c, ts.URL, g)

	waiting := make(chan *http.Response, 1)
	go func() {
		resp, err := c.Get(ts.URL)
		if err != nil {
			t.Error(err)
			resp = &http.Response{}
		}
		waiting <- resp
	}()
	waitFor(t, "the second request to wait", func() bool { return l.Totals().Waiting == 1 && clock.Timers() == 1 })

	// The queue holds one: a third request is refused at once.
	resp, err := c.Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "2" {
		t.Errorf("queue full: %d Retry-After %q, want 429 and 2", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	clock.Advance(2 * time.Second)
	select {
	case resp := <-waiting:
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("wait limit: status %d, want 429", resp.StatusCode)
		}
	case <-time.After(waitLimit):
		t.Fatal("the waiting request was not refused at its wait limit")
	}
	tot := l.Totals()
	if tot.QueueFull != 1 || tot.QueueTimeouts != 1 || tot.Waiting != 0 || tot.InUse != 1 {
		t.Errorf("totals %+v, want 1 queue full, 1 timeout, 1 in use", tot)
	}
	mu.Lock()
	got := strings.Join(events, ", ")
	mu.Unlock()
	if want := "granted 127.0.0.2 0s, queue_full 127.0.0.2 0s, queue_timeout 127.0.0.2 2s"; got != want {
		t.Errorf("observed %s, want %s", got, want)
	}
	g.release <- struct{}{}
	<-held
	expectIdle(t, l)
}

func TestCancelWhileWaiting(t *testing.T) {
	var rejected atomic.Value
	l := newLimiter(t, httplimit.Config{
		Policy: httplimit.Policy{
			Permits:   1,
			QueueSize: 4,
		},
		OnReject: func(key string, r *http.Request, err error) { rejected.Store(err) },
	})
	g := newGate()
	ts := startServer(t, l.Wrap(g))
	c := clientFrom(t, "127.0.0.2")
	held := holdOne(t, c, ts.URL, g)

	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := getStatus(ctx, c, ts.URL)
		errc <- err
	}()
	waitFor(t, "the request to wait", func() bool { return l.Totals().Waiting == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("client error %v, want context.Canceled", err)
	}
	// The server sees the connection close and the waiter leaves at once,
	// though the permit is still held.
	waitFor(t, "the waiter to leave", func() bool { return l.Totals().Abandoned == 1 })
	if tot := l.Totals(); tot.Waiting != 0 || tot.InUse != 1 {
		t.Errorf("after cancel: %+v", tot)
	}
	if err, _ := rejected.Load().(error); !errors.Is(err, context.Canceled) {
		t.Errorf("OnReject got %v, want context.Canceled", err)
	}
	g.release <- struct{}{}
	<-held
	expectIdle(t, l)
}

// TestScopeModLimitIPConn is the mod_limitipconn pitfall: with a limit of 3
// on /hoge, a client holding three slow downloads on /fuga still gets its
// /hoge request, because a Limiter counts only what passes through it. A
// server-wide limit is an explicit outer middleware, and that one refuses.
func TestScopeModLimitIPConn(t *testing.T) {
	hoge := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 3}})
	server := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 3}})
	g := newGate()
	mux := http.NewServeMux()
	mux.Handle("/fuga/", g)
	mux.Handle("/hoge/", hoge.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hoge")
	})))
	scoped := startServer(t, mux)
	serverWide := startServer(t, server.Wrap(mux))

	for _, tc := range []struct {
		name string
		url  string
		want int
	}{
		{"limit on /hoge only", scoped.URL, http.StatusOK},
		{"server-wide outer limit", serverWide.URL, http.StatusTooManyRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clientFrom(t, "127.0.0.2")
			var downloads []<-chan int
			for i := range 3 {
				downloads = append(downloads, holdOne(t, c, fmt.Sprintf("%s/fuga/video%d.mp4", tc.url, i), g))
			}
			code, err := getStatus(t.Context(), c, tc.url+"/hoge/index.cgi")
			if err != nil || code != tc.want {
				t.Errorf("/hoge while 3 downloads run: %d %v, want %d", code, err, tc.want)
			}
			for range downloads {
				g.release <- struct{}{}
			}
			for _, d := range downloads {
				<-d
			}
		})
	}
	if tot := hoge.Totals(); tot.Granted != 1 || tot.Refused != 0 {
		t.Errorf("/hoge limiter totals %+v: it must count the /hoge request only", tot)
	}
	if tot := server.Totals(); tot.Granted != 3 || tot.Refused != 1 {
		t.Errorf("server-wide totals %+v, want 3 granted, 1 refused", tot)
	}
	expectIdle(t, hoge)
	expectIdle(t, server)
}

// TestShadowBesideEnforced runs a stricter shadow limit (1) inside the
// enforced one (2) on the same route: each keeps its own counts.
func TestShadowBesideEnforced(t *testing.T) {
	var shadowReports atomic.Int64
	enforced := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 2}})
	shadow := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{
		Permits: 1,
		Shadow:  true,
	},
		OnReject: func(key string, r *http.Request, err error) {
			if key == "127.0.0.2" && errors.Is(err, httplimit.ErrShadowRefused) && !errors.Is(err, limit.ErrLimited) {
				shadowReports.Add(1)
			}
		}})
	g := newGate()
	ts := startServer(t, enforced.Wrap(shadow.Wrap(g)))
	c := clientFrom(t, "127.0.0.2")
	a := holdOne(t, c, ts.URL, g)
	b := holdOne(t, c, ts.URL, g) // over the shadow limit, let through
	code, _ := getStatus(t.Context(), c, ts.URL)
	if code != http.StatusTooManyRequests {
		t.Errorf("third request: %d, want 429 from the enforced limit", code)
	}
	if s := shadow.Snapshot(0).Exchanges; len(s.Keys) != 1 || s.Keys[0].InUse != 2 || s.Keys[0].Refused != 1 {
		t.Errorf("shadow snapshot %+v, want 2 in use and 1 refusal for the key", s)
	}
	g.release <- struct{}{}
	g.release <- struct{}{}
	<-a
	<-b
	if tot := enforced.Totals(); tot.Granted != 2 || tot.Refused != 1 || tot.ShadowRefused != 0 {
		t.Errorf("enforced totals %+v", tot)
	}
	if tot := shadow.Totals(); tot.Granted != 2 || tot.Refused != 0 || tot.ShadowRefused != 1 {
		t.Errorf("shadow totals %+v", tot)
	}
	if shadowReports.Load() != 1 {
		t.Errorf("OnReject told of %d shadow refusals, want 1", shadowReports.Load())
	}
	expectIdle(t, enforced)
	expectIdle(t, shadow)
}

// OnAdmit is told of every request let through, on its goroutine with its
// writer, before the handler: with how long it queued, and whether it went
// over the limit in shadow mode.
func TestOnAdmit(t *testing.T) {
	type admission struct {
		key      string
		waited   bool
		shadowed bool
	}
	for _, tt := range []struct {
		name string
		cfg  httplimit.Config
		want []admission
	}{
		{"queued", httplimit.Config{Policy: httplimit.Policy{Permits: 1, QueueSize: 1}}, []admission{{"127.0.0.2", false, false}, {"127.0.0.2", true, false}}},
		{"shadow", httplimit.Config{Policy: httplimit.Policy{Permits: 1, Shadow: true}}, []admission{{"127.0.0.2", false, false}, {"127.0.0.2", false, true}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []admission
			cfg := tt.cfg
			cfg.OnAdmit = func(w http.ResponseWriter, r *http.Request, key string, waited time.Duration, shadowed bool) {
				if w == nil || r == nil {
					t.Error("OnAdmit without the writer or the request")
				}
				mu.Lock()
				got = append(got, admission{key, waited > 0, shadowed})
				mu.Unlock()
			}
			l := newLimiter(t, cfg)
			g := newGate()
			ts := startServer(t, l.Wrap(g))
			c := clientFrom(t, "127.0.0.2")
			first := holdOne(t, c, ts.URL, g)
			second := make(chan int, 1)
			go func() {
				code, _ := getStatus(t.Context(), c, ts.URL)
				second <- code
			}()
			if tt.cfg.QueueSize > 0 {
				waitFor(t, "the request to wait", func() bool { return l.Totals().Waiting == 1 })
				g.release <- struct{}{}
				g.next(t)
			} else {
				g.next(t)
				g.release <- struct{}{}
			}
			g.release <- struct{}{}
			if a, b := <-first, <-second; a != http.StatusOK || b != http.StatusOK {
				t.Fatalf("statuses %d and %d, want 200", a, b)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(got, tt.want) {
				t.Fatalf("OnAdmit saw %+v, want %+v", got, tt.want)
			}
			expectIdle(t, l)
		})
	}
}
