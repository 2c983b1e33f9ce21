package daemon

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

// interceptState is the TLS interception of a forward listener's table: the
// Interceptor in front of the proxy, the Upstream its requests go to, the
// leaves it shows clients, and the chain of limits the requests inside go
// through.
//
// A reload keeps each part whose inputs did not change: the leaves (with
// their cache) while the CA files hold the same bytes and the leaves block
// is the same; the Upstream (with its idle target connections) while the
// proxy, the upstream block and the ca_file's bytes are the same; the
// Interceptor (with its open sessions) while the proxy, the leaves, the
// rules and the session settings are the same. A kept Interceptor serves
// the requests of its sessions through chain, which the reload points at
// the new table's limits when it commits, so that from then on they count
// under the new configuration, as every new exchange does.
type interceptState struct {
	leavesKey leavesKey
	leaves    *intercept.Leaves
	upKey     upstreamKey
	up        *intercept.Upstream
	icKey     interceptorKey
	ic        *intercept.Interceptor
	chain     *innerChain // the Interceptor's Handler, shared by the tables that keep it
	next      http.Handler
	stats     prometheus.Collector
	drain     time.Duration // how long a replaced Interceptor's sessions may finish
}

// leavesKey is what a Leaves is built from.
type leavesKey struct {
	ca  [sha256.Size]byte // of the CA certificate file's bytes, a zero byte, the key file's
	cfg config.InterceptLeaves
}

// upstreamKey is what an Upstream is built from.
type upstreamKey struct {
	proxy    *forward.Proxy
	roots    [sha256.Size]byte // of the upstream ca_file; zero without
	cfg      config.InterceptUpstream
	via      string
	maxIdle  int
	maxAll   int
	idleConn time.Duration
}

// interceptorKey is what an Interceptor is built from.
type interceptorKey struct {
	proxy           *forward.Proxy
	leaves          *intercept.Leaves
	only, bypass    []string
	handshake, idle time.Duration
	http2           bool
	readHeader      time.Duration
	read, write     time.Duration
	maxHeaderBytes  int
	listener        string
}

// innerChain is the handler an Interceptor serves the requests inside its
// sessions with: the chain of limits and the Upstream of the table in
// force, swapped when a reload commits. It counts the requests inside it,
// which no listener's http.Server sees.
type innerChain struct {
	h      atomic.Pointer[http.Handler]
	active atomic.Int64
}

func (c *innerChain) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.active.Add(1)
	defer c.active.Add(-1)
	(*c.h.Load()).ServeHTTP(w, r)
}

// wait waits up to d for the requests inside the chain to return.
// Interceptor.Shutdown and Close end sessions and so cancel the requests
// inside, but do not wait for their handlers, which give their permits
// back as they return.
func (c *innerChain) wait(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = waitZero(ctx, &c.active)
}

// stoppingInterceptor is a table's Interceptor as the server stops it:
// Shutdown and Close return once the requests inside its sessions have
// returned too (within forceWait once they were cut), so that their permits
// are back when the server's Shutdown returns.
type stoppingInterceptor struct{ st *interceptState }

func (s stoppingInterceptor) Shutdown(ctx context.Context) error {
	err := s.st.ic.Shutdown(ctx)
	s.st.chain.wait(forceWait)
	return err
}

func (s stoppingInterceptor) Close() error {
	_ = s.st.ic.Close()
	s.st.chain.wait(forceWait)
	return nil
}

