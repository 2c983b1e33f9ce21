package forward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// A Resolver looks up the addresses of a host name. *net.Resolver is one;
// tests use their own, so that names resolve without a network.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Defaults of [DialerConfig].
const (
	DefaultDialTimeout = 10 * time.Second
	// maxDialAddrs bounds how many of a name's addresses one dial tries.
	maxDialAddrs = 8
	// minAttempt is the least time one address gets when several share a
	// dial's deadline.
	minAttempt = 2 * time.Second
)

// DialerConfig configures a [Dialer].
type DialerConfig struct {
	// Policy decides which addresses may be dialled. Nil means
	// NewPolicy(PolicyConfig{}): the built-in rules and DefaultPorts.
	Policy *Policy

	// Resolver resolves target names. Nil means net.DefaultResolver.
	Resolver Resolver

	// Timeout bounds one dial, name resolution and every address tried
	// included. Zero means 10 s; negative means no bound but the
	// context's.
	Timeout time.Duration
}

// A Dialer opens TCP connections to proxy targets under a [Policy]. It
// resolves a name once, then dials each address it got (at most eight, in
// the resolver's order, sharing the deadline) with a net.Dialer whose
// Control hook checks the policy on the exact address the socket connects
// to. So the address checked is the address connected to: a name cannot
// resolve to an allowed address for the check and to a refused one for
// the connection (DNS rebinding). It is safe for concurrent use.
type Dialer struct {
	policy   *Policy
	resolver Resolver
	timeout  time.Duration
	nd       net.Dialer
}

// NewDialer returns the Dialer of cfg.
func NewDialer(cfg DialerConfig) (*Dialer, error) {
	d := &Dialer{policy: cfg.Policy, resolver: cfg.Resolver, timeout: cfg.Timeout}
	if d.policy == nil {
		var err error
		if d.policy, err = NewPolicy(PolicyConfig{}); err != nil {
			return nil, err
		}
	}
	if d.resolver == nil {
		d.resolver = net.DefaultResolver
	}
	if d.timeout == 0 {
		d.timeout = DefaultDialTimeout
	}
	d.nd = net.Dialer{KeepAlive: 30 * time.Second, Control: d.control}
	return d, nil
}

// Policy returns the Dialer's policy.
func (d *Dialer) Policy() *Policy { return d.policy }

// control is the net.Dialer hook run on every socket before it connects:
// the policy's last word on the address.
func (d *Dialer) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("forward: dial control: unexpected address %q: %w", address, err)
	}
	return d.policy.Check(ap)
}

// DialContext connects to address, "host:port", as [Dialer] describes.
// network must be "tcp", "tcp4" or "tcp6". It returns a [*DeniedError]
// (within a *net.OpError) when the policy refuses the port or every
// address the name resolved to, the resolver's error (a *net.DNSError for
// net.Resolver) when the name does not resolve, and otherwise the error of
// the last address tried.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("forward: dial %s: network %q is not TCP", address, network)
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("forward: dial %s: %w", address, err)
	}
	port, err := parsePort(portStr)
	if err != nil {
		return nil, fmt.Errorf("forward: dial %s: %w", address, err)
	}
	if err := d.policy.checkDialPort(port); err != nil {
		err.(*DeniedError).Target = address
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	if d.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.timeout)
		defer cancel()
	}
	addrs, err := d.resolve(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return d.dialEach(ctx, network, addrs, port)
}

func (d *Dialer) resolve(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	ipNet := map[string]string{"tcp": "ip", "tcp4": "ip4", "tcp6": "ip6"}[network]
	addrs, err := d.resolver.LookupNetIP(ctx, ipNet, host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	return addrs[:min(len(addrs), maxDialAddrs)], nil
}

// dialEach dials the addresses in turn, each getting an equal share of
// what is left of the deadline (at least minAttempt), until one connects.
func (d *Dialer) dialEach(ctx context.Context, network string, addrs []netip.Addr, port uint16) (net.Conn, error) {
	var firstDenied, lastErr error
	for i, a := range addrs {
		ap := netip.AddrPortFrom(a.Unmap(), port)
		actx, cancel := attemptContext(ctx, len(addrs)-i)
		c, err := d.nd.DialContext(actx, network, ap.String())
		cancel()
		if err == nil {
			return c, nil
		}
		if errors.Is(err, ErrDenied) {
			if firstDenied == nil {
				firstDenied = err
			}
			continue
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	if lastErr == nil {
		return nil, firstDenied // every address was refused by the policy
	}
	return nil, lastErr
}

// attemptContext bounds one of n remaining attempts to its share of ctx's
// deadline.
func attemptContext(ctx context.Context, n int) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok || n <= 1 {
		return ctx, func() {}
	}
	share := time.Until(deadline) / time.Duration(n)
	return context.WithTimeout(ctx, max(share, minAttempt))
}
