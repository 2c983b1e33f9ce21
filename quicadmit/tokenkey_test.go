package quicadmit

import (
	"crypto/tls"
	"encoding/base64"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

func TestParseTokenKey(t *testing.T) {
	var k quic.TokenGeneratorKey
	for i := range k {
		k[i] = byte(i)
	}
	hexKey := "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	cases := []struct {
		name string
		in   string
		ok   bool
	}{
		{"hex", hexKey, true},
		{"upper-case hex", strings.ToUpper(hexKey), true},
		{"hex with white space around", "  " + hexKey + "\n", true},
		{"padded base64", base64.StdEncoding.EncodeToString(k[:]), true},
		{"unpadded base64", base64.RawStdEncoding.EncodeToString(k[:]), true},
		{"empty", "", false},
		{"short hex", hexKey[:62], false},
		{"bad hex digit", "g" + hexKey[1:], false},
		{"base64 of 31 bytes", base64.StdEncoding.EncodeToString(k[:31]), false},
		{"base64 of 33 bytes", base64.StdEncoding.EncodeToString(append(k[:], 0)), false},
		{"extra padding", base64.StdEncoding.EncodeToString(k[:]) + "=", false},
		{"white space inside", hexKey[:32] + " " + hexKey[32:], false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTokenKey(tc.in)
			switch {
			case tc.ok && (err != nil || got != k):
				t.Fatalf("ParseTokenKey(%q) = %x, %v; want %x", tc.in, got, err, k)
			case !tc.ok && (!errors.Is(err, ErrTokenKey) || got != quic.TokenGeneratorKey{}):
				t.Fatalf("ParseTokenKey(%q) = %x, %v; want the zero key and ErrTokenKey", tc.in, got, err)
			}
		})
	}
}

func TestTokenKeyRoundTrip(t *testing.T) {
	a, b := NewTokenKey(), NewTokenKey()
	if a == b {
		t.Fatal("two random keys are equal")
	}
	got, err := ParseTokenKey(FormatTokenKey(a))
	if err != nil || got != a {
		t.Fatalf("round trip: %x, %v; want %x", got, err, a)
	}
}

func FuzzParseTokenKey(f *testing.F) {
	f.Add("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
	f.Add("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
	f.Add("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8")
	f.Add("")
	f.Add("==")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseTokenKey(s)
		if err != nil {
			if !errors.Is(err, ErrTokenKey) || k != (quic.TokenGeneratorKey{}) {
				t.Fatalf("failure returned %x, %v", k, err)
			}
			return
		}
		again, err := ParseTokenKey(FormatTokenKey(k))
		if err != nil || again != k {
			t.Fatalf("round trip of %q: %x, %v", s, again, err)
		}
	})
}

// TestSharedTokenKeyAcrossProcesses puts two servers behind one address, a
// relay that sends each client's first datagram to one and the rest to
// the other, as a load balancer that does not route by connection ID
// would. Under Retry the token issued by the first must be accepted by the
// second: only a shared key makes that work.
func TestSharedTokenKeyAcrossProcesses(t *testing.T) {
	shared := NewTokenKey()
	for _, tc := range []struct {
		name       string
		keyA, keyB quic.TokenGeneratorKey
		connects   bool
	}{
		{"shared key", shared, shared, true},
		{"a key per process", NewTokenKey(), NewTokenKey(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{RetryThresholdMin: Zero, RetryThresholdMax: Zero}
			cfg.TokenKey = &tc.keyA
			a := startServer(t, cfg, serverOpts{})
			cfg.TokenKey = &tc.keyB
			b := startServer(t, cfg, serverOpts{})
			front := startRelay(t, a.addr, b.addr)

			tlsConf := clientTLS(t)
			tlsConf.CurvePreferences = []tls.CurveID{tls.X25519} // a first flight of one datagram
			cl := newClient(t, loopback(80))
			_, err := cl.dial(t, front, tlsConf, time.Second)
			if (err == nil) != tc.connects {
				t.Fatalf("dial through the relay: %v", err)
			}
			if !cl.sawRetry.Load() || a.c.Snapshot().Retried == 0 {
				t.Fatal("the first process sent no Retry")
			}
			if tc.connects {
				if snap := b.waitIdle(t); snap.Completed != 1 {
					t.Fatalf("second process: %+v", snap)
				}
			} else if snap := b.c.Snapshot(); snap.Admitted != 0 || snap.Retried == 0 {
				t.Fatalf("second process accepted a token it cannot read: %+v", snap)
			}
		})
	}
}

// startRelay forwards each client's first datagram to first and all later
// ones to rest, and the answers back, through one upstream socket per
// client so that both servers see the same client address.
func startRelay(t *testing.T, first, rest *net.UDPAddr) *net.UDPAddr {
	t.Helper()
	front, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		upstreams = map[string]*net.UDPConn{}
	)
	wg.Go(func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := front.ReadFromUDP(buf)
			if err != nil {
				return
			}
			mu.Lock()
			up, seen := upstreams[from.String()]
			if !seen {
				if up, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
					mu.Unlock()
					return
				}
				upstreams[from.String()] = up
				wg.Go(func() { copyBack(up, front, from) })
			}
			mu.Unlock()
			to := rest
			if !seen {
				to = first
			}
			_, _ = up.WriteToUDP(buf[:n], to)
		}
	})
	t.Cleanup(func() {
		_ = front.Close()
		mu.Lock()
		for _, up := range upstreams {
			_ = up.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return front.LocalAddr().(*net.UDPAddr)
}

func copyBack(up, front *net.UDPConn, client *net.UDPAddr) {
	buf := make([]byte, 2048)
	for {
		n, err := up.Read(buf)
		if err != nil {
			return
		}
		_, _ = front.WriteToUDP(buf[:n], client)
	}
}
