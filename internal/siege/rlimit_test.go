//go:build unix

package siege

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

func TestRaiseFileLimit(t *testing.T) {
	var before syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &before); err != nil {
		t.Fatal(err)
	}
	got, err := raiseFileLimit(16)
	if err != nil {
		t.Fatalf("raiseFileLimit(16): %v", err)
	}
	var after syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &after); err != nil {
		t.Fatal(err)
	}
	if after.Cur != before.Max || got != after.Cur {
		t.Errorf("soft limit %d (reported %d), want the hard limit %d", after.Cur, got, before.Max)
	}

	_, err = raiseFileLimit(1 << 40)
	if !errors.Is(err, ErrTooFewFiles) || !strings.Contains(err.Error(), "1099511627776") {
		t.Errorf("raiseFileLimit(2^40) = %v, want ErrTooFewFiles naming the need", err)
	}
}
