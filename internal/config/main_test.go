package config_test

import (
	"fmt"
	"os"
	"testing"
)

// TestMain makes the test CA key readable by its owner only, as the
// daemon requires of a CA key (intercept.allow_readable_ca_key): git checks
// files out readable by everyone.
func TestMain(m *testing.M) {
	for file, mode := range map[string]os.FileMode{
		"testdata/files/intercept-ca-key.pem":          0o600,
		"testdata/files/intercept-ca-key-readable.pem": 0o644, // the bad case, whatever the umask
	} {
		if err := os.Chmod(file, mode); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}
