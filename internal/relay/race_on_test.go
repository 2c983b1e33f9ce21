//go:build race

package relay

// raceEnabled reports whether the tests run with the race detector, under
// which sync.Pool drops a share of what it is given on purpose, so that
// allocation counts of pooled objects say nothing.
const raceEnabled = true
