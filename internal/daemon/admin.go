package daemon

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/livepage"
	"github.com/seed-a07d1050/portcullis/internal/relay"
	"github.com/seed-a07d1050/portcullis/limit"
)

// snapshotTop is how many busy keys /debug/limits lists per limiter.
const snapshotTop = 100

// adminServer serves /metrics, /debug/limits, /healthz, /readyz and the
// live page.
type adminServer struct {
	ln     net.Listener
	srv    *http.Server
	live   *livepage.Sampler // sampled while the admin listener serves
	served chan struct{}
}

func startAdmin(addr string, s *Server) (*adminServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("proxy: admin listener: %w", err)
	}
	live := livepage.NewSampler(liveSource{s}, 0)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metricsOf{s}, relay.NewCollector(s.transport, s.loopCounts))
	s.metrics.RegisterOn(reg)
	// Everything but the health checks is behind the admin token, when
	// there is one; an unknown path gets its 404 only once authorized.
	private := http.NewServeMux()
	private.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: newServerErrorLog(s.log)}))
	private.HandleFunc("GET /debug/limits", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Snapshot())
	})
	private.Handle("GET "+livepage.PagePath+"{$}", livepage.Page(live, s.log))
	private.Handle("GET "+livepage.EventsPath, livepage.Events(live))
	mux := http.NewServeMux()
	mux.Handle("/", s.requireAdminToken(private))
	// The live page's way in: a redirect, its token form and its assets
	// hold no data.
	mux.Handle("GET /{$}", http.RedirectHandler(livepage.PagePath, http.StatusSeeOther))
	mux.HandleFunc("POST "+livepage.LoginPath, s.adminLogin)
	mux.Handle("GET "+livepage.AssetsPath, livepage.Assets())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		exchange.WriteShort(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ok, why := s.Ready(); !ok {
			exchange.WriteShort(w, http.StatusServiceUnavailable, why+"\n")
			return
		}
		// A degraded cluster stays ready: Redis away degrades every
		// node at once, and 503 from all of them would take the whole
		// fleet out of its load balancer (docs/cluster.md).
		if d := s.cluster.degraded(); len(d) > 0 {
			exchange.WriteShort(w, http.StatusOK, "ready; cluster degraded ("+strings.Join(d, ",")+"): limits decide by on_error\n")
			return
		}
		exchange.WriteShort(w, http.StatusOK, "ready\n")
	})
	a := &adminServer{
		ln: ln,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			IdleTimeout:       60 * time.Second,
			ErrorLog:          newServerErrorLog(s.log),
		},
		live:   live,
		served: make(chan struct{}),
	}
	go func() {
		defer close(a.served)
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin listener stopped", "error", err)
		}
	}()
	return a, nil
}

// adminAuth is the admin listener's bearer token, as its SHA-256 so that
// comparing it takes the same time whatever the length of what a client
// sends, and the live page's cookie derived from it.
type adminAuth struct {
	sum    [sha256.Size]byte
	cookie liveCookie
}

// loadAdminAuth reads the admin token of cfg; nil without one. It is the
// part of a reload that may fail, done before anything changes.
func loadAdminAuth(cfg config.Admin) (*adminAuth, error) {
	tok, err := cfg.Token()
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	if tok == "" {
		return nil, nil
	}
	return &adminAuth{sum: sha256.Sum256([]byte(tok)), cookie: newLiveCookie(tok)}, nil
}

// allows reports whether r carries the token: "Authorization: Bearer
// <token>", the scheme in any case (RFC 9110 §11.1).
func (a *adminAuth) allows(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return a.matches(tok)
}

// matches reports whether tok, spaces around it ignored, is the token.
func (a *adminAuth) matches(tok string) bool {
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], a.sum[:]) == 1
}

func (a *adminAuth) same(b *adminAuth) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.sum == b.sum
}

