package forward

import (
	"log/slog"
	"net/http"
	"net/netip"
	"time"
)

// localNets are the client networks a forward proxy with no other
// client control serves: loopback, the private ranges (RFC 1918, RFC
// 4193), shared address space (RFC 6598, carrier-grade NAT) and
// link-local, as Squid's default localnet ACL.
var localNets = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
}

// IsLocalClient reports whether a is a loopback, private (10/8,
// 172.16/12, 192.168/16, fc00::/7), shared (100.64/10) or link-local
// address, an IPv4-mapped IPv6 address being decided as its IPv4 address.
// The invalid Addr is not local.
func IsLocalClient(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	for _, p := range localNets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// LocalClientsConfig configures [LocalClientsOnly].
type LocalClientsConfig struct {
	// ClientAddr returns the address of a request's client, as the daemon
	// believes it (the peer, or the client a trusted proxy names).
	// Required.
	ClientAddr func(*http.Request) netip.Addr

	// Listener names the listener in log lines and answers.
	Listener string

	// Logger receives one INFO line per second at most about refused
	// clients, saying how to open the listener. Nil means slog.Default().
	Logger *slog.Logger

	// OnRefuse, if set, is called for every refused request before the
	// 403 is written, with reason "client_not_local", as
	// [Config.OnRefuse]. Nil means none.
	OnRefuse func(w http.ResponseWriter, r *http.Request, status int, reason string)
}

// LocalClientsOnly returns a handler that passes to next the requests of
// clients [IsLocalClient] accepts, and answers every other one 403 without
// any work: the safe default of a forward listener that has neither
// authentication nor a client allow list, so that a proxy bound to a
// public address is not an open relay by accident.
func LocalClientsOnly(next http.Handler, cfg LocalClientsConfig) http.Handler {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	gate := &logGate{every: time.Second}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := cfg.ClientAddr(r)
		if IsLocalClient(a) {
			next.ServeHTTP(w, r)
			return
		}
		if cfg.OnRefuse != nil {
			cfg.OnRefuse(w, r, http.StatusForbidden, "client_not_local")
		}
		if ok, held := gate.allow(); ok {
			log.LogAttrs(r.Context(), slog.LevelInfo,
				"forward request refused: the client is not on loopback or a private network, and the listener has no auth, "+
					"no allow_file and no forward.allow_public_clients; set one of them to serve it",
				slog.String("listener", cfg.Listener),
				slog.String("client", a.String()),
				slog.String("method", r.Method),
				slog.String("target", targetForLog(r)),
				slog.Int64("suppressed", held))
		}
		writePlain(w, http.StatusForbidden, "forbidden: this proxy serves clients on loopback and private networks only ("+
			a.String()+" is neither); its operator may open it with auth, allow_file or forward.allow_public_clients\n")
	})
}
