package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"

	"github.com/seed-a07d1050/portcullis/internal/cidrlist"
	"github.com/seed-a07d1050/portcullis/internal/config"
)

// The errors a listener's deny_file and allow_file refuse a client with,
// as connlimit logs them; fixed values, so that a refusal allocates
// nothing.
var (
	errDenyList   = errors.New("daemon: client in deny_file")
	errNotAllowed = errors.New("daemon: client not in allow_file")
)

// deniedCounts are the connections a listener's lists refused. A listener
// rebound by a reload keeps the counts of the one it replaces, so that the
// counter of a listener name only grows.
type deniedCounts struct {
	denyList, notAllowed atomic.Uint64
}

// frontLists are what a front is bound with for its lists: the matcher of
// its deny_file and allow_file (nil: none), and the counts of the listener
// it replaces (nil: new counts).
type frontLists struct {
	m      *cidrlist.Matcher
	denied *deniedCounts
}

// install gives f its lists, before f serves or its socket is read.
func (l frontLists) install(f *front) {
	f.lists.Store(l.m)
	f.denied = l.denied
	if f.denied == nil {
		f.denied = new(deniedCounts)
	}
}

// listsOf returns what a front replacing f, a running front or nil, is
// bound with: the matcher m, and f's counts.
func listsOf(m *cidrlist.Matcher, f *front) frontLists {
	if f == nil {
		return frontLists{m: m}
	}
	return frontLists{m: m, denied: f.denied}
}

// errEmptyAllow is the problem of an allow_file without an entry, which would refuse every
// client: more likely a file truncated while written than a wish.
var errEmptyAllow = errors.New("holds no entry, so every client would be refused (to refuse everyone, write 0.0.0.0/0 and ::/0 in a deny_file)")

// accessLists reads the deny_file and allow_file of lc, the listener at path at, into the
// matcher it checks its clients against at accept; nil when it has neither, or when a file
// does not load. Each problem is added to probs at its field: a file that cannot be read,
// a line that is neither blank, a comment nor an address or CIDR (the message names the
// file and line: a *cidrlist.ParseError), an allow_file without an entry.
func accessLists(lc *config.Listener, at string, probs *config.Problems) *cidrlist.Matcher {
	deny, okDeny := readListFile(lc.DenyFile, false, at+".deny_file", probs)
	allow, okAllow := readListFile(lc.AllowFile, true, at+".allow_file", probs)
	if !okDeny || !okAllow || (lc.DenyFile == "" && lc.AllowFile == "") {
		return nil
	}
	return cidrlist.New(deny, allow)
}

// readListFile reads one list file, "" being no list, and reports whether it loaded.
func readListFile(file string, allow bool, p string, probs *config.Problems) ([]netip.Prefix, bool) {
	if file == "" {
		return nil, true
	}
	ps, err := cidrlist.ReadFile(file)
	var pe *cidrlist.ParseError
	switch {
	case errors.As(err, &pe):
		probs.Add(p, err, err.Error())
	case err != nil:
		msg, ok := config.FileProblem(file, err)
		if !ok {
			msg = err.Error() + config.QuoteGot(file)
		}
		probs.Add(p, err, msg)
	case allow && len(ps) == 0:
		probs.Add(p, errEmptyAllow, errEmptyAllow.Error()+config.QuoteGot(file))
	default:
		return ps, true
	}
	return nil, false
}

// checkClient is the connlimit Filter of f: it refuses a client its lists
// deny or do not allow, and counts the refusal. It reads the lists in force
// now, so that a reload changes them for the next connection.
func (f *front) checkClient(client netip.Addr) error {
	switch f.lists.Load().Check(client) {
	case cidrlist.Denied:
		f.denied.denyList.Add(1)
		return errDenyList
	case cidrlist.NotAllowed:
		f.denied.notAllowed.Add(1)
		return errNotAllowed
	}
	return nil
}

// udpClient returns the IP address of a QUIC client, unmapped.
func udpClient(a net.Addr) netip.Addr {
	if u, ok := a.(*net.UDPAddr); ok && u != nil {
		ip, _ := netip.AddrFromSlice(u.IP)
		return ip.Unmap()
	}
	return netip.Addr{}
}

// filterQUIC makes tr refuse the QUIC attempts of clients f's lists
// refuse, before quicadmit's hooks (already attached to tr) see them: a
// denied client's Initial is answered with CONNECTION_REFUSED, never with
// a Retry, and takes no place among the attempts in progress. A Retry
// would only cost both sides a round trip before the same refusal.
func (f *front) filterQUIC(tr *quic.Transport) {
	verify, admit := tr.VerifySourceAddress, tr.ConnContext
	tr.VerifySourceAddress = func(a net.Addr) bool {
		return verify != nil && f.lists.Load().Check(udpClient(a)) == cidrlist.Accept && verify(a)
	}
	tr.ConnContext = func(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
		if info != nil {
			if err := f.checkClient(udpClient(info.RemoteAddr)); err != nil {
				f.logQUICRefusal(ctx, err, info.RemoteAddr)
				return nil, err
			}
		}
		if admit == nil {
			return ctx, nil
		}
		return admit(ctx, info)
	}
}

// logQUICRefusal logs a QUIC attempt the lists refused, at debug level:
// connlimit's refusal lines, which TCP listeners write, are rate-limited,
// and a flood must not cost a line per attempt at the default level.
func (f *front) logQUICRefusal(ctx context.Context, err error, client net.Addr) {
	if !f.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	reason := cidrlist.NotAllowed.String()
	if err == errDenyList {
		reason = cidrlist.Denied.String()
	}
	f.log.LogAttrs(ctx, slog.LevelDebug, "quic attempt refused", slog.String("reason", reason), slog.String("client", client.String()))
}

// deniedCollector exports a listener's deniedCounts as
// portcullis_denied_connections_total{listener, reason}.
type deniedCollector struct {
	f    *front
	desc *prometheus.Desc
}

func newDeniedCollector(f *front) deniedCollector {
	return deniedCollector{f: f, desc: prometheus.NewDesc("portcullis_denied_connections_total",
		"Connections refused at accept by the listener's deny_file (reason deny_list) or allow_file (reason not_allowed).",
		[]string{"reason"}, prometheus.Labels{"listener": f.cfg.Name})}
}

func (c deniedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c deniedCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.f.denied
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(d.denyList.Load()), cidrlist.Denied.String())
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(d.notAllowed.Load()), cidrlist.NotAllowed.String())
}
