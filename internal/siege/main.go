package siege

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Exit codes of [Main].
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

const usageHead = `Usage: portcullis siege [flags] URL

Sends load and attacks to the HTTP(S) server at URL and reports what its
legitimate clients got. Every simulated client leaves from its own source
address (127.0.0.X on loopback; any address this host owns elsewhere), so a
server that limits per client sees distinct clients.

Scenarios (-scenario):
  none           only the legitimate clients: the no-attack baseline
  throughput     -clients addresses x -conns-per-client keep-alive connections
  slowloris      the attacker holds -attack-conns half-sent request heads open
  slow-requests  the attacker keeps -attack-conns complete slow requests in flight
  flood          slowloris and slow requests, half each

With -baseline the none scenario runs first for the same duration and the
report ends with the goodput ratio (attacked successes/s over baseline) and
the p99 ratio. A run longer than 2s prints a progress line to stderr every
second (-progress=false: none). Exit status: 0 done, 1 the run failed or
missed a -require-* bound, 2 bad usage.

Flags:
`

// options are the parsed command line.
type options struct {
	cfg            Config
	json           bool
	baseline       bool
	baselineTarget string
	requireGoodput float64
	requireP99     float64
	progress       bool
}

// progressAfter is the run length from which Main prints progress lines:
// shorter runs end before anyone wonders whether they hang.
const progressAfter = 2 * time.Second

// Main runs the siege command with args (without the program and command
// names), writing reports to stdout and diagnostics to stderr, and returns
// the exit code: [ExitOK], [ExitFailure] or [ExitUsage]. "-help" prints the
// usage to stdout and returns ExitOK. SIGINT or SIGTERM stops a run early; the
// partial report is printed and the code is ExitFailure.
func Main(args []string, stdout, stderr io.Writer) int {
	opts, code, done := parseArgs(args, stdout, stderr)
	if done {
		return code
	}
	if opts.progress && opts.cfg.Warmup+opts.cfg.Duration > progressAfter {
		opts.cfg.Progress = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return execute(ctx, opts, stdout, stderr)
}

func newFlagSet(o *options, stderr io.Writer) (*flag.FlagSet, func() error) {
	fs := flag.NewFlagSet("portcullis siege", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // Main prints usage itself, to the right stream
	c := &o.cfg
	scenario := fs.String("scenario", string(ScenarioNone), "what to run: "+scenarioNames())
	fs.DurationVar(&c.Duration, "duration", DefaultDuration, "how long legitimate clients are measured (at most 10m with -warmup)")
	fs.DurationVar(&c.Warmup, "warmup", 0, "how long the attacker runs alone first")
	fs.IntVar(&c.Clients, "clients", 0, "legitimate client addresses (default 16, or the length of -client-addrs)")
	fs.IntVar(&c.ConnsPerClient, "conns-per-client", 0, "request loops per client address (default 16 for throughput, else 1)")
	firstClient := fs.String("client-addr", DefaultFirstClientAddr.String(), "first legitimate source address; client i uses it + i")
	clientList := fs.String("client-addrs", "", "legitimate source addresses, comma-separated, ranges as a-b (overrides -client-addr)")
	attackerAddr := fs.String("attacker-addr", DefaultAttackerAddr.String(), "the attacker's source address")
	fs.IntVar(&c.AttackConns, "attack-conns", DefaultAttackConns, "attack connections kept going at once")
	conns := fs.String("connections", "", "legitimate connections: fresh or keep-alive (default keep-alive for throughput, else fresh)")
	fs.DurationVar(&c.Timeout, "timeout", DefaultTimeout, "limit on one legitimate request, connect to last byte")
	fs.Float64Var(&c.Rate, "rate", 0, "requests/s per legitimate loop (0: back to back)")
	fs.StringVar(&c.SlowPath, "slow-path", DefaultSlowPath, "what slow requests ask for")
	fs.DurationVar(&c.HeaderInterval, "header-interval", DefaultHeaderInterval, "how often a slowloris connection sends another header line")
	fs.DurationVar(&c.Grace, "grace", DefaultGrace, "an attack connection still open after this counts as admitted")
	fs.Float64Var(&c.MaxConnectRate, "max-connect-rate", DefaultConnectRate, "attacker connection attempts per second, at most")
	insecure := fs.Bool("insecure", false, "do not verify the server's TLS certificate")
	fs.IntVar(&c.CPUPID, "cpu-pid", 0, "report this process's CPU time (the server under test; Linux)")
	fs.BoolVar(&o.json, "json", false, "print JSON instead of tables")
	fs.BoolVar(&o.baseline, "baseline", false, "first run the none scenario for the same duration, then compare")
	fs.StringVar(&o.baselineTarget, "baseline-target", "", "URL for the baseline run (default URL; e.g. the backend directly); implies -baseline")
	fs.Float64Var(&o.requireGoodput, "require-goodput", 0, "with -baseline: fail unless the goodput ratio is at least this (e.g. 0.99)")
	fs.Float64Var(&o.requireP99, "require-p99", 0, "with -baseline: fail unless the p99 ratio is at most this (e.g. 1.5)")
	fs.BoolVar(&o.progress, "progress", true, "on runs longer than 2s, print a progress line to stderr every second")

	finish := func() error {
		var err error
		if c.Scenario, err = ParseScenario(*scenario); err != nil {
			return err
		}
		c.Connections = ConnMode(*conns)
		if *clientList != "" {
			if c.ClientAddrs, err = ParseAddrList(*clientList); err != nil {
				return fmt.Errorf("-client-addrs: %w", err)
			}
		}
		if c.FirstClientAddr, err = netip.ParseAddr(*firstClient); err != nil {
			return fmt.Errorf("-client-addr: %w", err)
		}
		if c.AttackerAddr, err = netip.ParseAddr(*attackerAddr); err != nil {
			return fmt.Errorf("-attacker-addr: %w", err)
		}
		if *insecure {
			c.TLSConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for by -insecure
		}
		if o.baselineTarget != "" {
			o.baseline = true
		}
		if (o.requireGoodput != 0 || o.requireP99 != 0) && !o.baseline {
			return errors.New("-require-goodput and -require-p99 need -baseline")
		}
		if o.requireGoodput < 0 || o.requireP99 < 0 {
			return errors.New("-require-goodput and -require-p99 must be ≥ 0")
		}
		return nil
	}
	return fs, finish
}

// parseArgs parses args; done reports that Main should return code at once.
func parseArgs(args []string, stdout, stderr io.Writer) (o options, code int, done bool) {
	fs, finish := newFlagSet(&o, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(fs, stdout)
			return o, ExitOK, true
		}
		fmt.Fprintln(stderr, "run 'portcullis siege -help' for usage")
		return o, ExitUsage, true
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "portcullis siege: want exactly one URL, got %d arguments\n", fs.NArg())
		fmt.Fprintln(stderr, "run 'portcullis siege -help' for usage")
		return o, ExitUsage, true
	}
	o.cfg.Target = fs.Arg(0)
	if err := finish(); err != nil {
		fmt.Fprintf(stderr, "portcullis siege: %v\n", err)
		return o, ExitUsage, true
	}
	return o, 0, false
}

func printUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprint(w, usageHead)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// execute runs the baseline (if asked) and the scenario and prints them.
func execute(ctx context.Context, o options, stdout, stderr io.Writer) int {
	var base *Report
	if o.baseline {
		bcfg := o.cfg
		if bcfg.Scenario != ScenarioThroughput {
			bcfg.Scenario = ScenarioNone
		}
		bcfg.Warmup = 0
		if o.baselineTarget != "" {
			bcfg.Target = o.baselineTarget
		}
		var err error
		if base, err = Run(ctx, bcfg); err != nil {
			return runFailed(stderr, "baseline", err)
		}
	}
	rep, err := Run(ctx, o.cfg)
	if rep != nil {
		if werr := printReports(stdout, base, rep, o.json); werr != nil {
			fmt.Fprintf(stderr, "portcullis siege: writing the report: %v\n", werr)
			return ExitFailure
		}
	}
	if err != nil {
		return runFailed(stderr, "run", err)
	}
	if base != nil {
		if c := Compare(*base, *rep); !c.Meets(o.requireGoodput, o.requireP99) {
			fmt.Fprintf(stderr, "portcullis siege: bound missed: goodput ratio %.3f (want ≥ %g), p99 ratio %.2f (want ≤ %g)\n",
				c.GoodputRatio, o.requireGoodput, c.P99Ratio, o.requireP99)
			return ExitFailure
		}
	}
	return ExitOK
}

func runFailed(stderr io.Writer, what string, err error) int {
	fmt.Fprintf(stderr, "portcullis siege: %s: %v\n", what, err)
	if errors.Is(err, ErrInvalidConfig) {
		return ExitUsage
	}
	return ExitFailure
}

// comparedReports is the JSON shape of a run with a baseline.
type comparedReports struct {
	Baseline   *Report    `json:"baseline"`
	Run        *Report    `json:"run"`
	Comparison Comparison `json:"comparison"`
}

func printReports(w io.Writer, base, rep *Report, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if base == nil {
			return enc.Encode(rep)
		}
		return enc.Encode(comparedReports{Baseline: base, Run: rep, Comparison: Compare(*base, *rep)})
	}
	if base == nil {
		return rep.WriteTable(w)
	}
	sections := []struct {
		title string
		write func(io.Writer) error
	}{
		{"baseline", base.WriteTable},
		{"run", rep.WriteTable},
		{"comparison", func(w io.Writer) error { return WriteComparison(w, base, rep) }},
	}
	for i, sec := range sections {
		if i > 0 {
			if _, err := fmt.Fprintln(w); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintf(w, "== %s ==\n", sec.title); err != nil {
			return err
		}
		if err := sec.write(w); err != nil {
			return err
		}
	}
	return nil
}
