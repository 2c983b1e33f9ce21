package connlimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/rate"
)

// Back-off after a temporary accept error, as net/http's Server.Serve.
const (
	minAcceptDelay = 5 * time.Millisecond
	maxAcceptDelay = time.Second
)

// ErrClosed is returned by [Listener.Accept] after [Listener.Close]. It
// matches [net.ErrClosed] under errors.Is, which is what net/http and most
// servers check to end their accept loop quietly.
var ErrClosed error = listenerClosed{}

type listenerClosed struct{}

func (listenerClosed) Error() string        { return "connlimit: listener closed" }
func (listenerClosed) Is(target error) bool { return target == net.ErrClosed }

// A Listener wraps a [net.Listener] and admits each accepted connection
// only if its client is under its caps; a refused connection is closed at
// once, before any byte is read from it, and Accept goes on to the next.
// Every connection Accept returns is a [*Conn] holding a slot that its
// Close gives back. A Listener is safe for concurrent use.
type Listener struct {
	inner  net.Listener
	s      settings
	levels []level                      // levels[0] is the per-client cap
	rate   *rate.Limiter[clientkey.Key] // nil without Config.ConnRate
	tokens chan struct{}
	async  bool // admission may block: it runs on per-connection goroutines

	// The raw accept path (see rawAcceptor), used for the next rawRun
	// accepts after a refusal. Nil when inner is not a TCP listener or
	// admission is async.
	raw    *rawAcceptor
	rawRun atomic.Int32

	syn *synFilter // nil without Config.SYNFilter

	live liveConns // the open connections, for Adopt

	stats                      counters
	refusalGate, acceptErrGate logGate
	// suppressedArmed: a timer will report the refusal lines held back
	// (see reportSuppressed).
	suppressedArmed atomic.Bool
	now             func() time.Time

	done      chan struct{}
	closeOnce sync.Once
	closeErr  error

	// Used only when async.
	ctx       context.Context
	cancel    context.CancelFunc
	startOnce sync.Once
	loopDone  chan struct{}
	ready     chan *Conn
	failed    chan struct{}
	failErr   error // set before failed is closed
	admitting sync.WaitGroup
	pending   pendingSet
}

var _ net.Listener = (*Listener)(nil)

// level is one cap: a limiter over the keys of one prefix length per family.
type level struct {
	lim    *limit.Limiter[clientkey.Key]
	keyer  clientkey.Keyer
	v4, v6 bool // the families it applies to
}

func (lv *level) appliesTo(a netip.Addr) bool {
	if a.Is4() {
		return lv.v4
	}
	return lv.v6
}

// NewListener returns a Listener admitting connections from inner under
// cfg, or an error naming the first invalid field of cfg. It does not
// start accepting: the first call to Accept does. Closing the Listener
// closes inner.
func NewListener(inner net.Listener, cfg Config) (*Listener, error) {
	if inner == nil {
		return nil, errors.New("connlimit: inner listener is nil")
	}
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	l := &Listener{inner: inner, s: s, now: time.Now, done: make(chan struct{})}
	l.async = s.ProxyProtocol || s.Store != nil && s.anyCap() || s.ConnRateStore != nil
	if s.MaxConns > 0 {
		l.tokens = make(chan struct{}, s.MaxConns)
	}
	if err := l.buildLevels(); err != nil {
		return nil, err
	}
	if err := l.buildRate(); err != nil {
		l.closeLimiters()
		return nil, err
	}
	if !l.async {
		l.raw = newRawAcceptor(inner)
	}
	if s.SYNFilter {
		if err := l.startSYNFilter(); err != nil {
			return nil, err
		}
	}
	if l.async {
		l.ctx, l.cancel = context.WithCancel(context.Background())
		l.loopDone = make(chan struct{})
		l.ready = make(chan *Conn)
		l.failed = make(chan struct{})
	}
	return l, nil
}

func (l *Listener) startSYNFilter() error {
	install, err := newSYNInstaller(l.inner)
	if err != nil {
		return err
	}
	client := l.levels[0].lim
	l.syn = &synFilter{
		install: install,
		inUse:   client.InUse,
		capOf:   l.s.capOf,
		log:     l.s.Logger,
		name:    l.s.Name,
		keys:    make(map[clientkey.Key]struct{}),
	}
	return nil
}

// buildRate makes the per-client connection rate limiter, if configured.
// Its delay mode is nodelay whatever ConnRate.Delay says: a connection is
// admitted or refused, never delayed.
func (l *Listener) buildRate() error {
	if l.s.ConnRate.Rate.IsZero() {
		return nil
	}
	lim, err := rate.New(rate.Config[clientkey.Key]{
		Rate:  l.s.ConnRate.Rate,
		Burst: l.s.ConnRate.Burst,
		Delay: rate.NoDelay,
		Hash:  clientkey.Key.Hash, // the default hash allocates for netip keys
		Store: l.s.ConnRateStore,
		Name:  l.s.Name + " client rate",
	})
	if err != nil {
		return fmt.Errorf("connlimit: ConnRate: %w", err)
	}
	l.rate = lim
	return nil
}

