package proxytest

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/testcert"
)

// TargetOptions say how a Target serves. The zero value is plain HTTP/1.1.
type TargetOptions struct {
	// Cert, when set, makes the target serve TLS with this certificate.
	Cert *testcert.Cert
	// HTTP2 offers HTTP/2 by ALPN beside HTTP/1.1 (with Cert only).
	HTTP2 bool
}

// Target is an origin server on loopback that a proxy forwards to. Its
// paths:
//
//	/echo     the request as the target saw it, as JSON (see Echoed)
//	/slow     sends ?id= on Entered, then waits for Release (a value, or
//	          Open), its client, or WaitLimit
//	/sleep    sleeps ?d= (a Go duration) before answering
//	/upgrade  answers 101 to "Upgrade: echo" and echoes lines on the
//	          upgraded connection
//	/reset    fails mid-exchange: the connection is cut without an answer
//
// Every server of the target closes when the test ends, after Open.
type Target struct {
	Srv     *httptest.Server
	Addr    string // 127.0.0.1:port
	Entered chan string
	Release chan struct{}
	Conns   atomic.Int32 // connections accepted

	once sync.Once
}

// Echoed is what /echo answers.
type Echoed struct {
	Proto  string
	Host   string
	URI    string
	Header http.Header
	Body   string
}

// NewTarget starts a target.
func NewTarget(t testing.TB, o TargetOptions) *Target {
	t.Helper()
	tg := &Target{Entered: make(chan string, 256), Release: make(chan struct{})}
	srv := httptest.NewUnstartedServer(tg.mux())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			tg.Conns.Add(1)
		}
	}
	if o.Cert != nil {
		srv.EnableHTTP2 = o.HTTP2
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{o.Cert.TLS}}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(func() {
		tg.Open()
		srv.Close()
	})
	tg.Srv = srv
	tg.Addr = srv.Listener.Addr().String()
	return tg
}

func (tg *Target) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_ = json.NewEncoder(w).Encode(Echoed{Proto: r.Proto, Host: r.Host, URI: r.RequestURI, Header: r.Header, Body: string(body)})
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		tg.Entered <- r.URL.Query().Get("id")
		select {
		case <-tg.Release:
		case <-r.Context().Done():
		case <-time.After(WaitLimit):
		}
		io.WriteString(w, "slow done\n")
	})
	mux.HandleFunc("/sleep", func(w http.ResponseWriter, r *http.Request) {
		d, _ := time.ParseDuration(r.URL.Query().Get("d"))
		select {
		case <-time.After(d):
		case <-r.Context().Done():
		}
		io.WriteString(w, "slept\n")
	})
	mux.HandleFunc("/upgrade", serveEchoUpgrade)
	mux.HandleFunc("/reset", func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler)
	})
	return mux
}

// serveEchoUpgrade answers "Upgrade: echo" with 101, then echoes each
// line it reads on the connection until the client goes.
func serveEchoUpgrade(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "echo" {
		http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
		return
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	brw.Flush()
	for {
		line, err := brw.ReadString('\n')
		if err != nil {
			return
		}
		brw.WriteString(line)
		brw.Flush()
	}
}

// Port is the port the target listens on.
func (tg *Target) Port() string {
	_, p, _ := net.SplitHostPort(tg.Addr)
	return p
}

// Open lets every /slow request finish, now and later.
func (tg *Target) Open() { tg.once.Do(func() { close(tg.Release) }) }

// Next waits for the id of the next request to enter /slow.
func (tg *Target) Next(t testing.TB) string {
	t.Helper()
	select {
	case id := <-tg.Entered:
		return id
	case <-time.After(WaitLimit):
		t.Fatal("timed out waiting for a request to reach the target")
		return ""
	}
}

// DecodeEcho reads what /echo answered.
func DecodeEcho(t testing.TB, body []byte) Echoed {
	t.Helper()
	var e Echoed
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("echo body %q: %v", body, err)
	}
	return e
}

// TCPEcho starts a TCP server on loopback: on each connection it echoes
// what it reads until EOF, then writes "bytes=N\n" and closes. It returns
// its address.
func TCPEcho(t testing.TB) string {
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
				_ = c.SetDeadline(time.Now().Add(WaitLimit))
				n, _ := io.Copy(c, c)
				fmt.Fprintf(c, "bytes=%d\n", n)
			}()
		}
	}()
	return ln.Addr().String()
}
