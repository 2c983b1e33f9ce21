package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/admin"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/livepage"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
	"github.com/seed-a07d1050/portcullis/rate"
)

// routeServer is a loopback HTTP server whose requests go through a
// listener rate, then a route limit, into a handler that holds them until
// the test releases them.
type routeServer struct {
	url     string
	lim     *httplimit.Limiter
	shadow  *httplimit.Limiter // never in the chain: idle
	rate    *httplimit.RateLimiter
	release chan struct{}
	wg      sync.WaitGroup
}

func newRouteServer(t *testing.T) *routeServer {
	t.Helper()
	lim, err := httplimit.New(httplimit.Config{Policy: httplimit.Policy{Permits: 2}})
	if err != nil {
		t.Fatal(err)
	}
	shadow, err := httplimit.New(httplimit.Config{Policy: httplimit.Policy{Permits: 1, Shadow: true}})
	if err != nil {
		t.Fatal(err)
	}
	rl, err := httplimit.NewRate(httplimit.RateConfig{Rate: rate.PerSecond(100), Burst: 50})
	if err != nil {
		t.Fatal(err)
	}
	rs := &routeServer{lim: lim, shadow: shadow, rate: rl, release: make(chan struct{})}
	srv := httptest.NewServer(rl.Wrap(lim.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-rs.release
	}))))
	rs.url = srv.URL
	t.Cleanup(func() {
		rs.releaseAll()
		srv.Close()
		for _, l := range []*httplimit.Limiter{lim, shadow} {
			if tot := l.Totals(); tot.InUse != 0 || tot.Waiting != 0 {
				t.Errorf("permits left after the test: %+v", tot)
			}
			_ = l.Close()
		}
		_ = rl.Close()
	})
	return rs
}

func (rs *routeServer) releaseAll() {
	select {
	case <-rs.release:
	default:
		close(rs.release)
	}
	rs.wg.Wait()
}

// send sends a GET from the loopback address ip; held requests answer when
// released. It returns the status once the request was answered or is
// held (the route's limiter counts it).
func (rs *routeServer) send(t *testing.T, ip string, want int) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext,
	}}
	inUse := rs.lim.Totals().InUse
	status := make(chan int, 1)
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		defer c.CloseIdleConnections()
		resp, err := c.Get(rs.url)
		if err != nil {
			status <- 0
			return
		}
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	if want == http.StatusOK {
		waitfor.Cond(t, "the request held", func() bool { return rs.lim.Totals().InUse == inUse+1 })
		return
	}
	if got := <-status; got != want {
		t.Fatalf("GET from %s: %d, want %d", ip, got, want)
	}
}

// listeners returns the listeners of the tests' daemon: web (an http
// listener holding two connections, with the route server's limits) and
// more (routes of web, no table of its own).
func (rs *routeServer) listeners(t *testing.T) []admin.Listener {
	web := &config.Listener{Name: "web", Protocol: config.ProtocolHTTP, MaxConnsPerClient: 4, MaxConns: 100}
	more := &config.Listener{Name: "more", Protocol: config.ProtocolHTTP, MaxConnsPerClient: config.Unlimited, RoutesFrom: "web"}
	return []admin.Listener{
		{
			Config: web, Addr: "127.0.0.1:8080", Conns: connListener(t, 4, 2),
			Table: &admin.Table{
				Rate: &admin.Rate{Config: config.Rate{Rate: config.PerSecondRate(100), Burst: 50, DryRun: true}, Limiter: rs.rate},
				Routes: []admin.Route{{
					Name: "api", Path: config.PathLean,
					Planned: &config.RoutePath{Path: config.PathFull, Why: "rate block"},
					Limit:   &admin.Limit{Config: config.Limit{Permits: 2, Queue: config.Queue{Size: 3, Timeout: time.Second}}, Limiter: rs.lim},
					Shadow:  &admin.Limit{Config: config.Limit{Key: config.KeyClientIP, Permits: 1, Shadow: true}, Limiter: rs.shadow},
				}},
			},
		},
		{Config: more, Addr: "127.0.0.1:8081", Conns: connListener(t, 1, 0)},
	}
}

