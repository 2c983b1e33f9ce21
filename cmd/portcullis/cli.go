package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/sdnotify"
	"github.com/seed-a07d1050/portcullis/internal/siege"
)

// Exit codes.
const (
	exitOK      = 0 // success
	exitFailure = 1 // a failure at run time (a socket could not be bound, a run failed)
	exitUsage   = 2 // bad usage or a bad configuration; nothing was started
)

const usage = `portcullis: admission control in front of any server.

Usage:
  portcullis run --config FILE [--max-concurrent-per-client N]
  portcullis run --listen ADDR --upstream URL [--max-conns-per-client N]
                 [--max-concurrent-per-client N] [--max-rate-per-client "10r/s burst=20"]
                 [--trusted-proxy CIDR ...] [--admin ADDR [--admin-token-file FILE]]
  portcullis run --forward --listen ADDR [--max-concurrent-per-client N]
                 [--htpasswd FILE] [--forward-allow CIDR ...] [--forward-connect-port PORT ...] [--intercept-ca DIR]
                 [--admin ADDR [--admin-token-file FILE]]
  portcullis check --config FILE [--connect]
  portcullis ca create --out DIR [--permit-domain NAME ...]
  portcullis demo [--attack]
  portcullis siege [flags]
  portcullis rls --rules DIR [--listen ADDR] [--cluster FILE] [flags]
  portcullis version

Run "portcullis COMMAND --help" for a command's flags.
Exit codes: 0 ok, 1 runtime failure, 2 bad usage or configuration.
`

// env is what a command runs with. Tests replace its hooks.
type env struct {
	stdout, stderr io.Writer
	// notify starts delivering SIGHUP, SIGINT and SIGTERM to ch and returns
	// a function that stops it.
	notify func(ch chan<- os.Signal) (stop func())
	// started, if set, is told of the server once it serves.
	started func(*daemon.Server)
	// manager is the service manager to tell of the daemon's state; nil
	// when none started it (no NOTIFY_SOCKET). managerErr is why a
	// NOTIFY_SOCKET that is set cannot be used; run logs it.
	manager    *sdnotify.Notifier
	managerErr error
	// explainStart, if set, turns an error starting the server into the
	// message to print instead of it; "" keeps the error as it is.
	explainStart func(error) string
}

func osNotify(ch chan<- os.Signal) func() {
	signal.Notify(ch, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
	return func() { signal.Stop(ch) }
}

// run runs the command line args (without the program name) and returns
// the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	manager, err := sdnotify.FromEnv(os.Getenv)
	return env{stdout: stdout, stderr: stderr, notify: osNotify, manager: manager, managerErr: err}.main(args)
}

func (e env) main(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return e.runCmd(rest)
	case "check":
		return e.checkCmd(rest)
	case "demo":
		return e.demoCmd(rest)
	case "ca":
		return e.caCmd(rest)
	case "siege":
		return siege.Main(rest, e.stdout, e.stderr)
	case "rls":
		return e.rlsCmd(rest)
	case "version", "--version", "-version":
		readBuildDetails().write(e.stdout)
		return exitOK
	case "help", "--help", "-help", "-h":
		fmt.Fprint(e.stdout, usage)
		return exitOK
	}
	fmt.Fprintf(e.stderr, "portcullis: unknown command %q\n\n%s", cmd, usage)
	return exitUsage
}

// parseFlags parses args with fs, printing usage to stdout for --help. It
// returns the exit code to stop with, or -1 to go on.
func (e env) parseFlags(fs *flag.FlagSet, args []string) int {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(e.stdout)
		fs.Usage()
		return exitOK
	case err != nil:
		fmt.Fprintf(e.stderr, "portcullis %s: %v\n", fs.Name(), err)
		fs.SetOutput(e.stderr)
		fs.Usage()
		return exitUsage
	case fs.NArg() > 0:
		fmt.Fprintf(e.stderr, "portcullis %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return exitUsage
	}
	return -1
}

func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: portcullis %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*s = append(*s, part)
		}
	}
	return nil
}

func (e env) checkCmd(args []string) int {
	fs := newFlagSet("check", "check --config FILE [--connect]")
	file := fs.String("config", "", "the YAML configuration `file` to check (required)")
	connect := fs.Bool("connect", false, "also connect to the cluster's Redis as the daemon would at start (PING, scripts loaded) and fail if it cannot")
	if code := e.parseFlags(fs, args); code >= 0 {
		return code
	}
	if *file == "" {
		fmt.Fprintln(e.stderr, "portcullis check: --config is required")
		return exitUsage
	}
	cfg, err := loadConfig(*file)
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		return exitUsage
	}
	out, err := cfg.Effective().Marshal()
	if err != nil {
		fmt.Fprintf(e.stderr, "portcullis check: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(e.stdout, "# %s is valid; the effective configuration, defaults filled in:\n", *file)
	for _, w := range cfg.Effective().Warnings() {
		fmt.Fprintf(e.stdout, "# WARNING: %s\n", w)
	}
	for _, p := range cfg.Effective().RoutePaths(runtime.GOOS) {
		fmt.Fprintf(e.stdout, "# path: %s\n", p)
	}
	_, _ = e.stdout.Write(out)
	if *connect {
		what, err := daemon.CheckCluster(cfg)
		switch {
		case err != nil:
			fmt.Fprintf(e.stderr, "portcullis check --connect: %v\n", err)
			return exitFailure
		case what == "":
			fmt.Fprintln(e.stdout, "# --connect: no cluster block, nothing to connect to")
		default:
			fmt.Fprintf(e.stdout, "# --connect: %s\n", what)
		}
	}
	return exitOK
}
