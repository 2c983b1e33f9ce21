//go:build unix

package siege

import (
	"fmt"
	"syscall"
)

// raiseFileLimit raises the open-file soft limit to the hard limit and
// returns the limit now in force. It fails with ErrTooFewFiles if that is
// still below need.
func raiseFileLimit(need uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("siege: reading RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			lim = raised
		}
	}
	if lim.Cur < need {
		return lim.Cur, fmt.Errorf("%w: the run needs about %d open files, RLIMIT_NOFILE allows %d (hard limit %d); raise it (ulimit -n) or lower the connection counts",
			ErrTooFewFiles, need, lim.Cur, lim.Max)
	}
	return lim.Cur, nil
}
