package siege

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// Scenario names what a run does besides the legitimate clients' requests.
type Scenario string

// The scenarios. Every one runs the legitimate clients; they differ in what
// runs beside them and, for throughput, in the clients' shape.
const (
	// ScenarioNone runs only the legitimate clients: the no-attack baseline.
	ScenarioNone Scenario = "none"
	// ScenarioThroughput runs Clients addresses × ConnsPerClient keep-alive
	// connections, each sending requests back to back, and no attacker.
	ScenarioThroughput Scenario = "throughput"
	// ScenarioSlowloris has the attacker hold AttackConns connections that
	// send a request head slowly and never finish it.
	ScenarioSlowloris Scenario = "slowloris"
	// ScenarioSlowRequests has the attacker keep AttackConns complete
	// requests to SlowPath in flight, a new one as each ends.
	ScenarioSlowRequests Scenario = "slow-requests"
	// ScenarioFlood runs slowloris on half of AttackConns and slow requests
	// on the other half.
	ScenarioFlood Scenario = "flood"
)

// scenarios lists every scenario, in the order the help text shows them.
var scenarios = []Scenario{ScenarioNone, ScenarioThroughput, ScenarioSlowloris, ScenarioSlowRequests, ScenarioFlood}

// ParseScenario returns the scenario named s; "baseline" is another name for
// [ScenarioNone]. Anything else is an error wrapping [ErrInvalidConfig].
func ParseScenario(s string) (Scenario, error) {
	if s == "baseline" {
		return ScenarioNone, nil
	}
	for _, sc := range scenarios {
		if string(sc) == s {
			return sc, nil
		}
	}
	return "", fmt.Errorf("%w: unknown scenario %q (want one of %s)", ErrInvalidConfig, s, scenarioNames())
}

func scenarioNames() string {
	names := make([]string, len(scenarios))
	for i, sc := range scenarios {
		names[i] = string(sc)
	}
	return strings.Join(names, ", ")
}

// attackShare reports how many of n attack connections run slowloris and how
// many run slow requests in this scenario.
func (s Scenario) attackShare(n int) (slowloris, slowRequests int) {
	switch s {
	case ScenarioSlowloris:
		return n, 0
	case ScenarioSlowRequests:
		return 0, n
	case ScenarioFlood:
		return n / 2, n - n/2
	}
	return 0, 0
}

// ConnMode says whether legitimate clients reuse connections.
type ConnMode string

// The connection modes.
const (
	// ConnDefault is keep-alive for [ScenarioThroughput] and fresh otherwise.
	ConnDefault ConnMode = ""
	// ConnFresh opens a new connection for every request and sends
	// "Connection: close", so each request goes through connection admission.
	ConnFresh ConnMode = "fresh"
	// ConnKeepAlive reuses a connection for as long as the server allows.
	ConnKeepAlive ConnMode = "keep-alive"
)

// Limits on a run.
const (
	// MaxDuration bounds Warmup plus Duration.
	MaxDuration = 10 * time.Minute
	// MaxAttackConns bounds AttackConns.
	MaxAttackConns = 100_000
	// MaxLoops bounds Clients × ConnsPerClient.
	MaxLoops = 10_000
)

// Errors callers branch on.
var (
	// ErrInvalidConfig is wrapped by every error about a bad [Config] field.
	ErrInvalidConfig = errors.New("siege: invalid config")
	// ErrUnreachable is wrapped when a source address cannot connect to the
	// target before the run starts (an address this host does not own, a
	// target that is down).
	ErrUnreachable = errors.New("siege: target unreachable")
	// ErrTooFewFiles is wrapped when the open-file limit cannot cover the
	// sockets a run needs, even after raising it to its hard limit.
	ErrTooFewFiles = errors.New("siege: open-file limit too low")
)

