package connlimit

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/rate"
)

// Defaults applied where a [Config] field is zero.
const (
	DefaultPermits            = limit.DefaultPermits // per client key
	DefaultProxyHeaderTimeout = 3 * time.Second
	DefaultStoreTimeout       = time.Second
)

// Level is a cap on a wider prefix than the per-client key, checked in
// addition to it: for example {IPv6Bits: 48, Max: 256} lets one IPv6 /48
// hold at most 256 connections over all its /64 clients. A connection is
// admitted only if the per-client cap and every level admit it.
//
// A level applies to the families whose prefix length is set: {IPv4Bits:
// 24, Max: 1024} caps IPv4 /24 networks and leaves IPv6 clients alone;
// setting both lengths caps both families with the same Max.
type Level struct {
	// IPv4Bits is the IPv4 prefix length of this level, 1..32; zero means
	// the level does not apply to IPv4.
	IPv4Bits int
	// IPv6Bits is the IPv6 prefix length of this level, 1..128; zero means
	// the level does not apply to IPv6.
	IPv6Bits int
	// Max is how many connections one prefix of this level may hold. It
	// must be positive.
	Max int
}

// Override gives the clients inside a prefix their own per-client cap,
// instead of Config.Permits: a known office NAT gets 512, a scanner 4, a
// health checker -1 (unlimited). When overrides overlap, the longest prefix
// wins. An override changes only the per-client cap, not the caps of
// [Level]s.
type Override struct {
	// Prefix is the network the override covers, such as 192.0.2.0/24 or
	// 2001:db8::/48. Host bits must be clear. It may not be longer than
	// the per-client key of its family (an IPv6 /128 cannot be singled
	// out when clients are keyed by /64). An IPv4-mapped prefix is read as
	// the IPv4 prefix it maps.
	Prefix netip.Prefix
	// Max is the per-client cap of the clients inside Prefix: positive, or
	// -1 (limit.Unlimited) for unlimited, as in limit.Policy. Zero, which
	// in a Policy's Overrides means Permits, is an error here: an override
	// of a whole network that changes nothing is a mistake.
	Max int
}

// Policy is the shape of a limit shared by every layer of Portcullis;
// see [limit.Policy]. Its keys here are client keys.
type Policy = limit.Policy[clientkey.Key]

