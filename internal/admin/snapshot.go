package admin

import (
	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/rate"
)

// snapshotTop is how many busy keys /debug/limits lists per limiter.
const snapshotTop = 100

// Snapshot is the state of every limit of a daemon, as /debug/limits serves
// it in JSON.
type Snapshot struct {
	Listeners []ListenerSnapshot `json:"listeners"`
}

// ListenerSnapshot is one listener's connection counts and the limits of
// its routes.
type ListenerSnapshot struct {
	Name        string          `json:"name"`
	Protocol    string          `json:"protocol"`
	Addr        string          `json:"addr"`
	Connections connlimit.Stats `json:"connections"`
	// BusyClients are the client keys holding connections, busiest first.
	BusyClients []KeySnapshot   `json:"busy_clients"`
	ClientLimit *LimitSnapshot  `json:"client_limit,omitempty"`
	RoutesFrom  string          `json:"routes_from,omitempty"`
	Routes      []RouteSnapshot `json:"routes,omitempty"`
	// Rate is the listener's request rate; ConnRate and HandshakeRate its
	// accept-time rates, keyed by client.
	Rate          *RateSnapshot `json:"rate,omitempty"`
	ConnRate      *RateSnapshot `json:"conn_rate,omitempty"`
	HandshakeRate *RateSnapshot `json:"handshake_rate,omitempty"`
	// Auth is the listener's authentication, when it has an auth block.
	Auth *AuthSnapshot `json:"auth,omitempty"`
	// Forward is the proxy of a forward listener; nil for a reverse one.
	Forward *ForwardSnapshot `json:"forward,omitempty"`
}

// ForwardSnapshot is the state of a forward listener's proxy and limits.
type ForwardSnapshot struct {
	// Limits are the forward limits, outermost first; each names its key
	// (proxy_user, target_host, ...) and lists its busiest users or targets.
	Limits         []LimitSnapshot `json:"limits"`
	TunnelsOpen    int             `json:"tunnels_open"`
	TunnelsOpened  uint64          `json:"tunnels_opened"`
	Denied         uint64          `json:"denied"`
	Refused        uint64          `json:"refused"`
	TargetFailures uint64          `json:"target_failures"`
	// Intercept is the listener's TLS interception; nil without.
	Intercept *InterceptSnapshot `json:"intercept,omitempty"`
}

// InterceptSnapshot is the state of a forward listener's TLS interception
// since its Interceptor was made (at start, or by a reload that changed its
// settings); the leaf counts since its leaves were made (a reload keeps
// them while the CA files and the leaves block stay the same).
type InterceptSnapshot struct {
	SessionsOpen      int    `json:"sessions_open"`
	Sessions          uint64 `json:"sessions"`
	Connects          uint64 `json:"connects"`
	Tunnelled         uint64 `json:"tunnelled"`
	HandshakeFailures uint64 `json:"handshake_failures"`
	NotTLS            uint64 `json:"not_tls"`
	Requests          uint64 `json:"requests"`
	Misdirected       uint64 `json:"misdirected"`
	LeavesMinted      uint64 `json:"leaves_minted"`
	LeavesCached      int    `json:"leaves_cached"`
	LeafCacheHits     uint64 `json:"leaf_cache_hits"`
	LeafErrors        uint64 `json:"leaf_errors"`
	UpstreamFailures  uint64 `json:"upstream_failures"`
	BadCertificates   uint64 `json:"upstream_bad_certificates"`
	Unverified        uint64 `json:"upstream_unverified_sessions"`
}

// AuthSnapshot is a listener's authentication counts since its
// Authenticator was made (at start, or by a reload that changed its
// settings).
type AuthSnapshot struct {
	Users         int    `json:"users"`
	Cached        int    `json:"cached"`
	Verified      uint64 `json:"verified"`
	CacheHits     uint64 `json:"cache_hits"`
	NoCredentials uint64 `json:"no_credentials"`
	Failed        uint64 `json:"failed"`
	OverBudget    uint64 `json:"over_budget"`
	Busy          uint64 `json:"busy"`
	Reloads       uint64 `json:"reloads"`
	ReloadErrors  uint64 `json:"reload_errors"`
}