// Config describes a run. The zero value is invalid only for lacking a
// Target; every other zero field means its documented default. [Run] works on
// a copy and never changes the caller's Config.
type Config struct {
	// Target is the URL the legitimate clients request, "http://" or
	// "https://" host and port; its path and query are what they request
	// ("/" when empty). The host is resolved once, before the run.
	Target string

	// Scenario is what the run does. Empty means [ScenarioNone].
	Scenario Scenario

	// Duration is how long the legitimate clients are measured. Zero means
	// 10 s. Negative is invalid; Warmup+Duration may not exceed MaxDuration.
	Duration time.Duration

	// Warmup is how long the attacker runs alone before the legitimate
	// clients start, so they are measured against an attack in its steady
	// state. Zero means none: both start together. Negative is invalid.
	Warmup time.Duration

	// Clients is how many legitimate client addresses send requests. Zero
	// means len(ClientAddrs) if that is set, and 16 otherwise. Negative is
	// invalid; with ClientAddrs set it may not exceed len(ClientAddrs).
	Clients int

	// ConnsPerClient is how many request loops each client address runs at
	// once, each on its own connection. Zero means 16 for
	// [ScenarioThroughput] and 1 otherwise. Negative is invalid; Clients ×
	// ConnsPerClient may not exceed MaxLoops.
	ConnsPerClient int

	// ClientAddrs are the legitimate clients' source addresses, client i
	// using ClientAddrs[i]. Empty means FirstClientAddr and the addresses
	// after it. Every address must be of the target's IP family.
	ClientAddrs []netip.Addr

	// FirstClientAddr is the first legitimate source address when
	// ClientAddrs is empty; client i uses FirstClientAddr + i. The zero Addr
	// means 127.0.0.3.
	FirstClientAddr netip.Addr

	// AttackerAddr is the attacker's one source address. The zero Addr means
	// 127.0.0.2.
	AttackerAddr netip.Addr

	// AttackConns is how many connections the attacker keeps going at once.
	// Zero means 3000. Negative is invalid, and so is more than
	// MaxAttackConns. Ignored by scenarios without an attacker.
	AttackConns int

	// Timeout bounds one legitimate request, connect to last body byte; a
	// request that takes longer counts as a timeout. It also bounds each
	// attacker connect. Zero means 2 s; negative is invalid.
	Timeout time.Duration

	// Rate paces each legitimate request loop at this many requests per
	// second. Zero means no pacing: each loop sends its next request as soon
	// as the last one ends. Negative is invalid.
	Rate float64

	// Connections says whether legitimate clients reuse connections. Empty
	// means [ConnDefault].
	Connections ConnMode

	// SlowPath is what the slow-requests attacker requests. Empty means
	// "/slow?ms=5000", which the built-in backend answers after 5 s.
	SlowPath string

	// HeaderInterval is how often a slowloris connection sends one more
	// header line. Zero means 5 s; negative is invalid.
	HeaderInterval time.Duration

	// Grace is how long an attacker connection must stay open, unanswered,
	// counted from the end of its TCP handshake, to count as admitted; one
	// the server closes sooner is refused. A connect that does not complete
	// within Timeout (a server dropping the SYNs of a client at its cap) is
	// a dial error. Zero means 500 ms; negative is invalid.
	Grace time.Duration

	// MaxConnectRate bounds the attacker's connection attempts per second,
	// first ones and reconnects together. Zero means 5000; negative is
	// invalid.
	MaxConnectRate float64

	// TLSConfig is used for "https" targets; it is cloned, and its
	// NextProtos forced to HTTP/1.1. Nil means a default config that
	// verifies the server against the system roots.
	TLSConfig *tls.Config

	// CPUPID, when positive, is a process whose CPU time the report shows
	// (Linux only): the server under test. Zero means none.
	CPUPID int

	// Logger receives a line when a run starts and ends. Nil means discard.
	Logger *slog.Logger

	// Progress, when not nil, receives a line every ProgressInterval while
	// the run lasts: the time elapsed, the phase, the legitimate requests
	// so far and how many succeeded, and the attack connections held and
	// refused. Nil means no progress lines.
	Progress io.Writer

	// ProgressInterval is the time between two Progress lines. Zero means
	// 1 s; negative is invalid.
	ProgressInterval time.Duration
}

// Defaults for [Config].
const (
	DefaultDuration         = 10 * time.Second
	DefaultClients          = 16
	DefaultThroughputConn   = 16
	DefaultAttackConns      = 3000
	DefaultTimeout          = 2 * time.Second
	DefaultSlowPath         = "/slow?ms=5000"
	DefaultHeaderInterval   = 5 * time.Second
	DefaultGrace            = 500 * time.Millisecond
	DefaultConnectRate      = 5000
	DefaultProgressInterval = time.Second
)

// Default source addresses.
var (
	DefaultAttackerAddr    = netip.MustParseAddr("127.0.0.2")
	DefaultFirstClientAddr = netip.MustParseAddr("127.0.0.3")
)

