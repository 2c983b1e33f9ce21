package daemon

import (
	stdlog "log"
	"log/slog"
	"net"
)

// newServerErrorLog returns the log.Logger an http.Server writes its own
// errors to (TLS handshake failures, malformed requests). They are logged at
// DEBUG: a client can cause any number of them.
func newServerErrorLog(log *slog.Logger) *stdlog.Logger {
	return slog.NewLogLogger(log.Handler(), slog.LevelDebug)
}

// addrString formats an address for a log line: as text, where a JSON
// handler would write a *net.TCPAddr as its fields; "" for none.
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