// RouteSnapshot is the state of one route's limits.
type RouteSnapshot struct {
	Name string `json:"name"`
	// Path is how the route's HTTP/1.1 requests are served now, as the
	// running tables decide it: config.PathEventLoops, PathLean or
	// PathFull (see config.RoutePaths, which says why).
	Path        config.DataPath `json:"path"`
	Rate        *RateSnapshot   `json:"rate,omitempty"`
	Limit       *LimitSnapshot  `json:"limit,omitempty"`
	ShadowLimit *LimitSnapshot  `json:"shadow_limit,omitempty"`
}

// LimitSnapshot is one limiter's totals (exchanges and tunnels together) and
// its busiest keys.
type LimitSnapshot struct {
	// Key and Permits are the limit's configured key and permits per key
	// (-1: unlimited).
	Key     string        `json:"key"`
	Permits int           `json:"permits"`
	Totals  limit.Totals  `json:"totals"`
	Busy    []KeySnapshot `json:"busy"`
	// TunnelsBusy lists tunnel keys when tunnels have their own permits.
	TunnelsBusy []KeySnapshot `json:"tunnels_busy,omitempty"`
}

// KeySnapshot is one busy key.
type KeySnapshot struct {
	Key     string `json:"key"`
	InUse   int    `json:"in_use"`
	Waiting int    `json:"waiting,omitempty"`
	Refused uint64 `json:"refused,omitempty"`
}

