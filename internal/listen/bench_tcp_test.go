package listen_test

import (
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/listen"
)

// BenchmarkTCPProxy measures the bytes a tcp listener moves from one client
// to a discarding upstream, through the copies and their idle watch. Each
// op is 1 MiB.
func BenchmarkTCPProxy(b *testing.B) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	cfg, err := config.Parse("bench.yaml", []byte(`
listeners:
  - name: db
    protocol: tcp
    listen: "127.0.0.1:0"
    upstream: "`+up.Addr().String()+`"
`))
	if err != nil {
		b.Fatal(err)
	}
	lc := cfg.Effective().Listeners[0]
	raw, err := listen.ListenTCP(lc)
	if err != nil {
		b.Fatal(err)
	}
	f, err := listen.NewTCP(raw, lc, listen.Admission{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Serve(listen.Serving{}); err != nil {
		b.Fatal(err)
	}
	c, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	chunk := make([]byte, 1<<20)
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		if _, err := c.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
}
