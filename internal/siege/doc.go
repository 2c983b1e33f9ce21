// Package siege is Portcullis's load and attack generator: the engine of
// `portcullis siege` and `portcullis demo --attack`.
//
// A run ([Run], configured by [Config]) drives legitimate clients against an
// HTTP(S) target, each client leaving from its own source address so that a
// server limiting per client sees them as distinct, while an attacker on one
// more address holds connections open slowly ([ScenarioSlowloris]), keeps
// slow requests in flight ([ScenarioSlowRequests]) or both ([ScenarioFlood]).
// The [Report] says what the legitimate clients got (rate, goodput, latency
// quantiles, errors by kind) and how the server treated the attacker
// (admitted, refused, peak held, reconnects); [Compare] sets a run against a
// no-attack baseline.
//
// The legitimate clients speak HTTP/1.1 over raw connections with a
// response reader that allocates nothing, so that the generator takes as
// little of the machine as it can from the server it measures.
package siege
