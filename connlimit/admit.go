package connlimit

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/proxyproto"
	"github.com/seed-a07d1050/portcullis/rate"
)

// admitNow admits c without blocking: inline in Accept (or in the accept
// loop) for connections that need neither a PROXY header nor the Store. It
// returns nil when c was refused (and closed).
func (l *Listener) admitNow(c net.Conn) *Conn {
	peer := peerAddr(c.RemoteAddr())
	conn, why, err := l.admit(context.Background(), false, c, peer, peer, l.s.Trusted.Contains(peer))
	if why != admitted {
		l.refuse(c, why, peer, err)
		return nil
	}
	return conn
}

// admit takes the slots of client at every level that applies, and wraps
// c in a Conn holding them. Unless wait, it uses TryAcquire, which never
// blocks; with wait it may wait for the Store until ctx ends. An exempt
// connection, or one with no address to key, takes no slot. On refusal
// nothing is held and c is left open for the caller to refuse.
func (l *Listener) admit(ctx context.Context, wait bool, c net.Conn, peer, client netip.Addr, exempt bool) (*Conn, reason, error) {
	cl, why, err := l.claim(ctx, wait, client, exempt)
	if why != admitted {
		return nil, why, err
	}
	return l.wrap(c, cl), admitted, nil
}

// claim is what one admitted connection holds before it has a Conn: its
// key, whether it is exempt, and its slots.
type claim struct {
	key    clientkey.Key
	client netip.Addr // the address keyed: the peer, or the client a PROXY header named
	exempt bool
	ps     permits
}

// claim takes client's slots, as admit describes, without needing the
// connection itself.
func (l *Listener) claim(ctx context.Context, wait bool, client netip.Addr, exempt bool) (claim, reason, error) {
	cl := claim{key: l.levels[0].keyer.FromAddr(client), client: client, exempt: exempt}
	cl.exempt = cl.exempt || !cl.key.IsValid()
	if cl.exempt {
		l.stats.exempt.Add(1)
		return cl, admitted, nil
	}
	if l.s.Filter != nil {
		if err := l.s.Filter(client); err != nil {
			return claim{}, reasonFiltered, err
		}
	}
	why, err := l.acquire(ctx, wait, client, &cl.ps)
	if why == admitted && l.rate != nil {
		if why, err = l.checkRate(ctx, wait, cl.key); why != admitted {
			cl.ps.release()
		}
	}
	if l.syn != nil && (why == admitted || why == reasonClientCap) {
		// The key may now hold its cap: its next attempts need not reach Accept.
		l.syn.admitted(cl.key)
	}
	if why != admitted {
		return claim{}, why, err
	}
	return cl, admitted, nil
}

// checkRate counts one new connection of key under Config.ConnRate. Unless
// wait, it never blocks (Allow); with wait it may wait for the
// ConnRateStore until ctx ends. A refused key is handed to the SYN filter
// until its rate admits again.
func (l *Listener) checkRate(ctx context.Context, wait bool, key clientkey.Key) (reason, error) {
	var d rate.Decision
	var err error
	if wait {
		var r rate.Reservation[clientkey.Key]
		r, err = l.rate.Reserve(ctx, key)
		d = r.Decision
	} else if d = l.rate.Allow(key); !d.Allowed() {
		err = rate.ErrLimited
	}
	switch {
	case err == nil:
		return admitted, nil
	case errors.Is(err, rate.ErrLimited):
		if l.syn != nil {
			l.syn.rateRefused(key, d.RetryAfter)
		}
		return reasonClientRate, err
	default:
		return reasonStore, err
	}
}

// wrap makes the Conn that holds cl for c, and counts it open.
func (l *Listener) wrap(c net.Conn, cl claim) *Conn {
	l.stats.open.Add(1)
	conn := &Conn{conn: c, l: l, key: cl.key, client: cl.client, exempt: cl.exempt, ps: cl.ps}
	l.live.add(conn)
	return conn
}

// acquire takes one slot at each level that applies to client, into ps. A
// refusal at any level gives back what the others granted.
func (l *Listener) acquire(ctx context.Context, wait bool, client netip.Addr, ps *permits) (reason, error) {
	for i := range l.levels {
		lv := &l.levels[i]
		if !lv.appliesTo(client) {
			continue
		}
		key := lv.keyer.FromAddr(client)
		var p limit.Permit[clientkey.Key]
		var err error
		if wait {
			p, err = lv.lim.Acquire(ctx, key)
		} else {
			p, err = lv.lim.TryAcquire(key)
		}
		if err == nil && p.Shadowed() && l.stats.open.Load() > int64(l.s.EnforceAbove) {
			p.Release()
			err = limit.ErrLimited
		}
		if err != nil {
			ps.release()
			return refusalReason(i, err), err
		}
		ps.add(p)
	}
	return admitted, nil
}

