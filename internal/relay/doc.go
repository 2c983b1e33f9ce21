// Package relay sends a request upstream and its answer back: the
// upstream exchange of a reverse-proxy route.
//
// A [Relay] is one route's handler: it picks an upstream from its [Pool]
// (round robin, an upstream that refused a connection skipped for a
// while), writes the forwarding fields its listener's [Forwarding] rules
// allow, sends the request through the shared transport ([NewTransport],
// internal/upstream), relays 1xx answers, the response, trailers and
// upgrades, and answers its own failures (502, 504). It records what it
// did in the exchange's state (internal/exchange).
//
// The byte path of the event-loop server (internal/bytepath) sends
// requests as heads the relay writes ([Relay.AppendHead],
// the same bytes as the relay's own request: FuzzLeanHead holds them
// together) and hands answers it does not write itself back to
// [Relay.Answer]. [NewReverseProxy] is httputil.ReverseProxy set up the
// same way, the reference the relay is tested against.
package relay
