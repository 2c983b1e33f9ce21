//go:build race

package caddyportcullis_test

// raceEnabled reports whether the tests run with the race detector, so
// that the binary they build shares their compiled packages.
const raceEnabled = true