// Config configures a [Listener]: its [Policy] of per-client caps,
// embedded, and what is the listener's own (levels, network overrides,
// connection rate, PROXY protocol, SYN filter). The zero Config is valid:
// 64 connections per client (IPv4 address or IPv6 /64), always enforced, no
// global cap, no trusted proxies, no PROXY protocol, refusals closed with
// FIN and not logged. [NewListener] copies the Config; changing it
// afterwards has no effect, and NewListener never modifies it.
type Config struct {
	// Policy is what each client key is allowed, with the meanings
	// [limit.Policy] gives its fields: Permits is how many connections one
	// client key may hold at once (zero means 64, limit.Unlimited (-1)
	// means unlimited, which still counts connections per key for
	// [Listener.Snapshot], other negative values are invalid); Overrides
	// gives single client keys their own cap and PermitsFor computes it
	// (see PrefixOverrides for whole networks). A connection is admitted
	// or refused at accept and holds its slot until it is closed, so the
	// queue, shadow mode and reclaim do not apply: QueueSize,
	// QueueTimeout, Shadow and ReclaimAfter must be left zero (EnforceAbove
	// is the listener's way to let a lightly loaded server be generous).
	Policy

	// Keyer turns a client address into its key. The zero Keyer keys IPv4
	// by address (/32) and IPv6 by /64.
	Keyer clientkey.Keyer

	// Levels are additional caps on wider prefixes. Nil means none. Each
	// level's prefix length must differ from the Keyer's and from other
	// levels' for the families it covers, so that every level counts
	// distinct keys.
	Levels []Level

	// PrefixOverrides give the client keys inside some networks their own
	// per-client cap. A key's cap is its Overrides entry if it has one,
	// else the Max of the longest prefix here that contains it, else
	// PermitsFor's answer, else Permits. Nil means none.
	PrefixOverrides []Override

	// ConnRate, when its Rate is set, limits how fast each client key may
	// open connections, as HAProxy's conn_rate or g3proxy's
	// tcp_conn_rate_limit: Rate new connections per second (or minute,
	// hour), with Burst more at once, per key of the Keyer. A connection
	// over it is refused at accept exactly as one over the cap (closed
	// before any byte is read, counted in Stats.Refused.ClientRate,
	// logged); only admitted connections count towards the rate. It
	// applies after the caps, to every client that is not exempt, whatever
	// EnforceAbove says. A connection is never delayed, so Delay must be
	// zero or rate.NoDelay (both mean the burst is admitted at once). With
	// SYNFilter, a client refused for its rate also has its SYNs dropped
	// until its rate admits a connection again. The zero value sets no
	// rate.
	ConnRate rate.Limit

	// ConnRateStore shares the ConnRate state with other processes
	// (redisstore.RateStore), so that a client's connection rate holds
	// across a cluster; admission then waits for its answer on the
	// connection's own goroutine, as with Store. Nil means this listener's
	// state only. It needs ConnRate.
	ConnRateStore rate.Store[clientkey.Key]

	// Filter, when set, is asked about each connection's client before any
	// cap or rate, as HAProxy's "tcp-request connection reject" is: a
	// non-nil error refuses the connection, which is closed at once (with a
	// reset under ResetOnRefuse) before any byte is read or written, takes
	// no slot, does not count towards ConnRate, is counted in
	// Stats.Refused.Filtered and logged with the error. The client is the
	// peer's address, or, for a Trusted peer with ProxyProtocol, the address
	// its PROXY header names once the header is read; a connection that
	// takes no slot anyway (from a Trusted peer without ProxyProtocol, one
	// whose header names no client, or one with no IP address) is not
	// asked about. Filter is called on the goroutine admitting the
	// connection, Accept's or the connection's own, for several connections
	// at once: it must be safe for concurrent use, must not block, and
	// should not allocate, since a flood of refused connections calls it for
	// every one. The error should be a fixed value for the same reason. Nil
	// filters nothing.
	Filter func(client netip.Addr) error

	// EnforceAbove makes the per-client caps (levels and overrides
	// included) apply only while the listener holds more than this many
	// open connections, counted before the new one, as mod_qos's
	// QS_SrvMaxConnPerIP with a connection threshold: a lightly loaded
	// server lets one client have what it wants. Connections are counted
	// per key either way. Zero means always enforce; it must not be
	// negative.
	EnforceAbove int

	// MaxConns caps the connections the listener holds at once, admitted
	// or still being admitted (reading a PROXY header), over all clients
	// and trusted peers. At the cap, Accept stops calling the inner
	// listener's Accept until a connection closes: new connections wait in
	// the kernel's accept backlog, as with HAProxy's maxconn, instead of
	// being accepted and closed. Zero means no cap; it must not be
	// negative.
	MaxConns int

	// Trusted are peers exempt from per-client caps, typically reverse
	// proxies and load balancers, which carry many clients on their own
	// address. With ProxyProtocol they are instead keyed by the client
	// their PROXY header names. Their connections still count towards
	// MaxConns. Nil means no trusted peer.
	Trusted *clientkey.ProxySet

	// ProxyProtocol makes the listener read a PROXY protocol header
	// (version 1 or 2, see package proxyproto) from every connection of a
	// Trusted peer, and only from those: any other peer is keyed by its
	// own address and its bytes are left untouched. The header is read on
	// the connection's own goroutine, never in Accept. A connection whose
	// header names a client is keyed and limited as that client; a header
	// naming none (LOCAL, UNKNOWN, AF_UNSPEC, AF_UNIX) leaves the
	// connection the trusted peer's own, and exempt. A bad, slow or
	// missing header closes the connection, counted and logged. It
	// requires a non-empty Trusted set. False, the zero value, reads no
	// header from anyone.
	ProxyProtocol bool

	// ProxyHeaderTimeout bounds the wait for a whole PROXY header. Zero
	// means 3 s; it must not be negative.
	ProxyHeaderTimeout time.Duration

	// ProxyHeaderMaxV2 bounds the address and TLV block of a version 2
	// PROXY header, in bytes. Zero means 4096; it must not be negative.
	ProxyHeaderMaxV2 int

	// ResetOnRefuse closes a refused TCP connection with a reset (linger
	// zero) instead of a FIN, so that the server keeps no TIME_WAIT state
	// for it and the client learns at once. False, the zero value, closes
	// with a FIN.
	ResetOnRefuse bool

	// SYNFilter makes the kernel drop the connection attempts (SYN
	// packets) of clients that hold their per-client cap, on Linux, with a
	// classic BPF socket filter on the listening socket that the listener
	// keeps in step with its counts, as iptables' connlimit match with
	// DROP would. Such a client's connect waits, retrying its SYN (after
	// 1 s, 3 s, 7 s...), until one of its connections closes and the
	// filter lets it in, instead of being accepted and closed; an attacker
	// reconnecting in a loop then costs the server no accept, no refusal
	// and no reconnect storm. The caps are still checked at accept: the
	// filter is updated at most every 10 ms, holds up to about 1000 keys,
	// and applies to the per-client cap only (Levels and MaxConns refuse
	// at accept as before). It needs a *net.TCPListener that is not MPTCP
	// (net.ListenConfig.SetMultipathTCP(false); Go listens with MPTCP by
	// default where the kernel has it) and cannot be combined with
	// ProxyProtocol (the peer is the proxy, not the client), EnforceAbove
	// or Store. NewListener fails when the socket does not take the
	// filter. False, the zero value, installs no filter.
	SYNFilter bool

	// Store shares the per-client and level counts with other processes
	// (limit/redisstore). Keys of different levels are different prefixes,
	// so one Store holds them all apart. With a Store, admission waits for
	// its answer, on the connection's own goroutine, never in Accept. A
	// connection whose client no finite cap applies to (Permits or its
	// override unlimited, and no Level for its family) is admitted inline
	// and never reaches the Store, so an uncapped listener costs no round
	// trip and is not refused while the Store is down. Nil means the counts
	// are this listener's own.
	Store limit.Store[clientkey.Key]

	// StoreTimeout bounds the wait for the Store's answer; a Store that
	// does not answer in time refuses the connection. Zero means 1 s; it
	// must not be negative. Unused without a Store.
	StoreTimeout time.Duration

	// Logger receives refusals and accept errors. Nil means no logs: a
	// library logs only where it is told to. Refusal lines are rate-limited
	// to one per second per listener; a line reports how many were
	// suppressed before it.
	Logger *slog.Logger

	// LogLevel is the level of refusal lines. The zero value is
	// slog.LevelInfo. Accept errors are logged at WARN.
	LogLevel slog.Level

	// Name identifies the listener in logs. Empty means "connlimit".
	Name string
}