// closeLimiters stops every limiter's background work.
func (l *Listener) closeLimiters() {
	for _, lv := range l.levels {
		lv.lim.Close()
	}
	if l.rate != nil {
		l.rate.Close()
	}
}

func (l *Listener) buildLevels() error {
	base := limit.Config[clientkey.Key]{
		Policy: Policy{
			Shadow:       l.s.EnforceAbove > 0, // refusals are decided here, against the open count
			ReclaimAfter: -1,                   // a slot lives as long as its connection
		},
		Hash:   clientkey.Key.Hash, // the default hash allocates for netip keys
		Store:  l.s.Store,
		Logger: l.s.Logger,
	}
	client := base
	client.Permits = l.s.Permits
	client.Name = l.s.Name + " client"
	if l.s.hasPermitsFor() {
		client.PermitsFor = l.s.permitsFor
	}
	lim, err := limit.New(client)
	if err != nil {
		return fmt.Errorf("connlimit: per-client limiter: %w", err)
	}
	l.levels = append(l.levels, level{lim: lim, keyer: l.s.Keyer, v4: true, v6: true})
	for i, lv := range l.s.Levels {
		cfg := base
		cfg.Permits = lv.Max
		cfg.Name = fmt.Sprintf("%s level %d", l.s.Name, i)
		keyer, err := clientkey.NewKeyer(lv.IPv4Bits, lv.IPv6Bits)
		if err == nil {
			lim, err = limit.New(cfg)
		}
		if err != nil {
			return fmt.Errorf("connlimit: Levels[%d]: %w", i, err)
		}
		l.levels = append(l.levels, level{lim: lim, keyer: keyer, v4: lv.IPv4Bits != 0, v6: lv.IPv6Bits != 0})
	}
	return nil
}

// Accept waits for and returns the next admitted connection, a [*Conn].
// Refused connections are closed, counted and logged, and never returned
// as errors, so that a server's accept loop carries on. While MaxConns
// connections are held, Accept waits without calling the inner Accept. On
// a temporary error of the inner Accept (EMFILE, ENFILE, ENOBUFS, ENOMEM,
// ECONNABORTED, or an error reporting Temporary) it backs off, from 5 ms
// doubling to 1 s, and tries again. It returns an error only when the
// inner listener fails otherwise (that error) or the Listener is closed
// ([ErrClosed], or the inner listener's error if it was closed first).
func (l *Listener) Accept() (net.Conn, error) {
	if l.async {
		return l.acceptReady()
	}
	var delay time.Duration
	for {
		conn, err := l.acceptRaw()
		if err != nil {
			return nil, err
		}
		if conn != nil {
			return conn, nil
		}
		c, err := l.acceptInner(&delay)
		if err != nil {
			return nil, err
		}
		if c == nil {
			continue // a temporary error, backed off
		}
		if conn := l.admitNow(c); conn != nil {
			l.stats.accepted.Add(1)
			return conn, nil
		}
	}
}

// rawRunLength is how many accepts after a refusal go through the raw
// path. Under a reconnect flood, refusals keep it on; once they stop, it
// turns itself off within this many connections, so that admitted
// connections go back to the poller's cheaper accept.
const rawRunLength = 64

// acceptRaw accepts through the raw path while it is on, refusing
// connections there at the cost of two system calls each, until it admits
// one or finds none pending. It returns nil, nil when the caller should
// accept through the inner listener.
func (l *Listener) acceptRaw() (*Conn, error) {
	for l.raw != nil && l.rawRun.Load() > 0 {
		l.rawRun.Add(-1)
		if err := l.takeToken(); err != nil {
			return nil, err
		}
		fd, peer, ok := l.raw.try()
		if !ok {
			l.giveToken()
			return nil, nil
		}
		if conn := l.admitRaw(fd, peer); conn != nil {
			l.stats.accepted.Add(1)
			return conn, nil
		}
	}
	return nil, nil
}

// admitRaw is admitNow for a connection accepted on the raw path: a
// refusal closes the descriptor, an admission makes it a net.Conn. It
// returns nil when the connection was refused or could not be made a
// net.Conn (then closed, its slots given back).
func (l *Listener) admitRaw(fd int, peerPort netip.AddrPort) *Conn {
	peer := peerPort.Addr()
	cl, why, err := l.claim(context.Background(), false, peer, l.s.Trusted.Contains(peer))
	if why != admitted {
		l.stats.refused[why].Add(1)
		l.stats.rawRefused.Add(1)
		closeRaw(fd, l.s.ResetOnRefuse)
		l.refused(why, peerPort, peer, err)
		return nil
	}
	c, err := rawConn(fd)
	if err != nil {
		cl.ps.release()
		l.giveToken()
		l.stats.acceptErrors.Add(1)
		l.logAcceptError(err, 0)
		return nil
	}
	l.stats.rawAdmitted.Add(1)
	return l.wrap(c, cl)
}

