// Package cidrlist reads deny and allow lists of client addresses, one
// address or CIDR a line, and decides on a client address against them
// without allocating: the daemon's deny_file and allow_file, checked at
// accept before any byte of a connection is read.
//
// A [Matcher] holds both lists. The longest prefix holding an address
// decides; a deny entry wins a tie with an allow entry of the same prefix.
// With an allow list, an address that matches neither list is refused.
//
// The package is internal: the public admission packages take any func as
// their filter (connlimit.Config.Filter), and the file format and its
// reload are the daemon's. It imports nothing of Portcullis.
package cidrlist

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// A ParseError is a line of a list file that is neither blank, a comment,
// nor an address or CIDR. Its message reads
//
//	deny.txt:3: not an IP address or CIDR (got "10.0.0.300")
type ParseError struct {
	File string // the name given to Parse
	Line int    // from 1
	Text string // the offending entry, comment and surrounding space removed
	Msg  string // what is wrong, lower-case
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s:%d: %s (got %s)", e.File, e.Line, e.Msg, strconv.Quote(e.Text))
}

// ReadFile reads and parses the list file at path, as [Parse] does, naming
// the file by path in errors. An error reading the file is returned as the
// *fs.PathError os.ReadFile returns.
func ReadFile(path string) ([]netip.Prefix, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse reads a list: one entry a line, each an IPv4 or IPv6 address
// ("192.0.2.7", "2001:db8::1", a single host) or a CIDR in canonical form
// ("192.0.2.0/24"). Blank lines are skipped, and a '#' starts a comment
// that runs to the end of its line, alone or after an entry. Space and
// tabs around an entry, a trailing '\r' and a UTF-8 byte order mark at the
// start are ignored. An IPv4-mapped IPv6 entry (::ffff:192.0.2.7,
// ::ffff:192.0.2.0/120) is read as the IPv4 address or prefix it maps.
//
// Any other line makes Parse return nil and a *[ParseError] naming file
// and the line: text that is no address or CIDR, a CIDR with host bits set
// (10.1.2.3/8: write 10.0.0.0/8 or 10.1.2.3/32), an address with a zone
// (fe80::1%eth0), or several entries on one line. Entries are returned in
// file order, duplicates kept; an empty list is not an error.
func Parse(file string, data []byte) ([]netip.Prefix, error) {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	var out []netip.Prefix
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if i := bytes.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		entry := strings.Trim(string(line), " \t\r")
		if entry == "" {
			continue
		}
		p, msg := parseEntry(entry)
		if msg != "" {
			return nil, &ParseError{File: file, Line: n, Text: entry, Msg: msg}
		}
		out = append(out, p)
	}
	return out, nil
}

// parseEntry reads one entry, or says what is wrong with it.
func parseEntry(s string) (netip.Prefix, string) {
	if fields := strings.Fields(s); len(fields) > 1 {
		for _, f := range fields {
			if _, msg := parseEntry(f); msg != "" {
				return netip.Prefix{}, "not an IP address or CIDR"
			}
		}
		return netip.Prefix{}, "one address or CIDR a line"
	}
	if strings.Contains(s, "%") {
		return netip.Prefix{}, "zones are not allowed"
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, "not an IP address or CIDR"
		}
		if m := p.Masked(); m != p {
			return netip.Prefix{}, fmt.Sprintf("host bits set: write %s for the network or %s for the address", m, netip.PrefixFrom(p.Addr(), p.Addr().BitLen()))
		}
		return Unmap(p), ""
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, "not an IP address or CIDR"
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), ""
}

// Unmap returns p with an IPv4-mapped IPv6 prefix (inside ::ffff:0:0/96)
// rewritten as the IPv4 prefix it covers, and any other prefix unchanged;
// the addresses a Matcher is asked about are unmapped the same way.
func Unmap(p netip.Prefix) netip.Prefix {
	if !p.Addr().Is4In6() || p.Bits() < 96 {
		return p
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
}
