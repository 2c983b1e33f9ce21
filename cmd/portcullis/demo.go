package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/net/netutil"

	"github.com/seed-a07d1050/portcullis/internal/backend"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/siege"
)

//go:embed demo.yaml
var demoYAML string

const demoSynopsis = `demo [--attack] [--listen ADDR] [--admin ADDR]

Runs the proxy with an embedded configuration in front of a built-in backend.
With --attack, floods the site from 127.0.0.2 (slow connections and slow
requests) while legitimate clients on 127.0.0.3 and up use it, first against
the bare backend and then through Portcullis, prints a before/after table and
exits.`

// demoFlags are the flags of "portcullis demo".
type demoFlags struct {
	listen, admin string
	attack        bool
	duration      time.Duration
	warmup        time.Duration
	attackConns   int
	backendConns  int
}

func (e env) demoCmd(args []string) int {
	fs := newFlagSet("demo", demoSynopsis)
	var f demoFlags
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "the proxy's host:port")
	fs.StringVar(&f.admin, "admin", "127.0.0.1:9901", "the admin host:port")
	fs.BoolVar(&f.attack, "attack", false, "run the attack comparison and exit")
	fs.DurationVar(&f.duration, "duration", 6*time.Second, "with --attack: how long legitimate clients are measured in each run")
	fs.DurationVar(&f.warmup, "warmup", 2*time.Second, "with --attack: how long the attacker runs alone before each measurement")
	fs.IntVar(&f.attackConns, "attack-conns", 600, "with --attack: connections the attacker keeps going")
	fs.IntVar(&f.backendConns, "backend-conns", 256, "with --attack: connections the built-in backend serves at once, as a real server's worker pool")
	if code := e.parseFlags(fs, args); code >= 0 {
		return code
	}
	if f.attack && (f.duration <= 0 || f.duration > time.Minute/3 || f.warmup < 0 || f.warmup > 10*time.Second) {
		fmt.Fprintln(e.stderr, "portcullis demo: --duration must be in (0, 20s] and --warmup in [0, 10s], so the demo ends within a minute")
		return exitUsage
	}
	if f.attackConns < 1 || f.backendConns < 1 {
		fmt.Fprintln(e.stderr, "portcullis demo: --attack-conns and --backend-conns must be at least 1")
		return exitUsage
	}
	if f.attack {
		return e.demoAttack(&f)
	}
	return e.demoServe(&f)
}

// demoConfig returns the embedded configuration with its addresses filled in.
func demoConfig(listen, admin, backendURL string) (*config.Config, error) {
	text := strings.NewReplacer("{{listen}}", listen, "{{admin}}", admin, "{{backend}}", backendURL).Replace(demoYAML)
	return config.Parse("demo.yaml", []byte(text))
}

// startBackend serves the built-in backend on a free loopback port, at
// most conns connections at once (0: no cap).
func startBackend(conns int) (*backend.Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("portcullis demo: backend: %w", err)
	}
	if conns > 0 {
		ln = netutil.LimitListener(ln, conns)
	}
	return backend.Serve(ln, backend.Config{})
}

func (e env) demoServe(f *demoFlags) int {
	b, err := startBackend(0)
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		return exitFailure
	}
	defer b.Close()
	cfg, err := demoConfig(f.listen, f.admin, b.URL())
	if err != nil {
		fmt.Fprintf(e.stderr, "portcullis demo: %v\n", err)
		return exitUsage
	}
	hint, err := slowRouteHint(cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "portcullis demo: %v\n", err)
		return exitFailure
	}
	started := e.started
	e.started = func(srv *daemon.Server) {
		printTryList(e.stdout, srv.Addr("web").String(), srv.AdminAddr().String(), hint)
		if started != nil {
			started(srv)
		}
	}
	e.explainStart = f.explainBindError
	return e.serve(cfg, nil)
}

// routeHint is a scenario that shows one route's limit at work: requests
// sent at once from one client, each asking the backend to take ms.
type routeHint struct {
	path     string // the route's path prefix
	requests int    // sent at once
	ms       int    // what each asks the backend to wait
	run      int    // served at once: the route's permits
	wait     int    // wait in the queue, then are served
	refused  int    // get the refusal status at once: the queue is full
	status   int    // the refusal status
	timeout  time.Duration
}

