package daemon_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startFixedBackend is a loopback backend that answers every request with
// answer, whatever it asks.
func startFixedBackend(t *testing.T, answer string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(waitLimit))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(c, answer)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// The reverse path removes the fields a response's Connection names even
// when it also says "close" (net/http's reading, and the daemon's, drop
// such a Connection field whole), for a bodiless request and for one with
// a body.
func TestReverseDropsFieldsConnectionCloseNames(t *testing.T) {
	bothServers(t, func(t *testing.T) {
		for _, answer := range []string{
			"HTTP/1.1 200 OK\r\nConnection: close, X-Secret\r\nX-Secret: s\r\nX-Kept: k\r\nContent-Length: 2\r\n\r\nok",
			"HTTP/1.1 200 OK\r\nConnection: close, X-Secret\r\nX-Secret: s\r\nX-Kept: k\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		} {
			backend := startFixedBackend(t, answer)
			d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - upstreams: ["`+backend+`"]
`)
			for _, method := range []string{http.MethodGet, http.MethodPost} {
				var body io.Reader
				if method == http.MethodPost {
					body = strings.NewReader("abc")
				}
				req, _ := http.NewRequest(method, "http://"+d.srv.Addr("web").String()+"/", body)
				resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: waitLimit}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || string(b) != "ok" {
					t.Fatalf("%s: %d %q", method, resp.StatusCode, b)
				}
				if v := resp.Header.Get("X-Secret"); v != "" {
					t.Errorf("%s, %q: X-Secret %q reached the client, though the backend's Connection named it", method, answer[:60], v)
				}
				if resp.Header.Get("X-Kept") != "k" {
					t.Errorf("%s: X-Kept lost: %v", method, resp.Header)
				}
			}
		}
	})
}