// acceptInner takes a MaxConns token and accepts one connection from the
// inner listener. After a temporary error it backs off and returns nil, nil.
// The token is given back on every path that returns no connection.
func (l *Listener) acceptInner(delay *time.Duration) (net.Conn, error) {
	if err := l.takeToken(); err != nil {
		return nil, err
	}
	c, err := l.inner.Accept()
	if err == nil {
		*delay = 0
		return c, nil
	}
	l.giveToken()
	if l.isClosed() {
		return nil, ErrClosed
	}
	if !isTemporary(err) {
		return nil, err
	}
	*delay = nextDelay(*delay)
	l.stats.acceptErrors.Add(1)
	l.logAcceptError(err, *delay)
	if !l.sleep(*delay) {
		return nil, ErrClosed
	}
	return nil, nil
}

func nextDelay(d time.Duration) time.Duration {
	if d == 0 {
		return minAcceptDelay
	}
	return min(2*d, maxAcceptDelay)
}

// isTemporary reports whether an accept error is worth retrying: the
// process or system is out of descriptors or buffers, or a connection was
// aborted before it could be accepted. A deadline set on the listener is
// not retried: whoever set it wants Accept to return.
func isTemporary(err error) bool {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED:
			return true
		}
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// sleep waits for d or until the listener closes; it reports whether the
// listener is still open.
func (l *Listener) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.done:
		return false
	}
}

// takeToken waits for room under MaxConns. It fails only when the
// listener closes.
func (l *Listener) takeToken() error {
	if l.tokens == nil {
		return nil
	}
	select {
	case l.tokens <- struct{}{}:
		return nil
	default:
	}
	select {
	case l.tokens <- struct{}{}:
		return nil
	case <-l.done:
		return ErrClosed
	}
}

func (l *Listener) giveToken() {
	if l.tokens != nil {
		<-l.tokens
	}
}

func (l *Listener) isClosed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// Close stops accepting and closes the inner listener, returning its
// Close error. Admissions in progress are interrupted (a PROXY header
// being read fails at once) and their connections closed, counted as
// Refused.Shutdown, before Close returns. Connections already returned by
// Accept are not closed: they keep their slots until their own Close. Later
// calls do nothing and return the first call's result.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		close(l.done)
		l.closeErr = l.inner.Close()
		if l.async {
			l.cancel()
			l.startOnce.Do(func() { close(l.loopDone) }) // never started: nothing to wait for
			<-l.loopDone
			l.pending.abortAll()
			l.admitting.Wait()
		}
		if l.syn != nil {
			l.syn.close()
		}
		l.closeLimiters()
	})
	return l.closeErr
}

// Addr returns the inner listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// Stats returns the listener's counts now.
func (l *Listener) Stats() Stats {
	s := l.stats.stats()
	if l.syn != nil {
		s.SYNFiltered = l.syn.filtered.Load()
	}
	return s
}

// Snapshot returns the per-client limiter's state: its busiest keys (at
// most top; zero or negative means all), each with its open connections,
// and its totals. Exempt connections appear in no key. With EnforceAbove,
// the totals count as shadow-refused the connections over their cap that
// were admitted because the listener was lightly loaded.
func (l *Listener) Snapshot(top int) limit.Snapshot[clientkey.Key] {
	return l.levels[0].lim.Snapshot(top)
}

// RateSnapshot returns the state of the per-client connection rate
// (Config.ConnRate): the keys that opened connections recently, the
// furthest ahead of their rate first (at most top; zero or negative means
// all), and its totals. Without ConnRate it returns the zero Snapshot.
func (l *Listener) RateSnapshot(top int) rate.Snapshot[clientkey.Key] {
	if l.rate == nil {
		return rate.Snapshot[clientkey.Key]{}
	}
	return l.rate.Snapshot(top)
}

// RateTotals returns the totals of the per-client connection rate
// (Config.ConnRate) without listing keys, which makes it cheaper than
// RateSnapshot for a metrics scrape. Without ConnRate it returns the zero
// Totals.
func (l *Listener) RateTotals() rate.Totals {
	if l.rate == nil {
		return rate.Totals{}
	}
	return l.rate.Totals()
}

// LevelSnapshot is [Listener.Snapshot] for Config.Levels[i], whose keys
// are that level's prefixes. It panics if i is out of range, as indexing
// Config.Levels would.
func (l *Listener) LevelSnapshot(i, top int) limit.Snapshot[clientkey.Key] {
	if i < 0 || i >= len(l.levels)-1 {
		panic(fmt.Sprintf("connlimit: LevelSnapshot(%d) with %d levels", i, len(l.levels)-1))
	}
	return l.levels[1+i].lim.Snapshot(top)
}