// slowRouteHint works out the try-list scenario of the demo's "slow" route
// from cfg, so the line printed says what the configuration does: as many
// requests as the permits, the queue and two more, each short enough (half
// the queue timeout) that the queued ones are served rather than timed out.
func slowRouteHint(cfg *config.Config) (routeHint, error) {
	eff := cfg.Effective()
	for _, l := range eff.Listeners {
		for _, r := range l.Routes {
			if r.Name != "slow" || r.Limit == nil {
				continue
			}
			q := r.Limit.Queue
			if r.Limit.Permits < 1 || q.Size < 0 || q.Timeout <= 0 {
				return routeHint{}, fmt.Errorf("the slow route's limit (permits %d, queue %d, %v) has no try-list scenario", r.Limit.Permits, q.Size, q.Timeout)
			}
			return routeHint{
				path: r.PathPrefix, requests: r.Limit.Permits + q.Size + 2, ms: int(q.Timeout.Milliseconds() / 2),
				run: r.Limit.Permits, wait: q.Size, refused: 2, status: r.Limit.Status, timeout: q.Timeout,
			}, nil
		}
	}
	return routeHint{}, errors.New("the embedded configuration has no limited route named slow")
}

// command is the shell line that sends the scenario to proxyURL.
func (h routeHint) command(proxyURL string) string {
	return fmt.Sprintf("for i in $(seq %d); do curl -s -o /dev/null -w '%%{http_code}\\n' '%s%s?ms=%d' & done; wait",
		h.requests, proxyURL, h.path, h.ms)
}

// outcome says what the scenario shows.
func (h routeHint) outcome() string {
	return fmt.Sprintf("%d get %d at once, %d run, %d wait (up to %v) and run next: the limit of %s",
		h.refused, h.status, h.run, h.wait, h.timeout, h.path)
}

func printTryList(w io.Writer, proxyAddr, adminAddr string, slow routeHint) {
	p, a := "http://"+proxyAddr, "http://"+adminAddr
	fmt.Fprintf(w, `Portcullis demo: proxy on %[1]s, admin on %[2]s, built-in backend behind it.

Things to try:
  curl %[1]s/                          # proxied to the backend
  curl '%[1]s/slow?ms=2000'            # a slow request
  %[3]s
                                        # %[4]s
  open %[2]s/ in a browser    # the live page: limits, refusals per second, busiest keys
  curl %[2]s/debug/limits              # who holds which connections and permits
  curl -s %[2]s/metrics | grep '^portcullis_'
  portcullis siege --scenario flood %[1]s/   # a flood from 127.0.0.2
  portcullis demo --attack              # before/after: the same flood without and with Portcullis

Press Ctrl-C to stop.
`, p, a, slow.command(p), slow.outcome())
}

// explainBindError turns a failure to bind the demo's addresses into advice
// naming the flag to change; "" for any other error.
func (f *demoFlags) explainBindError(err error) string {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return ""
	}
	flag, addr := "--listen", f.listen
	var op *net.OpError
	if errors.As(err, &op) && op.Addr != nil && sameAddr(op.Addr.String(), f.admin) {
		flag, addr = "--admin", f.admin
	}
	host, _, splitErr := net.SplitHostPort(addr)
	if splitErr != nil {
		host = "127.0.0.1"
	}
	return fmt.Sprintf("portcullis demo: %s is already in use (is another demo running?): choose another address with %s, such as %s %s (port 0 takes any free port)",
		addr, flag, flag, net.JoinHostPort(host, "0"))
}

// sameAddr reports whether two host:port strings name the same address.
func sameAddr(a, b string) bool {
	pa, errA := netip.ParseAddrPort(a)
	pb, errB := netip.ParseAddrPort(b)
	if errA != nil || errB != nil {
		return a == b
	}
	return pa == pb
}

// attackRun is one run of the comparison.
type attackRun struct {
	label  string
	report *siege.Report
}

