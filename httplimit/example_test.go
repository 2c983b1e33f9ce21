package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/httplimit"
)

// The common case: at most 8 exchanges at once per client address.
func ExampleMaxConcurrentPerClient() {
	limited, err := httplimit.MaxConcurrentPerClient(8)
	if err != nil {
		log.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	srv := &http.Server{Handler: limited(hello), ReadHeaderTimeout: 10 * time.Second}
	_ = srv // srv.ListenAndServe()
}

// A limit on one route only, per user, with a batch user allowed more and
// a short queue. The API mux's other routes are not counted.
func ExampleNew() {
	type userKey struct{}
	byUser, err := httplimit.ByUser(func(r *http.Request) string { s, _ := r.Context().Value(userKey{}).(string); return s })
	if err != nil {
		log.Fatal(err)
	}
	l, err := httplimit.New(httplimit.Config{
		Key: byUser,
		Policy: httplimit.Policy{
			Permits:      4,
			Overrides:    map[string]int{"batch": 32},
			QueueSize:    16,
			QueueTimeout: 2 * time.Second,
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	mux := http.NewServeMux()
	mux.Handle("/reports/", l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	mux.Handle("/", http.NotFoundHandler()) // not limited by l

	r := httptest.NewRequest(http.MethodGet, "/reports/q3", nil)
	r = r.WithContext(contextWith(r, userKey{}, "alice"))
	mux.ServeHTTP(httptest.NewRecorder(), r)
	fmt.Println(l.Totals().Granted)
	// Output: 1
}

// Behind a load balancer at 10.0.0.0/8 that appends X-Forwarded-For, a
// stricter limit is tried in shadow mode inside the enforced one.
func ExampleConfig_shadow() {
	proxies, err := clientkey.ParseProxySet([]string{"10.0.0.0/8"})
	if err != nil {
		log.Fatal(err)
	}
	byClient := httplimit.ByClientIP(&clientkey.Resolver{Trusted: proxies, Header: clientkey.HeaderXForwardedFor})
	enforced, err := httplimit.New(httplimit.Config{Key: byClient, Policy: httplimit.Policy{Permits: 16}})
	if err != nil {
		log.Fatal(err)
	}
	defer enforced.Close()
	candidate, err := httplimit.New(httplimit.Config{Key: byClient, Policy: httplimit.Policy{Permits: 4, Shadow: true}, Name: "candidate"})
	if err != nil {
		log.Fatal(err)
	}
	defer candidate.Close()
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	handler := enforced.Wrap(candidate.Wrap(app))

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.1.2.3:5555"
	r.Header.Set("X-Forwarded-For", "198.51.100.9")
	handler.ServeHTTP(httptest.NewRecorder(), r)
	fmt.Println(enforced.Totals().Granted, candidate.Totals().ShadowRefused)
	// Output: 1 0
}

// A server with a cheap path for what it can serve at once and the full
// middleware for the rest: TryAdmit takes a permit only when one is free
// now and counts nothing otherwise, so that a request sent on to the
// wrapped handler is refused, queued or admitted there and counted once.
func ExampleLimiter_TryAdmit() {
	l, err := httplimit.New(httplimit.Config{Policy: httplimit.Policy{Permits: 1}})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	full := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "full path") }))
	serve := func(w http.ResponseWriter, r *http.Request) {
		if _, p, ok := l.TryAdmit(r, nil); ok {
			defer p.Release()
			fmt.Fprint(w, "fast path")
			return
		}
		full.ServeHTTP(w, r)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.7:1234"

	rec := httptest.NewRecorder()
	serve(rec, r)
	fmt.Println(rec.Code, rec.Body.String())

	_, held, _ := l.TryAdmit(r, nil) // the client's one permit, taken elsewhere
	rec = httptest.NewRecorder()
	serve(rec, r)
	fmt.Println(rec.Code, l.Totals().Refused)
	held.Release()
	// Output:
	// 200 fast path
	// 429 1
}

// A server that keeps state per connection keys a connection once:
// ClientIPConnKey reports whether the key it finds holds for every request
// with that RemoteAddr (it comes from the peer address, not a forwarding
// header), and TryAdmitKey then admits the connection's later requests
// under it without the look-up.
func ExampleClientIPConnKey() {
	l, err := httplimit.New(httplimit.Config{Policy: httplimit.Policy{Permits: 2}}) // keyed by ByClientIP(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "[2001:db8:1:2::7]:1234"

	key, perConn := httplimit.ClientIPConnKey(nil, r) // remembered with the connection
	fmt.Println(key, perConn)
	for range 3 { // three requests of that connection
		p, ok := l.TryAdmitKey(r, key, nil)
		fmt.Println(ok)
		defer p.Release()
	}
	// Output:
	// 2001:db8:1:2::/64 true
	// true
	// true
	// false
}
