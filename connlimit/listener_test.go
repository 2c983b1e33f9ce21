package connlimit

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// The model case: one host fills its budget and is refused, before any byte
// is read; another host is still served; the key goes when its
// connections do.
func TestPerClientCap(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counting := &countingListener{Listener: inner}
	l := newTestListener(t, counting, Config{})
	echoServer(t, l)

	var held []net.Conn
	for range DefaultPermits {
		c := dialFrom(t, "127.0.0.2", l.Addr())
		mustServe(t, c, "127.0.0.2")
		held = append(held, c)
	}
	over := dialFrom(t, "127.0.0.2", l.Addr())
	mustBeRefused(t, over)
	serverSide := counting.conn(t, over)
	if n := serverSide.read.Load(); n != 0 || !serverSide.closed.Load() {
		t.Fatalf("refused connection: server read %d bytes, closed %v; want 0 bytes, closed", n, serverSide.closed.Load())
	}
	mustServe(t, dialFrom(t, "127.0.0.3", l.Addr()), "127.0.0.3")

	s := l.Stats()
	if s.Refused.ClientCap != 1 || s.Accepted != DefaultPermits+1 {
		t.Fatalf("stats = %+v; want 1 client-cap refusal, %d accepted", s, DefaultPermits+1)
	}
	if got := l.levels[0].lim.InUse(mustKey("127.0.0.2")); got != DefaultPermits {
		t.Fatalf("127.0.0.2 holds %d slots, want %d", got, DefaultPermits)
	}
	snap := l.Snapshot(1)
	if len(snap.Keys) != 1 || snap.Keys[0].Key != mustKey("127.0.0.2") || snap.Keys[0].InUse != DefaultPermits {
		t.Fatalf("Snapshot(1).Keys = %+v; want 127.0.0.2 with %d", snap.Keys, DefaultPermits)
	}

	for _, c := range held {
		c.Close()
	}
	waitFor(t, "127.0.0.2's key to go", func() bool {
		for _, k := range l.Snapshot(0).Keys {
			if k.Key == mustKey("127.0.0.2") {
				return false
			}
		}
		return true
	})
	mustServe(t, dialFrom(t, "127.0.0.2", l.Addr()), "127.0.0.2")
}

func TestResetOnRefuse(t *testing.T) {
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 1}, ResetOnRefuse: true})
	echoServer(t, l)
	mustServe(t, dialFrom(t, "127.0.0.2", l.Addr()), "127.0.0.2")
	// The reset may beat the dialer's own check of the connect.
	d := net.Dialer{Timeout: waitTimeout, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	c, err := d.Dial("tcp", l.Addr().String())
	if err == nil {
		defer c.Close()
		c.SetDeadline(time.Now().Add(waitTimeout))
		_, err = c.Read(make([]byte, 1))
	}
	if !isReset(err) {
		t.Fatalf("refused connection read error = %v, want a reset", err)
	}
}

// A dual-stack listener sees an IPv4 peer as ::ffff:a.b.c.d; it must still
// be keyed as the IPv4 address, not lumped into ::/64 with every other
// IPv4 client.
func TestDualStackKeysIPv4(t *testing.T) {
	inner, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Fatalf("dual-stack listen: %v", err)
	}
	counting := &countingListener{Listener: inner}
	l := newTestListener(t, counting, Config{Policy: Policy{Permits: 2}})
	echoServer(t, l)
	port := l.Addr().(*net.TCPAddr).Port
	target := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	a1 := dialFrom(t, "127.0.0.2", target)
	mustServe(t, a1, "127.0.0.2")
	ip := counting.conn(t, a1).RemoteAddr().(*net.TCPAddr).IP
	if a, _ := netip.AddrFromSlice(ip); !a.Is4In6() {
		t.Fatalf("inner peer %v is not IPv4-mapped: the test does not exercise the trap", a)
	}
	mustServe(t, dialFrom(t, "127.0.0.2", target), "127.0.0.2")
	mustBeRefused(t, dialFrom(t, "127.0.0.2", target))
	mustServe(t, dialFrom(t, "127.0.0.3", target), "127.0.0.3")
}

