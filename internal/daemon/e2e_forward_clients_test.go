package daemon_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/realclients"
)

// forwardPair is a daemon with two forward listeners allowed to reach
// loopback: "open", without authentication, and "locked", with it.
const forwardPair = `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: open
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    forward:
      destinations: {allow: ["127.0.0.0/8", "::1"]}
  - name: locked
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    auth: {htpasswd: "{{htpasswd}}"}
    forward:
      destinations: {allow: ["127.0.0.0/8", "::1"]}
      limits: [{key: proxy_user, permits: 8}]
`

// checkEchoed checks what a target saw of a request sent through the
// proxy: its own authority in Host, the proxy's Via, and none of the
// proxy's credentials.
func checkEchoed(t *testing.T, body, targetAddr string) {
	t.Helper()
	var e echoed
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("target answer %q: %v", body, err)
	}
	if e.Host != targetAddr {
		t.Errorf("the target saw Host %q, want %q", e.Host, targetAddr)
	}
	if e.Header.Get("Proxy-Authorization") != "" || e.Header.Get("Proxy-Connection") != "" {
		t.Errorf("proxy headers reached the target: %v", e.Header)
	}
}

// TestForwardGoClient drives the forward listeners with Go's
// http.Transport{Proxy: ...}, for plain HTTP (absolute-form) and HTTPS
// (CONNECT to a TLS target), with and without authentication.
func TestForwardGoClient(t *testing.T) { bothServers(t, testForwardGoClient) }

func testForwardGoClient(t *testing.T) {
	d, _ := startForward(t, forwardPair)
	plain, secure := newGatedTarget(t, false), newGatedTarget(t, true)
	for _, tc := range []struct {
		name, listener, user, pass, target string
		want                               int // 0: the CONNECT fails
	}{
		{"http open", "open", "", "", plain.url("/echo"), http.StatusOK},
		{"https open", "open", "", "", secure.url("/echo"), http.StatusOK},
		{"http authenticated", "locked", "alice", "alice-pw", plain.url("/echo"), http.StatusOK},
		{"https authenticated", "locked", "alice", "alice-pw", secure.url("/echo"), http.StatusOK},
		{"http without credentials", "locked", "", "", plain.url("/echo"), http.StatusProxyAuthRequired},
		{"http wrong password", "locked", "alice", "nope", plain.url("/echo"), http.StatusProxyAuthRequired},
		{"https without credentials", "locked", "", "", secure.url("/echo"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := d.proxyClient(tc.listener, tc.user, tc.pass, "127.0.0.2")
			resp, err := c.Get(tc.target)
			if tc.want == 0 {
				if err == nil || !strings.Contains(err.Error(), "Proxy Authentication Required") {
					t.Fatalf("CONNECT without credentials: %v, want a 407 error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body := readAllString(t, resp)
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.want, body)
			}
			switch {
			case tc.want == http.StatusProxyAuthRequired:
				if got := resp.Header.Get("Proxy-Authenticate"); got != `Basic realm="portcullis", charset="UTF-8"` {
					t.Errorf("Proxy-Authenticate %q", got)
				}
			case strings.HasPrefix(tc.target, "http:"):
				checkEchoed(t, body, plain.addr)
				if via := resp.Header.Get("Via"); via != "1.1 portcullis" {
					t.Errorf("response Via %q", via)
				}
			default:
				checkEchoed(t, body, secure.addr)
			}
		})
	}
}

// TestForwardCurl drives the forward listeners with curl -x.
func TestForwardCurl(t *testing.T) { bothServers(t, testForwardCurl) }

func testForwardCurl(t *testing.T) {
	curl := realclients.Curl(t)
	d, _ := startForward(t, forwardPair)
	plain, secure := newGatedTarget(t, false), newGatedTarget(t, true)
	ca := caFile(t)
	open := "http://" + d.srv.Addr("open").String()
	locked := d.srv.Addr("locked").String()
	for _, tc := range []struct {
		name, proxy, url string
		connect, code    string // what curl reports for the CONNECT and the final answer
	}{
		{"http open", open, plain.url("/echo"), "000", "200"},
		{"https open", open, secure.url("/echo"), "200", "200"},
		{"http authenticated", "http://alice:alice-pw@" + locked, plain.url("/echo"), "000", "200"},
		{"https authenticated", "http://alice:alice-pw@" + locked, secure.url("/echo"), "200", "200"},
		{"http without credentials", "http://" + locked, plain.url("/echo"), "000", "407"},
		{"http wrong password", "http://alice:nope@" + locked, plain.url("/echo"), "000", "407"},
		{"https without credentials", "http://" + locked, secure.url("/echo"), "407", "000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := realclients.Run(t, waitLimit, curl, "-sS", "--max-time", "10", "-x", tc.proxy,
				"--cacert", ca, "-w", "\n%{http_connect} %{http_code}", tc.url)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			codes := strings.Fields(lines[len(lines)-1])
			if len(codes) != 2 {
				t.Fatalf("curl: %v\n%s", err, out)
			}
			if codes[0] != tc.connect || codes[1] != tc.code {
				t.Fatalf("curl reports CONNECT %s, final %s; want %s, %s (err %v)\n%s", codes[0], codes[1], tc.connect, tc.code, err, out)
			}
			if tc.code == "200" {
				target := plain.addr
				if strings.HasPrefix(tc.url, "https") {
					target = secure.addr
				}
				checkEchoed(t, strings.Join(lines[:len(lines)-1], "\n"), target)
			}
		})
	}
}

