package intercept_test

import (
	"crypto/tls"
	"fmt"
	"github.com/seed-a07d1050/portcullis/internal/proxytest"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/intercept"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// 200 intercepted names on one origin speaking HTTP/2 leave at most
// MaxIdleConns target connections open, counted by the origin: before the
// pool, net/http kept every HTTP/2 connection (one per name) for its idle
// timeout, outside MaxIdleConns.
func TestUpstreamBoundsIdleTargetConns(t *testing.T) {
	var open atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{originCert(t).TLS}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "https://"))

	const maxIdle, names = 4, 200
	s := newStack(t, stackOptions{upstream: intercept.UpstreamConfig{MaxIdleConns: maxIdle, InsecureSkipVerifyUpstream: true}})
	c := client(t, s, "", "", "127.0.0.2", s.ca.pool)
	c.Transport.(*http.Transport).DisableKeepAlives = true
	h2 := 0
	for i := range names {
		resp, err := c.Get(fmt.Sprintf("https://name-%d.test:%s/", i, port))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("name-%d: %d %q", i, resp.StatusCode, body)
		}
		if string(body) == "HTTP/2.0" {
			h2++
		}
	}
	if h2 != names {
		t.Errorf("%d of %d requests reached the origin over HTTP/2; the test is about HTTP/2 connections", h2, names)
	}
	waitfor.Cond(t, fmt.Sprintf("at most %d target connections open at the origin", maxIdle), func() bool {
		return open.Load() <= maxIdle
	})
	if n := s.upstream.TargetConns(); n > maxIdle {
		t.Errorf("the Upstream holds %d target connections, want at most %d", n, maxIdle)
	}
	t.Logf("origin connections open after %d names: %d (MaxIdleConns %d)", names, open.Load(), maxIdle)
}

// Inside an intercepted session the target gets what the client sent and
// nothing more: no User-Agent when the client sent none, no
// Accept-Encoding (net/http's Transport adds gzip, and decompresses behind
// the client's back, unless told not to), no X-Real-IP claim.
func TestUpstreamSendsWhatTheClientSent(t *testing.T) {
	tg := newTarget(t)
	s := newStack(t, stackOptions{})
	c := client(t, s, "", "", "127.0.0.2", s.ca.pool)
	c.Transport.(*http.Transport).DisableCompression = true
	for _, h2 := range []bool{true, false} {
		c.Transport.(*http.Transport).ForceAttemptHTTP2 = h2
		req, _ := http.NewRequest(http.MethodGet, "https://localhost:"+tg.Port()+"/echo", nil)
		req.Header.Set("User-Agent", "") // net/http sends none
		req.Header.Set("X-Real-IP", "203.0.113.9")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e := proxytest.DecodeEcho(t, body)
		for _, f := range []string{"User-Agent", "Accept-Encoding", "X-Real-Ip"} {
			if v, ok := e.Header[f]; ok {
				t.Errorf("h2 %v: the target got %s: %q", h2, f, v)
			}
		}
	}
}

// An HTTP/1.1 target's "Connection: close, X-Secret" does not pass
// X-Secret to the client: net/http drops that Connection field whole, and
// the tap over the TLS connection reads the names from the head.
func TestUpstreamDropsFieldsConnectionCloseNames(t *testing.T) {
	for _, answer := range []string{
		"HTTP/1.1 200 OK\r\nConnection: close, X-Secret\r\nX-Secret: s\r\nX-Kept: k\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nConnection: X-Secret\r\nConnection: close\r\nX-Secret: s\r\nX-Kept: k\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	} {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			io.WriteString(c, answer)
		}))
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{originCert(t).TLS}}
		srv.StartTLS() // HTTP/1.1 only
		t.Cleanup(srv.Close)
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "https://"))
		s := newStack(t, stackOptions{})
		c := client(t, s, "", "", "127.0.0.2", s.ca.pool)
		a := mustGet(t, c, "https://localhost:"+port+"/")
		if a.status != http.StatusOK || string(a.body) != "ok" {
			t.Fatalf("%d %q", a.status, a.body)
		}
		if v := a.header.Get("X-Secret"); v != "" {
			t.Errorf("%q: X-Secret %q reached the client, though the target's Connection named it", answer[:40], v)
		}
		if a.header.Get("X-Kept") != "k" {
			t.Errorf("X-Kept lost: %v", a.header)
		}
	}
}
