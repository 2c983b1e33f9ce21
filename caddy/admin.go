package caddyportcullis

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"

	"github.com/caddyserver/caddy/v2"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/limit"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// DefaultSnapshotTop is how many of the busiest keys of each limiter the
// admin endpoint lists when the request does not say (?top=N).
const DefaultSnapshotTop = 50

// AdminAPI serves the snapshot of the running configuration's limiters on
// Caddy's admin endpoint: GET /portcullis/limits[?top=N].
type AdminAPI struct {
	app *App
}

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.portcullis",
		New: func() caddy.Module { return new(AdminAPI) },
	}
}

// Provision finds the portcullis app of the configuration the admin
// endpoint is started with. Caddy starts a new admin endpoint with each
// configuration, before its apps, so this is the app its handlers and
// listener wrappers will register with.
func (a *AdminAPI) Provision(ctx caddy.Context) error {
	app, err := appFrom(ctx)
	if err != nil {
		return err
	}
	a.app = app
	return nil
}

// Routes returns the snapshot route.
func (a *AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: "/portcullis/limits", Handler: caddy.AdminHandlerFunc(a.serveLimits)}}
}

// LimitsSnapshot is the body of GET /portcullis/limits.
type LimitsSnapshot struct {
	// Handlers are the portcullis_limit handlers, by name.
	Handlers map[string]HandlerSnapshot `json:"handlers"`
	// Listeners are the sockets of the listener wrappers, by wrapper name.
	Listeners map[string][]ListenerSnapshot `json:"listeners"`
}

// HandlerSnapshot is one handler's limiter: its busiest keys and totals.
type HandlerSnapshot struct {
	Totals limit.Totals `json:"totals"`
	Keys   []KeyState   `json:"keys"`
}

// KeyState is one busy key.
type KeyState struct {
	Key     string `json:"key"`
	InUse   int    `json:"in_use"`
	Waiting int    `json:"waiting"`
	Refused uint64 `json:"refused"`
}

// ListenerSnapshot is one capped socket: its connection counts and its
// busiest clients.
type ListenerSnapshot struct {
	Address string          `json:"address"`
	Stats   connlimit.Stats `json:"stats"`
	Clients []KeyState      `json:"clients"`
}

func (a *AdminAPI) serveLimits(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed", r.Method)}
	}
	top := DefaultSnapshotTop
	if s := r.URL.Query().Get("top"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("top must be a whole number ≥ 0 (got %q)", s)}
		}
		top = n
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(a.app.snapshot(top))
}

// snapshot reads every registered limiter.
func (a *App) snapshot(top int) LimitsSnapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := LimitsSnapshot{Handlers: map[string]HandlerSnapshot{}, Listeners: map[string][]ListenerSnapshot{}}
	for name, h := range a.handlers {
		s := h.lim.Snapshot(top).Exchanges
		hs := HandlerSnapshot{Totals: h.lim.Totals(), Keys: []KeyState{}}
		for _, k := range s.Keys {
			hs.Keys = append(hs.Keys, KeyState{k.Key, k.InUse, k.Waiting, k.Refused})
		}
		out.Handlers[name] = hs
	}
	for name, list := range a.listeners {
		for _, e := range list {
			ls := ListenerSnapshot{Address: e.address, Stats: e.ln.Stats(), Clients: clientStates(e.ln.Snapshot(top))}
			out.Listeners[name] = append(out.Listeners[name], ls)
		}
		sort.Slice(out.Listeners[name], func(i, j int) bool { return out.Listeners[name][i].Address < out.Listeners[name][j].Address })
	}
	return out
}

func clientStates(s limit.Snapshot[clientkey.Key]) []KeyState {
	out := []KeyState{}
	for _, k := range s.Keys {
		out = append(out, KeyState{k.Key.String(), k.InUse, k.Waiting, k.Refused})
	}
	return out
}

// Interface guards
var (
	_ caddy.Provisioner = (*AdminAPI)(nil)
	_ caddy.AdminRouter = (*AdminAPI)(nil)
)
