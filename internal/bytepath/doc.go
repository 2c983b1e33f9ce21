// Package bytepath is the byte path of the daemon's default HTTP/1.1
// server (http1_server eventloop): it relays the plainest exchanges as
// bytes, a request head out and an answer's head and body back, without
// the http.Request, writer wrappers and header maps of the full server's
// handler chain, and gives everything else back to that chain.
//
// It serves in two places. [Poller] is the http1.ExchangeHandler of a
// listener's internal/http1 server: the lean path, in Go's poller, on
// systems without event loops, on the connections the loops give back and
// while the listener's routes give the loops nothing (lean.go). [Loops] is
// the evloop.Handler of a listener's event loops, which serve its plain
// connections and, on https, its HTTP/1.x ones after Go's handshake: the
// same decisions taken on a loop's thread from the head's bytes (loop.go).
//
// What it needs of the daemon is a narrow view the daemon fills
// (view.go): a [Listener] (its current [Table], the
// count of its active exchanges, whether its answers carry an Alt-Svc
// field) and, through the table's [Router], the [Route] of a request: its
// name and metrics, its relay (internal/relay: the upstream head, the pool,
// the failure answers) and its concurrency limits, taken quietly
// (httplimit). Every exchange it serves is recorded, counted and logged
// through internal/exchange, as the chain's are. A request it does not
// take is declined having done nothing; an exchange under way that it will
// not finish is handed over to the relay's own code with its admission
// recorded. So the route's pick, the limits' keys, the relay's field rules,
// the access line and the metrics stay one implementation each, and the
// daemon's differential tests (TestLeanMatchesFast, FuzzLeanAnswerMatchesFast)
// hold the byte path to the full server byte for byte.
//
// The package imports no part of the daemon: the daemon adapts its route
// tables to [Table] and [Router] (internal/route/bytepath.go).
package bytepath
