package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/internal/bytepath"
	"github.com/seed-a07d1050/portcullis/internal/cidrlist"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/evloop"
	"github.com/seed-a07d1050/portcullis/internal/listen"
	"github.com/seed-a07d1050/portcullis/internal/route"
)

// The listeners themselves (socket, connection caps, QUIC admission, the
// HTTP servers, the TCP proxy) are internal/listen's; this file gives them
// what they take of the daemon (listen.Admission, listen.Serving) and keeps
// beside each one what the daemon owns of it.

// front is a listener as the daemon runs it: its listen.Front, and what the
// daemon gave it and answers for: the deny and allow lists, the cluster
// Stores and the handshake_rate at accept, the metrics of all that, and the
// route table it serves.
type front struct {
	ln    *listen.Front
	cfg   config.Listener      // effective; the one ln was bound with
	log   *slog.Logger         // with listener=<name>
	conns *connlimit.Listener  // ln's connection caps; nil for http3
	store io.Closer            // the cluster Store of the connection caps; nil without
	rates io.Closer            // the cluster Store of conn_rate; nil without
	redis prometheus.Collector // that Store's Redis metrics; nil without
	h3    *h3Rates             // http3 listeners only: their handshake_rate
	stats prometheus.Collector // ln's metrics and the daemon's for it

	// table is the route table the listener serves, set when it starts
	// serving; shared with the listeners that use RoutesFrom. served is
	// the same, for the connection caps' goroutines (prefetch).
	table  *atomic.Pointer[route.Table]
	served atomic.Pointer[atomic.Pointer[route.Table]]

	// nextCert is the certificate a reload in progress read, given to ln
	// when it commits; under Server.mu.
	nextCert *tls.Certificate

	// lists are the deny_file and allow_file in force, nil without; read
	// at every accept (checkClient), swapped by a reload. nextLists is what
	// a reload in progress read for a front it keeps, stored in lists when
	// it commits; under Server.mu. denied counts their refusals.
	lists     atomic.Pointer[cidrlist.Matcher]
	nextLists *cidrlist.Matcher
	denied    *deniedCounts
}

// testHookBind, when set by a test, runs before a listener is bound; an
// error from it fails the bind, as a taken port would.
var testHookBind func(config.Listener) error

// bindFront binds the socket of lc and wraps it in its connection caps and
// its deny and allow lists; it does not serve yet. On error nothing is left
// open.
func bindFront(lc config.Listener, log *slog.Logger, cl *cluster, lists frontLists) (*front, error) {
	if testHookBind != nil {
		if err := testHookBind(lc); err != nil {
			return nil, fmt.Errorf("daemon: listener %s: %w", lc.Name, err)
		}
	}
	if lc.Protocol == config.ProtocolHTTP3 {
		return bindH3(lc, log, cl, lists)
	}
	raw, err := listen.ListenTCP(lc)
	if err != nil {
		return nil, err
	}
	return bindFrontOn(raw, lc, log, cl, lists)
}

// bindShared opens a second descriptor on the socket of holder, a running
// TCP front at the address of lc, and builds lc's front on it, so that the
// new front can take over the socket without refusing a connection. On
// error nothing is left open and holder is untouched.
func bindShared(holder *front, lc config.Listener, log *slog.Logger, cl *cluster, lists frontLists) (*front, error) {
	raw, err := listen.Share(holder.ln, lc.Name)
	if err != nil {
		return nil, err
	}
	return bindFrontOn(raw, lc, log, cl, lists)
}

// newFront returns the daemon's part of the front of lc, with its lists
// installed, and the admission its listen.Front is to be bound with.
func newFront(lc config.Listener, log *slog.Logger, lists frontLists) (*front, listen.Admission, error) {
	id, err := route.NewIdentity(&lc)
	if err != nil {
		return nil, listen.Admission{}, err
	}
	f := &front{cfg: lc, log: log.With("listener", lc.Name)}
	lists.install(f) // before the socket is read
	adm := listen.Admission{Log: log, Keyer: id.Keyer, Trusted: id.Resolver.Trusted, Filter: f.checkClient, FilterQUIC: f.filterQUIC}
	return f, adm, nil
}