// settings is a Config with its defaults applied, checked and prepared.
type settings struct {
	Config
	overrides []Override // sorted longest prefix first, unmapped
}

func (c Config) settings() (settings, error) {
	s := settings{Config: c}
	if err := c.checkScalars(); err != nil {
		return s, err
	}
	if err := c.checkLevels(); err != nil {
		return s, err
	}
	if err := c.checkConnRate(); err != nil {
		return s, err
	}
	ov, err := c.sortedOverrides()
	if err != nil {
		return s, err
	}
	s.overrides = ov
	s.Overrides = maps.Clone(c.Overrides)
	s.Levels = slices.Clone(c.Levels)
	if s.Permits == 0 {
		s.Permits = DefaultPermits
	}
	if s.ProxyHeaderTimeout == 0 {
		s.ProxyHeaderTimeout = DefaultProxyHeaderTimeout
	}
	if s.StoreTimeout == 0 {
		s.StoreTimeout = DefaultStoreTimeout
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.Name == "" {
		s.Name = "connlimit"
	}
	return s, nil
}

func (c Config) checkScalars() error {
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("connlimit: %w", err)
	}
	switch {
	case c.QueueSize != 0 || c.QueueTimeout != 0:
		return fmt.Errorf("connlimit: QueueSize and QueueTimeout must be zero: a connection is admitted or refused at accept, never queued (got %d, %v)", c.QueueSize, c.QueueTimeout)
	case c.Shadow:
		return fmt.Errorf("connlimit: Shadow is not supported: a listener enforces its caps (EnforceAbove relaxes them under light load)")
	case c.ReclaimAfter != 0:
		return fmt.Errorf("connlimit: ReclaimAfter must be zero: a connection holds its slot until it is closed (got %v)", c.ReclaimAfter)
	case c.EnforceAbove < 0:
		return fmt.Errorf("connlimit: EnforceAbove must not be negative (got %d)", c.EnforceAbove)
	case c.MaxConns < 0:
		return fmt.Errorf("connlimit: MaxConns must not be negative (got %d)", c.MaxConns)
	case c.ProxyHeaderTimeout < 0:
		return fmt.Errorf("connlimit: ProxyHeaderTimeout must not be negative (got %v)", c.ProxyHeaderTimeout)
	case c.ProxyHeaderMaxV2 < 0:
		return fmt.Errorf("connlimit: ProxyHeaderMaxV2 must not be negative (got %d)", c.ProxyHeaderMaxV2)
	case c.StoreTimeout < 0:
		return fmt.Errorf("connlimit: StoreTimeout must not be negative (got %v)", c.StoreTimeout)
	case c.SYNFilter && (c.ProxyProtocol || c.EnforceAbove > 0 || c.Store != nil || c.ConnRateStore != nil):
		return fmt.Errorf("connlimit: SYNFilter cannot be combined with ProxyProtocol, EnforceAbove, Store or ConnRateStore")
	case c.ConnRateStore != nil && c.ConnRate.Rate.IsZero():
		return fmt.Errorf("connlimit: ConnRateStore needs ConnRate")
	case c.ProxyProtocol && c.Trusted.Len() == 0:
		return fmt.Errorf("connlimit: ProxyProtocol needs a non-empty Trusted set: a PROXY header is believed only from trusted peers")
	}
	return nil
}

