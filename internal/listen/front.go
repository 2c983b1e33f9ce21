package listen

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/internal/bytepath"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/promlimit"
)

// Front is one listener of the daemon: a bound socket, its admission at
// accept, and what serves the connections it admits (its HTTP servers,
// its HTTP/3 server or the TCP proxy). Bind it with [ListenTCP] and
// [NewTCP], [Share] and [NewTCP], or [BindH3]; start it with
// [Front.Serve]; stop it with [Front.Shutdown] (graceful), [Front.Close]
// (abrupt), or, if it never served, [Front.CloseUnserved]. A Front cannot
// serve again once stopped.
type Front struct {
	cfg   config.Listener // effective
	log   *slog.Logger
	raw   net.Listener        // the bound TCP socket; nil for http3
	conns *connlimit.Listener // nil for http3
	h3    *h3Front            // http3 listeners only
	stats prometheus.Collector

	// altSvc, when set, is the Alt-Svc header of every response: the port of
	// an http3 listener sharing this listener's routes.
	altSvc atomic.Pointer[string]

	// HTTP listeners.
	http        *httpServers // built when bound (http and https)
	httpStarted bool         // http started; under the caller's lock
	routes      Serving      // set by Serve, before a request is served
	active      atomic.Int64 // handlers running, tunnels included

	// TCP listeners.
	tcp *tcpProxy

	// cert is the certificate of https and http3 listeners, read when bound
	// and replaced by the daemon's reloads (SetCert).
	cert atomic.Pointer[tls.Certificate]

	served chan struct{} // closed when the serving goroutines return
}

// errorf returns an error of the listener named name, saying what was
// being done.
func errorf(name, format string, args ...any) error {
	return fmt.Errorf("listen: listener %s: "+format, append([]any{name}, args...)...)
}

// loadCert reads the listener's certificate files into f.cert. On error
// f.cert is left as it was.
func (f *Front) loadCert() error {
	cert, err := f.cfg.TLS.Certificate()
	if err != nil {
		return errorf(f.cfg.Name, "load certificate: %w", err)
	}
	f.cert.Store(&cert)
	return nil
}

// getCertificate is the tls.Config hook that serves the current f.cert.
func (f *Front) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return f.cert.Load(), nil
}

// Cert returns the certificate f serves now: nil but for https and http3
// listeners.
func (f *Front) Cert() *tls.Certificate { return f.cert.Load() }

// SetCert makes cert the certificate of the TLS handshakes f begins from
// now on (a reload read the listener's files again). Handshakes under way
// finish with the one they began with.
func (f *Front) SetCert(cert *tls.Certificate) { f.cert.Store(cert) }

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

// SameSocket reports whether a reload to lc can keep f's socket. A listen
// address naming the port f was given for port 0 counts as unchanged.
func (f *Front) SameSocket(lc config.Listener) bool {
	old := f.cfg
	if f.SameAddr(lc.Listen) {
		old.Listen = lc.Listen
	}
	return reflect.DeepEqual(socketConfig(old), socketConfig(lc))
}

// SameAddr reports whether listen names the address f is bound to.
func (f *Front) SameAddr(listen string) bool {
	return listen == f.cfg.Listen || SameBoundAddr(f.Addr(), listen)
}

// SameBoundAddr reports whether listen names the bound address a (TCP or
// UDP): the same port, and the same IP or an unspecified one.
func SameBoundAddr(a net.Addr, listen string) bool {
	want, err := net.ResolveTCPAddr("tcp", listen)
	if err != nil || want.Port == 0 {
		return false
	}
	var ip net.IP
	var port int
	switch a := a.(type) {
	case *net.TCPAddr:
		ip, port = a.IP, a.Port
	case *net.UDPAddr:
		ip, port = a.IP, a.Port
	default:
		return false
	}
	return port == want.Port && (ip.Equal(want.IP) || want.IP == nil && ip.IsUnspecified())
}

// ListenTCP binds the TCP socket of lc. HTTP listeners leave TCP keep-alive
// off on the connections they accept, as nginx does by default: their idle
// and read-header timeouts already end silent clients, and every accepted
// socket, refused ones included, is then spared four setsockopt calls,
// which matters under a reconnect storm. tcp listeners keep Go's default
// keep-alive, since their connections may stay silent for long. Every
// socket is plain TCP, not MPTCP (Go's default since 1.24): an MPTCP socket
// takes no socket filter, and a reload may turn syn_filter on for a socket
// it keeps.
func ListenTCP(lc config.Listener) (net.Listener, error) {
	var lcfg net.ListenConfig
	if lc.Protocol.IsHTTP() {
		lcfg.KeepAlive = -1
	}
	lcfg.SetMultipathTCP(false)
	ln, err := lcfg.Listen(context.Background(), "tcp", lc.Listen)
	if err != nil {
		return nil, errorf(lc.Name, "%w", err)
	}
	return ln, nil
}

