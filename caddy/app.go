package caddyportcullis

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/promlimit"
)

func init() {
	caddy.RegisterModule(new(App))
}

// App is the portcullis app: the registry of one configuration's limiters,
// for their metrics and the admin endpoint. It has nothing to configure;
// the handlers and listener wrappers load it themselves (Caddy creates an
// app that a module asks for), so it need not appear in the configuration.
// It lives as long as its configuration: a reload starts a new one, with
// new limiters and counts from zero.
type App struct {
	mu        sync.Mutex
	registry  *prometheus.Registry
	handlers  map[string]*Handler
	listeners map[string][]*listenerEntry // by wrapper name
	unnamed   map[string]int              // how many default names were handed out, by prefix
}

// listenerEntry is one listening socket wrapped by a listener wrapper.
type listenerEntry struct {
	address string
	ln      *connlimit.Listener
}

// CaddyModule returns the Caddy module information.
func (*App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "portcullis",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision takes the configuration's metrics registry.
func (a *App) Provision(ctx caddy.Context) error {
	a.registry = ctx.GetMetricsRegistry()
	a.handlers = make(map[string]*Handler)
	a.listeners = make(map[string][]*listenerEntry)
	a.unnamed = make(map[string]int)
	return nil
}

// Start does nothing: the limiters work inside the HTTP app.
func (a *App) Start() error { return nil }

// Stop does nothing: each limiter is closed by its own module's Cleanup.
func (a *App) Stop() error { return nil }

// appFrom loads the configuration's portcullis app.
func appFrom(ctx caddy.Context) (*App, error) {
	v, err := ctx.App("portcullis")
	if err != nil {
		return nil, fmt.Errorf("portcullis: loading the portcullis app: %w", err)
	}
	return v.(*App), nil
}

// name returns the name to register a limiter under: the given one, or
// prefix followed by a number when it is empty ("portcullis_limit",
// "portcullis_limit#2", ...).
func (a *App) name(given, prefix string) string {
	if given != "" {
		return given
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unnamed[prefix]++
	if n := a.unnamed[prefix]; n > 1 {
		return prefix + "#" + strconv.Itoa(n)
	}
	return prefix
}

// addHandler registers h under h.name and its metrics, labelled
// limiter=<name>. Two handlers of one configuration may not share a name.
func (a *App) addHandler(h *Handler) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.handlers[h.name]; ok {
		return fmt.Errorf("portcullis_limit: name %q is used twice: each limit needs its own name", h.name)
	}
	opts := promlimit.Opts{Subsystem: "http_exchanges", ConstLabels: prometheus.Labels{"limiter": h.name}}
	if err := a.register(promlimit.NewCollector(h.lim, opts), h.wait); err != nil {
		return fmt.Errorf("portcullis_limit %q: metrics: %w", h.name, err)
	}
	a.handlers[h.name] = h
	return nil
}

func (a *App) removeHandler(h *Handler) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.handlers[h.name] == h {
		delete(a.handlers, h.name)
	}
}

// addListener registers one socket of a listener wrapper and its metrics,
// labelled listener=<name>, address=<address>.
func (a *App) addListener(name string, ln *connlimit.Listener) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	addr := ln.Addr().String()
	labels := prometheus.Labels{"listener": name, "address": addr}
	conns := promlimit.NewConnCollector(ln, promlimit.Opts{ConstLabels: labels})
	if err := a.register(conns); err != nil {
		return fmt.Errorf("portcullis listener %q on %s: metrics: %w", name, addr, err)
	}
	a.listeners[name] = append(a.listeners[name], &listenerEntry{address: addr, ln: ln})
	return nil
}

func (a *App) removeListener(name string, ln *connlimit.Listener) {
	a.mu.Lock()
	defer a.mu.Unlock()
	list := a.listeners[name]
	for i, e := range list {
		if e.ln == ln {
			a.listeners[name] = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(a.listeners[name]) == 0 {
		delete(a.listeners, name)
	}
}

// register registers collectors in the configuration's registry, or none
// of them.
func (a *App) register(cs ...prometheus.Collector) error {
	if a.registry == nil {
		return nil
	}
	for i, c := range cs {
		if err := a.registry.Register(c); err != nil {
			for _, done := range cs[:i] {
				a.registry.Unregister(done)
			}
			return err
		}
	}
	return nil
}

// Interface guards
var (
	_ caddy.App         = (*App)(nil)
	_ caddy.Provisioner = (*App)(nil)
)