func TestTrustedPeerExempt(t *testing.T) {
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 1}, Trusted: mustProxySet("127.0.0.5")})
	echoServer(t, l)
	for range 3 {
		mustServe(t, dialFrom(t, "127.0.0.5", l.Addr()), "127.0.0.5")
	}
	mustServe(t, dialFrom(t, "127.0.0.6", l.Addr()), "127.0.0.6")
	mustBeRefused(t, dialFrom(t, "127.0.0.6", l.Addr()))
	s := l.Stats()
	if s.Exempt != 3 || s.Refused.ClientCap != 1 {
		t.Fatalf("stats = %+v; want 3 exempt, 1 refusal", s)
	}
	for _, k := range l.Snapshot(0).Keys {
		if k.Key == mustKey("127.0.0.5") {
			t.Fatalf("the trusted peer holds slots: %+v", k)
		}
	}
}

func TestLevels(t *testing.T) {
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 2}, Levels: []Level{{IPv4Bits: 24, Max: 3}}})
	echoServer(t, l)
	mustServe(t, dialFrom(t, "127.0.0.2", l.Addr()), "127.0.0.2")
	mustServe(t, dialFrom(t, "127.0.0.2", l.Addr()), "127.0.0.2")
	mustBeRefused(t, dialFrom(t, "127.0.0.2", l.Addr())) // its own cap
	mustServe(t, dialFrom(t, "127.0.0.3", l.Addr()), "127.0.0.3")
	mustBeRefused(t, dialFrom(t, "127.0.0.3", l.Addr())) // the /24 is full
	s := l.Stats()
	if s.Refused.ClientCap != 1 || s.Refused.Level != 1 {
		t.Fatalf("refusals = %+v; want 1 client cap, 1 level", s.Refused)
	}
	// The refusal at the /24 gave back the per-client slot it had taken.
	if got := l.levels[0].lim.InUse(mustKey("127.0.0.3")); got != 1 {
		t.Fatalf("127.0.0.3 holds %d slots after a level refusal, want 1", got)
	}
	if got := l.LevelSnapshot(0, 0).Keys; len(got) != 1 || got[0].Key != mustKey("127.0.0.0/24") || got[0].InUse != 3 {
		t.Fatalf("level snapshot = %+v; want 127.0.0.0/24 holding 3", got)
	}
}

func TestOverrides(t *testing.T) {
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 1}, PrefixOverrides: []Override{
		{Prefix: netip.MustParsePrefix("127.0.0.0/24"), Max: 2},
		{Prefix: netip.MustParsePrefix("127.0.0.4/32"), Max: 3},
		{Prefix: netip.MustParsePrefix("127.0.0.8/29"), Max: -1},
	}})
	echoServer(t, l)
	tests := []struct {
		src   string
		allow int
	}{
		{"127.0.0.2", 2},  // the /24
		{"127.0.0.4", 3},  // its /32 beats the /24
		{"127.0.1.2", 1},  // no override
		{"127.0.0.9", 20}, // unlimited; 20 stands for "many"
	}
	for _, tc := range tests {
		t.Run(tc.src, func(t *testing.T) {
			for range tc.allow {
				mustServe(t, dialFrom(t, tc.src, l.Addr()), tc.src)
			}
			if tc.allow < 20 {
				mustBeRefused(t, dialFrom(t, tc.src, l.Addr()))
			}
		})
	}
}

// A client key's cap is its Policy.Overrides entry, else the longest
// prefix override holding it, else PermitsFor's answer, else Permits.
func TestPolicyKeyOverrides(t *testing.T) {
	l := newTestListener(t, nil, Config{
		Policy: Policy{
			Permits:   1,
			Overrides: map[clientkey.Key]int{mustKey("127.0.0.3"): 3, mustKey("127.0.1.3"): 0},
			PermitsFor: func(k clientkey.Key) int {
				if k == mustKey("127.0.1.3") || k == mustKey("127.0.2.3") || k == mustKey("127.0.0.4") {
					return 2
				}
				return 0
			},
		},
		PrefixOverrides: []Override{{Prefix: netip.MustParsePrefix("127.0.0.0/24"), Max: 4}},
	})
	echoServer(t, l)
	for _, tc := range []struct {
		src   string
		allow int
	}{
		{"127.0.0.3", 3}, // its own key beats the /24
		{"127.0.0.4", 4}, // the /24 beats PermitsFor
		{"127.0.1.3", 1}, // a zero override means Permits
		{"127.0.2.3", 2}, // PermitsFor
		{"127.0.3.3", 1}, // Permits
	} {
		t.Run(tc.src, func(t *testing.T) {
			var conns []net.Conn
			for range tc.allow {
				c := dialFrom(t, tc.src, l.Addr())
				mustServe(t, c, tc.src)
				conns = append(conns, c)
			}
			mustBeRefused(t, dialFrom(t, tc.src, l.Addr()))
			for _, c := range conns {
				c.Close()
			}
		})
	}
	waitFor(t, "every slot to be given back", func() bool { return len(l.Snapshot(0).Keys) == 0 })
}

