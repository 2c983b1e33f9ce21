package intercept_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/intercept"
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
	waitFor(t, fmt.Sprintf("at most %d target connections open at the origin", maxIdle), func() bool {
		return open.Load() <= maxIdle
	})
	if n := s.upstream.TargetConns(); n > maxIdle {
		t.Errorf("the Upstream holds %d target connections, want at most %d", n, maxIdle)
	}
	t.Logf("origin connections open after %d names: %d (MaxIdleConns %d)", names, open.Load(), maxIdle)
}
