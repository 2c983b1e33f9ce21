package sdnotify

import "golang.org/x/sys/unix"

// monotonicMicros returns CLOCK_MONOTONIC in microseconds: the clock
// systemd compares MONOTONIC_USEC with. Go's own monotonic readings have an
// unspecified origin, so the clock is read directly.
func monotonicMicros() (uint64, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, false
	}
	return uint64(ts.Sec)*1_000_000 + uint64(ts.Nsec)/1_000, true
}