func TestEnforceAbove(t *testing.T) {
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 1}, EnforceAbove: 3})
	echoServer(t, l)
	for range 4 { // open before each: 0, 1, 2, 3: never more than 3
		mustServe(t, dialFrom(t, "127.0.0.2", l.Addr()), "127.0.0.2")
	}
	mustBeRefused(t, dialFrom(t, "127.0.0.2", l.Addr())) // 4 open: enforced
	mustServe(t, dialFrom(t, "127.0.0.3", l.Addr()), "127.0.0.3")
	if got := l.levels[0].lim.InUse(mustKey("127.0.0.2")); got != 4 {
		t.Fatalf("127.0.0.2 holds %d slots, want all 4 counted", got)
	}
}

// A Conn closed many times, concurrently, gives its slot back once.
func TestConnCloseReleasesOnce(t *testing.T) {
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 3}})
	var accepted []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 3 {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted = append(accepted, c)
		}
	}()
	for range 3 {
		dialFrom(t, "127.0.0.2", l.Addr())
	}
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("Accept did not return three connections")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { accepted[0].Close() })
	}
	wg.Wait()
	if got := l.levels[0].lim.InUse(mustKey("127.0.0.2")); got != 2 {
		t.Fatalf("after closing one connection 8 times, the key holds %d, want 2", got)
	}
	if err := accepted[0].Close(); err == nil {
		t.Fatal("a second Close returned nil, want the inner connection's error")
	}
	if s := l.Stats(); s.Open != 2 {
		t.Fatalf("Open = %d, want 2", s.Open)
	}
	accepted[1].Close()
	accepted[2].Close()
	checkDrained(t, l)
}

func TestCloseStopsAccept(t *testing.T) {
	l := newTestListener(t, nil, Config{})
	errc := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond) // let Accept block; the test holds either way
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Accept did not return after Close")
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close = %v, want the first result (nil)", err)
	}
}

func TestKeyOf(t *testing.T) {
	c := &Conn{key: mustKey("192.0.2.1")}
	tests := []struct {
		name string
		conn net.Conn
		ok   bool
	}{
		{"conn", c, true},
		{"wrapped twice", netConnWrapper{netConnWrapper{c}}, true},
		{"other", netConnWrapper{&net.TCPConn{}}, false},
		{"nil", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, ok := KeyOf(tc.conn)
			if ok != tc.ok || (ok && k != c.key) || (!ok && k.IsValid()) {
				t.Fatalf("KeyOf = %v, %v; want ok=%v", k, ok, tc.ok)
			}
		})
	}
}

// netConnWrapper exposes its inner conn as *tls.Conn does.
type netConnWrapper struct{ net.Conn }

func (w netConnWrapper) NetConn() net.Conn { return w.Conn }

func TestNewListenerErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"negative EnforceAbove", Config{EnforceAbove: -1}, "EnforceAbove"},
		{"negative MaxConns", Config{MaxConns: -1}, "MaxConns"},
		{"negative timeout", Config{ProxyHeaderTimeout: -1}, "ProxyHeaderTimeout"},
		{"negative v2 max", Config{ProxyHeaderMaxV2: -1}, "ProxyHeaderMaxV2"},
		{"negative store timeout", Config{StoreTimeout: -1}, "StoreTimeout"},
		{"proxy protocol untrusted", Config{ProxyProtocol: true}, "Trusted"},
		{"level without family", Config{Levels: []Level{{Max: 1}}}, "Levels[0] sets neither"},
		{"level without max", Config{Levels: []Level{{IPv6Bits: 48}}}, "Levels[0].Max"},
		{"level bits out of range", Config{Levels: []Level{{IPv4Bits: 33, Max: 1}}}, "Levels[0]"},
		{"level repeats key", Config{Levels: []Level{{IPv6Bits: 64, Max: 1}}}, "Levels[0].IPv6Bits /64 repeats"},
		{"levels repeat", Config{Levels: []Level{{IPv4Bits: 24, Max: 1}, {IPv4Bits: 24, Max: 2}}}, "Levels[1].IPv4Bits"},
		{"override host bits", Config{PrefixOverrides: []Override{{Prefix: netip.MustParsePrefix("10.1.2.3/8"), Max: 1}}}, "host bits"},
		{"override narrower than key", Config{PrefixOverrides: []Override{{Prefix: netip.MustParsePrefix("2001:db8::1/128"), Max: 1}}}, "narrower"},
		{"override zero max", Config{PrefixOverrides: []Override{{Prefix: netip.MustParsePrefix("10.0.0.0/8")}}}, "Overrides[0].Max"},
		{"override invalid", Config{PrefixOverrides: []Override{{Max: 1}}}, "invalid prefix"},
		{"permits below -1", Config{Policy: Policy{Permits: -2}}, "Permits must be ≥ -1"},
		{"key override below -1", Config{Policy: Policy{Overrides: map[clientkey.Key]int{mustKey("127.0.0.2"): -5}}}, "Overrides[127.0.0.2]"},
		{"queue", Config{Policy: Policy{QueueSize: 4}}, "QueueSize"},
		{"queue timeout", Config{Policy: Policy{QueueTimeout: time.Second}}, "QueueTimeout"},
		{"shadow", Config{Policy: Policy{Shadow: true}}, "Shadow"},
		{"reclaim", Config{Policy: Policy{ReclaimAfter: time.Minute}}, "ReclaimAfter"},
		{"syn filter with enforce above", Config{SYNFilter: true, EnforceAbove: 10}, "SYNFilter"},
		{"syn filter with store", Config{SYNFilter: true, Store: &fakeStore{}}, "SYNFilter"},
		{"syn filter with proxy protocol", Config{SYNFilter: true, ProxyProtocol: true, Trusted: mustProxySet("127.0.0.1")}, "SYNFilter"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer inner.Close()
			_, err = NewListener(inner, tc.cfg)
			if err == nil || !containsAll(err.Error(), "connlimit: ", tc.want) {
				t.Fatalf("NewListener error = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := NewListener(nil, Config{}); err == nil {
		t.Fatal("NewListener(nil) succeeded")
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !contains(s, sub) {
			return false
		}
	}
	return true
}

func contains(s, sub string) bool { return len(sub) == 0 || indexOf(s, sub) >= 0 }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestPermitsFor(t *testing.T) {
	s, err := Config{PrefixOverrides: []Override{
		{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Max: 100},
		{Prefix: netip.MustParsePrefix("10.1.0.0/16"), Max: 5},
		{Prefix: netip.MustParsePrefix("::ffff:10.1.2.0/120"), Max: -1}, // mapped: read as 10.1.2.0/24
		{Prefix: netip.MustParsePrefix("2001:db8::/32"), Max: 7},
	}}.settings()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key  string
		want int
	}{
		{"10.9.9.9", 100},
		{"10.1.9.9", 5},
		{"10.1.2.3", -1},
		{"192.0.2.1", 0},
		{"2001:db8:1:2::/64", 7},
		{"2001:db9::/64", 0},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			if got := s.permitsFor(mustKey(tc.key)); got != tc.want {
				t.Fatalf("permitsFor(%s) = %d, want %d", tc.key, got, tc.want)
			}
		})
	}
}

// Concurrent connections from two clients of one /24: never more than the
// caps are admitted, refusals at the /24 give back their per-client slots,
// and everything drains.
func TestConcurrentCaps(t *testing.T) {
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 10}, Levels: []Level{{IPv4Bits: 24, Max: 15}}})
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	var wg sync.WaitGroup
	for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
		for range 40 {
			wg.Go(func() {
				d := net.Dialer{Timeout: waitTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
				c, err := d.Dial("tcp", l.Addr().String())
				if err != nil {
					t.Errorf("dial from %s: %v", src, err)
					return
				}
				t.Cleanup(func() { c.Close() })
			})
		}
	}
	wg.Wait()
	waitFor(t, "every connection to be admitted or refused", func() bool {
		s := l.Stats()
		return s.Accepted+s.Refused.Total() == 80
	})
	s := l.Stats()
	a, b := keyInUse(l, "127.0.0.2"), keyInUse(l, "127.0.0.3")
	if s.Accepted != 15 || a > 10 || b > 10 || a+b != 15 || s.Refused.ClientCap+s.Refused.Level != 65 {
		t.Fatalf("accepted %d (127.0.0.2: %d, 127.0.0.3: %d), refusals %+v; want 15 within the caps", s.Accepted, a, b, s.Refused)
	}
	mu.Lock()
	for _, c := range held {
		c.Close()
	}
	mu.Unlock()
	checkDrained(t, l)
}
