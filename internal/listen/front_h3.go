package listen

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/promlimit"
	"github.com/seed-a07d1050/portcullis/quicadmit"
)

// h3Front is the QUIC side of an http3 listener: its UDP socket and
// transport, the handshake admission controller, the per-client cap on
// proven clients, and the HTTP/3 server.
type h3Front struct {
	udp       net.PacketConn
	tr        *quic.Transport
	ctrl      *quicadmit.Controller
	perClient *limit.Limiter[clientkey.Key]
	ln        *quicadmit.Listener
	srv       *http3.Server
}

// BindH3 binds the UDP socket of lc, an http3 listener, and sets up its
// admission: the handshake admission controller (quicadmit), with the
// filter and handshake rate of adm, the per-client cap on proven clients,
// and its certificate. It does not serve yet. On error nothing is left
// open; the handshake rate of adm is the caller's to close.
func BindH3(lc config.Listener, adm Admission) (*Front, error) {
	if lc.Protocol != config.ProtocolHTTP3 {
		return nil, errorf(lc.Name, "BindH3 binds http3 listeners, not %s", lc.Protocol)
	}
	f := &Front{cfg: lc, log: logOf(adm).With("listener", lc.Name), served: make(chan struct{})}
	udp, err := net.ListenPacket("udp", lc.Listen)
	if err != nil {
		return nil, errorf(lc.Name, "%w", err)
	}
	h := &h3Front{udp: udp, tr: &quic.Transport{Conn: udp}}
	if err := h.admit(f, adm); err != nil {
		h.closeAll()
		return nil, err
	}
	f.h3 = h
	f.stats = newQUICCollector(h, lc.Name)
	return f, nil
}

// admit sets up the admission of h, f's QUIC side, and its listener.
func (h *h3Front) admit(f *Front, adm Admission) error {
	lc := &f.cfg
	var err error
	h.perClient, err = limit.New(limit.Config[clientkey.Key]{
		Policy: limit.Policy[clientkey.Key]{
			Permits:      lc.MaxConnsPerClient,
			PermitsFor:   connOverridePermits(lc.ConnOverrides),
			ReclaimAfter: -1, // a QUIC connection holds its permit as long as it lives
		},
		Hash:   clientkey.Key.Hash,
		Logger: f.log,
		Name:   lc.Name + "/quic_clients",
	})
	if err != nil {
		return errorf(lc.Name, "per-client cap: %w", err)
	}
	qc := quicadmit.Config{
		RetryThresholdMin: lc.QUIC.RetryThresholdMin,
		RetryThresholdMax: lc.QUIC.RetryThresholdMax,
		MaxInProgress:     lc.QUIC.MaxInProgress,
		HandshakeTimeout:  admissionBackstop(lc.QUIC.HandshakeTimeout),
		PerClient:         h.perClient,
		PerClientRate:     adm.HandshakeRate,
		Keyer:             adm.Keyer,
		Logger:            f.log,
	}
	if lc.QUIC.Retry == config.RetryAlways {
		// A threshold of zero: every unproven attempt gets a Retry.
		qc.RetryThresholdMin, qc.RetryThresholdMax = quicadmit.Zero, quicadmit.Zero
	}
	if lc.QUIC.TokenKeyFile != "" {
		key, err := config.ReadTokenKey(lc.QUIC.TokenKeyFile)
		if err != nil {
			return errorf(lc.Name, "%w", err)
		}
		tk := quic.TokenGeneratorKey(key)
		qc.TokenKey = &tk
	}
	if h.ctrl, err = quicadmit.New(qc); err != nil {
		return errorf(lc.Name, "quic admission: %w", err)
	}
	// The lists refuse before quicadmit admits: its hooks go on the
	// transport first, and the daemon's filter wraps them.
	if err := h.ctrl.Attach(h.tr); err != nil {
		return errorf(lc.Name, "quic admission: %w", err)
	}
	if adm.FilterQUIC != nil {
		adm.FilterQUIC(h.tr)
	}
	if err := f.loadCert(); err != nil {
		return err
	}
	tlsConf := http3.ConfigureTLSConfig(&tls.Config{GetCertificate: f.getCertificate, MinVersion: tls.VersionTLS13})
	// Listen, not ListenEarly: a connection reaches the HTTP/3 server only
	// once its handshake completed and quicadmit checked its client's cap,
	// so an over-cap client is never served a request (and 0-RTT, which
	// could be replayed, is off).
	h.ln, err = h.ctrl.Listen(h.tr, tlsConf, &quic.Config{
		HandshakeIdleTimeout: lc.QUIC.HandshakeTimeout,
		MaxIdleTimeout:       lc.IdleTimeout,
		MaxIncomingStreams:   int64(lc.MaxConcurrentStreams),
	})
	if err != nil {
		return errorf(lc.Name, "quic listener: %w", err)
	}
	return nil
}

