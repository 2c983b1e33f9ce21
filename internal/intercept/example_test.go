package intercept_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

// A forward-proxy listener with interception, as the daemon assembles it:
// the same limiter wraps the CONNECTs and, inside each intercepted
// session, every request, which the Upstream carries to the target over
// TLS.
func Example() {
	origin := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello over %s", r.Proto)
	}))
	defer origin.Close()
	originRoots := x509.NewCertPool()
	originRoots.AddCert(origin.Certificate())

	// The origin is on loopback, which the default policy refuses.
	policy, _ := forward.NewPolicy(forward.PolicyConfig{
		Allow:        []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		ConnectPorts: []forward.PortRange{{From: 1024, To: 65535}}, // the test target's port
	})
	proxy, _ := forward.New(forward.Config{Policy: policy})
	defer proxy.Close()

	certPEM, keyPEM, _ := intercept.NewCA(intercept.CAOptions{}) // portcullis ca create
	ca, _ := intercept.ParseCA(certPEM, keyPEM)
	leaves, _ := intercept.NewLeaves(intercept.LeavesConfig{CA: ca})
	upstream, _ := intercept.NewUpstream(intercept.UpstreamConfig{Dialer: proxy.Dialer(), RootCAs: originRoots})
	defer upstream.Close()

	perClient, _ := httplimit.New(httplimit.Config{Key: httplimit.ByClientIP(nil), Policy: httplimit.Policy{Permits: 8}})
	defer perClient.Close()
	ic, _ := intercept.New(intercept.Config{Leaves: leaves, Handler: perClient.Wrap(upstream), Policy: policy})
	defer ic.Close()
	front := httptest.NewServer(perClient.Wrap(ic.Wrap(proxy)))
	defer front.Close()

	// The client trusts the interception CA.
	clientRoots := x509.NewCertPool()
	clientRoots.AddCert(ca.Certificate())
	proxyURL, _ := url.Parse(front.URL)
	client := &http.Client{Transport: &http.Transport{
		Proxy:             http.ProxyURL(proxyURL),
		TLSClientConfig:   &tls.Config{RootCAs: clientRoots},
		ForceAttemptHTTP2: true,
	}}
	resp, err := client.Get(origin.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	st := ic.Stats()
	fmt.Println(resp.StatusCode, resp.Proto, string(body), st.Sessions, st.Requests)

	// Output: 200 HTTP/2.0 hello over HTTP/1.1 1 1
}