// settings is a Config with defaults applied and the target resolved.
type settings struct {
	Config
	target      netip.AddrPort
	host        string // Host header
	requestPath string
	https       bool
	keepAlive   bool
	clientAddrs []netip.Addr
	slowloris   int
	slowReqs    int
	logger      *slog.Logger
}

// loops is how many legitimate request loops run.
func (s *settings) loops() int { return s.Clients * s.ConnsPerClient }

// resolve validates c, applies defaults on a copy and resolves the target.
func (c Config) resolve(ctx context.Context) (*settings, error) {
	s := &settings{Config: c}
	steps := []func() error{s.checkScenario, s.checkDurations, s.checkCounts, s.checkAttack, s.parseTarget, s.buildClientAddrs}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if err := s.resolveTarget(ctx); err != nil {
		return nil, err
	}
	return s, s.checkFamilies()
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}

func (s *settings) checkScenario() error {
	if s.Scenario == "" {
		s.Scenario = ScenarioNone
	}
	if _, err := ParseScenario(string(s.Scenario)); err != nil {
		return err
	}
	switch s.Connections {
	case ConnDefault:
		s.keepAlive = s.Scenario == ScenarioThroughput
	case ConnFresh:
	case ConnKeepAlive:
		s.keepAlive = true
	default:
		return invalid("Connections %q is none of %q, %q", s.Connections, ConnFresh, ConnKeepAlive)
	}
	s.logger = s.Logger
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func (s *settings) checkDurations() error {
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"Duration", &s.Duration, DefaultDuration},
		{"Warmup", &s.Warmup, 0},
		{"Timeout", &s.Timeout, DefaultTimeout},
		{"HeaderInterval", &s.HeaderInterval, DefaultHeaderInterval},
		{"Grace", &s.Grace, DefaultGrace},
		{"ProgressInterval", &s.ProgressInterval, DefaultProgressInterval},
	} {
		if *d.v < 0 {
			return invalid("%s must be ≥ 0, got %v", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if s.Warmup+s.Duration > MaxDuration {
		return invalid("Warmup+Duration must be ≤ %v, got %v", MaxDuration, s.Warmup+s.Duration)
	}
	return nil
}

func (s *settings) checkCounts() error {
	switch {
	case s.Clients < 0:
		return invalid("Clients must be ≥ 0, got %d", s.Clients)
	case s.ConnsPerClient < 0:
		return invalid("ConnsPerClient must be ≥ 0, got %d", s.ConnsPerClient)
	case s.Rate < 0 || s.Rate != s.Rate:
		return invalid("Rate must be ≥ 0, got %v", s.Rate)
	case s.CPUPID < 0:
		return invalid("CPUPID must be ≥ 0, got %d", s.CPUPID)
	case len(s.ClientAddrs) > 0 && s.Clients > len(s.ClientAddrs):
		return invalid("Clients (%d) exceeds the %d ClientAddrs", s.Clients, len(s.ClientAddrs))
	}
	if s.Clients == 0 {
		s.Clients = DefaultClients
		if len(s.ClientAddrs) > 0 {
			s.Clients = len(s.ClientAddrs)
		}
	}
	if s.ConnsPerClient == 0 {
		s.ConnsPerClient = 1
		if s.Scenario == ScenarioThroughput {
			s.ConnsPerClient = DefaultThroughputConn
		}
	}
	if s.loops() > MaxLoops {
		return invalid("Clients × ConnsPerClient must be ≤ %d, got %d", MaxLoops, s.loops())
	}
	return nil
}

func (s *settings) checkAttack() error {
	switch {
	case s.AttackConns < 0 || s.AttackConns > MaxAttackConns:
		return invalid("AttackConns must be in [0, %d], got %d", MaxAttackConns, s.AttackConns)
	case s.MaxConnectRate < 0 || s.MaxConnectRate != s.MaxConnectRate:
		return invalid("MaxConnectRate must be ≥ 0, got %v", s.MaxConnectRate)
	}
	if s.AttackConns == 0 {
		s.AttackConns = DefaultAttackConns
	}
	if s.MaxConnectRate == 0 {
		s.MaxConnectRate = DefaultConnectRate
	}
	if s.SlowPath == "" {
		s.SlowPath = DefaultSlowPath
	}
	if err := checkRequestTarget("SlowPath", s.SlowPath); err != nil {
		return err
	}
	if !s.AttackerAddr.IsValid() {
		s.AttackerAddr = DefaultAttackerAddr
	}
	s.AttackerAddr = s.AttackerAddr.Unmap()
	s.slowloris, s.slowReqs = s.Scenario.attackShare(s.AttackConns)
	return nil
}

// checkRequestTarget refuses what would break the request line we write.
func checkRequestTarget(field, p string) error {
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, " \r\n\t") {
		return invalid("%s must start with / and hold no white space, got %q", field, p)
	}
	return nil
}

func (s *settings) parseTarget() error {
	if s.Target == "" {
		return invalid("Target is required")
	}
	u, err := url.Parse(s.Target)
	if err != nil {
		return invalid("Target: %v", err)
	}
	switch u.Scheme {
	case "http":
	case "https":
		s.https = true
	default:
		return invalid("Target scheme must be http or https, got %q", u.Scheme)
	}
	if u.Hostname() == "" || u.User != nil || u.Fragment != "" {
		return invalid("Target must be scheme://host[:port]/path, got %q", s.Target)
	}
	s.host = u.Host
	s.requestPath = u.RequestURI()
	return checkRequestTarget("Target path", s.requestPath)
}

func (s *settings) buildClientAddrs() error {
	if len(s.ClientAddrs) > 0 {
		s.clientAddrs = make([]netip.Addr, s.Clients)
		for i := range s.clientAddrs {
			if !s.ClientAddrs[i].IsValid() {
				return invalid("ClientAddrs[%d] is the zero address", i)
			}
			s.clientAddrs[i] = s.ClientAddrs[i].Unmap()
		}
		return nil
	}
	a := s.FirstClientAddr.Unmap()
	if !a.IsValid() {
		a = DefaultFirstClientAddr
	}
	s.clientAddrs = make([]netip.Addr, s.Clients)
	for i := range s.clientAddrs {
		if !a.IsValid() {
			return invalid("FirstClientAddr %v leaves no room for %d clients", s.FirstClientAddr, s.Clients)
		}
		s.clientAddrs[i] = a
		a = a.Next()
	}
	return nil
}

// resolveTarget turns the target host into one address of the clients'
// family, so no request pays for a lookup.
func (s *settings) resolveTarget(ctx context.Context) error {
	u, _ := url.Parse(s.Target) // parseTarget has checked it
	port := u.Port()
	if port == "" {
		port = map[bool]string{false: "80", true: "443"}[s.https]
	}
	portNum, err := net.LookupPort("tcp", port)
	if err != nil {
		return invalid("Target port %q: %v", port, err)
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
		s.target = netip.AddrPortFrom(ip.Unmap(), uint16(portNum))
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(lctx, "ip", u.Hostname())
	if err != nil {
		return fmt.Errorf("%w: resolving %q: %w", ErrUnreachable, u.Hostname(), err)
	}
	want := s.clientAddrs[0].Is4()
	for _, ip := range ips {
		if ip.Unmap().Is4() == want {
			s.target = netip.AddrPortFrom(ip.Unmap(), uint16(portNum))
			return nil
		}
	}
	return fmt.Errorf("%w: %q has no address of the client addresses' family (%v)", ErrUnreachable, u.Hostname(), ips)
}

func (s *settings) checkFamilies() error {
	want := s.target.Addr().Is4()
	sources := s.clientAddrs
	if s.slowloris+s.slowReqs > 0 {
		sources = append([]netip.Addr{s.AttackerAddr}, sources...)
	}
	for _, a := range sources {
		if a.Is4() != want {
			return invalid("source address %v is not of the target's IP family (%v)", a, s.target.Addr())
		}
	}
	return nil
}

// tlsConfig returns the TLS config for one client: a clone of the base with
// its own session cache, so resumption behaves as in one browser.
func (s *settings) tlsConfig() *tls.Config {
	var cfg *tls.Config
	if s.TLSConfig != nil {
		cfg = s.TLSConfig.Clone()
	} else {
		cfg = &tls.Config{}
	}
	cfg.NextProtos = []string{"http/1.1"}
	if cfg.ServerName == "" {
		host := s.host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		cfg.ServerName = strings.Trim(host, "[]")
	}
	if cfg.ClientSessionCache == nil {
		cfg.ClientSessionCache = tls.NewLRUClientSessionCache(64)
	}
	return cfg
}