// /debug/limits serves the snapshot of every listener: connections and
// their busiest clients, each route's limits with their busiest keys
// (busiest first, refusals counted), and rates. InUse sums what is held;
// once the requests end it is zero again.
func TestDebugLimits(t *testing.T) {
	rs := newRouteServer(t)
	src := newSource()
	src.listeners = rs.listeners(t)
	s := startAdmin(t, src, nil)
	rs.send(t, "127.0.0.3", http.StatusOK)
	rs.send(t, "127.0.0.2", http.StatusOK)
	rs.send(t, "127.0.0.2", http.StatusOK)
	rs.send(t, "127.0.0.2", http.StatusTooManyRequests)

	resp, body := get(t, s, "/debug/limits")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("/debug/limits: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var snap admin.Snapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.Listeners) != 2 {
		t.Fatalf("listeners: %+v", snap.Listeners)
	}
	web, more := snap.Listeners[0], snap.Listeners[1]
	if web.Name != "web" || web.Protocol != "http" || web.Addr != "127.0.0.1:8080" || web.Connections.Open != 2 {
		t.Errorf("web: %+v", web)
	}
	if len(web.BusyClients) != 1 || web.BusyClients[0] != (admin.KeySnapshot{Key: "127.0.0.1", InUse: 2}) {
		t.Errorf("web's busy clients: %+v", web.BusyClients)
	}
	if len(web.Routes) != 1 {
		t.Fatalf("web's routes: %+v", web.Routes)
	}
	api := web.Routes[0]
	if api.Name != "api" || api.Path != config.PathLean || api.Limit == nil || api.ShadowLimit == nil {
		t.Fatalf("route api: %+v", api)
	}
	wantBusy := []admin.KeySnapshot{{Key: "127.0.0.2", InUse: 2, Refused: 1}, {Key: "127.0.0.3", InUse: 1}}
	if l := api.Limit; l.Key != "" || l.Permits != 2 || l.Totals.InUse != 3 || l.Totals.Refused != 1 || !equalKeys(l.Busy, wantBusy) {
		t.Errorf("route api's limit: %+v, want busy %+v", l, wantBusy)
	}
	if l := api.ShadowLimit; l.Key != "client_ip" || l.Permits != 1 || len(l.Busy) != 0 || l.Busy == nil {
		t.Errorf("route api's shadow limit: %+v", l)
	}
	if r := web.Rate; r == nil || r.Limit != "100r/s burst=50" || !r.DryRun || r.Totals.Admitted+r.Totals.Delayed != 4 || r.Busy == nil {
		t.Errorf("web's rate: %+v", r)
	}
	if more.RoutesFrom != "web" || more.Routes != nil || more.Rate != nil || len(more.BusyClients) != 0 || more.BusyClients == nil {
		t.Errorf("more: %+v", more)
	}
	// The JSON's shape: indented, the fields of a listener in this order,
	// the empty ones of a listener without routes left out.
	for _, want := range []string{
		"{\n  \"listeners\": [\n    {\n      \"name\": \"web\",\n      \"protocol\": \"http\",\n      \"addr\": \"127.0.0.1:8080\",\n      \"connections\": {",
		"\"routes_from\": \"web\"",
		"\"busy\": [\n              {\n                \"key\": \"127.0.0.2\",\n                \"in_use\": 2,\n                \"refused\": 1\n              },",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/debug/limits lacks %q:\n%s", want, body)
		}
	}
	for _, absent := range []string{`"client_limit"`, `"conn_rate"`, `"handshake_rate"`, `"auth"`, `"forward"`, `"tunnels_busy"`} {
		if strings.Contains(body, absent) {
			t.Errorf("/debug/limits shows %s, which no listener has:\n%s", absent, body)
		}
	}
	if got := snap.InUse(); got != 2+3 {
		t.Errorf("InUse: %d, want 5 (2 connections, 3 permits)", got)
	}

	rs.releaseAll()
	if got := admin.SnapshotOf(src.Listeners()).Listeners[0].Routes[0].Limit.Totals.InUse; got != 0 {
		t.Errorf("permits in use once the requests ended: %d", got)
	}
}

