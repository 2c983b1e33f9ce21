package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"syscall"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/proxy"
	"github.com/seed-a07d1050/portcullis/internal/sdnotify"
)

const runSynopsis = `run --config FILE
       portcullis run --listen ADDR --upstream URL [--max-conns-per-client N] [--syn-filter]
                      [--max-concurrent-per-client N] [--trusted-proxy CIDR ...] [--admin ADDR]

Serves until SIGTERM or SIGINT (then drains in-flight exchanges up to the
shutdown timeout and exits 0). SIGHUP reloads --config FILE; an invalid file is
refused with a logged error and the running configuration stays. Under
systemd (NOTIFY_SOCKET set) it reports READY, RELOADING and STOPPING, for a
Type=notify-reload unit.`

// runFlags are the flags of "portcullis run".
type runFlags struct {
	file          string
	listen        string
	upstreams     stringList
	maxConns      int
	synFilter     bool
	maxConcurrent int
	trusted       stringList
	admin         string
}

func (e env) runCmd(args []string) int {
	fs := newFlagSet("run", runSynopsis)
	var f runFlags
	fs.StringVar(&f.file, "config", "", "run from this YAML configuration `file`; excludes the other flags")
	fs.StringVar(&f.listen, "listen", "", "serve HTTP on this host:port (without --config)")
	fs.Var(&f.upstreams, "upstream", "send requests to this http(s) `URL`; repeat for round robin")
	fs.IntVar(&f.maxConns, "max-conns-per-client", 0, "connections one client may hold, checked at accept (0: 64, -1: no cap)")
	fs.BoolVar(&f.synFilter, "syn-filter", false, "drop the connection attempts of clients at their cap in the kernel (Linux), instead of refusing them at accept")
	fs.IntVar(&f.maxConcurrent, "max-concurrent-per-client", 0, "requests one client may run at once; more get 429 (0: no limit)")
	fs.Var(&f.trusted, "trusted-proxy", "a proxy `CIDR` whose X-Forwarded-For is believed and whose connections are not capped; repeatable")
	fs.StringVar(&f.admin, "admin", "", "serve /metrics, /debug/limits, /healthz and /readyz on this host:port")
	if code := e.parseFlags(fs, args); code >= 0 {
		return code
	}
	if f.file != "" {
		if f.listen != "" || len(f.upstreams) > 0 || f.maxConns != 0 || f.synFilter || f.maxConcurrent != 0 || len(f.trusted) > 0 || f.admin != "" {
			fmt.Fprintln(e.stderr, "portcullis run: --config excludes --listen, --upstream, --max-*, --trusted-proxy and --admin")
			return exitUsage
		}
		cfg, err := loadConfig(f.file)
		if err != nil {
			fmt.Fprintln(e.stderr, err)
			return exitUsage
		}
		return e.serve(cfg, func() (*config.Config, error) { return loadConfig(f.file) })
	}
	cfg, err := f.config()
	if err != nil {
		fmt.Fprintf(e.stderr, "portcullis run: %v\n", err)
		return exitUsage
	}
	return e.serve(cfg, nil)
}

