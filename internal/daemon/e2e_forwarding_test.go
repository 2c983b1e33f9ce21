package daemon_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"testing"
)

// headersVia sends GET /headers from ip with the given header fields, set
// under exactly the names given, and returns the fields the upstream saw.
func headersVia(t *testing.T, d *testDaemon, ip string, sent map[string]string) map[string]string {
	t.Helper()
	req, _ := http.NewRequest("GET", d.url("web", "/headers"), nil)
	for k, v := range sent {
		req.Header[k] = []string{v}
	}
	resp, err := d.client(ip).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := map[string]string{}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestForwardingHeadersFromBelief checks that the upstream sees the client
// the daemon believes, in X-Forwarded-For and Forwarded alike, whichever
// header the listener reads, and never what a client wrote about itself.
func TestForwardingHeadersFromBelief(t *testing.T) { bothServers(t, testForwardingHeadersFromBelief) }

func testForwardingHeadersFromBelief(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    trusted_proxies: [127.0.0.5/32, 10.0.0.0/8]
    forwarded_header: forwarded
    routes:
      - upstreams: ["{{backend}}"]
`)
	t.Run("trusted peer speaking Forwarded, client-chosen X-Forwarded-For", func(t *testing.T) {
		got := headersVia(t, d, "127.0.0.5", map[string]string{
			"Forwarded":       "for=6.6.6.6, for=198.51.100.7, for=10.0.0.2",
			"X-Forwarded-For": "203.0.113.66",
		})
		want := map[string]string{
			"X-Forwarded-For": "198.51.100.7, 10.0.0.2, 127.0.0.5",
			"X-Real-Ip":       "198.51.100.7",
			"Forwarded":       `for=198.51.100.7;host="` + d.srv.Addr("web").String() + `";proto=http, for=10.0.0.2, for=127.0.0.5`,
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %q, want %q", k, got[k], v)
			}
		}
	})
	t.Run("untrusted peer", func(t *testing.T) {
		got := headersVia(t, d, "127.0.0.2", map[string]string{
			"Forwarded":       "for=198.51.100.7",
			"X-Forwarded-For": "198.51.100.7",
		})
		if got["X-Forwarded-For"] != "127.0.0.2" || got["X-Real-Ip"] != "127.0.0.2" ||
			got["Forwarded"] != `for=127.0.0.2;host="`+d.srv.Addr("web").String()+`";proto=http` {
			t.Errorf("upstream saw %v", got)
		}
	})
}

// TestSpoofableHeadersStripped checks the look-alike headers: removed from
// an untrusted peer under any spelling, kept from a trusted one, except the
// underscore spellings and the path overrides, which no proxy sends.
func TestSpoofableHeadersStripped(t *testing.T) { bothServers(t, testSpoofableHeadersStripped) }

func testSpoofableHeadersStripped(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    trusted_proxies: [127.0.0.5/32]
    routes:
      - upstreams: ["{{backend}}"]
`)
	sent := map[string]string{
		"True-Client-Ip":   "203.0.113.1",
		"Cf-Connecting-Ip": "203.0.113.1",
		"X-Client-Ip":      "203.0.113.1",
		"X-Forwarded-Port": "443",
		"X_Forwarded_For":  "203.0.113.1",
		"x_real_ip":        "203.0.113.1",
		"X-Original-Url":   "/admin",
		"X-Rewrite-Url":    "/admin",
		"X-Custom":         "kept",
	}
	cases := []struct {
		ip   string
		kept []string
	}{
		{"127.0.0.2", []string{"X-Custom"}},
		{"127.0.0.5", []string{"X-Custom", "True-Client-Ip", "Cf-Connecting-Ip", "X-Client-Ip", "X-Forwarded-Port"}},
	}
	for _, c := range cases {
		got := headersVia(t, d, c.ip, sent)
		keep := map[string]bool{}
		for _, k := range c.kept {
			keep[http.CanonicalHeaderKey(k)] = true
		}
		for k := range sent {
			ck := http.CanonicalHeaderKey(k)
			if _, ok := got[ck]; ok != keep[ck] {
				t.Errorf("from %s: %s reached the upstream: %v, want %v", c.ip, k, ok, keep[ck])
			}
		}
	}
}

// TestForwardingHeadersNeverCrossClients sends requests from eight client
// addresses at once, each over its own kept-alive connection, and checks
// that every request reaches the upstream naming its own client: the
// requests going upstream, and the values of their forwarding fields, are
// pooled and reused from one exchange to the next, and the address texts
// are cached, so a mix-up would show here as another client's address.
func TestForwardingHeadersNeverCrossClients(t *testing.T) {
	bothServers(t, testForwardingHeadersNeverCrossClients)
}

func testForwardingHeadersNeverCrossClients(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - upstreams: ["{{backend}}"]
`)
	var wg sync.WaitGroup
	for i := range 8 {
		ip := "127.0.0." + strconv.Itoa(10+i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := d.client(ip)
			for n := range 150 {
				got, err := upstreamHeaders(c, d.url("web", "/headers"))
				if err != nil {
					t.Errorf("request %d from %s: %v", n, ip, err)
					return
				}
				if got["X-Real-Ip"] != ip || got["X-Forwarded-For"] != ip {
					t.Errorf("request %d from %s reached the upstream as X-Real-Ip %q, X-Forwarded-For %q", n, ip, got["X-Real-Ip"], got["X-Forwarded-For"])
					return
				}
			}
		}()
	}
	wg.Wait()
}

// upstreamHeaders gets url, a backend's /headers, and returns the fields
// the upstream saw; unlike headersVia it may run on any goroutine.
func upstreamHeaders(c *http.Client, url string) (map[string]string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	got := map[string]string{}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		return nil, err
	}
	return got, nil
}