func equalKeys(a, b []admin.KeySnapshot) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The live page's event stream shows each listener with what caps it, its
// limits and rates with their bounds, how each route is served, the
// busiest keys of all of them, and the limits that only count.
func TestLiveFrame(t *testing.T) {
	rs := newRouteServer(t)
	src := newSource()
	src.listeners = rs.listeners(t)
	s := startAdmin(t, src, nil)
	rs.send(t, "127.0.0.3", http.StatusOK)
	rs.send(t, "127.0.0.2", http.StatusOK)
	rs.send(t, "127.0.0.2", http.StatusOK)
	rs.send(t, "127.0.0.2", http.StatusTooManyRequests)
	s.Sample()
	f := nextFrame(t, s, func(f livepage.Frame) bool {
		return len(f.Listeners) == 2 && len(f.Listeners[0].Limits) == 2 && f.Listeners[0].Limits[1].InUse == 3
	})

	web, more := f.Listeners[0], f.Listeners[1]
	if web.Row.Limit != "4 connections per client, 100 in all" || web.InUse != 2 {
		t.Errorf("web's row: %+v", web.Row)
	}
	if more.Row.Limit != "no per-client cap, routes of web" || len(more.Limits) != 0 || more.Paths != nil {
		t.Errorf("more: %+v", more)
	}
	wantRows := []livepage.Row{
		{ID: "web/listener/rate", Name: "listener rate", Limit: "100r/s burst=50 per client_ip (dry run)"},
		{ID: "web/route/api", Name: "route api", Limit: "2 per client_ip, queue 3 for 1s", InUse: 3, Refused: 1},
	}
	if len(web.Limits) != len(wantRows) {
		t.Fatalf("web's limits: %+v, want %+v", web.Limits, wantRows)
	}
	for i, want := range wantRows {
		if got := web.Limits[i]; got.ID != want.ID || got.Name != want.Name || got.Limit != want.Limit ||
			got.InUse != want.InUse || got.Waiting != want.Waiting || got.Refused != want.Refused {
			t.Errorf("web's limit %d: %+v, want %+v", i, got, want)
		}
	}
	if len(web.Paths) != 1 || web.Paths[0] != "route api: "+string(config.PathFull)+" (rate block)" {
		t.Errorf("web's paths: %q", web.Paths)
	}
	wantKeys := []livepage.Key{
		{Where: "web/route/api", Key: "127.0.0.2", InUse: 2, Refused: 1},
		{Where: "web connections", Key: "127.0.0.1", InUse: 2},
		{Where: "web/route/api", Key: "127.0.0.3", InUse: 1},
	}
	if len(f.Keys) != len(wantKeys) {
		t.Fatalf("keys: %+v, want %+v", f.Keys, wantKeys)
	}
	for i := range wantKeys {
		if f.Keys[i] != wantKeys[i] {
			t.Errorf("key %d: %+v, want %+v", i, f.Keys[i], wantKeys[i])
		}
	}
	var shadows []string
	for _, sh := range f.Shadow {
		shadows = append(shadows, sh.ID+": "+sh.Limit)
	}
	if want := "web/listener/rate: 100r/s burst=50 per client_ip (dry run)|web/route/api/shadow: 1 per client_ip (shadow)"; strings.Join(shadows, "|") != want {
		t.Errorf("shadow rows: %q, want %q", shadows, want)
	}
	if f.Redis != nil || len(f.QUIC) != 0 {
		t.Errorf("redis %+v, quic %+v, without either", f.Redis, f.QUIC)
	}
}

// nextFrame reads the live page's event stream, sent the given headers
// (name, value pairs), until a frame satisfies ok, within 10 s.
func nextFrame(t *testing.T, s *admin.Server, ok func(livepage.Frame) bool, header ...string) livepage.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Addr().String()+livepage.EventsPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the event stream: %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var last livepage.Frame
	for sc.Scan() {
		data, found := strings.CutPrefix(sc.Text(), "data: ")
		if !found {
			continue
		}
		last = livepage.Frame{}
		if err := json.Unmarshal([]byte(data), &last); err != nil {
			t.Fatal(err)
		}
		if ok(last) {
			return last
		}
	}
	t.Fatalf("no frame as wanted before the stream ended (%v); the last: %+v", sc.Err(), last)
	return last
}