// Share opens a second descriptor on the socket of holder, a running TCP
// front, for the listener named name: a front built on it ([NewTCP]) can
// take over the socket without refusing a connection, accepting from the
// same queue while holder closes its own descriptor. holder is untouched.
func Share(holder *Front, name string) (net.Listener, error) {
	tl, ok := holder.raw.(*net.TCPListener)
	if !ok {
		return nil, errorf(name, "share the socket of %s: cannot share a %T", holder.cfg.Name, holder.raw)
	}
	f, err := tl.File()
	if err == nil {
		defer f.Close()
		var ln net.Listener
		if ln, err = net.FileListener(f); err == nil {
			return ln, nil
		}
	}
	return nil, errorf(name, "share the socket of %s: %w", holder.cfg.Name, err)
}

// NewTCP builds the front of lc, an http, https or tcp listener, on the
// bound socket raw: its certificate, its connection caps and their
// admission, and for HTTP its servers; it does not serve yet. On error raw
// is closed; the stores of adm are the caller's to close.
func NewTCP(raw net.Listener, lc config.Listener, adm Admission) (*Front, error) {
	if lc.Protocol == config.ProtocolHTTP3 {
		_ = raw.Close()
		return nil, errorf(lc.Name, "an http3 listener is bound with BindH3, not on a TCP socket")
	}
	f := &Front{cfg: lc, log: logOf(adm).With("listener", lc.Name), raw: raw, served: make(chan struct{})}
	if lc.Protocol == config.ProtocolHTTPS {
		if err := f.loadCert(); err != nil {
			_ = raw.Close()
			return nil, err
		}
	}
	var err error
	if f.conns, err = connlimit.NewListener(raw, connConfig(&lc, adm)); err != nil {
		_ = raw.Close()
		return nil, errorf(lc.Name, "connection caps: %w", err)
	}
	f.stats = promlimit.NewConnCollector(f.conns, promlimit.Opts{ConstLabels: prometheus.Labels{"listener": lc.Name}})
	if lc.Protocol.IsHTTP() {
		f.http = newHTTPServers(f)
	}
	return f, nil
}

// logOf returns the logger of adm, or slog.Default().
func logOf(adm Admission) *slog.Logger {
	if adm.Log != nil {
		return adm.Log
	}
	return slog.Default()
}

// connConfig is the connlimit configuration of lc, bound with adm. It logs
// to adm.Log as it is: connlimit names the listener in its lines itself.
func connConfig(lc *config.Listener, adm Admission) connlimit.Config {
	c := connlimit.Config{
		Policy:             connlimit.Policy{Permits: lc.MaxConnsPerClient},
		Keyer:              adm.Keyer,
		EnforceAbove:       lc.EnforceAbove,
		MaxConns:           lc.MaxConns,
		Trusted:            adm.Trusted,
		ProxyProtocol:      lc.ProxyProtocol,
		ProxyHeaderTimeout: lc.ProxyProtocolTimeout,
		ResetOnRefuse:      lc.ResetOnRefuse,
		SYNFilter:          lc.SYNFilter,
		Filter:             adm.Filter,
		Logger:             logOf(adm),
		Name:               lc.Name,
		ConnRate:           adm.ConnRate,
		Store:              adm.Store,
		ConnRateStore:      adm.ConnRateStore,
	}
	for _, pl := range lc.PrefixLevels {
		c.Levels = append(c.Levels, connlimit.Level{IPv4Bits: pl.IPv4Prefix, IPv6Bits: pl.IPv6Prefix, Max: pl.Max})
	}
	for _, o := range lc.ConnOverrides {
		c.PrefixOverrides = append(c.PrefixOverrides, connlimit.Override{Prefix: o.CIDR, Max: o.Max})
	}
	return c
}

// Addr returns the address the listener is bound to.
func (f *Front) Addr() net.Addr {
	if f.h3 != nil {
		return f.h3.udp.LocalAddr()
	}
	return f.raw.Addr()
}

// Conns returns the connection caps of a TCP listener; nil for http3.
func (f *Front) Conns() *connlimit.Listener { return f.conns }

// Collector returns the metrics of the listener's own admission: its
// connection caps, or, for http3, its QUIC admission and per-client cap.
// The metrics of what Admission gave it (conn_rate totals, the Stores,
// handshake_rate) are the caller's to add.
func (f *Front) Collector() prometheus.Collector { return f.stats }

// Serving reports whether f was started.
func (f *Front) Serving() bool {
	return f.httpStarted || f.tcp != nil || (f.h3 != nil && f.h3.srv != nil)
}

