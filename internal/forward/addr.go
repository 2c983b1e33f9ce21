package forward

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"

	"github.com/seed-a07d1050/portcullis/httplimit"
)

// A pin is the address a request's target was resolved to by
// [Proxy.ResolveTargets]: the one address the Proxy connects to for it, or
// why there is none.
type pin struct {
	target string         // Target.String() of the request it was made for
	ap     netip.AddrPort // valid when err is nil
	err    error          // the resolver's error, or the policy's refusal of every address
}

type pinKey struct{}

// pinOf returns the pin ResolveTargets put on r for its target t, nil when
// there is none (no ResolveTargets in front, or a request it left alone).
func pinOf(r *http.Request, t Target) *pin {
	pn, _ := r.Context().Value(pinKey{}).(*pin)
	if pn == nil || pn.target != t.String() {
		return nil
	}
	return pn
}

// ResolveTargets returns next behind a step that resolves the target of
// each CONNECT and absolute-form request once, before any limit sees it,
// and pins the request to one address: the first the destination policy
// allows, in the resolver's order (an IP literal is its own address). The
// Proxy then connects to that address only, with no fallback to the
// name's other addresses, and an absolute-form request is sent over a
// pooled connection to that address; so [ByTargetAddr], which keys on the
// pin, always counts the address actually dialled, whatever the name
// resolves to by the time of the dial. When the name does not resolve, or
// the policy refuses every address, the Proxy answers the error (502 or
// 403) without resolving again. Requests left alone, unpinned: those whose
// target does not parse or whose port the policy refuses (the Proxy
// refuses them without a dial), and the requests inside an intercepted
// TLS session. The resolution is bounded by the dial timeout, and the
// dial that follows by the same timeout again.
//
// Put it in front of the limits only when one counts by [ByTargetAddr]:
// without it a Proxy resolves at dial time and tries each address in turn.
func (p *Proxy) ResolveTargets(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := InterceptedTarget(r.Context()); ok {
			next.ServeHTTP(w, r)
			return
		}
		t, err := TargetOf(r)
		if err != nil {
			next.ServeHTTP(w, r)
			return
		}
		pol := p.dialer.policy
		if r.Method == http.MethodConnect {
			err = pol.CheckConnectPort(t.Port())
		} else {
			err = pol.CheckPort(t.Port())
		}
		if err != nil {
			next.ServeHTTP(w, r)
			return
		}
		pn := &pin{target: t.String()}
		pn.ap, pn.err = p.dialer.pick(r.Context(), t)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), pinKey{}, pn)))
	})
}

// pick resolves t's host and returns the first of its addresses (at most
// eight, as DialContext tries) that the policy allows, with t's port.
func (d *Dialer) pick(ctx context.Context, t Target) (netip.AddrPort, error) {
	if d.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.timeout)
		defer cancel()
	}
	addrs, err := d.resolve(ctx, "tcp", t.Host())
	if err != nil {
		return netip.AddrPort{}, err
	}
	var firstDenied error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a.Unmap().WithZone(""), t.Port())
		err := d.policy.Check(ap)
		if err == nil {
			return ap, nil
		}
		if firstDenied == nil {
			firstDenied = err
		}
	}
	return netip.AddrPort{}, &net.OpError{Op: "dial", Net: "tcp", Err: firstDenied}
}

// errNoPin is never returned: dialAddress uses it to tell an unpinned
// request from a pinned one.
var errNoPin = errors.New("forward: request not pinned")

// dialAddress is the address to dial for r's target t: the pinned address
// when [Proxy.ResolveTargets] pinned r, with the pin's error when it found
// none; errNoPin and t itself otherwise.
func dialAddress(r *http.Request, t Target) (string, error) {
	pn := pinOf(r, t)
	if pn == nil {
		return t.String(), errNoPin
	}
	if pn.err != nil {
		return "", pn.err
	}
	return pn.ap.String(), nil
}

// ByTargetAddr keys a forward-proxy request by the address and port the
// Proxy connects to for it ("192.0.2.7:443", "[2001:db8::1]:443"), as
// pinned by [Proxy.ResolveTargets], which must be in front of the limiter:
// CONNECT example.com:443, CONNECT www.example.com:443 and CONNECT
// 192.0.2.7:443 count under one key when both names resolve first to
// 192.0.2.7. An IPv6 address is keyed whole, not per /64 as client
// addresses are: it names a server. A request without a pin is not
// counted: one whose target does not parse, whose port or every address
// the policy refuses, or whose name does not resolve (each answered with
// no connection made), and a request inside an intercepted TLS session.
func ByTargetAddr() httplimit.KeyFunc {
	return func(r *http.Request) string {
		pn, _ := r.Context().Value(pinKey{}).(*pin)
		if pn == nil || pn.err != nil {
			return ""
		}
		return pn.ap.String()
	}
}