// bindFrontOn builds the front of lc, a TCP listener, on the bound socket
// raw: its cluster Stores, then its listen.Front. On error raw and
// everything else is closed.
func bindFrontOn(raw net.Listener, lc config.Listener, log *slog.Logger, cl *cluster, lists frontLists) (*front, error) {
	f, adm, err := newFront(lc, log, lists)
	if err != nil {
		_ = raw.Close()
		return nil, err
	}
	var cc connlimit.Config // the Stores, as connRateStore gives them
	cs, err := cl.connStore(&lc, f.prefetch(adm.Keyer))
	if cs != nil { // a nil *clusterStore must not become a non-nil Store
		cc.Store, f.store, f.redis = cs, cs, cs.metrics
	}
	if err == nil {
		err = f.connRateStore(&cc, cl)
	}
	if err != nil {
		_ = raw.Close()
		f.closeStore()
		return nil, fmt.Errorf("daemon: listener %s: %w", lc.Name, err)
	}
	adm.Store, adm.ConnRateStore = cc.Store, cc.ConnRateStore
	if lc.ConnRate != nil {
		adm.ConnRate = route.RateLimitOf(lc.ConnRate.Limit())
	}
	if f.ln, err = listen.NewTCP(raw, lc, adm); err != nil {
		f.closeStore()
		return nil, err
	}
	f.conns = f.ln.Conns()
	f.stats = collectorList{f.withConnRateStats(f.ln.Collector(), cc.ConnRateStore), newDeniedCollector(f)}
	return f, nil
}

// bindH3 binds the UDP socket of lc, an http3 listener, with its
// handshake_rate; it does not serve yet. On error nothing is left open.
func bindH3(lc config.Listener, log *slog.Logger, cl *cluster, lists frontLists) (*front, error) {
	f, adm, err := newFront(lc, log, lists)
	if err != nil {
		return nil, err
	}
	f.h3 = new(h3Rates)
	if err := f.h3.build(f, cl); err != nil {
		return nil, fmt.Errorf("daemon: listener %s: %w", lc.Name, err)
	}
	adm.HandshakeRate = f.h3.handshake
	if f.ln, err = listen.BindH3(lc, adm); err != nil {
		f.h3.close()
		return nil, err
	}
	f.stats = collectorList{f.h3.withStats(f.ln.Collector()), newDeniedCollector(f)}
	return f, nil
}

// tableHandler serves each request with the route table in force in t when
// it arrives.
type tableHandler struct{ t *atomic.Pointer[route.Table] }

func (h tableHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.t.Load().Handler().ServeHTTP(w, r)
}

// serve starts f serving: HTTP listeners with the route table in table,
// tcp listeners toward their upstream. It fails only as listen.Front.Serve
// does, on a front that serves already.
func (f *front) serve(table *atomic.Pointer[route.Table], base context.Context, loopCounts *evloop.Counts, accessLog bool) error {
	s := listen.Serving{Base: base, LoopCounts: loopCounts, LoopPanicHook: testHookLoopPanic, AccessLog: accessLog}
	if f.cfg.Protocol != config.ProtocolTCP {
		f.table = table
		f.served.Store(table)
		s.Handler = tableHandler{table}
		s.Bytes = func() *bytepath.Table { return table.Load().Byte() }
	}
	return f.ln.Serve(s)
}

func (f *front) addr() net.Addr                        { return f.ln.Addr() }
func (f *front) serving() bool                         { return f.ln.Serving() }
func (f *front) stopAccepting()                        { f.ln.StopAccepting() }
func (f *front) sameSocket(lc config.Listener) bool    { return f.ln.SameSocket(lc) }
func (f *front) sameAddr(listenAddr string) bool       { return f.ln.SameAddr(listenAddr) }
func sameBoundAddr(a net.Addr, listenAddr string) bool { return listen.SameBoundAddr(a, listenAddr) }

// shutdown stops accepting and waits for the listener's exchanges and
// tunnels to end, until ctx ends, then closes what is left and the
// cluster Stores and handshake_rate of its admission. It returns ctx.Err()
// if it had to cut something off, nil otherwise.
func (f *front) shutdown(ctx context.Context) error {
	err := f.ln.Shutdown(ctx)
	f.closeStore()
	return err
}

// close stops the listener at once, cutting every connection.
func (f *front) close() {
	f.ln.Close()
	f.closeStore()
}

// closeUnserved closes a listener that was bound but never served.
func (f *front) closeUnserved() {
	f.ln.CloseUnserved()
	f.closeStore()
}

// closeStore closes the cluster Stores of the connection caps and
// conn_rate, and the handshake_rate with its Store, once the listener
// holds no connection, so that this node's counts leave Redis.
func (f *front) closeStore() {
	if f.store != nil {
		_ = f.store.Close()
	}
	if f.rates != nil {
		_ = f.rates.Close()
	}
	if f.h3 != nil {
		f.h3.close()
	}
}

// linkAltSvc makes every TCP HTTP listener of fronts whose routes an http3
// listener shares advertise its port (listen.LinkAltSvc).
func linkAltSvc(fronts []*front) {
	lns := make([]*listen.Front, len(fronts))
	for i, f := range fronts {
		lns[i] = f.ln
	}
	listen.LinkAltSvc(lns)
}
