package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/intercept"
	"github.com/seed-a07d1050/portcullis/internal/sdnotify"
	"github.com/seed-a07d1050/portcullis/rate"
)

const runSynopsis = `run --config FILE [--max-concurrent-per-client N]
       portcullis run --listen ADDR --upstream URL [--max-conns-per-client N] [--syn-filter]
                      [--max-concurrent-per-client N] [--max-rate-per-client "10r/s burst=20"]
                      [--max-conn-rate-per-client "20r/s burst=40"] [--trusted-proxy CIDR ...]
                      [--deny-file FILE] [--allow-file FILE]
                      [--admin ADDR [--admin-token-file FILE]]
                      [--access-log=false] [--log-format text|json]
       portcullis run --forward --listen ADDR [--max-concurrent-per-client N] [--htpasswd FILE]
                      [--forward-allow CIDR ...] [--forward-connect-port PORT|RANGE ...]
                      [--intercept-ca DIR] [--max-conns-per-client N]
                      [--trusted-proxy CIDR ...] [--max-rate-per-client LIMIT]
                      [--max-conn-rate-per-client LIMIT] [--deny-file FILE] [--allow-file FILE]
                      [--admin ADDR [--admin-token-file FILE]] [--access-log=false] [--log-format text|json]

Serves until SIGTERM or SIGINT (then drains in-flight exchanges up to the
shutdown timeout and exits 0). SIGHUP reloads --config FILE; an invalid file is
refused with a logged error and the running configuration stays. With --config,
--max-concurrent-per-client N gives every HTTP listener without a client_limit
of its own (reverse and forward) a limit of N requests at once per client.
Under systemd (NOTIFY_SOCKET set) it reports READY, RELOADING and STOPPING,
for a Type=notify or Type=notify-reload unit.`

// runFlags are the flags of "portcullis run".
type runFlags struct {
	file          string
	listen        string
	upstreams     stringList
	maxConns      int
	synFilter     bool
	maxConcurrent int
	maxRate       string
	maxConnRate   string
	trusted       stringList
	admin         string
	forward       bool
	htpasswd      string
	forwardAllow  stringList
	connectPorts  stringList
	interceptCA   string
	adminToken    string
	denyFile      string
	allowFile     string
	accessLog     bool
	logFormat     string
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
	fs.StringVar(&f.maxRate, "max-rate-per-client", "", "requests one client may make, as nginx's limit_req: \"10r/s burst=20\", \"10r/s burst=20 nodelay\" or \"10r/s burst=20 delay=5\"; more wait or get 429")
	fs.StringVar(&f.maxConnRate, "max-conn-rate-per-client", "", "connections one client may open, checked at accept: \"20r/s burst=40\"; more are refused")
	fs.Var(&f.trusted, "trusted-proxy", "a proxy `CIDR` whose X-Forwarded-For is believed and whose connections are not capped; repeatable")
	fs.StringVar(&f.denyFile, "deny-file", "", "refuse at accept, before any byte, the clients in this `file` of addresses and CIDRs (one a line, # comments); read again on SIGHUP")
	fs.StringVar(&f.allowFile, "allow-file", "", "refuse at accept every client outside this `file` of addresses and CIDRs (a more specific --deny-file entry still refuses); read again on SIGHUP")
	fs.StringVar(&f.admin, "admin", "", "serve /metrics, /debug/limits, /healthz and /readyz on this host:port")
	fs.BoolVar(&f.forward, "forward", false, "serve a forward proxy on --listen (clients send absolute-form requests and CONNECT), instead of a reverse proxy to --upstream")
	fs.StringVar(&f.htpasswd, "htpasswd", "", "with --forward: require proxy authentication (407) against this htpasswd `file` of bcrypt hashes, read again on SIGHUP")
	fs.Var(&f.forwardAllow, "forward-allow", "with --forward: let this private or loopback `CIDR` through the destination policy; repeatable")
	fs.Var(&f.connectPorts, "forward-connect-port", "with --forward: let CONNECT reach this `port` or range (such as 8443 or 1-65535) besides 443, the default; repeatable")
	fs.StringVar(&f.interceptCA, "intercept-ca", "", "with --forward: intercept the TLS inside every CONNECT with the CA in this `directory` (ca.pem and ca-key.pem, as `portcullis ca create --out DIR` writes them), counting the requests inside one by one; read again on SIGHUP")
	fs.StringVar(&f.adminToken, "admin-token-file", "", "require the bearer token in this `file` for every admin endpoint but /healthz and /readyz")
	fs.BoolVar(&f.accessLog, "access-log", true, "log one line per exchange and per TCP connection (--access-log=false: none)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log line `format`: text or json")
	if code := e.parseFlags(fs, args); code >= 0 {
		return code
	}
	if f.file != "" {
		logFlags := false // the config file's log section says these
		fs.Visit(func(fl *flag.Flag) { logFlags = logFlags || fl.Name == "access-log" || fl.Name == "log-format" })
		if f.listen != "" || len(f.upstreams) > 0 || f.maxConns != 0 || f.synFilter || len(f.trusted) > 0 || f.admin != "" || f.adminToken != "" ||
			f.forward || f.htpasswd != "" || len(f.forwardAllow) > 0 || len(f.connectPorts) > 0 || f.interceptCA != "" || f.maxRate != "" || f.maxConnRate != "" ||
			f.denyFile != "" || f.allowFile != "" || logFlags {
			fmt.Fprintln(e.stderr, "portcullis run: --config excludes every flag but --max-concurrent-per-client (the file's log section sets the log)")
			return exitUsage
		}
		if f.maxConcurrent < 0 {
			fmt.Fprintf(e.stderr, "portcullis run: --max-concurrent-per-client must be 0 (no limit) or more (got %d)\n", f.maxConcurrent)
			return exitUsage
		}
		load := func() (*config.Config, []string, error) {
			cfg, err := loadConfig(f.file)
			if err != nil {
				return nil, nil, err
			}
			notes, err := addClientLimits(cfg, f.maxConcurrent)
			return cfg, notes, err
		}
		cfg, notes, err := load()
		if err != nil {
			fmt.Fprintln(e.stderr, err)
			return exitUsage
		}
		return e.serveWith(cfg, notes, load)
	}
	cfg, err := f.config()
	if err != nil {
		fmt.Fprintf(e.stderr, "portcullis run: %v\n", err)
		return exitUsage
	}
	var reload func() (*config.Config, error)
	if f.htpasswd != "" || f.interceptCA != "" || f.denyFile != "" || f.allowFile != "" {
		reload = f.config // SIGHUP reads the htpasswd file, the CA and the lists again
	}
	return e.serve(cfg, reload)
}

