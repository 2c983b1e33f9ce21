package forward_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/forward"
)

// A forward-proxy listener as the daemon assembles it: limits keyed by
// target and by client in front of the Proxy. (With authentication,
// proxyauth's Wrap goes outside them all, and a proxy_user limit keys by
// httplimit.ByUser(proxyauth.UserOf).)
func Example() {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.Host)
	}))
	defer origin.Close()

	// The origin is on loopback, which the default policy refuses.
	policy, err := forward.NewPolicy(forward.PolicyConfig{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		panic(err)
	}
	proxy, err := forward.New(forward.Config{Policy: policy})
	if err != nil {
		panic(err)
	}
	defer proxy.Close()
	perTarget, _ := httplimit.New(httplimit.Config{Key: forward.ByTargetHost(), Policy: httplimit.Policy{Permits: 32}})
	defer perTarget.Close()
	perClient, _ := httplimit.New(httplimit.Config{Key: httplimit.ByClientIP(nil), Policy: httplimit.Policy{Permits: 8}})
	defer perClient.Close()
	front := httptest.NewServer(perTarget.Wrap(perClient.Wrap(proxy)))
	defer front.Close()

	proxyURL, _ := url.Parse(front.URL)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	resp, err := client.Get(origin.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	// The origin saw its own name as Host, and the proxy's Via.
	fmt.Println(resp.StatusCode, resp.Header.Get("Via"), string(body) == "hello from "+strings.TrimPrefix(origin.URL, "http://"))

	// Output: 200 1.1 portcullis true
}
