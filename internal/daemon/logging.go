package daemon

import "net"

// addrString formats an address for a log line: as text, where a JSON
// handler would write a *net.TCPAddr as its fields; "" for none.
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
