package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
)

// TestTryAdmit checks that TryAdmit takes the permit the handler would
// take, from the same count, and that when it declines it counts nothing,
// so that the handler then refuses or queues the request and counts that
// once.
func TestTryAdmit(t *testing.T) {
	byHeader := func(r *http.Request) string { return r.Header.Get("X-Who") }
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1, QueueSize: 1, QueueTimeout: time.Minute}, Key: byHeader})
	req := func(who string, upgrade bool) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Who", who)
		if upgrade {
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
		}
		return r
	}

	key, p, ok := l.TryAdmit(req("alice", false), nil)
	if !ok || key != "alice" || !p.Valid() {
		t.Fatalf("first request: key %q, permit valid %v, ok %v", key, p.Valid(), ok)
	}
	if got := l.Totals(); got.InUse != 1 || got.Granted != 1 {
		t.Fatalf("after a grant: %+v", got)
	}

	// At the limit: declined with nothing counted.
	before := l.Totals()
	if _, p2, ok := l.TryAdmit(req("alice", false), nil); ok || p2.Valid() {
		t.Fatalf("second request for the same key: ok %v, permit valid %v", ok, p2.Valid())
	}
	if got := l.Totals(); got != before {
		t.Errorf("a declined request changed the totals: %+v, then %+v", before, got)
	}

	// The handler, given the declined request, counts it (here it waits
	// in the queue until the first permit is released).
	var served atomic.Int32
	h := l.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(httptest.NewRecorder(), req("alice", false))
	}()
	waitFor(t, "the handler to queue the request", func() bool { return l.Totals().Waiting == 1 })
	// With one waiting, a free permit still goes to the waiter, not to TryAdmit.
	if _, _, ok := l.TryAdmit(req("alice", false), nil); ok {
		t.Error("TryAdmit went ahead of a waiting request")
	}
	p.Release()
	<-done
	if served.Load() != 1 {
		t.Errorf("the queued request was served %d times", served.Load())
	}

	// A tunnel request and a request the Limiter does not key.
	if _, p3, ok := l.TryAdmit(req("bob", true), nil); ok || p3.Valid() {
		t.Errorf("an upgrade request: ok %v, permit valid %v", ok, p3.Valid())
	}
	if key, p4, ok := l.TryAdmit(req("", false), nil); !ok || key != "" || p4.Valid() {
		t.Errorf("an unkeyed request: key %q, ok %v, permit valid %v", key, ok, p4.Valid())
	}
	expectIdle(t, l)
}

// TestTryAdmitReclaim checks that the hook TryAdmit is given runs when the
// permit is reclaimed, and that the reclaimed permit no longer counts.
func TestTryAdmitReclaim(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1, ReclaimAfter: 20 * time.Millisecond}})
	var calls atomic.Int32
	_, p, ok := l.TryAdmit(httptest.NewRequest(http.MethodGet, "/", nil), func() { calls.Add(1) })
	if !ok {
		t.Fatal("TryAdmit declined a request under the limit")
	}
	waitFor(t, "the reclaim", func() bool { return calls.Load() == 1 })
	expectIdle(t, l)
	p.Release() // a reclaimed permit's release is a no-op
	expectIdle(t, l)
}

// TestTryAdmitKey checks that TryAdmitKey counts under the key it is
// given, as TryAdmit counts under the Key function's: the same limit,
// tunnels declined, an empty key not limited.
func TestTryAdmitKey(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1}, Key: httplimit.ByClientIP(nil)})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.7:4000"
	p, ok := l.TryAdmitKey(r, "192.0.2.7", nil)
	if !ok || !p.Valid() {
		t.Fatalf("first request: ok %v, permit valid %v", ok, p.Valid())
	}
	if _, _, ok := l.TryAdmit(r, nil); ok {
		t.Error("TryAdmit admitted past the permit TryAdmitKey took for the same key")
	}
	if p2, ok := l.TryAdmitKey(r, "192.0.2.7", nil); ok || p2.Valid() {
		t.Errorf("second request: ok %v, permit valid %v", ok, p2.Valid())
	}
	up := httptest.NewRequest(http.MethodGet, "/", nil)
	up.Header.Set("Connection", "Upgrade")
	up.Header.Set("Upgrade", "websocket")
	if p3, ok := l.TryAdmitKey(up, "198.51.100.1", nil); ok || p3.Valid() {
		t.Errorf("an upgrade request: ok %v, permit valid %v", ok, p3.Valid())
	}
	if p4, ok := l.TryAdmitKey(r, "", nil); !ok || p4.Valid() {
		t.Errorf("an unkeyed request: ok %v, permit valid %v", ok, p4.Valid())
	}
	p.Release()
	expectIdle(t, l)
}