func (c Config) checkConnRate() error {
	if c.ConnRate == (rate.Limit{}) {
		return nil
	}
	if err := c.ConnRate.Validate(); err != nil {
		return fmt.Errorf("connlimit: ConnRate: %w", err)
	}
	if c.ConnRate.Delay != 0 && c.ConnRate.Delay != rate.NoDelay {
		return fmt.Errorf("connlimit: ConnRate.Delay must be 0 or rate.NoDelay: a connection is never delayed (got %d)", c.ConnRate.Delay)
	}
	return nil
}

func (c Config) checkLevels() error {
	seen4 := map[int]bool{c.Keyer.IPv4Bits(): true}
	seen6 := map[int]bool{c.Keyer.IPv6Bits(): true}
	for i, lv := range c.Levels {
		if _, err := clientkey.NewKeyer(lv.IPv4Bits, lv.IPv6Bits); err != nil {
			return fmt.Errorf("connlimit: Levels[%d]: %w", i, err)
		}
		switch {
		case lv.IPv4Bits == 0 && lv.IPv6Bits == 0:
			return fmt.Errorf("connlimit: Levels[%d] sets neither IPv4Bits nor IPv6Bits", i)
		case lv.Max <= 0:
			return fmt.Errorf("connlimit: Levels[%d].Max must be positive (got %d)", i, lv.Max)
		case lv.IPv4Bits != 0 && seen4[lv.IPv4Bits]:
			return fmt.Errorf("connlimit: Levels[%d].IPv4Bits /%d repeats the client key or another level", i, lv.IPv4Bits)
		case lv.IPv6Bits != 0 && seen6[lv.IPv6Bits]:
			return fmt.Errorf("connlimit: Levels[%d].IPv6Bits /%d repeats the client key or another level", i, lv.IPv6Bits)
		}
		seen4[lv.IPv4Bits], seen6[lv.IPv6Bits] = lv.IPv4Bits != 0, lv.IPv6Bits != 0
	}
	return nil
}

