package main

import (
	"fmt"
	"os"
	"testing"
)

// TestMain makes the example CA key readable by its owner only, as the
// daemon requires of a CA key (intercept.allow_readable_ca_key): git checks
// files out readable by everyone, and examples/files/README.md tells users
// to chmod it.
func TestMain(m *testing.M) {
	if err := os.Chmod("../../examples/files/intercept-ca-key.pem", 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
