package connlimit

import (
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
)

var errFiltered = errors.New("test: filtered")

// denyFilter refuses the addresses in deny and counts its calls.
func denyFilter(calls *atomic.Int64, deny ...string) func(netip.Addr) error {
	set := make(map[netip.Addr]bool)
	for _, s := range deny {
		set[netip.MustParseAddr(s)] = true
	}
	return func(a netip.Addr) error {
		calls.Add(1)
		if set[a] {
			return errFiltered
		}
		return nil
	}
}

// A filtered client is refused before any cap: it takes no slot, so a
// cap of 1 still admits the next client, and repeated refusals (through
// the raw accept path after the first) count as filtered only.
func TestFilterRefusesBeforeCaps(t *testing.T) {
	var calls atomic.Int64
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 1}, MaxConns: 2, Filter: denyFilter(&calls, "127.0.0.2")})
	echoServer(t, l)
	for range 5 {
		mustBeRefused(t, dialFrom(t, "127.0.0.2", l.Addr()))
	}
	a := dialFrom(t, "127.0.0.3", l.Addr())
	mustServe(t, a, "127.0.0.3")
	b := dialFrom(t, "127.0.0.4", l.Addr())
	mustServe(t, b, "127.0.0.4") // MaxConns 2: the refusals gave their places back
	s := l.Stats()
	if s.Refused.Filtered != 5 || s.Refused.Total() != 5 || s.Open != 2 || s.Accepted != 2 {
		t.Fatalf("stats %+v; want 5 filtered refusals only, 2 open", s)
	}
	if snap := l.Snapshot(0); len(snap.Keys) != 2 {
		t.Fatalf("keys holding slots %v; want the 2 admitted clients only", snap.Keys)
	}
	if n := calls.Load(); n != 7 {
		t.Fatalf("filter called %d times, want once per connection (7)", n)
	}
}

// Behind a trusted proxy with PROXY protocol, the filter is asked about
// the client the header names, never the proxy; a trusted peer without a
// client (LOCAL) is not asked about.
func TestFilterProxyProtocolClient(t *testing.T) {
	var calls atomic.Int64
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 1}, Trusted: mustProxySet("127.0.0.5"), ProxyProtocol: true,
		Filter: denyFilter(&calls, "192.0.2.66", "127.0.0.5", "127.0.0.6")})
	denied := dialFrom(t, "127.0.0.5", l.Addr())
	if _, err := denied.Write(append(proxyHeader(t, 1, "192.0.2.66:1234", "198.51.100.1:443"), "x"...)); err != nil {
		t.Fatal(err)
	}
	allowed := dialFrom(t, "127.0.0.5", l.Addr())
	if _, err := allowed.Write(append(proxyHeader(t, 2, "192.0.2.7:1234", "198.51.100.1:443"), "y"...)); err != nil {
		t.Fatal(err)
	}
	conn := acceptOne(t, l)
	if conn.Key() != mustKey("192.0.2.7") {
		t.Fatalf("admitted %v, want 192.0.2.7", conn.Key())
	}
	mustBeRefused(t, denied)
	local := dialFrom(t, "127.0.0.5", l.Addr())
	if _, err := local.Write([]byte("PROXY UNKNOWN\r\nz")); err != nil {
		t.Fatal(err)
	}
	if c := acceptOne(t, l); !c.Exempt() {
		t.Fatalf("LOCAL connection not exempt")
	}
	mustBeRefused(t, dialFrom(t, "127.0.0.6", l.Addr())) // an untrusted peer: its own address
	s := l.Stats()
	if s.Refused.Filtered != 2 || s.Refused.Total() != 2 {
		t.Fatalf("stats %+v; want 2 filtered refusals", s)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("filter called %d times, want 3 (two headers' clients, one peer)", n)
	}
}
