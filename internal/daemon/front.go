package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/internal/cidrlist"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/evloop"
	"github.com/seed-a07d1050/portcullis/promlimit"

	"github.com/prometheus/client_golang/prometheus"
)

// front is one listener of the daemon: a bound socket, its connection caps,
// and what serves the connections it admits (its HTTP servers or the TCP
// proxy).
type front struct {
	cfg   config.Listener // effective
	id    identity
	log   *slog.Logger
	raw   net.Listener         // the bound TCP socket; nil for http3
	conns *connlimit.Listener  // nil for http3
	store io.Closer            // the cluster Store of the connection caps; nil without
	rates io.Closer            // the cluster Store of conn_rate; nil without
	redis prometheus.Collector // that Store's Redis metrics; nil without
	h3    *h3Front             // http3 listeners only
	stats prometheus.Collector

	// altSvc, when set, is the Alt-Svc header of every response: the port of
	// an http3 listener sharing this listener's routes.
	altSvc atomic.Pointer[string]

	// HTTP listeners.
	http        *httpServers                // built when bound (http and https)
	httpStarted bool                        // http started; under Server.mu
	table       *atomic.Pointer[routeTable] // shared with listeners that use RoutesFrom
	active      atomic.Int64                // handlers running, tunnels included

	// TCP listeners.
	tcp *tcpProxy

	// cert is the certificate of https and http3 listeners, read again on
	// every reload so that a renewed file is picked up without a restart.
	cert atomic.Pointer[tls.Certificate]
	// nextCert is the certificate a reload in progress read, stored in
	// cert when it commits; under Server.mu.
	nextCert *tls.Certificate

	// lists are the deny_file and allow_file in force, nil without; read
	// at every accept (checkClient), swapped by a reload. nextLists is what
	// a reload in progress read for a front it keeps, stored in lists when
	// it commits; under Server.mu. denied counts their refusals.
	lists     atomic.Pointer[cidrlist.Matcher]
	nextLists *cidrlist.Matcher
	denied    *deniedCounts

	served chan struct{} // closed when the serving goroutines return
}

// loadCert reads the listener's certificate files into f.cert. On error
// f.cert is left as it was.
func (f *front) loadCert() error {
	cert, err := f.cfg.TLS.Certificate()
	if err != nil {
		return fmt.Errorf("proxy: listener %s: load certificate: %w", f.cfg.Name, err)
	}
	f.cert.Store(&cert)
	return nil
}

// getCertificate is the tls.Config hook that serves the current f.cert.
func (f *front) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return f.cert.Load(), nil
}

// socketConfig is the part of a listener's configuration that its socket,
// its connection caps and its http.Server are built from: when it does not
// change across a reload, the listener keeps its socket and its counts.
func socketConfig(lc config.Listener) config.Listener {
	lc.Routes = nil
	lc.ClientLimit = nil
	lc.Rate = nil
	lc.Mode, lc.Auth, lc.Forward = "", nil, nil // the route table's
	lc.DenyFile, lc.AllowFile = "", ""          // read at every reload, swapped in place
	return lc
}

// sameSocket reports whether a reload to lc can keep f's socket. A listen
// address naming the port f was given for port 0 counts as unchanged.
func (f *front) sameSocket(lc config.Listener) bool {
	old := f.cfg
	if f.sameAddr(lc.Listen) {
		old.Listen = lc.Listen
	}
	return reflect.DeepEqual(socketConfig(old), socketConfig(lc))
}

// sameAddr reports whether listen names the address f is bound to.
func (f *front) sameAddr(listen string) bool {
	return listen == f.cfg.Listen || sameBoundAddr(f.addr(), listen)
}

// testHookBind, when set by a test, runs before a listener is bound; an
// error from it fails the bind, as a taken port would.
var testHookBind func(config.Listener) error

// listenTCP binds the TCP socket of lc. HTTP listeners leave TCP keep-alive
// off on the connections they accept, as nginx does by default: their idle
// and read-header timeouts already end silent clients, and every accepted
// socket, refused ones included, is then spared four setsockopt calls,
// which matters under a reconnect storm. tcp listeners keep Go's default
// keep-alive, since their connections may stay silent for long. Every
// socket is plain TCP, not MPTCP (Go's default since 1.24): an MPTCP socket
// takes no socket filter, and a reload may turn syn_filter on for a socket
// it keeps.
func listenTCP(lc config.Listener) (net.Listener, error) {
	var lcfg net.ListenConfig
	if lc.Protocol.IsHTTP() {
		lcfg.KeepAlive = -1
	}
	lcfg.SetMultipathTCP(false)
	return lcfg.Listen(context.Background(), "tcp", lc.Listen)
}