func (e env) demoAttack(f *demoFlags) int {
	b, err := startBackend(f.backendConns)
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		return exitFailure
	}
	defer b.Close()
	cfg, err := demoConfig(f.listen, f.admin, b.URL())
	if err != nil {
		fmt.Fprintf(e.stderr, "portcullis demo: %v\n", err)
		return exitUsage
	}
	cfg.Log.Level = config.LevelWarn // the refusals would drown the table
	srv, err := daemon.Start(cfg, daemon.Options{LogOutput: e.stderr})
	if err != nil {
		if msg := f.explainBindError(err); msg != "" {
			fmt.Fprintln(e.stderr, msg)
		} else {
			fmt.Fprintf(e.stderr, "portcullis demo: %v\n", err)
		}
		return exitFailure
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	if e.started != nil {
		e.started(srv)
	}
	ctx, stop := e.signalContext()
	defer stop()

	fmt.Fprintf(e.stdout, "Flooding from 127.0.0.2 (%d connections: half slowloris, half slow requests) while 8 clients on 127.0.0.3-10 use the site.\n", f.attackConns)
	fmt.Fprintf(e.stdout, "The backend serves %d connections at once, like a server with a fixed worker pool.\n", f.backendConns)
	fmt.Fprintf(e.stdout, "Live page: http://%s/ (open it to watch the refusals while the flood runs).\n\n", srv.AdminAddr())
	var runs []attackRun
	for _, target := range []struct{ label, url string }{
		{"without portcullis", b.URL() + "/"},
		{"with portcullis", "http://" + srv.Addr("web").String() + "/"},
	} {
		fmt.Fprintf(e.stdout, "running %s: %v...\n", target.label, f.warmup+f.duration)
		rep, err := siege.Run(ctx, siege.Config{
			Target:         target.url,
			Scenario:       siege.ScenarioFlood,
			Duration:       f.duration,
			Warmup:         f.warmup,
			Clients:        8,
			AttackConns:    f.attackConns,
			Timeout:        2 * time.Second,
			Grace:          300 * time.Millisecond,
			MaxConnectRate: 2000,
		})
		if err != nil {
			fmt.Fprintf(e.stderr, "portcullis demo: %s: %v\n", target.label, err)
			return exitFailure
		}
		runs = append(runs, attackRun{target.label, rep})
	}
	fmt.Fprintln(e.stdout)
	writeAttackTable(e.stdout, runs)
	return exitOK
}

// signalContext is a context that ends at SIGINT or SIGTERM.
func (e env) signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	stop := e.notify(sigs)
	go func() {
		select {
		case s := <-sigs:
			if s != syscall.SIGHUP {
				cancel()
			}
		case <-ctx.Done():
		}
	}()
	return ctx, func() { stop(); cancel() }
}

// writeAttackTable prints the before/after comparison.
func writeAttackTable(w io.Writer, runs []attackRun) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	row := func(name string, cell func(r *siege.Report) string) {
		fmt.Fprintf(tw, "%s\t", name)
		for _, r := range runs {
			fmt.Fprintf(tw, "%s\t", cell(r.report))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "\t")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t", r.label)
	}
	fmt.Fprintln(tw)
	attack := func(get func(a *siege.AttackStats) uint64) func(r *siege.Report) string {
		return func(r *siege.Report) string {
			if r.Attack == nil {
				return "-"
			}
			return fmt.Sprint(get(r.Attack))
		}
	}
	row("attacker connections admitted", attack(func(a *siege.AttackStats) uint64 { return a.Admitted }))
	row("attacker connections refused", attack(func(a *siege.AttackStats) uint64 { return a.Refused }))
	row("attacker peak connections held", attack(func(a *siege.AttackStats) uint64 { return uint64(a.PeakHeld) }))
	row("legitimate requests sent", func(r *siege.Report) string { return fmt.Sprint(r.Legit.Requests) })
	row("legitimate requests served", func(r *siege.Report) string { return fmt.Sprint(r.Legit.Successes) })
	row("legitimate success rate", func(r *siege.Report) string { return fmt.Sprintf("%.1f%%", 100*r.Legit.SuccessRate) })
	row("legitimate latency p50", func(r *siege.Report) string { return latency(r.Legit.P50, r.Legit.Successes) })
	row("legitimate latency p99", func(r *siege.Report) string { return latency(r.Legit.P99, r.Legit.Successes) })
	_ = tw.Flush()
}

func latency(d time.Duration, successes uint64) string {
	if successes == 0 {
		return "none served"
	}
	return d.Round(10 * time.Microsecond).String()
}
