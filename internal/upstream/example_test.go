package upstream_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/upstream"
)

// A reverse proxy whose routes share one Transport, and so one idle pool,
// each with its own bound on the wait for the upstream's response head.
func ExampleTransport_WithHeadTimeout() {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.URL.Path)
	}))
	defer backend.Close()
	target, _ := url.Parse(backend.URL)

	shared, err := upstream.New(upstream.Config{}) // the daemon passes its *http.Transport as Fallback
	if err != nil {
		panic(err)
	}
	defer shared.CloseIdleConnections()
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: shared.WithHeadTimeout(5 * time.Second), // a 504 when the head is late
	}
	front := httptest.NewServer(proxy)
	defer front.Close()

	resp, err := http.Get(front.URL + "/api")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	// Output: 200 hello from /api
}
