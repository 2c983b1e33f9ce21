//go:build !unix

package siege

// raiseFileLimit does nothing where there is no RLIMIT_NOFILE; it reports 0.
func raiseFileLimit(uint64) (uint64, error) { return 0, nil }
