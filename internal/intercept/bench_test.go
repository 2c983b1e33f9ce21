package intercept_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

// BenchmarkHandshake is a full TLS 1.3 handshake, client and server in
// one process over net.Pipe, with the server's leaf from Leaves: cached
// (the same name each time) against freshly minted (a new name each
// time: ECDSA P-256 key generation and signature by the CA). cpu-ns/op is
// the process's CPU time per handshake, client included, which a loaded
// machine disturbs less than the wall clock.
func BenchmarkHandshake(b *testing.B) {
	ca := sharedCA()
	for _, bc := range []struct {
		name  string
		fresh bool
	}{
		{"cached", false},
		{"mint", true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l := newLeaves(b, intercept.LeavesConfig{})
			server := &tls.Config{GetCertificate: l.GetCertificate, SessionTicketsDisabled: true}
			if _, err := l.Get("cached.bench.test"); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			cpu := processCPU()
			for b.Loop() {
				name := "cached.bench.test"
				if bc.fresh {
					name = fmt.Sprintf("h%d.bench.test", i)
					i++
				}
				benchHandshake(b, server, &tls.Config{ServerName: name, RootCAs: ca.pool})
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
			st := l.Stats()
			if bc.fresh && st.Minted < uint64(b.N) || !bc.fresh && st.Minted != 1 {
				b.Fatalf("%d minted for %d handshakes", st.Minted, b.N)
			}
		})
	}
}

func benchHandshake(b *testing.B, server, client *tls.Config) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	errc := make(chan error, 1)
	go func() { errc <- tls.Server(c1, server).HandshakeContext(context.Background()) }()
	if err := tls.Client(c2, client).HandshakeContext(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLeafGet is the leaf look-up alone: a cache hit against a
// minting (key generation, signature, parse).
func BenchmarkLeafGet(b *testing.B) {
	for _, fresh := range []bool{false, true} {
		name := "cached"
		if fresh {
			name = "mint"
		}
		b.Run(name, func(b *testing.B) {
			l := newLeaves(b, intercept.LeavesConfig{})
			b.ReportAllocs()
			i := 0
			cpu := processCPU()
			for b.Loop() {
				host := "cached.bench.test"
				if fresh {
					host = fmt.Sprintf("h%d.bench.test", i)
					i++
				}
				if _, err := l.Get(host); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
