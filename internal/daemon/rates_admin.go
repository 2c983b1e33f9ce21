package daemon

import (
	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/rate"
)

// RateSnapshot is one rate's state, as /debug/limits serves it: its limit,
// its totals and its busiest keys, the furthest ahead of their rate first.
type RateSnapshot struct {
	// Limit is the rate as nginx writes it ("10r/s burst=20 delay=5").
	Limit  string `json:"limit"`
	Key    string `json:"key,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
	// Totals count the decisions since the rate was built (a reload that
	// keeps it keeps them).
	Totals rate.Totals       `json:"totals"`
	Busy   []RateKeySnapshot `json:"busy"`
}

// RateKeySnapshot is one key whose rate state is not fresh.
type RateKeySnapshot struct {
	Key string `json:"key"`
	// AheadSeconds is how far the key is ahead of its rate: the time until
	// its whole burst is available again.
	AheadSeconds float64 `json:"ahead_seconds"`
	// Remaining is how many more requests of the key would be admitted now.
	Remaining int `json:"remaining"`
}

func rateSnapshotOf(r *rateLimiter) *RateSnapshot {
	if r == nil {
		return nil
	}
	s := r.lim.Snapshot(snapshotTop)
	return &RateSnapshot{
		Limit:  r.cfg.Limit().String(),
		Key:    string(r.cfg.Key),
		DryRun: r.cfg.DryRun,
		Totals: s.Totals,
		Busy:   rateKeys(s.Keys, func(k string) string { return k }),
	}
}

func rateKeys[K comparable](keys []rate.KeyStats[K], name func(K) string) []RateKeySnapshot {
	out := make([]RateKeySnapshot, 0, len(keys))
	for _, k := range keys {
		out = append(out, RateKeySnapshot{Key: name(k.Key), AheadSeconds: k.Ahead.Seconds(), Remaining: k.Remaining})
	}
	return out
}

func clientRateSnapshot(lim rate.Limit, s rate.Snapshot[clientkey.Key]) *RateSnapshot {
	return &RateSnapshot{Limit: lim.String(), Totals: s.Totals, Busy: rateKeys(s.Keys, clientkey.Key.String)}
}
