// Package exchange is the daemon's record of one HTTP exchange, from the
// moment an HTTP listener's chain takes a request to its access line.
//
// [Handler] is the outermost handler of every HTTP listener: it gives the
// exchange a [Writer], which records the status and size of the response
// and keeps the connection's write deadline a send timeout ahead of the
// last progress; its [State] embeds the [Admission], what the route and the
// limits decided (filled by [Admission.Admit], [AdmissionHooks], [Gated])
// and the request's id ([RequestIDs]).
// When the exchange ends, [EndedAt] counts it in its route's [RouteMetrics]
// (the [Metrics] collector: portcullis_http_requests_total, durations,
// upstream errors, the byte path's outcomes) and writes its access line
// through internal/accesslog. The byte path (internal/daemon's
// lean and loop relays) fills a State without a Writer and calls EndedAt
// itself, so that both paths log and count alike.
//
// The package holds no goroutine and no socket. It imports accesslog and
// the limit packages' error kinds, and nothing of the daemon.
package exchange
