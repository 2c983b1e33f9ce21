package httplimit_test

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// mustKey returns the KeyFunc of a constructor given input the test knows
// is valid; an error there is a bug in the test, so it panics.
func mustKey(k httplimit.KeyFunc, err error) httplimit.KeyFunc {
	if err != nil {
		panic(err)
	}
	return k
}

// waitLimit bounds every wait in these tests.
const waitLimit = 10 * time.Second

// startServer serves h over loopback on an httptest.Server whose error log
// is discarded (handlers here panic on purpose).
func startServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

// dialerFrom returns a dialer whose connections come from ip, so that the
// server sees a distinct client per 127.0.0.X address.
func dialerFrom(ip string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: waitLimit}
}

// clientFrom returns an HTTP/1.1 client whose connections come from ip.
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	tr := &http.Transport{DialContext: dialerFrom(ip).DialContext, MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitLimit}
}

// waitFor polls cond until it holds, failing the test after waitLimit.
// (internal/waitfor holds the loop; this package keeps the name while
// another branch edits its tests: issue 37 item 6.)
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitfor.Within(t, waitLimit, what, cond)
}

// getStatus sends GET url and returns the status, reading the body.
func getStatus(ctx context.Context, c *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// newLimiter builds a Limiter and closes it at the end of the test.
func newLimiter(t *testing.T, cfg httplimit.Config) *httplimit.Limiter {
	t.Helper()
	l, err := httplimit.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// expectIdle waits until l holds and awaits nothing.
func expectIdle(t *testing.T, l *httplimit.Limiter) {
	t.Helper()
	waitFor(t, "the limiter to be idle", func() bool {
		tot := l.Totals()
		return tot.InUse == 0 && tot.Waiting == 0 && tot.Keys == 0
	})
}

// gate is a handler that blocks each request until released, and reports
// the requests that entered it.
type gate struct {
	entered chan string // the "id" query value of each request that entered
	release chan struct{}
}

func newGate() *gate {
	return &gate{entered: make(chan string, 256), release: make(chan struct{})}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.entered <- r.URL.Query().Get("id")
	select {
	case <-g.release:
	case <-r.Context().Done():
	case <-time.After(waitLimit):
	}
}

// next receives the id of the next request to enter, with a time limit.
func (g *gate) next(t *testing.T) string {
	t.Helper()
	select {
	case id := <-g.entered:
		return id
	case <-time.After(waitLimit):
		t.Fatal("timed out waiting for a request to enter the handler")
		return ""
	}
}

// contextWith returns r's context with k set to v.
func contextWith(r *http.Request, k, v any) context.Context {
	return context.WithValue(r.Context(), k, v)
}
