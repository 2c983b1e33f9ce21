package siege

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/backend"
)

// BenchmarkKeepAliveRequest measures one legitimate request on a kept
// connection to the built-in backend: the generator's own path against
// net/http's client as the baseline, in the same run. What the generator
// spends per request is CPU the server under test does not get.
func BenchmarkKeepAliveRequest(b *testing.B) {
	srv, err := backend.Start("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()

	b.Run("siege", func(b *testing.B) {
		s, err := Config{Target: srv.URL() + "/", Connections: ConnKeepAlive, Clients: 1}.resolve(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		l := newLegitLoop(s, 0, nil)
		defer l.closeConn()
		end := time.Now().Add(time.Hour)
		b.ReportAllocs()
		for b.Loop() {
			l.request(context.Background(), end)
		}
		if l.stats.successes != l.stats.requests {
			b.Fatalf("%d of %d succeeded", l.stats.successes, l.stats.requests)
		}
	})
	b.Run("net-http", func(b *testing.B) {
		tr := &http.Transport{MaxIdleConnsPerHost: 1, DialContext: newDialer(DefaultFirstClientAddr).DialContext}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr, Timeout: DefaultTimeout}
		b.ReportAllocs()
		for b.Loop() {
			resp, err := client.Get(srv.URL() + "/")
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

// BenchmarkReadResponse compares the response reader with
// net/http.ReadResponse on the same bytes.
func BenchmarkReadResponse(b *testing.B) {
	raw := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 23\r\nDate: Sun, 29 Nov 2026 17:00:00 GMT\r\n\r\nhello from the backend\n")
	src := bytes.NewReader(raw)
	br := bufio.NewReader(src)
	b.Run("siege", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			src.Reset(raw)
			br.Reset(src)
			if _, err := readResponse(br); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("net-http", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			src.Reset(raw)
			br.Reset(src)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}
