//go:build !linux

package sdnotify

// monotonicMicros reports no clock: systemd, the one manager that reads
// MONOTONIC_USEC, runs on Linux only.
func monotonicMicros() (uint64, bool) { return 0, false }