// acceptQueueWait is how long a completed QUIC connection may wait in
// quic-go's accept queue before the HTTP/3 server takes it.
const acceptQueueWait = 5 * time.Second

// admissionBackstop is quicadmit's HandshakeTimeout for a quic-go
// HandshakeIdleTimeout of handshake: quic-go gives up on a handshake after
// twice that, and a completed connection may still wait in the accept
// queue, so an attempt nothing reported on is ended as timed out only
// after both.
func admissionBackstop(handshake time.Duration) time.Duration {
	return 2*handshake + acceptQueueWait
}

// connOverridePermits turns conn_overrides into a PermitsFor over client
// keys: the longest override prefix holding the key wins.
func connOverridePermits(overrides []config.ConnOverride) func(clientkey.Key) int {
	if len(overrides) == 0 {
		return nil
	}
	return func(k clientkey.Key) int {
		kp := k.Prefix()
		best, bestBits := 0, -1
		for _, o := range overrides {
			p := o.CIDR
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			if p.Bits() <= kp.Bits() && p.Contains(kp.Addr()) && p.Bits() > bestBits {
				best, bestBits = o.Max, p.Bits()
			}
		}
		return best
	}
}

// serve starts the HTTP/3 server on the admitted QUIC connections.
func (h *h3Front) serve(f *Front) {
	lc := &f.cfg
	h.srv = &http3.Server{
		Handler:        f,
		MaxHeaderBytes: lc.MaxHeaderBytes,
		IdleTimeout:    lc.IdleTimeout,
		Logger:         f.log,
	}
	go func() {
		defer close(f.served)
		if err := h.srv.ServeListener(h.ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, quic.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			f.log.Error("listener stopped", "error", err)
		}
	}()
}

// shutdown sends GOAWAY and waits for the requests in progress until ctx
// ends, then closes everything.
func (h *h3Front) shutdown(ctx context.Context, f *Front) error {
	err := h.srv.Shutdown(ctx)
	if err == nil {
		err = f.WaitIdle(ctx)
	}
	h.closeAll()
	return err
}

// closeAll closes the server, listener, transport and socket, and stops
// the controller and the per-client limiter (the handshake rate is the
// daemon's).
func (h *h3Front) closeAll() {
	if h.srv != nil {
		_ = h.srv.Close()
	}
	if h.ln != nil {
		_ = h.ln.Close()
	}
	_ = h.tr.Close()
	_ = h.udp.Close()
	if h.ctrl != nil {
		_ = h.ctrl.Close()
	}
	if h.perClient != nil {
		_ = h.perClient.Close()
	}
}

// QUICStats returns the QUIC admission counts of an http3 listener as
// connection counts: a completed handshake is an accepted connection, a
// per-client refusal a client_cap refusal, an attempt in progress a
// pending connection; open connections are the per-client permits held.
// The attempts Admission.FilterQUIC refused are not among them (the
// daemon counts those). Zero Stats for a TCP listener.
func (f *Front) QUICStats() connlimit.Stats {
	if f.h3 == nil {
		return connlimit.Stats{}
	}
	return f.h3.stats()
}

// QUIC returns the QUIC admission controller of an http3 listener, and
// its per-client cap on proven clients; nil, nil for a TCP listener.
func (f *Front) QUIC() (*quicadmit.Controller, *limit.Limiter[clientkey.Key]) {
	if f.h3 == nil {
		return nil, nil
	}
	return f.h3.ctrl, f.h3.perClient
}

