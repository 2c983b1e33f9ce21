package caddyportcullis

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/connlimit"
)

func init() {
	caddy.RegisterModule(new(ListenerWrapper))
}

// ListenerWrapper caps the connections each client may hold on a Caddy
// listener, at accept time: a connection over its client's cap is closed
// at once, before any byte is read and before the TLS handshake, provided
// the wrapper comes before the "tls" placeholder in the server's
// listener_wrappers (Caddy puts every wrapper after TLS unless "tls" is
// listed after it). Each listening socket gets its own counts.
//
// Its zero value caps each client (an IPv4 address or an IPv6 /64) at 64
// connections, with no trusted proxy.
type ListenerWrapper struct {
	// Name labels the listener's metrics and its entry in the admin
	// endpoint's snapshot. Empty means "portcullis". Several servers may
	// use one name: each socket is told apart by its address.
	Name string `json:"name,omitempty"`

	// PerClient is how many connections one client may hold at once. Zero
	// means 64; -1 means unlimited (still counted).
	PerClient int `json:"per_client,omitempty"`

	// IPv4Prefix and IPv6Prefix are the prefix lengths that make one
	// client. Zero means 32 (each IPv4 address) and 64 (each IPv6 /64).
	IPv4Prefix int `json:"ipv4_prefix,omitempty"`
	IPv6Prefix int `json:"ipv6_prefix,omitempty"`

	// Levels cap wider prefixes as well, such as 256 connections per IPv6
	// /48 over all its /64 clients. Empty means none.
	Levels []Level `json:"levels,omitempty"`

	// Overrides give networks their own per-client cap (512 for an office
	// NAT, -1 for a health checker). The longest prefix wins. Empty means
	// none.
	Overrides []Override `json:"overrides,omitempty"`

	// TrustedProxies are the addresses or CIDR prefixes of load balancers
	// in front of Caddy. Their connections are exempt from the per-client
	// caps, or, with ProxyProtocol, counted as the client their PROXY
	// header names. Empty means none.
	TrustedProxies []string `json:"trusted_proxies,omitempty"`

	// ProxyProtocol reads a PROXY protocol header (v1 or v2) from the
	// connections of TrustedProxies, and only from those, and caps the
	// client it names. Use it instead of Caddy's proxy_protocol wrapper,
	// which reads the header inside Accept. False, the zero value, reads
	// none.
	ProxyProtocol bool `json:"proxy_protocol,omitempty"`

	// ProxyHeaderTimeout bounds the wait for a PROXY header. Zero means
	// 3s.
	ProxyHeaderTimeout caddy.Duration `json:"proxy_header_timeout,omitempty"`

	// MaxConns caps the connections of the socket over all clients: at
	// the cap, new connections wait in the kernel's backlog. Zero means no
	// cap.
	MaxConns int `json:"max_conns,omitempty"`

	// EnforceAbove enforces the per-client caps only while the socket
	// holds more than this many connections. Zero means always.
	EnforceAbove int `json:"enforce_above,omitempty"`

	// ResetOnRefuse closes refused connections with a TCP reset instead of
	// a FIN. False, the zero value, sends a FIN.
	ResetOnRefuse bool `json:"reset_on_refuse,omitempty"`

	cfg    connlimit.Config
	name   string
	app    *App
	opened *openListeners
}

// openListeners are the sockets a wrapper wrapped.
type openListeners struct {
	mu   sync.Mutex
	list []*connlimit.Listener
}

// Level is a cap on a wider prefix (see connlimit.Level).
type Level struct {
	// IPv4Prefix is the IPv4 prefix length the level counts, 1..32; zero
	// means the level leaves IPv4 alone.
	IPv4Prefix int `json:"ipv4_prefix,omitempty"`
	// IPv6Prefix is the IPv6 prefix length the level counts, 1..128; zero
	// means the level leaves IPv6 alone.
	IPv6Prefix int `json:"ipv6_prefix,omitempty"`
	// Max is how many connections one such prefix may hold; it must be
	// positive (zero is an error).
	Max int `json:"max"`
}

// Override gives a network its own per-client cap.
type Override struct {
	// Prefix is the network, such as "192.0.2.0/24"; a bare address means
	// that address alone. Empty is an error.
	Prefix string `json:"prefix"`
	// Max is the per-client cap inside Prefix: positive, or -1 for
	// unlimited; zero is an error.
	Max int `json:"max"`
}

// CaddyModule returns the Caddy module information.
func (*ListenerWrapper) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.listeners.portcullis",
		New: func() caddy.Module { return new(ListenerWrapper) },
	}
}

