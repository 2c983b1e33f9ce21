package quicadmit

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/seed-a07d1050/portcullis/internal/testcert"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

const testALPN = "quicadmit-test"

// testCert is a self-signed certificate for localhost and 127.0.0.1, made
// once per test binary.
var testCert = sync.OnceValues(func() (tls.Certificate, error) {
	c, err := testcert.New()
	if err != nil {
		return tls.Certificate{}, err
	}
	return c.TLS, nil
})

func serverTLS(t testing.TB) *tls.Config {
	t.Helper()
	cert, err := testCert()
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{testALPN}}
}

// clientTLS trusts the test certificate.
func clientTLS(t testing.TB) *tls.Config {
	t.Helper()
	cert, err := testCert()
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	return &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{testALPN}}
}

// testServer is a Controller attached to a transport on 127.0.0.1 with an
// accept loop that holds every accepted connection until the test ends.
type testServer struct {
	c         *Controller
	tr        *quic.Transport
	ln        *Listener
	addr      *net.UDPAddr
	tlsStarts atomic.Int64 // ClientHellos the TLS stack processed: handshake work started

	mu    sync.Mutex
	conns []*quic.Conn
}

type serverOpts struct {
	early    bool
	quicConf *quic.Config
	tlsConf  *tls.Config
	tr       func(*quic.Transport)
}

func startServer(t testing.TB, cfg Config, o serverOpts) *testServer {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{c: c, tr: &quic.Transport{Conn: udp}, addr: udp.LocalAddr().(*net.UDPAddr)}
	if o.tr != nil {
		o.tr(s.tr)
	}
	tlsConf := o.tlsConf
	if tlsConf == nil {
		tlsConf = serverTLS(t)
	}
	tlsConf.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		s.tlsStarts.Add(1)
		return nil, nil
	}
	quicConf := o.quicConf
	if quicConf == nil {
		quicConf = &quic.Config{}
	}
	if o.early {
		s.ln, err = c.ListenEarly(s.tr, tlsConf, quicConf)
	} else {
		s.ln, err = c.Listen(s.tr, tlsConf, quicConf)
	}
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go s.acceptLoop(done)
	t.Cleanup(func() {
		s.closeConns()
		_ = s.tr.Close()
		<-done
		_ = udp.Close()
	})
	return s
}

func (s *testServer) acceptLoop(done chan<- struct{}) {
	defer close(done)
	for {
		conn, err := s.ln.Accept(context.Background())
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, conn)
		s.mu.Unlock()
	}
}

func (s *testServer) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.CloseWithError(0, "")
	}
	s.conns = nil
}

// waitIdle waits until no attempt is in progress.
func (s *testServer) waitIdle(t testing.TB) Snapshot {
	t.Helper()
	waitfor.Within(t, 10*time.Second, "no attempt in progress", func() bool { return s.c.Snapshot().InProgress == 0 })
	return s.c.Snapshot()
}

// client is one QUIC client with its own UDP socket on a chosen loopback
// address, which records whether it received a Retry.
type client struct {
	tr       *quic.Transport
	sawRetry atomic.Bool
	tokens   quic.TokenStore
}

func newClient(t testing.TB, ip netip.Addr) *client {
	t.Helper()
	udp, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
	if err != nil {
		t.Fatal(err)
	}
	cl := &client{tr: &quic.Transport{Conn: udp}}
	t.Cleanup(func() {
		_ = cl.tr.Close()
		_ = udp.Close()
	})
	return cl
}

// dial connects to addr and waits for the handshake, at most limit.
func (cl *client) dial(t testing.TB, addr net.Addr, tlsConf *tls.Config, limit time.Duration) (*quic.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	conf := &quic.Config{
		TokenStore:           cl.tokens,
		HandshakeIdleTimeout: limit,
		Tracer: func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace {
			return retrySpy{&cl.sawRetry}
		},
	}
	if tlsConf == nil {
		tlsConf = clientTLS(t)
	}
	return cl.tr.Dial(ctx, addr, tlsConf, conf)
}

// retrySpy is a qlog trace that only notes a received Retry packet.
type retrySpy struct{ saw *atomic.Bool }

func (r retrySpy) AddProducer() qlogwriter.Recorder { return r }
func (r retrySpy) Close() error                     { return nil }
func (r retrySpy) RecordEvent(ev qlogwriter.Event) {
	if p, ok := ev.(qlog.PacketReceived); ok && p.Header.PacketType == qlog.PacketTypeRetry {
		r.saw.Store(true)
	}
}

func loopback(last byte) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 0, last}) }

// isRefused reports whether err is a CONNECTION_REFUSED sent by the server.
func isRefused(err error) bool {
	var te *quic.TransportError
	return errors.As(err, &te) && te.Remote && te.ErrorCode == quic.ConnectionRefused
}

// captureInitials returns n client Initial datagrams with distinct
// destination connection IDs, made by a real quic-go client dialling a
// socket that never answers. Replayed from other source addresses they are
// what an attacker with spoofed addresses sends: each opens a new
// handshake on the server, and nobody ever answers it.
func captureInitials(t testing.TB, n int) [][]byte {
	t.Helper()
	sink, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	cl := newClient(t, loopback(1))
	ctx, cancel := context.WithCancel(context.Background())
	var dials sync.WaitGroup
	defer func() {
		cancel()
		dials.Wait()
	}()
	// Without the large post-quantum key share, the ClientHello fits one
	// Initial, so one datagram is a whole first flight.
	tlsConf := clientTLS(t)
	tlsConf.CurvePreferences = []tls.CurveID{tls.X25519}
	for range n {
		dials.Go(func() { _, _ = cl.tr.Dial(ctx, sink.LocalAddr(), tlsConf, &quic.Config{}) })
	}
	seen := map[string]bool{}
	var out [][]byte
	buf := make([]byte, 2048)
	_ = sink.SetReadDeadline(time.Now().Add(10 * time.Second))
	for len(out) < n {
		m, _, err := sink.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("captured %d of %d Initials: %v", len(out), n, err)
		}
		dcid, ok := initialDCID(buf[:m])
		if !ok || seen[string(dcid)] {
			continue // a retransmission
		}
		seen[string(dcid)] = true
		out = append(out, append([]byte(nil), buf[:m]...))
	}
	return out
}

// initialDCID returns the destination connection ID of a long-header
// packet (RFC 9000 §17.2).
func initialDCID(p []byte) ([]byte, bool) {
	if len(p) < 6 || p[0]&0x80 == 0 {
		return nil, false
	}
	l := int(p[5])
	if len(p) < 6+l {
		return nil, false
	}
	return p[6 : 6+l], true
}

// spoof sends each Initial to s from its own socket on 127.0.0.X (X from
// first on, wrapping within 127.0.0.2..254), as a spoofing attacker would.
// The sockets never read, so the handshakes never progress.
func spoof(t testing.TB, s *testServer, initials [][]byte, first int) {
	t.Helper()
	for i, p := range initials {
		last := byte(2 + (first+i)%253)
		udp, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(loopback(last), 0)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = udp.Close() })
		if _, err := udp.WriteToUDP(p, s.addr); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeClock is a Clock whose time moves only on Advance, which runs the
// functions that fall due, in the caller's goroutine.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c    *fakeClock
	when time.Time
	f    func()
	done bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, when: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	for _, t := range c.timers {
		if !t.done && !t.when.After(c.now) {
			t.done = true
			due = append(due, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

// pending counts timers not yet run or stopped.
func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}
