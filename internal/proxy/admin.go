package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/limit"
)

// snapshotTop is how many busy keys /debug/limits lists per limiter.
const snapshotTop = 100

// adminServer serves /metrics, /debug/limits, /healthz and /readyz.
type adminServer struct {
	ln     net.Listener
	srv    *http.Server
	served chan struct{}
}

func startAdmin(addr string, s *Server) (*adminServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("proxy: admin listener: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metricsOf{s}, upstreamCollector{s.transport})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: newServerErrorLog(s.log)}))
	mux.HandleFunc("GET /debug/limits", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Snapshot())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeShort(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ok, why := s.Ready(); !ok {
			writeShort(w, http.StatusServiceUnavailable, why+"\n")
			return
		}
		writeShort(w, http.StatusOK, "ready\n")
	})
	a := &adminServer{
		ln: ln,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			IdleTimeout:       60 * time.Second,
			ErrorLog:          newServerErrorLog(s.log),
		},
		served: make(chan struct{}),
	}
	go func() {
		defer close(a.served)
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin listener stopped", "err", err)
		}
	}()
	return a, nil
}

func (a *adminServer) close() {
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
}

// RouteSnapshot is the state of one route's limits.
type RouteSnapshot struct {
	Name        string         `json:"name"`
	Rate        *RateSnapshot  `json:"rate,omitempty"`
	Limit       *LimitSnapshot `json:"limit,omitempty"`
	ShadowLimit *LimitSnapshot `json:"shadow_limit,omitempty"`
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
				rs := RouteSnapshot{Name: r.name, Rate: rateSnapshotOf(r.rate)}
				if r.limit != nil {
					rs.Limit = limitSnapshot(r.limit)
				}
				if r.shadow != nil {
					rs.ShadowLimit = limitSnapshot(r.shadow)
				}
				ls.Routes = append(ls.Routes, rs)
			}
		}
		out.Listeners = append(out.Listeners, ls)
	}
	return out
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
// connections, and exchange permits in use or waited for. It is zero on an
// idle server.
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
