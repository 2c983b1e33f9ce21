package daemon_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

func TestProxyProtocolNamesTheClient(t *testing.T) { defaultServer(t, testProxyProtocolNamesTheClient) }

func testProxyProtocolNamesTheClient(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 1
    trusted_proxies: [127.0.0.5/32]
    proxy_protocol: true
    forwarded_header: none
    routes:
      - upstreams: ["{{backend}}"]
`)
	addr := d.srv.Addr("web").String()
	send := func(client string) (map[string]string, error) {
		c := dialFrom(t, "127.0.0.5", addr)
		_ = c.SetDeadline(time.Now().Add(waitLimit))
		_, err := c.Write([]byte("PROXY TCP4 " + client + " 127.0.0.1 40000 80\r\n" +
			"GET /headers HTTP/1.1\r\nHost: site.example\r\nX-Forwarded-For: 198.51.100.66\r\n\r\n"))
		if err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		got := map[string]string{}
		return got, json.NewDecoder(resp.Body).Decode(&got)
	}
	got, err := send("203.0.113.7")
	if err != nil {
		t.Fatal(err)
	}
	if got["X-Forwarded-For"] != "203.0.113.7" {
		t.Fatalf("X-Forwarded-For %q, want the client the PROXY header names (and not the one it sent)", got["X-Forwarded-For"])
	}
	// The first connection is still open (keep-alive): the client named by
	// PROXY holds its one slot, another client does not share it.
	if _, err := send("203.0.113.7"); err == nil {
		t.Fatal("second connection of 203.0.113.7 served over a cap of 1")
	}
	if _, err := send("203.0.113.8"); err != nil {
		t.Fatalf("another client behind the balancer: %v", err)
	}
	if n := d.listener("web").Connections.Refused.ClientCap; n != 1 {
		t.Fatalf("client_cap refusals %d, want 1", n)
	}
}
