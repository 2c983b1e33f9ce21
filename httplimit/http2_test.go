package httplimit_test

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seed-a07d1050/portcullis/httplimit"
)

// startTLSServer serves h over TLS with HTTP/2 offered by ALPN, counting
// the TCP connections it accepts.
func startTLSServer(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	ts := httptest.NewUnstartedServer(h)
	ts.EnableHTTP2 = true
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts, &conns
}

// h2ClientFrom returns a client of ts speaking HTTP/2 from ip.
func h2ClientFrom(t *testing.T, ts *httptest.Server, ip string) *http.Client {
	t.Helper()
	tr := ts.Client().Transport.(*http.Transport).Clone()
	tr.DialContext = dialerFrom(ip).DialContext
	tr.ForceAttemptHTTP2 = true
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitLimit}
}

// TestHTTP2StreamsAreExchanges sends six concurrent streams on one HTTP/2
// connection with a limit of three: each stream is one exchange, so three
// run and three are refused, while another client is unaffected. A stream
// the client resets gives its permit back and the connection lives on.
func TestHTTP2StreamsAreExchanges(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 3}})
	g := newGate()
	var protos sync.Map
	ts, conns := startTLSServer(t, l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos.Store(r.Proto, true)
		if r.URL.Path != "/warm" {
			g.ServeHTTP(w, r)
		}
	})))
	c := h2ClientFrom(t, ts, "127.0.0.2")
	// One request first, so that the others share its connection.
	if resp, err := c.Get(ts.URL + "/warm"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.ProtoMajor != 2 {
		t.Fatalf("negotiated %s, want HTTP/2", resp.Proto)
	}

	var wg sync.WaitGroup
	var ok, refused atomic.Int64
	for range 6 {
		wg.Go(func() {
			code, err := getStatus(t.Context(), c, ts.URL)
			switch {
			case err != nil:
				t.Error(err)
			case code == http.StatusOK:
				ok.Add(1)
			case code == http.StatusTooManyRequests:
				refused.Add(1)
			}
		})
	}
	for range 3 {
		g.next(t)
	}
	waitFor(t, "three refusals", func() bool { return l.Totals().Refused == 3 })

	other := h2ClientFrom(t, ts, "127.0.0.3")
	otherDone := holdOne(t, other, ts.URL, g)
	if got := l.Snapshot(0).Exchanges.Keys; len(got) != 2 || got[0].InUse != 3 || got[1].InUse != 1 {
		t.Errorf("snapshot keys %+v, want 3 and 1 in use", got)
	}
	for range 4 {
		g.release <- struct{}{}
	}
	wg.Wait()
	<-otherDone
	if ok.Load() != 3 || refused.Load() != 3 {
		t.Errorf("%d served and %d refused, want 3 and 3", ok.Load(), refused.Load())
	}
	expectIdle(t, l)

	// A stream reset by the client mid-exchange releases its permit.
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { _, err := getStatus(ctx, c, ts.URL); errc <- err }()
	g.next(t)
	cancel()
	if err := <-errc; err == nil {
		t.Error("cancelled stream: no error")
	}
	expectIdle(t, l)
	if code, err := getStatus(t.Context(), c, ts.URL+"/warm"); err != nil || code != http.StatusOK {
		t.Errorf("after the reset: %d %v", code, err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d TCP connections, want 2 (one per client, streams multiplexed)", n)
	}
	if _, ok := protos.Load("HTTP/2.0"); !ok {
		t.Error("the handler never saw HTTP/2.0")
	}
}
