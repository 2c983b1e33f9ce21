package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"syscall"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/proxy"
	"github.com/seed-a07d1050/portcullis/rate"
)

const runSynopsis = `run --config FILE
       portcullis run --listen ADDR --upstream URL [--max-conns-per-client N] [--syn-filter]
                      [--max-concurrent-per-client N] [--max-rate-per-client "10r/s burst=20"]
                      [--max-conn-rate-per-client "20r/s burst=40"]
                      [--trusted-proxy CIDR ...] [--admin ADDR]

Serves until SIGTERM or SIGINT (then drains in-flight exchanges up to the
shutdown timeout and exits 0). SIGHUP reloads --config FILE; an invalid file is
refused with a logged error and the running configuration stays.`

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
	fs.StringVar(&f.admin, "admin", "", "serve /metrics, /debug/limits, /healthz and /readyz on this host:port")
	if code := e.parseFlags(fs, args); code >= 0 {
		return code
	}
	if f.file != "" {
		if f.listen != "" || len(f.upstreams) > 0 || f.maxConns != 0 || f.synFilter || f.maxConcurrent != 0 ||
			f.maxRate != "" || f.maxConnRate != "" || len(f.trusted) > 0 || f.admin != "" {
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
	if err := f.rates(&ln); err != nil {
		return nil, err
	}
	cfg := &config.Config{Admin: config.Admin{Listen: f.admin}, Listeners: []config.Listener{ln}}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// rates sets the listener's request rate and connection rate from
// --max-rate-per-client and --max-conn-rate-per-client.
func (f *runFlags) rates(ln *config.Listener) error {
	if f.maxRate != "" {
		l, err := rate.ParseLimit(f.maxRate)
		if err != nil {
			return fmt.Errorf("--max-rate-per-client: %w", err)
		}
		r := &config.Rate{Rate: l.Rate, Burst: l.Burst, Key: config.KeyClientIP}
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
		ln.ConnRate = &config.ConnRate{Rate: l.Rate, Burst: l.Burst}
	}
	return nil
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
func (e env) serve(cfg *config.Config, reload func() (*config.Config, error)) int {
	sigs := make(chan os.Signal, 4)
	stop := e.notify(sigs)
	defer stop()
	srv, err := proxy.Start(cfg, proxy.Options{LogOutput: e.stderr})
	if err != nil {
		fmt.Fprintf(e.stderr, "portcullis: %v\n", err)
		return exitFailure
	}
	if e.started != nil {
		e.started(srv)
	}
	log := srv.Logger()
	running := cfg.Effective()
	for sig := range sigs {
		if sig != syscall.SIGHUP {
			log.Info("signal received: draining", "signal", sig.String(), "timeout", running.ShutdownTimeout)
			ctx, cancel := context.WithTimeout(context.Background(), running.ShutdownTimeout)
			err := srv.Shutdown(ctx)
			cancel()
			if err != nil {
				log.Warn("shutdown timeout reached: the exchanges left were cut off")
			}
			return exitOK
		}
		if reload == nil {
			log.Warn("SIGHUP ignored: running from flags, there is no file to reload")
			continue
		}
		next, err := reload()
		if err == nil {
			err = srv.Reload(next)
		}
		if err != nil {
			log.Error("reload refused; the running configuration stays", "err", err)
			continue
		}
		running = next.Effective()
	}
	return exitOK
}