// bindFront binds the socket of lc and wraps it in its connection caps and
// its deny and allow lists; it does not serve yet. On error nothing is left
// open.
func bindFront(lc config.Listener, log *slog.Logger, cl *cluster, lists frontLists) (*front, error) {
	if testHookBind != nil {
		if err := testHookBind(lc); err != nil {
			return nil, fmt.Errorf("proxy: listener %s: %w", lc.Name, err)
		}
	}
	if lc.Protocol == config.ProtocolHTTP3 {
		id, err := newIdentity(&lc)
		if err != nil {
			return nil, err
		}
		f := &front{cfg: lc, id: id, log: log.With("listener", lc.Name), served: make(chan struct{})}
		lists.install(f) // before the QUIC transport sees a packet
		if err := bindH3(f, cl); err != nil {
			return nil, err
		}
		f.stats = collectorList{f.h3.rates.withStats(newQUICCollector(f.h3, lc.Name)), newDeniedCollector(f)}
		return f, nil
	}
	raw, err := listenTCP(lc)
	if err != nil {
		return nil, fmt.Errorf("proxy: listener %s: %w", lc.Name, err)
	}
	return bindFrontOn(raw, lc, log, cl, lists)
}

// bindShared opens a second descriptor on the socket of holder, a running
// TCP front at the address of lc, and builds lc's front on it, so that the
// new front can take over the socket without refusing a connection. On
// error nothing is left open and holder is untouched.
func bindShared(holder *front, lc config.Listener, log *slog.Logger, cl *cluster, lists frontLists) (*front, error) {
	raw, err := dupListener(holder.raw)
	if err != nil {
		return nil, fmt.Errorf("proxy: listener %s: share the socket of %s: %w", lc.Name, holder.cfg.Name, err)
	}
	return bindFrontOn(raw, lc, log, cl, lists)
}

// bindFrontOn builds the front of lc, a TCP listener, on the bound socket
// raw: its connection caps, its certificate. On error raw and everything
// else is closed.
func bindFrontOn(raw net.Listener, lc config.Listener, log *slog.Logger, cl *cluster, lists frontLists) (*front, error) {
	id, err := newIdentity(&lc)
	if err != nil {
		_ = raw.Close()
		return nil, err
	}
	f := &front{cfg: lc, id: id, log: log.With("listener", lc.Name), raw: raw, served: make(chan struct{})}
	lists.install(f)
	if lc.Protocol == config.ProtocolHTTPS {
		if err := f.loadCert(); err != nil {
			_ = raw.Close()
			return nil, err
		}
	}
	cc := f.connConfig(log)
	cs, err := cl.connStore(&lc)
	if cs != nil { // a nil *clusterStore must not become a non-nil Store
		cc.Store, f.store, f.redis = cs, cs, cs.metrics
	}
	if err == nil {
		err = f.connRateStore(&cc, cl)
	}
	if err == nil {
		f.conns, err = connlimit.NewListener(raw, cc)
	}
	if err != nil {
		_ = raw.Close()
		f.closeStore()
		return nil, fmt.Errorf("proxy: listener %s: %w", lc.Name, err)
	}
	f.stats = promlimit.NewConnCollector(f.conns, promlimit.Opts{ConstLabels: prometheus.Labels{"listener": lc.Name}})
	f.stats = collectorList{f.withConnRateStats(f.stats, cc.ConnRateStore), newDeniedCollector(f)}
	if lc.Protocol.IsHTTP() {
		f.http = newHTTPServers(f)
	}
	return f, nil
}

// connConfig is the connlimit configuration of f, logging to log: not f.log,
// since connlimit names the listener in its lines itself.
func (f *front) connConfig(log *slog.Logger) connlimit.Config {
	lc := &f.cfg
	c := connlimit.Config{
		Policy:             connlimit.Policy{Permits: lc.MaxConnsPerClient},
		Keyer:              f.id.keyer,
		EnforceAbove:       lc.EnforceAbove,
		MaxConns:           lc.MaxConns,
		Trusted:            f.id.resolver.Trusted,
		ProxyProtocol:      lc.ProxyProtocol,
		ProxyHeaderTimeout: lc.ProxyProtocolTimeout,
		ResetOnRefuse:      lc.ResetOnRefuse,
		SYNFilter:          lc.SYNFilter,
		Filter:             f.checkClient,
		Logger:             log,
		Name:               lc.Name,
	}
	for _, pl := range lc.PrefixLevels {
		c.Levels = append(c.Levels, connlimit.Level{IPv4Bits: pl.IPv4Prefix, IPv6Bits: pl.IPv6Prefix, Max: pl.Max})
	}
	for _, o := range lc.ConnOverrides {
		c.PrefixOverrides = append(c.PrefixOverrides, connlimit.Override{Prefix: o.CIDR, Max: o.Max})
	}
	if lc.ConnRate != nil {
		c.ConnRate = rateLimitOf(lc.ConnRate.Limit())
	}
	return c
}