// config builds the configuration the flags describe: one HTTP listener
// with one route to the upstreams, or with --forward one forward listener.
func (f *runFlags) config() (*config.Config, error) {
	switch {
	case f.forward && f.listen == "":
		return nil, errors.New("--forward needs --listen")
	case f.forward && len(f.upstreams) > 0:
		return nil, errors.New("--forward excludes --upstream: a forward proxy reaches the target each request names")
	case !f.forward && (f.htpasswd != "" || len(f.forwardAllow) > 0 || len(f.connectPorts) > 0 || f.interceptCA != ""):
		return nil, errors.New("--htpasswd, --forward-allow, --forward-connect-port and --intercept-ca need --forward")
	case !f.forward && (f.listen == "" || len(f.upstreams) == 0):
		return nil, errors.New("give --config FILE, or --listen and --upstream, or --forward and --listen")
	}
	if f.maxConcurrent < 0 {
		return nil, fmt.Errorf("--max-concurrent-per-client must be 0 (no limit) or more (got %d)", f.maxConcurrent)
	}
	logCfg := config.Log{Format: config.LogFormat(f.logFormat), AccessLog: &f.accessLog}
	if logCfg.Format != config.LogText && logCfg.Format != config.LogJSON {
		return nil, fmt.Errorf("--log-format must be text or json (got %q)", f.logFormat)
	}
	ln := config.Listener{
		Name:              "http",
		Protocol:          config.ProtocolHTTP,
		Listen:            f.listen,
		MaxConnsPerClient: f.maxConns,
		SYNFilter:         f.synFilter,
		Routes:            []config.Route{{Name: "default", Upstreams: f.upstreams}},
	}
	if f.forward {
		ln.Name, ln.Mode, ln.Routes = "forward", config.ModeForward, nil
		ln.Forward = &config.Forward{}
		for _, s := range f.forwardAllow {
			p, err := parseCIDR("--forward-allow", s)
			if err != nil {
				return nil, err
			}
			ln.Forward.Destinations.Allow = append(ln.Forward.Destinations.Allow, p)
		}
		if len(f.connectPorts) > 0 {
			// 443 stays: the flag adds to the default, as the help says.
			ln.Forward.ConnectPorts = []string{"443"}
			for _, s := range f.connectPorts {
				r, err := config.ParsePortRange(s)
				if err != nil {
					return nil, fmt.Errorf("--forward-connect-port %q: %w", s, err)
				}
				if r.String() != "443" {
					ln.Forward.ConnectPorts = append(ln.Forward.ConnectPorts, r.String())
				}
			}
		}
		if f.htpasswd != "" {
			abs, err := filepath.Abs(f.htpasswd)
			if err != nil {
				return nil, fmt.Errorf("--htpasswd: %w", err)
			}
			ln.Auth = &config.Auth{Htpasswd: abs}
		}
		if f.interceptCA != "" {
			dir, err := filepath.Abs(f.interceptCA)
			if err != nil {
				return nil, fmt.Errorf("--intercept-ca: %w", err)
			}
			ln.Forward.Intercept = &config.Intercept{
				CACert: filepath.Join(dir, intercept.CACertFile),
				CAKey:  filepath.Join(dir, intercept.CAKeyFile),
			}
		}
	}
	if err := f.lists(&ln); err != nil {
		return nil, err
	}
	for _, s := range f.trusted {
		p, err := parseCIDR("--trusted-proxy", s)
		if err != nil {
			return nil, err
		}
		ln.TrustedProxies = append(ln.TrustedProxies, p)
	}
	if f.maxConcurrent > 0 {
		ln.ClientLimit = &config.Limit{Key: config.KeyClientIP, Permits: f.maxConcurrent}
	}
	if err := f.rates(&ln); err != nil {
		return nil, err
	}
	cfg := &config.Config{Log: logCfg, Admin: config.Admin{Listen: f.admin, TokenFile: f.adminToken}, Listeners: []config.Listener{ln}}
	if err := daemon.Check(cfg); err != nil { // validates, then builds what the daemon will
		return nil, flagError(err)
	}
	return cfg, nil
}