// Provision checks the configuration, exactly as the listener will be
// built, and registers the wrapper with the portcullis app.
func (w *ListenerWrapper) Provision(ctx caddy.Context) error {
	cfg, err := w.connConfig()
	if err != nil {
		return err
	}
	cfg.Logger = ctx.Slogger()
	// Build once on a stand-in listener, so that a configuration that
	// connlimit would refuse fails here, not when the server starts.
	probe, err := connlimit.NewListener(nopListener{}, cfg)
	if err != nil {
		return fmt.Errorf("portcullis listener: %w", err)
	}
	_ = probe.Close()
	w.cfg = cfg
	if w.app, err = appFrom(ctx); err != nil {
		return err
	}
	w.name = w.Name
	if w.name == "" {
		w.name = "portcullis"
	}
	w.cfg.Name = "portcullis " + w.name
	w.opened = new(openListeners)
	return nil
}

// connConfig translates the JSON fields into a connlimit.Config.
func (w *ListenerWrapper) connConfig() (connlimit.Config, error) {
	var cfg connlimit.Config
	keyer, err := clientkey.NewKeyer(w.IPv4Prefix, w.IPv6Prefix)
	if err != nil {
		return cfg, fmt.Errorf("portcullis listener: %w", err)
	}
	cfg = connlimit.Config{
		Policy:             connlimit.Policy{Permits: w.PerClient},
		Keyer:              keyer,
		ProxyProtocol:      w.ProxyProtocol,
		ProxyHeaderTimeout: time.Duration(w.ProxyHeaderTimeout),
		MaxConns:           w.MaxConns,
		EnforceAbove:       w.EnforceAbove,
		ResetOnRefuse:      w.ResetOnRefuse,
	}
	if w.PerClient < -1 {
		return cfg, fmt.Errorf("portcullis listener: per_client must be ≥ -1 (got %d)", w.PerClient)
	}
	for _, lv := range w.Levels {
		cfg.Levels = append(cfg.Levels, connlimit.Level{IPv4Bits: lv.IPv4Prefix, IPv6Bits: lv.IPv6Prefix, Max: lv.Max})
	}
	for i, o := range w.Overrides {
		p, err := parsePrefix(o.Prefix)
		if err != nil {
			return cfg, fmt.Errorf("portcullis listener: overrides[%d]: %w", i, err)
		}
		cfg.PrefixOverrides = append(cfg.PrefixOverrides, connlimit.Override{Prefix: p, Max: o.Max})
	}
	if len(w.TrustedProxies) > 0 {
		if cfg.Trusted, err = clientkey.ParseProxySet(w.TrustedProxies); err != nil {
			return cfg, fmt.Errorf("portcullis listener: trusted_proxies: %w", err)
		}
	}
	return cfg, nil
}

// parsePrefix reads "192.0.2.0/24" or a bare address.
func parsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR prefix", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// WrapListener returns ln capped by the wrapper's configuration. Caddy
// calls it once per listening socket; the configuration was checked in
// Provision, so it fails only if the socket cannot be wrapped at all, and
// then returns a listener whose Accept fails, so that the server stops
// rather than serve without its caps.
func (w *ListenerWrapper) WrapListener(ln net.Listener) net.Listener {
	capped, err := connlimit.NewListener(ln, w.cfg)
	if err != nil {
		caddy.Log().Named("portcullis").Error("cannot cap listener", zap.String("address", ln.Addr().String()), zap.Error(err))
		return failedListener{Listener: ln, err: fmt.Errorf("portcullis listener: %w", err)}
	}
	if err := w.app.addListener(w.name, capped); err != nil {
		caddy.Log().Named("portcullis").Warn("listener metrics not registered", zap.Error(err))
	}
	w.opened.mu.Lock()
	w.opened.list = append(w.opened.list, capped)
	w.opened.mu.Unlock()
	return capped
}

// Cleanup forgets the wrapper's listeners in the app. Caddy closes the
// listeners themselves when their server stops.
func (w *ListenerWrapper) Cleanup() error {
	if w.opened == nil {
		return nil // never provisioned
	}
	w.opened.mu.Lock()
	defer w.opened.mu.Unlock()
	for _, ln := range w.opened.list {
		w.app.removeListener(w.name, ln)
	}
	w.opened.list = nil
	return nil
}

// nopListener stands in for a socket when checking a configuration.
type nopListener struct{}

func (nopListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (nopListener) Close() error              { return nil }
func (nopListener) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4zero} }

// failedListener fails every Accept with err.
type failedListener struct {
	net.Listener
	err error
}

func (f failedListener) Accept() (net.Conn, error) { return nil, f.err }

// Interface guards
var (
	_ caddy.Provisioner     = (*ListenerWrapper)(nil)
	_ caddy.ListenerWrapper = (*ListenerWrapper)(nil)
	_ caddy.CleanerUpper    = (*ListenerWrapper)(nil)
)
