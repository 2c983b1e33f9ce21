// Package accesslog writes the daemon's access lines: one line per HTTP
// exchange, in the bytes slog's text or JSON handler would write
// ([NewLogger] builds that handler, and [Logger] matches it), batched in a
// [LineBuffer] that writes a local file directly (directwrite_linux.go) so
// that an event loop never waits on the file. It knows nothing of
// exchanges: the caller fills [Fields] (internal/exchange does, when an
// exchange ends) and [Clients] names the client a line shows when a trusted
// proxy's header says who it is.
package accesslog
