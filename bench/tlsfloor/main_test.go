package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestProxy sends HTTP/2 requests through the -upstream handler: the
// upstream sees the request's method, path, query and fields, the client
// gets the upstream's status, fields and body, and a dead upstream is a
// 502.
func TestProxy(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("X-Client")+" "+r.Host)
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, strings.Repeat("body;", 10000))
	}))
	defer up.Close()
	h, err := proxy(up.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	front := serveH2(t, h)

	req, _ := http.NewRequest(http.MethodGet, front.URL+"/a/b?c=d", nil)
	req.Header.Set("X-Client", "yes")
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	host := strings.TrimPrefix(front.URL, "https://")
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusTeapot ||
		resp.Header.Get("X-Seen") != "GET /a/b?c=d yes "+host || string(body) != strings.Repeat("body;", 10000) {
		t.Fatalf("%s %d, X-Seen %q, %d bytes of body", resp.Proto, resp.StatusCode, resp.Header.Get("X-Seen"), len(body))
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	if h, err = proxy(dead); err != nil {
		t.Fatal(err)
	}
	front = serveH2(t, h)
	resp, err = front.Client().Get(front.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("a dead upstream: %d, want 502", resp.StatusCode)
	}

	if _, err := proxy("no-port"); err == nil {
		t.Fatal("proxy took an address without a port")
	}
}

// serveH2 serves h over TLS with HTTP/2 until the test ends.
func serveH2(t *testing.T, h http.Handler) *httptest.Server {
	s := httptest.NewUnstartedServer(h)
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}
