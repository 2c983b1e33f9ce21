package caddyportcullis

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("portcullis_limit", parseHandlerDirective)
	// After authentication, so that {http.auth.user.id} is known and
	// refused logins are never counted; before the handlers that do the
	// work (handle, route, respond, reverse_proxy...). The global option
	// `order portcullis_limit ...` moves it.
	httpcaddyfile.RegisterDirectiveOrder("portcullis_limit", httpcaddyfile.After, "forward_auth")
}

func parseHandlerDirective(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var hd Handler
	if err := hd.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	return &hd, nil
}

// UnmarshalCaddyfile reads the portcullis listener wrapper:
//
//	portcullis [<per_client>] {
//		name            <name>
//		per_client      <n>|unlimited
//		client_prefix   [ipv4 <bits>] [ipv6 <bits>]
//		level           [ipv4 <bits>] [ipv6 <bits>] max <n>
//		override        <address|cidr> <n>|unlimited
//		trusted_proxies <address|cidr>...
//		proxy_protocol  [<timeout>]
//		max_conns       <n>
//		enforce_above   <n>
//		reset_on_refuse
//	}
func (w *ListenerWrapper) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the wrapper's name
	if d.NextArg() {
		n, err := permitsArg(d)
		if err != nil {
			return err
		}
		w.PerClient = n
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	for d.NextBlock(0) {
		var err error
		switch d.Val() {
		case "name":
			w.Name, err = oneArg(d)
		case "per_client":
			w.PerClient, err = permitsOption(d)
		case "client_prefix":
			w.IPv4Prefix, w.IPv6Prefix, _, err = prefixArgs(d, false)
		case "level":
			var lv Level
			lv.IPv4Prefix, lv.IPv6Prefix, lv.Max, err = prefixArgs(d, true)
			w.Levels = append(w.Levels, lv)
		case "override":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.ArgErr()
			}
			n, perr := parsePermits(args[1])
			if perr != nil {
				return d.Errf("override %s: %v", args[0], perr)
			}
			w.Overrides = append(w.Overrides, Override{Prefix: args[0], Max: n})
		case "trusted_proxies":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			w.TrustedProxies = append(w.TrustedProxies, args...)
		case "proxy_protocol":
			w.ProxyProtocol = true
			if d.NextArg() {
				w.ProxyHeaderTimeout, err = durationArg(d)
				if err == nil && d.NextArg() {
					err = d.ArgErr()
				}
			}
		case "max_conns":
			w.MaxConns, err = countOption(d)
		case "enforce_above":
			w.EnforceAbove, err = countOption(d)
		case "reset_on_refuse":
			w.ResetOnRefuse = true
			if d.NextArg() {
				err = d.ArgErr()
			}
		default:
			return d.Errf("unknown portcullis listener option %q", d.Val())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// UnmarshalCaddyfile reads the portcullis_limit directive:
//
//	portcullis_limit [<matcher>] [<permits>] {
//		name          <name>
//		key           <placeholder template>
//		client_prefix [ipv4 <bits>] [ipv6 <bits>]
//		permits       <n>|unlimited
//		override      <key> <n>|unlimited
//		queue         <size> [<timeout>]
//		shadow
//		status        <code>
//		retry_after   <duration>|off
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		n, err := permitsArg(d)
		if err != nil {
			return err
		}
		h.Permits = n
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	for d.NextBlock(0) {
		var err error
		switch d.Val() {
		case "name":
			h.Name, err = oneArg(d)
		case "key":
			h.Key, err = oneArg(d)
		case "client_prefix":
			h.IPv4Prefix, h.IPv6Prefix, _, err = prefixArgs(d, false)
		case "permits":
			h.Permits, err = permitsOption(d)
		case "override":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.ArgErr()
			}
			n, perr := parsePermits(args[1])
			if perr != nil {
				return d.Errf("override %s: %v", args[0], perr)
			}
			if h.Overrides == nil {
				h.Overrides = map[string]int{}
			}
			h.Overrides[args[0]] = n
		case "queue":
			args := d.RemainingArgs()
			if len(args) < 1 || len(args) > 2 {
				return d.ArgErr()
			}
			if h.QueueSize, err = parseCount(args[0]); err != nil {
				return d.Errf("queue size: %v", err)
			}
			if len(args) == 2 {
				dur, perr := caddy.ParseDuration(args[1])
				if perr != nil || dur < 0 {
					return d.Errf("queue timeout %q: want a duration ≥ 0 such as 2s", args[1])
				}
				h.QueueTimeout = caddy.Duration(dur)
			}
		case "shadow":
			h.Shadow = true
			if d.NextArg() {
				err = d.ArgErr()
			}
		case "status":
			var s string
			if s, err = oneArg(d); err == nil {
				h.Status, err = strconv.Atoi(s)
				if err != nil || h.Status < 400 || h.Status > 599 {
					err = d.Errf("status %q: want a code in 400..599", s)
				}
			}
		case "retry_after":
			var s string
			if s, err = oneArg(d); err == nil {
				if s == "off" {
					h.RetryAfter = -1
					break
				}
				dur, perr := caddy.ParseDuration(s)
				if perr != nil || dur <= 0 {
					err = d.Errf("retry_after %q: want a positive duration such as 2s, or off", s)
				}
				h.RetryAfter = caddy.Duration(dur)
			}
		default:
			return d.Errf("unknown portcullis_limit option %q", d.Val())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// oneArg reads the one argument of the current option.
func oneArg(d *caddyfile.Dispenser) (string, error) {
	if !d.NextArg() {
		return "", d.ArgErr()
	}
	v := d.Val()
	if d.NextArg() {
		return "", d.ArgErr()
	}
	return v, nil
}

// permitsOption reads the one argument of an option that is a number of
// permits.
func permitsOption(d *caddyfile.Dispenser) (int, error) {
	if !d.NextArg() {
		return 0, d.ArgErr()
	}
	n, err := permitsArg(d)
	if err == nil && d.NextArg() {
		err = d.ArgErr()
	}
	return n, err
}

func permitsArg(d *caddyfile.Dispenser) (int, error) {
	n, err := parsePermits(d.Val())
	if err != nil {
		return 0, d.Errf("%v", err)
	}
	return n, nil
}

// parsePermits reads a positive count or "unlimited" (-1).
func parsePermits(s string) (int, error) {
	if s == "unlimited" || s == "-1" {
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, errorf("%q: want a whole number ≥ 1, or unlimited", s)
	}
	return n, nil
}

// countOption reads the one argument of an option that is a count ≥ 0.
func countOption(d *caddyfile.Dispenser) (int, error) {
	s, err := oneArg(d)
	if err != nil {
		return 0, err
	}
	n, err := parseCount(s)
	if err != nil {
		return 0, d.Errf("%s: %v", d.Val(), err)
	}
	return n, nil
}

func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, errorf("%q: want a whole number ≥ 0", s)
	}
	return n, nil
}

// durationArg reads the current token as a duration ≥ 0.
func durationArg(d *caddyfile.Dispenser) (caddy.Duration, error) {
	dur, err := caddy.ParseDuration(d.Val())
	if err != nil || dur < 0 {
		return 0, d.Errf("%q: want a duration ≥ 0 such as 3s", d.Val())
	}
	return caddy.Duration(dur), nil
}

// prefixArgs reads "[ipv4 <bits>] [ipv6 <bits>]", and with withMax a
// required "max <n>", in any order.
func prefixArgs(d *caddyfile.Dispenser, withMax bool) (v4, v6, maxConns int, err error) {
	opt := d.Val()
	args := d.RemainingArgs()
	if len(args) == 0 || len(args)%2 != 0 {
		return 0, 0, 0, d.Errf("%s: want pairs such as ipv4 24 ipv6 48", opt)
	}
	seenMax := false
	for i := 0; i < len(args); i += 2 {
		n, perr := strconv.Atoi(args[i+1])
		if perr != nil || n < 1 {
			return 0, 0, 0, d.Errf("%s %s %q: want a whole number ≥ 1", opt, args[i], args[i+1])
		}
		switch {
		case args[i] == "ipv4" && v4 == 0:
			v4 = n
		case args[i] == "ipv6" && v6 == 0:
			v6 = n
		case args[i] == "max" && withMax && !seenMax:
			maxConns, seenMax = n, true
		default:
			return 0, 0, 0, d.Errf("%s: unexpected or repeated %q", opt, args[i])
		}
	}
	if withMax && !seenMax {
		return 0, 0, 0, d.Errf("%s: max <n> is required", opt)
	}
	return v4, v6, maxConns, nil
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*ListenerWrapper)(nil)
	_ caddyfile.Unmarshaler = (*Handler)(nil)
)