func refusalReason(level int, err error) reason {
	switch {
	case errors.Is(err, limit.ErrClosed):
		return reasonShutdown
	case errors.Is(err, limit.ErrStore), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return reasonStore
	case level == 0:
		return reasonClientCap
	default:
		return reasonLevel
	}
}

// refuse counts the refusal, closes c (with a reset if configured), gives
// back its MaxConns token and logs the refusal.
func (l *Listener) refuse(c net.Conn, why reason, client netip.Addr, err error) {
	peer := peerAddrPort(c.RemoteAddr())
	l.stats.refused[why].Add(1) // before the close, so a client that sees it closed sees it counted
	if l.s.ResetOnRefuse {
		if tc, ok := c.(interface{ SetLinger(int) error }); ok {
			_ = tc.SetLinger(0) // best effort: a FIN is the fallback
		}
	}
	_ = c.Close() // nothing to do about a failed close of a refused socket
	l.refused(why, peer, client, err)
}

// refused does what every refusal does once its connection is closed:
// it gives back the MaxConns token, turns the raw accept path on for a
// while and logs.
func (l *Listener) refused(why reason, peer netip.AddrPort, client netip.Addr, err error) {
	l.giveToken()
	if l.raw != nil {
		l.rawRun.Store(rawRunLength)
	}
	l.logRefusal(why, peer, client, err)
}

// acceptReady is Accept when admission runs on per-connection goroutines:
// it returns what they admitted.
func (l *Listener) acceptReady() (net.Conn, error) {
	l.startOnce.Do(func() { go l.acceptLoop() })
	select {
	case c := <-l.ready:
		l.stats.accepted.Add(1)
		return c, nil
	case <-l.failed:
		return nil, l.failErr
	case <-l.done:
		return nil, ErrClosed
	}
}

// acceptLoop accepts from the inner listener and starts each connection's
// admission, until the listener closes or fails. Connections that need
// neither a PROXY header nor the Store are admitted inline.
func (l *Listener) acceptLoop() {
	defer close(l.loopDone)
	var delay time.Duration
	for {
		c, err := l.acceptInner(&delay)
		if err != nil {
			if !errors.Is(err, ErrClosed) {
				l.failErr = err
				close(l.failed)
			}
			return
		}
		if c == nil {
			continue
		}
		peer := peerAddr(c.RemoteAddr())
		trusted := l.s.Trusted.Contains(peer)
		readsHeader := l.s.ProxyProtocol && trusted
		asksStore := !trusted && (l.s.ConnRateStore != nil || l.storeDecides(peer))
		if !readsHeader && !asksStore {
			if conn := l.admitNow(c); conn != nil {
				l.deliver(conn)
			}
			continue
		}
		l.stats.pending.Add(1)
		l.admitting.Add(1)
		go l.admitSlow(c, peer, trusted)
	}
}

// storeDecides reports whether admitting a connection of client takes a
// Store round trip: some cap that applies to it is finite. A client that
// every applicable cap leaves unlimited is admitted inline, and the Store
// never hears of it (the limiter does not ask it for unlimited keys).
func (l *Listener) storeDecides(client netip.Addr) bool {
	if l.s.Store == nil || !client.IsValid() {
		return false
	}
	if l.s.capOf(l.levels[0].keyer.FromAddr(client)) >= 0 {
		return true
	}
	for i := range l.levels[1:] {
		if l.levels[1+i].appliesTo(client) {
			return true
		}
	}
	return false
}

// admitSlow admits one connection on its own goroutine: it reads the PROXY
// header of a trusted peer, asks the Store, and hands the admitted
// connection to Accept.
func (l *Listener) admitSlow(c net.Conn, peer netip.Addr, trusted bool) {
	defer l.admitting.Done()
	conn, why, client, err := l.admitWithHeader(c, peer, trusted)
	l.stats.pending.Add(-1)
	if why != admitted {
		if l.isClosed() {
			why = reasonShutdown
		}
		l.refuse(c, why, client, err)
		return
	}
	l.deliver(conn)
}