// lists sets the listener's deny_file and allow_file from --deny-file and
// --allow-file, made absolute so that a reload reads the same files.
func (f *runFlags) lists(ln *config.Listener) error {
	for _, x := range []struct {
		flag, file string
		to         *string
	}{{"--deny-file", f.denyFile, &ln.DenyFile}, {"--allow-file", f.allowFile, &ln.AllowFile}} {
		if x.file == "" {
			continue
		}
		abs, err := filepath.Abs(x.file)
		if err != nil {
			return fmt.Errorf("%s: %w", x.flag, err)
		}
		*x.to = abs
	}
	return nil
}

// rates sets the listener's request rate and connection rate from
// --max-rate-per-client and --max-conn-rate-per-client.
func (f *runFlags) rates(ln *config.Listener) error {
	if f.maxRate != "" {
		l, err := rate.ParseLimit(f.maxRate)
		if err != nil {
			return fmt.Errorf("--max-rate-per-client: %w", err)
		}
		r := &config.Rate{Rate: configRate(l.Rate), Burst: l.Burst, Key: config.KeyClientIP}
		if l.Delay == rate.NoDelay {
			r.NoDelay = true
		} else {
			r.Delay = l.Delay
		}
		ln.Rate = r
	}
	if f.maxConnRate != "" {
		l, err := rate.ParseLimit(f.maxConnRate)
		switch {
		case err != nil:
			return fmt.Errorf("--max-conn-rate-per-client: %w", err)
		case l.Delay != 0:
			return fmt.Errorf("--max-conn-rate-per-client %q: a connection is never delayed: give a rate and a burst only", f.maxConnRate)
		}
		ln.ConnRate = &config.ConnRate{Rate: configRate(l.Rate), Burst: l.Burst}
	}
	return nil
}

// configRate is the configuration's form of a rate the flags parsed with package rate
// (whose messages the flags' errors keep).
func configRate(r rate.Rate) config.RateValue {
	return config.RateValue{Events: r.Events, Per: r.Per}
}