// config builds the configuration the flags describe: one HTTP listener
// with one route to the upstreams.
func (f *runFlags) config() (*config.Config, error) {
	if f.listen == "" || len(f.upstreams) == 0 {
		return nil, errors.New("give --config FILE, or --listen and --upstream")
	}
	if f.maxConcurrent < 0 {
		return nil, fmt.Errorf("--max-concurrent-per-client must be 0 (no limit) or more (got %d)", f.maxConcurrent)
	}
	ln := config.Listener{
		Name:              "http",
		Protocol:          config.ProtocolHTTP,
		Listen:            f.listen,
		MaxConnsPerClient: f.maxConns,
		SYNFilter:         f.synFilter,
		Routes:            []config.Route{{Name: "default", Upstreams: f.upstreams}},
	}
	for _, s := range f.trusted {
		p, err := parseCIDR(s)
		if err != nil {
			return nil, err
		}
		ln.TrustedProxies = append(ln.TrustedProxies, p)
	}
	if f.maxConcurrent > 0 {
		ln.ClientLimit = &config.Limit{Key: config.KeyClientIP, Permits: f.maxConcurrent}
	}
	cfg := &config.Config{Admin: config.Admin{Listen: f.admin}, Listeners: []config.Listener{ln}}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// parseCIDR reads a --trusted-proxy value: a CIDR or a single address.
func parseCIDR(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		if p.Masked() != p {
			return netip.Prefix{}, fmt.Errorf("--trusted-proxy %s has host bits set; did you mean %s?", s, p.Masked())
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("--trusted-proxy %q is not an IP address or CIDR", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func loadConfig(file string) (*config.Config, error) {
	return config.Load(file)
}

// serve starts the daemon from cfg and runs it until SIGTERM or SIGINT.
// On SIGHUP it asks reload (nil: nothing to reload) for a new configuration.
// It tells the service manager, if one started it, each step: READY once
// serving, RELOADING then READY around a SIGHUP, STOPPING at SIGTERM.
func (e env) serve(cfg *config.Config, reload func() (*config.Config, error)) int {
	sigs := make(chan os.Signal, 4)
	stop := e.notify(sigs)
	defer stop()
	srv, err := proxy.Start(cfg, proxy.Options{LogOutput: e.stderr})
	if err != nil {
		if e.explainStart != nil {
			if msg := e.explainStart(err); msg != "" {
				fmt.Fprintln(e.stderr, msg)
				return exitFailure
			}
		}
		fmt.Fprintf(e.stderr, "portcullis: %v\n", err)
		return exitFailure
	}
	log := srv.Logger()
	manager := managerNotifier{n: e.manager, log: log}
	if e.managerErr != nil {
		log.Warn("not notifying the service manager", "err", e.managerErr)
	}
	running := cfg.Effective()
	manager.ready(servingStatus(running))
	if e.started != nil {
		e.started(srv)
	}
	for sig := range sigs {
		if sig != syscall.SIGHUP {
			log.Info("signal received: draining", "signal", sig.String(), "timeout", running.ShutdownTimeout)
			manager.stopping(fmt.Sprintf("draining for up to %v", running.ShutdownTimeout))
			ctx, cancel := context.WithTimeout(context.Background(), running.ShutdownTimeout)
			err := srv.Shutdown(ctx)
			cancel()
			if err != nil {
				log.Warn("shutdown timeout reached: the exchanges left were cut off")
			}
			return exitOK
		}
		manager.reloading()
		if reload == nil {
			log.Warn("SIGHUP ignored: running from flags, there is no file to reload")
			manager.ready("SIGHUP ignored: running from flags; " + servingStatus(running))
			continue
		}
		next, err := reload()
		if err == nil {
			err = srv.Reload(next)
		}
		if err != nil {
			log.Error("reload refused; the running configuration stays", "err", err)
			manager.ready("reload refused, see the log; " + servingStatus(running))
			continue
		}
		running = next.Effective()
		manager.ready(servingStatus(running))
	}
	return exitOK
}

// servingStatus is the status line the service manager shows for cfg.
func servingStatus(cfg *config.Config) string {
	names := make([]string, len(cfg.Listeners))
	for i, l := range cfg.Listeners {
		names[i] = fmt.Sprintf("%s (%s %s)", l.Name, l.Protocol, l.Listen)
	}
	return fmt.Sprintf("serving %d listener(s): %s", len(names), strings.Join(names, ", "))
}

// managerNotifier sends the daemon's state to the service manager and logs
// a notification that fails: the daemon serves on either way.
type managerNotifier struct {
	n   *sdnotify.Notifier // nil: no service manager
	log *slog.Logger
}

func (m managerNotifier) ready(status string) { m.check("READY", m.n.Ready(status)) }
func (m managerNotifier) reloading()          { m.check("RELOADING", m.n.Reloading("reloading")) }
func (m managerNotifier) stopping(status string) {
	m.check("STOPPING", m.n.Stopping(status))
}

func (m managerNotifier) check(what string, err error) {
	if err != nil {
		m.log.Warn("service manager notification failed", "notification", what, "socket", m.n.Socket(), "err", err)
	}
}