func (l *Listener) admitWithHeader(c net.Conn, peer netip.Addr, trusted bool) (*Conn, reason, netip.Addr, error) {
	client, exempt := peer, trusted
	var hdr *proxyproto.Header
	var rest []byte
	if l.s.ProxyProtocol && trusted {
		if !l.pending.add(c) {
			return nil, reasonShutdown, client, ErrClosed
		}
		h, buffered, why, err := l.readProxyHeader(c)
		l.pending.remove(c)
		if why != admitted {
			return nil, why, client, err
		}
		hdr, rest = &h, buffered
		if h.HasClient() {
			client, exempt = h.Source.Addr().Unmap(), false
		}
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.s.StoreTimeout)
	defer cancel()
	conn, why, err := l.admit(ctx, true, c, peer, client, exempt)
	if why != admitted {
		return nil, why, client, err
	}
	conn.header, conn.pending = hdr, rest
	conn.hasPending.Store(len(rest) > 0)
	if hdr != nil && hdr.HasClient() {
		conn.remote = net.TCPAddrFromAddrPort(hdr.Source)
	}
	return conn, admitted, client, nil
}

// readProxyHeader reads the PROXY header of c under ProxyHeaderTimeout and
// returns it with the bytes read past it, which the Conn replays.
func (l *Listener) readProxyHeader(c net.Conn) (proxyproto.Header, []byte, reason, error) {
	if err := c.SetReadDeadline(time.Now().Add(l.s.ProxyHeaderTimeout)); err != nil {
		return proxyproto.Header{}, nil, reasonProxyBad, err
	}
	br := bufio.NewReaderSize(c, 512)
	h, err := proxyproto.ReadHeader(br, l.s.ProxyHeaderMaxV2)
	if err != nil {
		return proxyproto.Header{}, nil, headerRefusal(err), err
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return proxyproto.Header{}, nil, reasonProxyBad, err
	}
	var rest []byte
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n) // cannot fail: n bytes are buffered
		rest = append([]byte(nil), b...)
	}
	return h, rest, admitted, nil
}

func headerRefusal(err error) reason {
	switch {
	case errors.Is(err, proxyproto.ErrNoHeader), errors.Is(err, io.EOF):
		return reasonProxyMissing
	case errors.Is(err, os.ErrDeadlineExceeded):
		return reasonProxySlow
	default:
		return reasonProxyBad
	}
}

// deliver hands an admitted connection to Accept, or closes it if the
// listener closes first.
func (l *Listener) deliver(c *Conn) {
	select {
	case l.ready <- c:
	case <-l.done:
		c.Close()
		l.stats.refused[reasonShutdown].Add(1)
	}
}

// pendingSet tracks connections whose PROXY header is being read, so that
// Close can interrupt the reads instead of waiting for their deadlines.
type pendingSet struct {
	mu      sync.Mutex
	closing bool
	conns   map[net.Conn]struct{}
}

// add registers c; it reports false when the listener is closing.
func (p *pendingSet) add(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return false
	}
	if p.conns == nil {
		p.conns = make(map[net.Conn]struct{})
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *pendingSet) remove(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// abortAll makes every pending read fail now, and every later add fail.
func (p *pendingSet) abortAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closing = true
	for c := range p.conns {
		_ = c.SetReadDeadline(time.Unix(1, 0)) // a time long past; errors mean the conn is already gone
	}
}

// permits are the slots one connection holds, one per level that applied.
type permits struct {
	first limit.Permit[clientkey.Key]
	more  []limit.Permit[clientkey.Key]
}

func (ps *permits) add(p limit.Permit[clientkey.Key]) {
	if !ps.first.Valid() {
		ps.first = p
		return
	}
	ps.more = append(ps.more, p)
}

// release gives back every slot; Permit.Release counts only once.
func (ps *permits) release() {
	ps.first.Release()
	for _, p := range ps.more {
		p.Release()
	}
}

// peerAddrPort returns the address and port of a connection's peer, the
// address unmapped, or the zero AddrPort when it has none; for the
// refusal line.
func peerAddrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok && ta != nil {
		ip, _ := netip.AddrFromSlice(ta.IP)
		return netip.AddrPortFrom(ip.Unmap(), uint16(ta.Port))
	}
	if a == nil {
		return netip.AddrPort{}
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// peerAddr returns the IP address of a connection's peer, unmapped, or the
// zero Addr when it has none. *net.TCPAddr is read without allocating;
// other addresses are parsed from their String as "ip:port".
func peerAddr(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ta == nil {
			return netip.Addr{}
		}
		ip, _ := netip.AddrFromSlice(ta.IP)
		return ip.Unmap()
	}
	if a == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap().WithZone("")
}