// intercept puts the listener's Interceptor, when it has an intercept
// block, in front of *h (the forward proxy), and records it in t. limits
// puts a handler behind the listener's rate and limits, in their order;
// the requests inside sessions pass through them too, each taking and
// releasing its own permits. It reuses what it can of the old table's, as
// interceptState says. On error it leaves nothing of its own open.
func (b *tableBuilder) intercept(t *routeTable, limits func(http.Handler) http.Handler, h *http.Handler) error {
	ic := b.lc.Forward.Intercept
	if ic == nil {
		return nil
	}
	old := b.old.interceptState()
	st := &interceptState{drain: b.drain}
	if err := b.interceptLeaves(st, ic, old); err != nil {
		return fmt.Errorf("proxy: listener %s: intercept: %w", b.lc.Name, err)
	}
	if err := b.interceptUpstream(st, ic, t.forward.proxy, old); err != nil {
		return fmt.Errorf("proxy: listener %s: intercept: %w", b.lc.Name, err)
	}
	st.next = exchange.Handler(limits(st.up), b.exchangeOpts())
	if err := b.interceptor(st, ic, t.forward.proxy, old); err != nil {
		if old == nil || st.up != old.up {
			_ = st.up.Close()
		}
		return fmt.Errorf("proxy: listener %s: intercept: %w", b.lc.Name, err)
	}
	st.stats = intercept.NewCollector(st.ic, st.up, prometheus.Labels{"listener": b.lc.Name})
	t.forward.intercept = st
	*h = st.ic.Wrap(*h)
	return nil
}