// addr returns the address the listener is bound to.
func (f *front) addr() net.Addr {
	if f.h3 != nil {
		return f.h3.udp.LocalAddr()
	}
	return f.raw.Addr()
}

// serving reports whether f was started.
func (f *front) serving() bool {
	return f.httpStarted || f.tcp != nil || (f.h3 != nil && f.h3.srv != nil)
}

// stopAccepting makes a TCP front accept no more connections, leaving
// those it has to drain, and returns once its accept loop has ended: a
// connection the loop took from the socket as it was closed is then
// admitted and listed, so that a front adopting f's connections sees it.
// Its socket stays open if a new front shares it.
func (f *front) stopAccepting() {
	if f.conns == nil {
		return
	}
	_ = f.conns.Close()
	if f.serving() {
		<-f.served
	}
}

// connStats returns the listener's connection counts.
func (f *front) connStats() connlimit.Stats {
	if f.h3 != nil {
		s := f.h3.stats()
		// quicadmit never sees the attempts the lists refuse.
		s.Refused.Filtered = f.denied.denyList.Load() + f.denied.notAllowed.Load()
		return s
	}
	return f.conns.Stats()
}

// serveH3 starts serving HTTP/3 with the route table in table.
func (f *front) serveH3(table *atomic.Pointer[routeTable]) {
	f.table = table
	f.h3.serve(f)
}

// serveHTTP starts serving HTTP (or HTTPS with HTTP/2) from the admitted
// connections, with the route table in table, on the servers built when f
// was bound.
func (f *front) serveHTTP(table *atomic.Pointer[routeTable], base context.Context, loopCounts *evloop.Counts) {
	f.table = table
	f.httpStarted = true
	f.http.start(f.conns, base, f.served, loopCounts, func(err error) { f.log.Error("listener stopped", "error", err) })
}

// ServeHTTP serves one request on the route table current when it arrived.
func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.active.Add(1)
	defer f.active.Add(-1)
	if alt := f.altSvc.Load(); alt != nil {
		w.Header().Set("Alt-Svc", *alt)
	}
	f.table.Load().handler.ServeHTTP(w, r)
}

// serveTCP starts proxying the admitted connections to the listener's
// upstream.
func (f *front) serveTCP(base context.Context, accessLog bool) {
	f.tcp = newTCPProxy(f.cfg.Upstream, f.cfg.TCPIdleTimeout, f.log, accessLog)
	go func() {
		defer close(f.served)
		f.tcp.serve(base, f.conns)
	}()
}

// drainPoll is how often a draining listener looks whether its exchanges
// have ended.
const drainPoll = 10 * time.Millisecond

// shutdown stops accepting and waits for the listener's exchanges and
// tunnels to end, until ctx ends; then it closes what is left. It returns
// ctx.Err() if it had to cut something off, nil otherwise.
func (f *front) shutdown(ctx context.Context) error {
	if !f.serving() {
		f.closeUnserved()
		return nil
	}
	var err error
	if f.h3 != nil {
		err = f.h3.shutdown(ctx, f)
	} else if f.http != nil {
		err = f.http.shutdown(ctx) // closes the listener, waits for idle
		if err == nil {
			err = waitZero(ctx, &f.active) // hijacked tunnels are not tracked by Shutdown
		}
		if err != nil {
			f.http.close()
		}
	} else {
		_ = f.conns.Close()
		// Once the accept loop has returned no connection can join the
		// proxy's count, so the wait below sees every one of them.
		<-f.served
		if f.tcp != nil {
			err = f.tcp.shutdown(ctx)
		}
	}
	<-f.served
	f.closeStore()
	return err
}

// close stops the listener at once, cutting every connection.
func (f *front) close() {
	if !f.serving() {
		f.closeUnserved()
		return
	}
	if f.h3 != nil {
		f.h3.closeAll()
	} else if f.http != nil {
		f.http.close()
	} else {
		_ = f.conns.Close()
		if f.tcp != nil {
			f.tcp.closeAll()
		}
	}
	select {
	case <-f.served:
	case <-time.After(time.Second):
	}
	f.closeStore()
}

// closeUnserved closes a listener that was bound but never served.
func (f *front) closeUnserved() {
	if f.h3 != nil {
		f.h3.closeAll()
		return
	}
	_ = f.conns.Close()
	f.closeStore()
}

// closeStore closes the cluster Store of the connection caps, once the
// listener holds no connection, so that this node's counts leave Redis.
func (f *front) closeStore() {
	if f.store != nil {
		_ = f.store.Close()
	}
	if f.rates != nil {
		_ = f.rates.Close()
	}
}

func waitZero(ctx context.Context, n *atomic.Int64) error {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for n.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