// parseCIDR reads the value of flag (--trusted-proxy, --forward-allow): a
// CIDR or a single address.
func parseCIDR(flag, s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		if p.Masked() != p {
			return netip.Prefix{}, fmt.Errorf("%s %s has host bits set; did you mean %s?", flag, s, p.Masked())
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s %q is not an IP address or CIDR", flag, s)
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

// addClientLimits gives every HTTP listener of cfg that has a route table of
// its own (reverse listeners without routes_from, forward listeners) and no
// client_limit a limit of n requests at once per client: what
// --max-concurrent-per-client N means with --config. A listener whose file
// sets its own client_limit keeps it. It returns notes to log, saying which
// listeners took the limit and which kept their own; n 0 changes nothing.
func addClientLimits(cfg *config.Config, n int) ([]string, error) {
	if n == 0 {
		return nil, nil
	}
	var added, kept []string
	for i := range cfg.Listeners {
		l := &cfg.Listeners[i]
		name := l.Name
		if name == "" {
			name = fmt.Sprintf("%s-%d", l.Protocol, i)
		}
		switch {
		case !l.Protocol.IsHTTP() || l.RoutesFrom != "":
		case l.ClientLimit != nil:
			kept = append(kept, name)
		default:
			l.ClientLimit = &config.Limit{Key: config.KeyClientIP, Permits: n}
			added = append(added, name)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	notes := []string{fmt.Sprintf("--max-concurrent-per-client %d: a client_limit of %d per client on listeners %v", n, n, added)}
	if len(kept) > 0 {
		notes = append(notes, fmt.Sprintf("--max-concurrent-per-client %d: listeners %v keep the client_limit of the file", n, kept))
	}
	return notes, nil
}

// loadConfig reads and validates file, then runs the daemon's build pass
// (daemon.Check) on it, as Start and Reload do before they bind anything:
// the lists, htpasswd files, CAs, rules and target patterns it names must
// load. check, run and a SIGHUP's reload so refuse the same files, with the
// same file:line messages.
func loadConfig(file string) (*config.Config, error) {
	cfg, err := config.Load(file)
	if err != nil {
		return nil, err
	}
	if err := daemon.Check(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// serve starts the daemon from cfg and runs it until SIGTERM or SIGINT.
// On SIGHUP it asks reload (nil: nothing to reload) for a new configuration.
// It tells the service manager, if one started it, each step: READY once
// serving, RELOADING then READY around a SIGHUP, STOPPING at SIGTERM.
func (e env) serve(cfg *config.Config, reload func() (*config.Config, error)) int {
	var noted func() (*config.Config, []string, error)
	if reload != nil {
		noted = func() (*config.Config, []string, error) {
			c, err := reload()
			return c, nil, err
		}
	}
	return e.serveWith(cfg, nil, noted)
}

// serveWith is serve for a configuration that flags changed: it logs notes
// once started, and the notes reload returns after each reload.
func (e env) serveWith(cfg *config.Config, notes []string, reload func() (*config.Config, []string, error)) int {
	sigs := make(chan os.Signal, 4)
	stop := e.notify(sigs)
	defer stop()
	srv, err := daemon.Start(cfg, daemon.Options{LogOutput: e.stderr})
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
		log.Warn("not notifying the service manager", "error", e.managerErr)
	}
	// The notes, then READY, then the test hook: whoever learns that the
	// daemon started finds both already done.
	for _, n := range notes {
		log.Info(n)
	}
	running := cfg.Effective()
	logRoutePaths(log, running)
	manager.ready(servingStatus(running))
	if e.started != nil {
		e.started(srv)
	}
	for sig := range sigs {
		if sig != syscall.SIGHUP {
			log.Info("signal received: draining", "signal", sig.String(), "timeout_ms", running.ShutdownTimeout.Milliseconds())
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
			log.Warn("SIGHUP ignored: running from flags without --config, --htpasswd, --intercept-ca, --deny-file or --allow-file, there is no file to read again")
			manager.ready("SIGHUP ignored: running from flags; " + servingStatus(running))
			continue
		}
		next, notes, err := reload()
		if err == nil {
			err = srv.Reload(next)
		}
		if err != nil {
			log.Error("reload refused; the running configuration stays", "error", err)
			manager.ready("reload refused, see the log; " + servingStatus(running))
			continue
		}
		for _, n := range notes {
			log.Info(n)
		}
		running = next.Effective()
		logRoutePaths(log, running)
		manager.ready(servingStatus(running))
	}
	return exitOK
}

// logRoutePaths logs, once per route of cfg (effective), how its
// HTTP/1.1 requests are served, and why when not on the event loops: a
// route that leaves the fast path says so.
func logRoutePaths(log *slog.Logger, cfg *config.Config) {
	for _, p := range cfg.RoutePaths(runtime.GOOS) {
		attrs := []any{"listener", p.Listener, "route", p.Route, "path", string(p.Path)}
		if p.Why != "" {
			attrs = append(attrs, "why", p.Why)
		}
		log.Info("route path", attrs...)
	}
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
		m.log.Warn("service manager notification failed", "notification", what, "socket", m.n.Socket(), "error", err)
	}
}
