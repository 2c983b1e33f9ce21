package connlimit

import "sync/atomic"

// Stats are a listener's counts. Counters only grow; Open and Pending are
// the state now.
type Stats struct {
	// Accepted counts connections Accept returned (exempt ones included).
	Accepted uint64 `json:"accepted"`
	// Exempt counts admitted connections that took no per-client slot:
	// from a trusted peer, or with no IP address to key.
	Exempt uint64 `json:"exempt"`
	// Open is how many admitted connections are not yet closed, whether or
	// not Accept has returned them yet.
	Open int64 `json:"open"`
	// Pending is how many connections are still being admitted: reading a
	// PROXY header or waiting for the Store.
	Pending int64 `json:"pending"`
	// Refused counts connections closed instead of admitted, by reason.
	Refused Refused `json:"refused"`
	// AcceptErrors counts temporary errors of the inner Accept (such as
	// EMFILE), each followed by a back-off.
	AcceptErrors uint64 `json:"accept_errors"`
	// SYNFiltered is how many client keys the installed SYN filter now
	// drops the connection attempts of (Config.SYNFilter); their attempts
	// never reach Accept and are not counted in Refused.
	SYNFiltered int64 `json:"syn_filtered"`
}

// Refused counts refusals by reason.
type Refused struct {
	// ClientCap: the client's key held its cap (Permits or an override).
	ClientCap uint64 `json:"client_cap"`
	// Level: a wider prefix ([Level]) held its cap.
	Level uint64 `json:"level"`
	// ClientRate: the client opened connections faster than
	// Config.ConnRate allows.
	ClientRate uint64 `json:"client_rate"`
	// ProxyHeaderBad: a trusted peer sent a malformed or oversized PROXY
	// header, or closed the connection inside it.
	ProxyHeaderBad uint64 `json:"proxy_header_bad"`
	// ProxyHeaderSlow: a trusted peer's PROXY header did not arrive whole
	// within ProxyHeaderTimeout.
	ProxyHeaderSlow uint64 `json:"proxy_header_slow"`
	// ProxyHeaderMissing: a trusted peer sent something other than a PROXY
	// header, or closed the connection before sending anything.
	ProxyHeaderMissing uint64 `json:"proxy_header_missing"`
	// Store: the shared Store failed or did not answer in time.
	Store uint64 `json:"store"`
	// Shutdown: the listener was closed while the connection was being
	// admitted or waited to be returned by Accept.
	Shutdown uint64 `json:"shutdown"`
	// Filtered: Config.Filter refused the client.
	Filtered uint64 `json:"filtered"`
}

// Total returns the sum of all refusals.
func (r Refused) Total() uint64 {
	return r.ClientCap + r.Level + r.ClientRate + r.ProxyHeaderBad + r.ProxyHeaderSlow + r.ProxyHeaderMissing + r.Store + r.Shutdown + r.Filtered
}

// reason is why a connection was refused; it indexes counters.refused.
type reason uint8

const (
	admitted reason = iota
	reasonClientCap
	reasonLevel
	reasonClientRate
	reasonProxyBad
	reasonProxySlow
	reasonProxyMissing
	reasonStore
	reasonShutdown
	reasonFiltered
	numReasons
)

// reasonNames are the reasons as logs write them: the JSON names of the
// Stats.Refused fields, which are also the "reason" labels of the metrics
// (promlimit), so that one refusal is spelled one way everywhere.
var reasonNames = [numReasons]string{
	admitted:           "admitted",
	reasonClientCap:    "client_cap",
	reasonLevel:        "level",
	reasonClientRate:   "client_rate",
	reasonProxyBad:     "proxy_header_bad",
	reasonProxySlow:    "proxy_header_slow",
	reasonProxyMissing: "proxy_header_missing",
	reasonStore:        "store",
	reasonShutdown:     "shutdown",
	reasonFiltered:     "filtered",
}

func (r reason) String() string { return reasonNames[r] }

// counters are the atomic form of Stats.
type counters struct {
	accepted, exempt, acceptErrors atomic.Uint64
	open, pending                  atomic.Int64
	refused                        [numReasons]atomic.Uint64

	// Connections the raw accept path refused and admitted; not in Stats,
	// since which path took a connection is the listener's business.
	rawRefused, rawAdmitted atomic.Uint64
}

func (c *counters) stats() Stats {
	r := func(x reason) uint64 { return c.refused[x].Load() }
	return Stats{
		Accepted:     c.accepted.Load(),
		Exempt:       c.exempt.Load(),
		Open:         c.open.Load(),
		Pending:      c.pending.Load(),
		AcceptErrors: c.acceptErrors.Load(),
		Refused: Refused{
			ClientCap:          r(reasonClientCap),
			Level:              r(reasonLevel),
			ClientRate:         r(reasonClientRate),
			ProxyHeaderBad:     r(reasonProxyBad),
			ProxyHeaderSlow:    r(reasonProxySlow),
			ProxyHeaderMissing: r(reasonProxyMissing),
			Store:              r(reasonStore),
			Shutdown:           r(reasonShutdown),
			Filtered:           r(reasonFiltered),
		},
	}
}