// RateSnapshot is one rate's state, as /debug/limits serves it: its limit,
// its totals and its busiest keys, the furthest ahead of their rate first.
type RateSnapshot struct {
	// Limit is the rate as nginx writes it ("10r/s burst=20 delay=5").
	Limit  string `json:"limit"`
	Key    string `json:"key,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
	// Totals count the decisions since the rate was built (a reload that
	// keeps it keeps them).
	Totals rate.Totals       `json:"totals"`
	Busy   []RateKeySnapshot `json:"busy"`
}

// RateKeySnapshot is one key whose rate state is not fresh.
type RateKeySnapshot struct {
	Key string `json:"key"`
	// AheadSeconds is how far the key is ahead of its rate: the time until
	// its whole burst is available again.
	AheadSeconds float64 `json:"ahead_seconds"`
	// Remaining is how many more requests of the key would be admitted now.
	Remaining int `json:"remaining"`
}

// SnapshotOf reads the state of listeners now, as /debug/limits serves
// it: every count, and the busiest keys of every limiter.
func SnapshotOf(listeners []Listener) Snapshot {
	out := Snapshot{Listeners: []ListenerSnapshot{}}
	for _, l := range listeners {
		ls := ListenerSnapshot{
			Name:        l.Config.Name,
			Protocol:    string(l.Config.Protocol),
			Addr:        l.Addr,
			Connections: l.Conns.Stats(),
			BusyClients: connKeys(l.Conns, snapshotTop),
			RoutesFrom:  l.Config.RoutesFrom,
		}
		if r := l.AcceptRate; r != nil {
			s := acceptRateSnapshot(r)
			if r.Handshake {
				ls.HandshakeRate = s
			} else {
				ls.ConnRate = s
			}
		}
		if t := l.Table; t != nil {
			ls.ClientLimit = limitSnapshot(t.Client)
			ls.Rate = rateSnapshot(t.Rate)
			for _, r := range t.Routes {
				ls.Routes = append(ls.Routes, RouteSnapshot{
					Name: r.Name, Path: r.Path, Rate: rateSnapshot(r.Rate),
					Limit: limitSnapshot(r.Limit), ShadowLimit: limitSnapshot(r.Shadow),
				})
			}
			ls.Auth, ls.Forward = authSnapshot(t), forwardSnapshot(t.Forward)
		}
		out.Listeners = append(out.Listeners, ls)
	}
	return out
}

// InUse sums what the snapshot shows held or waiting: open and pending
// connections, exchange permits in use or waited for, and open tunnels. It
// is zero on an idle server.
func (s Snapshot) InUse() int {
	n := 0
	for _, l := range s.Listeners {
		n += int(l.Connections.Open + l.Connections.Pending)
		if l.ClientLimit != nil {
			n += l.ClientLimit.Totals.InUse + l.ClientLimit.Totals.Waiting
		}
		for _, r := range l.Routes {
			for _, x := range []*LimitSnapshot{r.Limit, r.ShadowLimit} {
				if x != nil {
					n += x.Totals.InUse + x.Totals.Waiting
				}
			}
		}
		if l.Forward != nil {
			n += l.Forward.TunnelsOpen
			for _, x := range l.Forward.Limits {
				n += x.Totals.InUse + x.Totals.Waiting
			}
		}
	}
	return n
}

func forwardSnapshot(f *Forward) *ForwardSnapshot {
	if f == nil {
		return nil
	}
	st := f.Proxy.Stats()
	fs := &ForwardSnapshot{
		Limits:         []LimitSnapshot{},
		TunnelsOpen:    st.TunnelsOpen,
		TunnelsOpened:  st.TunnelsOpened,
		Denied:         st.Denied,
		Refused:        st.Refused,
		TargetFailures: st.TargetFailures,
		Intercept:      interceptSnapshot(f),
	}
	for i := range f.Limits {
		fs.Limits = append(fs.Limits, *limitSnapshot(&f.Limits[i]))
	}
	return fs
}

func interceptSnapshot(f *Forward) *InterceptSnapshot {
	if f.Interceptor == nil {
		return nil
	}
	s, u := f.Interceptor.Stats(), f.Upstream.Stats()
	return &InterceptSnapshot{
		SessionsOpen: s.Open, Sessions: s.Sessions, Connects: s.Connects, Tunnelled: s.Tunnelled,
		HandshakeFailures: s.HandshakeFailures, NotTLS: s.NotTLS, Requests: s.Requests, Misdirected: s.Misdirected,
		LeavesMinted: s.Leaves.Minted, LeavesCached: s.Leaves.Cached, LeafCacheHits: s.Leaves.Hits, LeafErrors: s.Leaves.Errors,
		UpstreamFailures: u.Failures, BadCertificates: u.BadCertificates, Unverified: u.Unverified,
	}
}

func authSnapshot(t *Table) *AuthSnapshot {
	if t.Auth == nil {
		return nil
	}
	st := t.Auth.Stats()
	return &AuthSnapshot{
		Users: st.Users, Cached: st.Cached, Verified: st.Verified, CacheHits: st.CacheHits,
		NoCredentials: st.NoCredentials, Failed: st.Failed, OverBudget: st.OverBudget, Busy: st.Busy,
		Reloads: st.Reloads, ReloadErrors: st.ReloadErrors,
	}
}

// limitSnapshot returns l's totals and busiest keys; nil for a nil l.
func limitSnapshot(l *Limit) *LimitSnapshot {
	if l == nil {
		return nil
	}
	snap := l.Limiter.Snapshot(snapshotTop)
	return &LimitSnapshot{
		Key:         string(l.Config.Key),
		Permits:     l.Config.Permits,
		Totals:      l.Limiter.Totals(),
		Busy:        keyStats(snap.Exchanges.Keys, func(k string) string { return k }),
		TunnelsBusy: keyStats(snap.Tunnels.Keys, func(k string) string { return k }),
	}
}

func keyStats[K comparable](keys []limit.KeyStats[K], name func(K) string) []KeySnapshot {
	out := make([]KeySnapshot, 0, len(keys))
	for _, k := range keys {
		out = append(out, KeySnapshot{Key: name(k.Key), InUse: k.InUse, Waiting: k.Waiting, Refused: k.Refused})
	}
	return out
}

// connKeys lists at most top client keys holding connections, busiest
// first.
func connKeys(c Conns, top int) []KeySnapshot {
	return keyStats(c.Snapshot(top).Keys, clientkey.Key.String)
}

// rateSnapshot returns r's totals and busiest keys; nil for a nil r.
func rateSnapshot(r *Rate) *RateSnapshot {
	if r == nil {
		return nil
	}
	s := r.Limiter.Snapshot(snapshotTop)
	return &RateSnapshot{
		Limit:  r.Config.Limit().String(),
		Key:    string(r.Config.Key),
		DryRun: r.Config.DryRun,
		Totals: s.Totals,
		Busy:   rateKeys(s.Keys, func(k string) string { return k }),
	}
}

func acceptRateSnapshot(r *AcceptRate) *RateSnapshot {
	s := r.Snapshot(snapshotTop)
	return &RateSnapshot{Limit: r.Limit.String(), Totals: s.Totals, Busy: rateKeys(s.Keys, clientkey.Key.String)}
}

func rateKeys[K comparable](keys []rate.KeyStats[K], name func(K) string) []RateKeySnapshot {
	out := make([]RateKeySnapshot, 0, len(keys))
	for _, k := range keys {
		out = append(out, RateKeySnapshot{Key: name(k.Key), AheadSeconds: k.Ahead.Seconds(), Remaining: k.Remaining})
	}
	return out
}
