package caddyportcullis_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// A route limit of 2: two requests of a client reach the slow upstream,
// the third is refused 429 with Retry-After before any upstream work;
// other clients and other routes are not counted; every permit comes
// back, also when a client leaves mid-request.
func TestRouteLimit(t *testing.T) {
	up := startUpstream(t)
	port := itoa(freePort(t))
	c := startCaddy(t, t.TempDir(), `{
	GLOBAL
}

http://127.0.0.1:`+port+` {
	bind 127.0.0.1
	handle /slow* {
		portcullis_limit {
			name slow
			permits 2
		}
		reverse_proxy `+up.addr+`
	}
	handle /keyed* {
		portcullis_limit 1 {
			name keyed
			key {http.request.header.X-Api-Key}
		}
		reverse_proxy `+up.addr+`
	}
	handle /host* {
		portcullis_limit 1 {
			name host
			key {http.request.remote.host}
			retry_after 3s
		}
		reverse_proxy `+up.addr+`
	}
	handle {
		respond "fast"
	}
	handle_errors 429 {
		respond "slow down" 429
	}
}
`)
	base := "http://127.0.0.1:" + port
	a, b := clientFrom("127.0.0.2"), clientFrom("127.0.0.3")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	first := []<-chan response{get(ctx, a, base+"/slow/1", nil), get(ctx, a, base+"/slow/2", nil)}
	waitFor(t, "two requests at the upstream", func() bool { return up.running.Load() == 2 })
	third := wait(t, get(ctx, a, base+"/slow/3", nil))
	if third.err != nil || third.status != http.StatusTooManyRequests || third.header.Get("Retry-After") != "1" || third.body != "slow down" {
		t.Fatalf("third request: %d %q Retry-After %q %v, want 429 \"slow down\" Retry-After 1", third.status, third.body, third.header.Get("Retry-After"), third.err)
	}
	if n := up.entered.Load(); n != 2 {
		t.Fatalf("the upstream saw %d requests, want 2", n)
	}
	// Other routes and other clients are not counted against 127.0.0.2.
	if r := wait(t, get(ctx, a, base+"/", nil)); r.status != http.StatusOK || r.body != "fast" {
		t.Fatalf("another route: %d %q %v", r.status, r.body, r.err)
	}
	otherClient := get(ctx, b, base+"/slow/b", nil)
	waitFor(t, "the other client's request at the upstream", func() bool { return up.running.Load() == 3 })

	// Keys from a header: one per key, none for requests without it.
	withKey := func(k string) http.Header { return http.Header{"X-Api-Key": {k}} }
	keyed := []<-chan response{get(ctx, a, base+"/keyed/1", withKey("alpha")), get(ctx, b, base+"/keyed/2", withKey("beta"))}
	keyed = append(keyed, get(ctx, a, base+"/keyed/3", nil), get(ctx, a, base+"/keyed/4", nil))
	waitFor(t, "four keyed requests at the upstream", func() bool { return up.running.Load() == 7 })
	if r := wait(t, get(ctx, b, base+"/keyed/5", withKey("alpha"))); r.status != http.StatusTooManyRequests {
		t.Fatalf("second request of key alpha: %d %v, want 429", r.status, r.err)
	}

	// {http.request.remote.host}, and a client that leaves mid-request.
	leaveCtx, leave := context.WithCancel(ctx)
	leaving := get(leaveCtx, a, base+"/host/1", nil)
	waitFor(t, "the leaving request at the upstream", func() bool { return up.running.Load() == 8 })
	if r := wait(t, get(ctx, a, base+"/host/2", nil)); r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "3" {
		t.Fatalf("second request of 127.0.0.2 on /host: %d Retry-After %q", r.status, r.header.Get("Retry-After"))
	}
	leave()
	if r := wait(t, leaving); r.err == nil {
		t.Fatal("the cancelled request completed")
	}
	waitFor(t, "the leaving request's permit back", func() bool { return c.limits(t).Handlers["host"].Totals.InUse == 0 })

	snap := c.limits(t).Handlers["slow"]
	if snap.Totals.InUse != 3 || snap.Totals.Refused != 1 || len(snap.Keys) != 2 || snap.Keys[0].Key != "127.0.0.2" || snap.Keys[0].InUse != 2 {
		t.Fatalf("slow snapshot %+v", snap)
	}
	up.open()
	for _, d := range append(append(first, otherClient), keyed...) {
		if r := wait(t, d); r.err != nil || r.status != http.StatusOK || !strings.HasPrefix(r.body, "slow /") {
			t.Fatalf("admitted request: %d %q %v", r.status, r.body, r.err)
		}
	}
	waitFor(t, "every permit back", func() bool {
		for _, h := range c.limits(t).Handlers {
			if h.Totals.InUse != 0 || h.Totals.Keys != 0 {
				return false
			}
		}
		return true
	})
	final := c.limits(t).Handlers
	if s := final["slow"].Totals; s.Granted != 3 || s.Refused != 1 {
		t.Fatalf("slow totals %+v, want 3 granted and 1 refused", s)
	}
	metrics := c.adminGet(t, "/metrics")
	for _, want := range []string{
		`portcullis_http_exchanges_refused_total{limiter="slow"} 1`,
		`portcullis_http_exchanges_granted_total{limiter="keyed"} 2`,
		`portcullis_http_exchanges_in_use{limiter="host"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