// TestForwardPythonRequests drives the forward listeners with Python's
// requests and proxies=.
func TestForwardPythonRequests(t *testing.T) { bothServers(t, testForwardPythonRequests) }

func testForwardPythonRequests(t *testing.T) {
	python := realclients.Python(t)
	d, _ := startForward(t, forwardPair)
	plain, secure := newGatedTarget(t, false), newGatedTarget(t, true)
	ca := caFile(t)
	open := "http://" + d.srv.Addr("open").String()
	locked := d.srv.Addr("locked").String()
	for _, tc := range []struct {
		name, proxy, url string
		want             string // first line
		detail           string // in the rest
	}{
		{"http open", open, plain.url("/echo"), "200", `"Host":"` + plain.addr},
		{"https open", open, secure.url("/echo"), "200", `"Host":"` + secure.addr},
		{"http authenticated", "http://alice:alice-pw@" + locked, plain.url("/echo"), "200", `"Host":"` + plain.addr},
		{"https authenticated", "http://alice:alice-pw@" + locked, secure.url("/echo"), "200", `"Host":"` + secure.addr},
		{"http without credentials", "http://" + locked, plain.url("/echo"), "407", "proxy authentication required"},
		{"https without credentials", "http://" + locked, secure.url("/echo"), "proxyerror", "407"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := realclients.Run(t, waitLimit, python, "-c", realclients.PythonGet, tc.proxy, tc.url, ca)
			if err != nil {
				t.Fatalf("python: %v\n%s", err, out)
			}
			first, rest, _ := strings.Cut(out, "\n")
			if first != tc.want || !strings.Contains(rest, tc.detail) {
				t.Fatalf("got %q, want %q with %q\n%s", first, tc.want, tc.detail, out)
			}
			if tc.want == "200" && strings.Contains(rest, "Proxy-Authorization") {
				t.Fatalf("Proxy-Authorization reached the target:\n%s", out)
			}
		})
	}
}

// TestForwardHTTPSListener serves the forward proxy over TLS: Go's client
// speaks to an https:// proxy and tunnels through it.
func TestForwardHTTPSListener(t *testing.T) { bothServers(t, testForwardHTTPSListener) }

func testForwardHTTPSListener(t *testing.T) {
	certFile, keyFile := certFiles(t)
	d, _ := startForward(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: tls
    protocol: https
    listen: "127.0.0.1:0"
    mode: forward
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
    auth: {htpasswd: "{{htpasswd}}"}
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
`)
	plain, secure := newGatedTarget(t, false), newGatedTarget(t, true)
	c := d.proxyClient("tls", "bob", "bob-pw", "127.0.0.2")
	for _, target := range []*gatedTarget{plain, secure} {
		resp, err := c.Get(target.url("/echo"))
		if err != nil {
			t.Fatal(err)
		}
		body := readAllString(t, resp)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s through the https proxy: %d %s", target.url("/"), resp.StatusCode, body)
		}
		checkEchoed(t, body, target.addr)
	}
}

func readAllString(t *testing.T, resp *http.Response) string {
	t.Helper()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}