// stats maps the QUIC admission counts onto connection counts
// (QUICStats).
func (h *h3Front) stats() connlimit.Stats {
	s := h.ctrl.Snapshot()
	return connlimit.Stats{
		Accepted: s.Completed,
		Open:     int64(h.perClient.Totals().InUse),
		Pending:  s.InProgress,
		Refused:  connlimit.Refused{ClientCap: s.PerClientRefused, ClientRate: s.PerClientRateRefused},
	}
}

// quicCollector exports a Controller's snapshot and the per-client cap.
type quicCollector struct {
	h         *h3Front
	clients   *promlimit.Collector
	attempts  *prometheus.Desc
	progress  *prometheus.Desc
	threshold *prometheus.Desc
	retryOn   *prometheus.Desc
}

func newQUICCollector(h *h3Front, listener string) *quicCollector {
	labels := prometheus.Labels{"listener": listener}
	return &quicCollector{
		h:         h,
		clients:   promlimit.NewCollector(h.perClient, promlimit.Opts{Subsystem: "quic_clients", ConstLabels: labels}),
		attempts:  prometheus.NewDesc("portcullis_quic_attempts_total", "QUIC connection attempts by outcome.", []string{"outcome"}, labels),
		progress:  prometheus.NewDesc("portcullis_quic_in_progress", "QUIC handshakes in progress.", nil, labels),
		threshold: prometheus.NewDesc("portcullis_quic_retry_threshold", "Handshakes in progress above which unproven clients get a Retry.", nil, labels),
		retryOn:   prometheus.NewDesc("portcullis_quic_retry_on", "1 while unproven clients are answered with a Retry, else 0.", nil, labels),
	}
}

func (c *quicCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.attempts
	ch <- c.progress
	ch <- c.threshold
	ch <- c.retryOn
	c.clients.Describe(ch)
}

func (c *quicCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.h.ctrl.Snapshot()
	for _, x := range []struct {
		outcome string
		n       uint64
	}{
		{"admitted", s.Admitted}, {"retried", s.Retried}, {"refused", s.Refused},
		{"per_client_refused", s.PerClientRefused}, {"per_client_rate_refused", s.PerClientRateRefused}, {"completed", s.Completed},
		{"failed", s.Failed}, {"timed_out", s.TimedOut}, {"abandoned", s.Abandoned},
	} {
		ch <- prometheus.MustNewConstMetric(c.attempts, prometheus.CounterValue, float64(x.n), x.outcome)
	}
	ch <- prometheus.MustNewConstMetric(c.progress, prometheus.GaugeValue, float64(s.InProgress))
	ch <- prometheus.MustNewConstMetric(c.threshold, prometheus.GaugeValue, float64(s.Threshold))
	retryOn := 0.0
	if s.RetryOn {
		retryOn = 1
	}
	ch <- prometheus.MustNewConstMetric(c.retryOn, prometheus.GaugeValue, retryOn)
	c.clients.Collect(ch)
}

// altSvc is the Alt-Svc value advertising an HTTP/3 port for a day.
func altSvc(port int) string { return `h3=":` + strconv.Itoa(port) + `"; ma=86400` }

// udpPort returns the port of a UDP address, or 0.
func udpPort(a net.Addr) int {
	if u, ok := a.(*net.UDPAddr); ok {
		return u.Port
	}
	return 0
}

// LinkAltSvc makes every TCP HTTP listener of fronts whose routes an
// http3 listener of fronts shares advertise that listener's port with
// Alt-Svc, and clears the header of the others.
func LinkAltSvc(fronts []*Front) {
	ports := make(map[string]int)
	for _, f := range fronts {
		if f.h3 != nil && f.cfg.RoutesFrom != "" {
			ports[f.cfg.RoutesFrom] = udpPort(f.Addr())
		}
	}
	for _, f := range fronts {
		if f.h3 != nil {
			continue
		}
		if port, ok := ports[f.cfg.Name]; ok && port != 0 {
			v := altSvc(port)
			f.altSvc.Store(&v)
		} else {
			f.altSvc.Store(nil)
		}
	}
}