// sortedOverrides checks the overrides and returns them unmapped and
// sorted longest prefix first, so that the first match is the longest.
func (c Config) sortedOverrides() ([]Override, error) {
	out := make([]Override, 0, len(c.PrefixOverrides))
	for i, o := range c.PrefixOverrides {
		p := o.Prefix
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		keyBits := c.Keyer.IPv6Bits()
		if p.Addr().Is4() {
			keyBits = c.Keyer.IPv4Bits()
		}
		switch {
		case !p.IsValid():
			return nil, fmt.Errorf("connlimit: PrefixOverrides[%d]: invalid prefix %v", i, o.Prefix)
		case p.Masked() != p:
			return nil, fmt.Errorf("connlimit: PrefixOverrides[%d]: prefix %v has host bits set (the network is %v)", i, o.Prefix, p.Masked())
		case p.Addr().Zone() != "":
			return nil, fmt.Errorf("connlimit: PrefixOverrides[%d]: prefix %v has a zone", i, o.Prefix)
		case p.Bits() > keyBits:
			return nil, fmt.Errorf("connlimit: PrefixOverrides[%d]: prefix %v is narrower than the client key (/%d)", i, o.Prefix, keyBits)
		case o.Max == 0 || o.Max < -1:
			return nil, fmt.Errorf("connlimit: PrefixOverrides[%d].Max must be positive or -1 for unlimited (got %d)", i, o.Max)
		}
		out = append(out, Override{Prefix: p, Max: o.Max})
	}
	slices.SortStableFunc(out, func(a, b Override) int { return cmp.Compare(b.Prefix.Bits(), a.Prefix.Bits()) })
	return out, nil
}

// anyCap reports whether some client can meet a finite cap: without one,
// a Store has nothing to count and is never asked.
func (s *settings) anyCap() bool {
	if s.Permits >= 0 || len(s.Levels) > 0 || s.PermitsFor != nil {
		return true
	}
	for _, n := range s.Overrides {
		if n > 0 {
			return true
		}
	}
	for _, o := range s.overrides {
		if o.Max > 0 {
			return true
		}
	}
	return false
}

// capOf returns key's per-client cap: its override, or Permits;
// negative means unlimited.
func (s *settings) capOf(key clientkey.Key) int {
	if c := s.permitsFor(key); c != 0 {
		return c
	}
	return s.Permits
}

// hasPermitsFor reports whether some key may have a cap other than
// Permits, so that the per-client limiter needs permitsFor.
func (s *settings) hasPermitsFor() bool {
	return len(s.overrides) > 0 || len(s.Overrides) > 0 || s.PermitsFor != nil
}

// permitsFor is the limiter's PermitsFor for the per-client level: the
// key's Overrides entry, else the Max of the longest prefix override
// containing key, else PermitsFor's answer, else 0 (Permits). A key's
// prefix is never shorter than a prefix override's, so containing its
// address means containing the whole key.
func (s *settings) permitsFor(key clientkey.Key) int {
	if n, ok := s.Overrides[key]; ok {
		return n
	}
	a := key.Prefix().Addr()
	for _, o := range s.overrides {
		if o.Prefix.Contains(a) {
			return o.Max
		}
	}
	if s.PermitsFor != nil {
		return s.PermitsFor(key)
	}
	return 0
}