// interceptLeaves puts in st the old leaves when the CA files hold the
// same bytes and the leaves block did not change, so that their cache
// carries over; otherwise new ones. The files are read, and the CA
// checked, at every build: a CA that no longer loads fails the reload.
func (b *tableBuilder) interceptLeaves(st *interceptState, ic *config.Intercept, old *interceptState) error {
	certPEM, err := os.ReadFile(ic.CACert)
	if err != nil {
		return fmt.Errorf("read CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(ic.CAKey)
	if err != nil {
		return fmt.Errorf("read CA key: %w", err)
	}
	if !ic.AllowReadableCAKey {
		if err := intercept.CheckKeyFile(ic.CAKey); err != nil {
			return err
		}
	}
	ca, err := intercept.ParseCA(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("CA %s (key %s): %w", ic.CACert, ic.CAKey, err)
	}
	h := sha256.New()
	h.Write(certPEM)
	h.Write([]byte{0})
	h.Write(keyPEM)
	st.leavesKey = leavesKey{cfg: ic.Leaves}
	h.Sum(st.leavesKey.ca[:0])
	if old != nil && old.leavesKey == st.leavesKey {
		st.leaves = old.leaves
		return nil
	}
	st.leaves, err = ic.Leaves.Build(ca)
	return err
}

// interceptUpstream puts in st the old Upstream when nothing it is built
// from changed, so that its idle target connections carry over; otherwise
// a new one.
func (b *tableBuilder) interceptUpstream(st *interceptState, ic *config.Intercept, p *forward.Proxy, old *interceptState) error {
	fw := b.lc.Forward
	st.upKey = upstreamKey{proxy: p, cfg: ic.Upstream, via: fw.Via, maxIdle: fw.MaxIdleConnsPerTarget, maxAll: fw.MaxIdleConns, idleConn: fw.IdleConnTimeout}
	var roots []byte
	if f := ic.Upstream.CAFile; f != "" {
		var err error
		if roots, err = os.ReadFile(f); err != nil {
			return fmt.Errorf("read upstream CA file: %w", err)
		}
		st.upKey.roots = sha256.Sum256(roots)
	}
	if old != nil && old.upKey == st.upKey {
		st.up = old.up
		return nil
	}
	uc := intercept.UpstreamConfig{
		Dialer:                     p.Dialer(),
		InsecureSkipVerifyUpstream: ic.Upstream.InsecureSkipVerifyUpstream,
		UpstreamTimeout:            ic.Upstream.Timeout,
		MaxIdleConnsPerTarget:      fw.MaxIdleConnsPerTarget,
		MaxIdleConns:               fw.MaxIdleConns,
		IdleConnTimeout:            fw.IdleConnTimeout,
		Via:                        fw.Via,
		Logger:                     b.deps.log.With("listener", b.lc.Name),
	}
	if roots != nil {
		pool, err := intercept.LoadRoots(ic.Upstream.CAFile)
		if err != nil {
			return err
		}
		uc.RootCAs = pool
	}
	up, err := intercept.NewUpstream(uc)
	if err != nil {
		return err
	}
	st.up = up
	return nil
}

// interceptor puts in st the old Interceptor, with its sessions, when
// nothing it is built from changed; otherwise a new one, serving.
func (b *tableBuilder) interceptor(st *interceptState, ic *config.Intercept, p *forward.Proxy, old *interceptState) error {
	lc := b.lc
	st.icKey = interceptorKey{
		proxy: p, leaves: st.leaves, only: ic.Intercept, bypass: ic.Bypass,
		handshake: ic.HandshakeTimeout, idle: ic.IdleTimeout, http2: ic.IsOfferingHTTP2(),
		readHeader: lc.ReadHeaderTimeout, read: lc.ReadTimeout, write: lc.WriteTimeout,
		maxHeaderBytes: lc.MaxHeaderBytes, listener: lc.Name,
	}
	if old != nil && reflect.DeepEqual(old.icKey, st.icKey) {
		st.ic, st.chain = old.ic, old.chain
		return nil
	}
	only, bypass, err := ic.Rules()
	if err != nil {
		return err
	}
	st.chain = new(innerChain)
	st.chain.h.Store(&st.next)
	st.ic, err = intercept.New(intercept.Config{
		Leaves:            st.leaves,
		Handler:           st.chain,
		Intercept:         only,
		Bypass:            bypass,
		Policy:            p.Dialer().Policy(),
		HandshakeTimeout:  ic.HandshakeTimeout,
		IdleTimeout:       ic.IdleTimeout,
		ReadHeaderTimeout: lc.ReadHeaderTimeout,
		ReadTimeout:       lc.ReadTimeout,
		WriteTimeout:      lc.WriteTimeout,
		MaxHeaderBytes:    lc.MaxHeaderBytes,
		DisableHTTP2:      !ic.IsOfferingHTTP2(),
		Logger:            b.deps.log.With("listener", lc.Name),
	})
	return err
}

// interceptState returns t's interception, or nil.
func (t *routeTable) interceptState() *interceptState {
	if t == nil || t.forward == nil {
		return nil
	}
	return t.forward.intercept
}

// commitIntercept points t's Interceptor, when a reload keeps it, at t's
// chain of limits: the requests its sessions send from now on count under
// t's limits.
func (t *routeTable) commitIntercept() {
	if st := t.interceptState(); st != nil {
		st.chain.h.Store(&st.next)
	}
}

// closeNewIntercept closes what t's interception does not share with old's,
// for a table that failed to build or was discarded.
func (t *routeTable) closeNewIntercept(old *routeTable) {
	st, o := t.interceptState(), old.interceptState()
	if st == nil {
		return
	}
	if o == nil || st.ic != o.ic {
		_ = st.ic.Close()
	}
	if o == nil || st.up != o.up {
		_ = st.up.Close()
	}
}

// retireIntercept retires what old's interception has and t's does not: a
// replaced Interceptor stops intercepting new CONNECTs, lets the requests
// under way finish within its drain time (closing its sessions as they
// fall idle), then cuts what is left; a replaced Upstream closes its idle
// target connections once that Interceptor is done. t may be nil (the
// listener is gone).
func (s *Server) retireIntercept(old, t *routeTable) {
	o, st := old.interceptState(), t.interceptState()
	if o == nil {
		return
	}
	oldIC := o.ic
	if st != nil && st.ic == oldIC {
		oldIC = nil
	}
	oldUp := o.up
	if st != nil && st.up == oldUp {
		oldUp = nil
	}
	if oldIC == nil && oldUp == nil {
		return
	}
	drain := o.drain
	if st != nil {
		drain = st.drain
	}
	s.retired.Add(1)
	go func() {
		defer s.retired.Done()
		if oldIC != nil {
			ctx, cancel := context.WithTimeout(s.base, drain)
			if err := oldIC.Shutdown(ctx); err != nil {
				s.log.Warn("sessions of a replaced interceptor cut off after the shutdown timeout", "sessions", oldIC.Sessions())
			}
			cancel()
			o.chain.wait(forceWait)
		}
		if oldUp != nil {
			_ = oldUp.Close()
		}
	}()
}

// closeIntercept ends t's interception at once, for a server that stops.
func (t *routeTable) closeIntercept() {
	if st := t.interceptState(); st != nil {
		_ = st.ic.Close()
		_ = st.up.Close()
	}
}