// requireAdminToken answers 401 to a request without the admin token, when
// one is configured: neither the bearer token nor, for the live page, the
// cookie its token form sets. A browser asking for the live page gets the
// form. The token in force is read per request, so a reload changes it at
// once on every admin listener.
func (s *Server) requireAdminToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := s.adminAuth.Load(); a != nil && !a.allows(r) && !a.allowsCookie(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="portcullis admin"`)
			if wantsLivePage(r) {
				livepage.WriteLogin(w, http.StatusUnauthorized, false, s.log)
				return
			}
			exchange.WriteShort(w, http.StatusUnauthorized, "unauthorized: this endpoint needs the admin token (Authorization: Bearer)\n")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// logAdminChange logs what a start or a reload changed for the admin
// listener, once the new token (if any) is in force: a new token, and a
// warning when the listener is reachable beyond loopback without one, at
// start and whenever a reload moved the listener or took its token away.
// prevAuth and prevAddr are what was in force before (nil at start).
func (s *Server) logAdminChange(prevAuth *adminAuth, prevAddr net.Addr, starting bool) {
	auth := s.adminAuth.Load()
	changed := !auth.same(prevAuth)
	if changed && !starting {
		s.log.Info("admin token changed", "token_required", auth != nil)
	}
	a := s.admin.Load()
	if a == nil || auth != nil || isLoopback(a.ln.Addr()) {
		return
	}
	moved := prevAddr == nil || a.ln.Addr().String() != prevAddr.String()
	if starting || changed || moved {
		s.log.Warn("admin listener reachable beyond loopback without admin.token_file: "+
			"/metrics and /debug/limits (which lists client addresses) are open to whoever reaches it",
			"admin", a.ln.Addr().String())
	}
}

// isLoopback reports whether a is a loopback address; an unspecified one
// (every interface) is not.
func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// close stops the live page's sampling first, which ends its event
// streams, so that Shutdown does not wait on them.
func (a *adminServer) close() {
	a.live.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if a.srv.Shutdown(ctx) != nil {
		_ = a.srv.Close()
	}
	<-a.served
}

// metricsOf collects the metrics of every listener and limiter a Server runs
// now. It describes nothing (an unchecked collector) because the set of
// listeners and routes changes with reloads.
type metricsOf struct{ s *Server }

func (m metricsOf) Describe(chan<- *prometheus.Desc) {}

func (m metricsOf) Collect(ch chan<- prometheus.Metric) {
	m.s.cluster.collectDegraded(ch)
	seen := make(map[*routeTable]bool)
	for _, f := range m.s.frontList() {
		f.stats.Collect(ch)
		if f.redis != nil {
			f.redis.Collect(ch)
		}
		if f.table == nil {
			continue
		}
		t := f.table.Load()
		if seen[t] { // listeners with routes_from share a table
			continue
		}
		seen[t] = true
		for _, l := range t.limiters() {
			for _, c := range l.collectors() {
				c.Collect(ch)
			}
		}
		for _, r := range t.rates() {
			for _, c := range r.collectors() {
				c.Collect(ch)
			}
		}
		for _, c := range t.extraCollectors() {
			c.Collect(ch)
		}
	}
}

// Snapshot is the state of every limit of a Server, as /debug/limits serves
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

// pathOf returns how r, a route of f's table t, is served now: on the
// event loops when they run and take it, on the lean path when it takes
// the route's requests, through the full server otherwise.
func (f *front) pathOf(t *routeTable, r *routeState) config.DataPath {
	switch {
	case f.h3 != nil || t.lean == nil || r.lean == nil || f.altSvc.Load() != nil:
		return config.PathFull
	case r.lean.OnLoop() && f.http != nil && f.http.loop != nil:
		return config.PathEventLoops
	}
	return config.PathLean
}

// Snapshot returns the state of every listener and limit now.
func (s *Server) Snapshot() Snapshot {
	var out Snapshot
	out.Listeners = []ListenerSnapshot{}
	for _, f := range s.frontList() {
		ls := ListenerSnapshot{
			Name:        f.cfg.Name,
			Protocol:    string(f.cfg.Protocol),
			Addr:        f.addr().String(),
			Connections: f.connStats(),
			BusyClients: f.busyClients(snapshotTop),
			RoutesFrom:  f.cfg.RoutesFrom,
		}
		f.rateSnapshots(&ls)
		if f.table != nil && f.cfg.RoutesFrom == "" {
			t := f.table.Load()
			if t.client != nil {
				ls.ClientLimit = limitSnapshot(t.client)
			}
			ls.Rate = rateSnapshotOf(t.rate)
			for _, r := range t.routes {
				rs := RouteSnapshot{Name: r.name, Path: f.pathOf(t, r), Rate: rateSnapshotOf(r.rate)}
				if r.limit != nil {
					rs.Limit = limitSnapshot(r.limit)
				}
				if r.shadow != nil {
					rs.ShadowLimit = limitSnapshot(r.shadow)
				}
				ls.Routes = append(ls.Routes, rs)
			}
			ls.Auth, ls.Forward = authSnapshot(t), forwardSnapshot(t)
		}
		out.Listeners = append(out.Listeners, ls)
	}
	return out
}

func forwardSnapshot(t *routeTable) *ForwardSnapshot {
	if t.forward == nil {
		return nil
	}
	st := t.forward.proxy.Stats()
	fs := &ForwardSnapshot{
		Limits:         []LimitSnapshot{},
		TunnelsOpen:    st.TunnelsOpen,
		TunnelsOpened:  st.TunnelsOpened,
		Denied:         st.Denied,
		Refused:        st.Refused,
		TargetFailures: st.TargetFailures,
		Intercept:      interceptSnapshot(t),
	}
	for _, l := range t.forward.limits {
		fs.Limits = append(fs.Limits, *limitSnapshot(l))
	}
	return fs
}

func authSnapshot(t *routeTable) *AuthSnapshot {
	if t.auth == nil {
		return nil
	}
	st := t.auth.a.Stats()
	return &AuthSnapshot{
		Users: st.Users, Cached: st.Cached, Verified: st.Verified, CacheHits: st.CacheHits,
		NoCredentials: st.NoCredentials, Failed: st.Failed, OverBudget: st.OverBudget, Busy: st.Busy,
		Reloads: st.Reloads, ReloadErrors: st.ReloadErrors,
	}
}

func limitSnapshot(l *limiter) *LimitSnapshot {
	snap := l.lim.Snapshot(snapshotTop)
	return &LimitSnapshot{
		Key:         string(l.cfg.Key),
		Permits:     l.cfg.Permits,
		Totals:      l.lim.Totals(),
		Busy:        keyStats(snap.Exchanges.Keys),
		TunnelsBusy: keyStats(snap.Tunnels.Keys),
	}
}

func keyStats(keys []limit.KeyStats[string]) []KeySnapshot {
	out := make([]KeySnapshot, 0, len(keys))
	for _, k := range keys {
		out = append(out, KeySnapshot{Key: k.Key, InUse: k.InUse, Waiting: k.Waiting, Refused: k.Refused})
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

// connKeys lists the client keys holding connections on l, busiest first.
func connKeys(l *connlimit.Listener, top int) []KeySnapshot {
	keys := l.Snapshot(top).Keys
	out := make([]KeySnapshot, 0, len(keys))
	for _, k := range keys {
		out = append(out, KeySnapshot{Key: k.Key.String(), InUse: k.InUse, Waiting: k.Waiting, Refused: k.Refused})
	}
	return out
}