// StopAccepting makes a TCP front accept no more connections, leaving
// those it has to drain, and returns once its accept loop has ended: a
// connection the loop took from the socket as it was closed is then
// admitted and listed, so that a front adopting f's connections sees it.
// Its socket stays open if a new front shares it. An http3 front is left
// as it is.
func (f *Front) StopAccepting() {
	if f.conns == nil {
		return
	}
	_ = f.conns.Close()
	if f.Serving() {
		<-f.served
	}
}

// DetachSocketFilter removes the socket filter of f's socket (Linux): the
// SYN filter a front with syn_filter installed on a socket f, without it,
// took over. A socket without a filter is left as it is.
func (f *Front) DetachSocketFilter() {
	if f.raw != nil {
		detachSocketFilter(f.raw)
	}
}

// Serve starts serving the admitted connections with s: HTTP (or HTTPS
// with HTTP/2) on the servers built when f was bound, HTTP/3, or the TCP
// proxy to the listener's upstream. It returns at once; errors of the
// serving goroutines are logged. It fails, starting nothing, when f serves
// already or s has no Handler for an HTTP listener. It must not be called
// by two goroutines at once.
func (f *Front) Serve(s Serving) error {
	switch {
	case f.Serving():
		return errorf(f.cfg.Name, "serve: already serving")
	case s.Handler == nil && f.cfg.Protocol != config.ProtocolTCP:
		return errorf(f.cfg.Name, "serve: no handler for an %s listener", f.cfg.Protocol)
	}
	if s.Base == nil {
		s.Base = context.Background()
	}
	f.routes = s
	switch {
	case f.h3 != nil:
		f.h3.serve(f)
	case f.http != nil:
		f.httpStarted = true
		f.http.start(f.conns, s, f.served, func(err error) { f.log.Error("listener stopped", "error", err) })
	default:
		f.tcp = newTCPProxy(f.cfg.Upstream, f.cfg.TCPIdleTimeout, f.log, s.AccessLog)
		go func() {
			defer close(f.served)
			f.tcp.serve(s.Base, f.conns)
		}()
	}
	return nil
}

// ServeHTTP serves one request with the handler given to Serve, counting
// it as under way, after adding the listener's Alt-Svc field.
func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.active.Add(1)
	defer f.active.Add(-1)
	if alt := f.altSvc.Load(); alt != nil {
		w.Header().Set("Alt-Svc", *alt)
	}
	f.routes.Handler.ServeHTTP(w, r)
}

// byteTable is the byte path's view of the table in force now.
func (f *Front) byteTable() *bytepath.Table {
	if f.routes.Bytes == nil {
		return nil
	}
	return f.routes.Bytes()
}

// byteListener returns the byte path's view of f: the byte path's part
// of the route table f serves now, read for each request.
func (f *Front) byteListener() bytepath.Listener {
	return bytepath.Listener{Table: f.byteTable, AltSvc: &f.altSvc, Active: &f.active, Log: f.log}
}

// AltSvc returns the Alt-Svc field f's answers carry now, or "".
func (f *Front) AltSvc() string {
	if alt := f.altSvc.Load(); alt != nil {
		return *alt
	}
	return ""
}

// drainPoll is how often a draining listener looks whether its exchanges
// have ended.
const drainPoll = 10 * time.Millisecond

// Shutdown stops accepting and waits for the listener's exchanges and
// tunnels to end, until ctx ends; then it closes what is left. It returns
// ctx.Err() if it had to cut something off, nil otherwise. Once it returns
// the listener holds no connection.
func (f *Front) Shutdown(ctx context.Context) error {
	if !f.Serving() {
		f.CloseUnserved()
		return nil
	}
	var err error
	if f.h3 != nil {
		err = f.h3.shutdown(ctx, f)
	} else if f.http != nil {
		err = f.http.shutdown(ctx) // closes the listener, waits for idle
		if err == nil {
			err = f.WaitIdle(ctx) // hijacked tunnels are not tracked by Shutdown
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
	return err
}

// Close stops the listener at once, cutting every connection; it waits up
// to a second for the serving goroutines to return.
func (f *Front) Close() {
	if !f.Serving() {
		f.CloseUnserved()
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
}

// CloseUnserved closes a listener that was bound but never served.
func (f *Front) CloseUnserved() {
	if f.h3 != nil {
		f.h3.closeAll()
		return
	}
	_ = f.conns.Close()
}

// WaitIdle waits until no exchange or tunnel of the listener is under way,
// or ctx ends (then it returns ctx.Err()).
func (f *Front) WaitIdle(ctx context.Context) error {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for f.active.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
